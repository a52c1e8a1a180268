"""Report content for the decisions a planner acts on: the operating-point headline, what one failure costs, and the
go/no-go criteria of each pilot stage. Data only (the template formats it); thresholds come from
advisor.operations, the same numbers the Prometheus rules export."""

from __future__ import annotations

from advisor.operations import operating_thresholds
from models.assumptions import ModelAssumptions
from models.pipeline import Evaluation
from models.workload import Workload


def operating_glance(res) -> dict | None:
    """The operating figure of an optimizer answer (advisor/optimizer/operating.py) for the headline."""
    op = res.operating
    if op is None:
        return None
    return {"tasks_per_hour": op.operating_tasks_per_hour, "planned_load": op.planned_load,
            "sustainable_tasks_per_hour": op.sustainable_tasks_per_hour, "limited_by": op.limited_by,
            "planned": op.limited_by == "planned load", "note": op.note,
            "tails": [t.model_dump() for t in op.tails]}


def failure_rows(res) -> dict | None:
    """Spares and one-failure cases (advisor/optimizer/failures.py) as table rows."""
    f = res.failures
    if f is None:
        return None
    return {"spares_per_pool": f.spares_per_pool, "spares": f.spares,
            "active_tasks_per_hour": f.active_operating_tasks_per_hour,
            "active_sustainable_tasks_per_hour": f.active_sustainable_tasks_per_hour,
            "cases": [c.model_dump() for c in f.cases]}


def _s(x: float) -> str:
    return f"{x * 1000:,.0f} ms" if x < 1 else f"{x:,.1f} s"


def go_no_go(ev: Evaluation, w: Workload, a: ModelAssumptions, headroom: float,
             operating_tasks_per_hour: float | None = None) -> list[dict]:
    """Criteria to pass before buying the next stage, each on a metric the monitoring table alerts on, with the
    stage's own thresholds (its evaluation at its planned load): go when every one holds while arrivals run at the
    stage's operating figure; otherwise no-go: update the workload file from the measurements and re-run."""
    t = operating_thresholds(ev, w, a, headroom)
    rate = operating_tasks_per_hour if operating_tasks_per_hour is not None else ev.arrival_rate_tasks_per_hour
    out = [{"metric": "completed tasks/h at the stage's planned arrivals",
            "go": f"≥ {rate:,.0f} with no growing backlog",
            "basis": "at the planned load every arriving task completes: the model's operating figure"}]
    for q in t.queues:
        out.append({"metric": f"{t.tail_label} wait for a tool core, queue {q.queue}", "go": f"≤ {_s(q.wait_alert_s)}",
                    "basis": "the tool-wait target" if q.wait_target_s else "the wait alert threshold"})
        out.append({"metric": f"tool calls waiting for a core, queue {q.queue}", "go": f"≤ {q.waiting_calls_alert:,}",
                    "basis": f"M/M/c {t.tail_label} queue length at the planned load"})
    if t.gpu:
        out.append({"metric": "GPU idle waiting on CPU tools", "go": f"≤ {t.gpu.idle_on_cpu_alert:.0%}",
                    "basis": f"model {t.gpu.idle_on_cpu_fraction:.0%} at the operating point plus headroom"})
        out.append({"metric": "GPU utilization (serving capacity in use)",
                    "go": f"{t.gpu.utilization_low_alert:.0%} to {t.gpu.utilization_alert:.0%}",
                    "basis": f"model {t.gpu.utilization:.0%} ± headroom"})
    if t.task_time and t.task_time.alert_s is not None:
        out.append({"metric": f"task completion time, {t.tail_label}", "go": f"≤ {t.task_time.alert_s:,.0f} s",
                    "basis": "the task-time target" if t.task_time.alert_basis == "slo" else "the model's p99"})
    return out
