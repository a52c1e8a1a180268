"""Which stage shares the recommendation depends on most.

A measured stage share is uncertain (`advisor fit` prints its 95% confidence interval). For each stage of each task
class in turn, its count per task is scaled by (1 + step), which adds `step` of that stage's time to every task of
the class, and the recommended configuration is re-evaluated with the closed form: the relative change in
sustainable tasks/h, divided by the step, is the stage's elasticity. The stage with the largest elasticity is then
re-solved (the optimizer picks servers for the changed workload) to show whether the recommendation itself would
change, not only its throughput."""

from __future__ import annotations

from collections.abc import Callable

from advisor.optimizer.optimize import OptimizeResult
from models.assumptions import ModelAssumptions
from models.catalog import Catalog
from models.config import Configuration
from models.hardware import Rack
from models.pipeline import evaluate
from models.workload import Workload


KEY_STAGES = 3
"""Stages the report's sentence names (the table lists all)."""


def with_stage_scaled(w: Workload, task_class: str, stage: str, factor: float) -> Workload:
    """The workload with one stage's count per task multiplied by `factor` (everything else unchanged)."""
    classes = [c if c.name != task_class else c.model_copy(update={"stages": [
        s.model_copy(update={"count": s.count * factor}) if s.name == stage else s for s in c.stages]})
        for c in w.classes]
    return w.model_copy(update={"classes": classes})


def _servers(res: OptimizeResult) -> list[tuple]:
    return sorted((s.chassis, s.cpu, s.gpu or "", s.gpus_per_server, s.count) for s in res.servers)


def stage_sensitivity(res: OptimizeResult, w: Workload, rack: Rack, cat: Catalog, assumptions: ModelAssumptions,
                      step: float, resolve: Callable[[Workload], OptimizeResult] | None = None) -> dict | None:
    """Per stage: its share of task time, tasks/h with the stage's count x (1 + step), the change and the elasticity,
    sorted by the size of the change; `top` re-solves the stage with the largest one (when `resolve` is given)."""
    ev = res.evaluation
    if ev is None or res.configuration is None or ev.throughput_tasks_per_hour <= 0:
        return None
    base = ev.throughput_tasks_per_hour
    cfg = Configuration.model_validate(res.configuration)
    rows = []
    for c in w.classes:
        for st in c.stages:
            key = f"{c.name}/{st.name}"
            ev2 = evaluate(cfg, with_stage_scaled(w, c.name, st.name, 1 + step), rack, cat, assumptions)
            change = ev2.throughput_tasks_per_hour / base - 1
            rows.append({"stage": key, "task_class": c.name, "stage_name": st.name,
                         "share": ev.stage_shares.get(key, 0.0), "tasks_per_hour": ev2.throughput_tasks_per_hour,
                         "change": change, "elasticity": change / step})
    rows.sort(key=lambda r: (-abs(r["change"]), r["stage"]))
    top = None
    if resolve is not None and rows and rows[0]["change"] != 0:
        r0 = rows[0]
        alt = resolve(with_stage_scaled(w, r0["task_class"], r0["stage_name"], 1 + step))
        top = {"stage": r0["stage"], "tasks_per_hour": alt.throughput_tasks_per_hour,
               "change": alt.throughput_tasks_per_hour / res.throughput_tasks_per_hour - 1
               if res.throughput_tasks_per_hour > 0 else None,
               "same_servers": _servers(alt) == _servers(res),
               "servers": [{"count": s.count, "chassis": s.chassis, "cpu": s.cpu, "gpu": s.gpu,
                            "gpus_per_server": s.gpus_per_server} for s in alt.servers]}
    key = [r for r in rows[:KEY_STAGES] if abs(r["change"]) > 0]
    return {"step": step, "base_tasks_per_hour": base, "stages": rows, "key": key, "top": top}
