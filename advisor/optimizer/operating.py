"""The operating point: tasks/h a configuration delivers at its planned load with every tail target met.

The sustainable throughput X (the evaluator's smallest pool bound) is a saturation figure: queues at X grow without
bound. A capacity plan runs at a planned load f (the workload's `slo.target_utilization`, else the model assumption
`operating_load_fraction`, 0.8), i.e. open arrivals at f X, and the tail targets (p95 task time, p95 wait for a
tool core) must hold there. The operating figure is the largest arrival rate, at most f X, at which the evaluator
finds every target met; it is f X unless a target binds first (then bisection on the arrival rate, which every tail
figure increases with). The tool-wait target is also a bound inside X (`slo:<queue>`), so at f X < X it always
holds in the closed form; the p95 task-time target is checked only at the operating point, so it is what can make
the operating figure smaller than f X.

`max_operating_throughput` (an optimizer objective): the max-throughput answer maximizes X, hence f X; when no
target binds there its operating figure f X is the most any configuration can deliver at the planned load (the
answer is optimal for this objective too). When a target binds, the answers of each GPU SKU on its own are also
tried and the best operating figure kept; that answer is then labelled `feasible` (no proof over all configurations).
"""

from __future__ import annotations

import math
from typing import Any
from collections.abc import Callable

from models.assumptions import ModelAssumptions
from models.base import Frozen
from models.catalog import Catalog
from models.config import Configuration, OperatingPoint
from models.hardware import Rack
from models.pipeline import Evaluation, evaluate
from models.queueing import mmc_wait_quantile
from models.workload import CpuStage, Workload

OptimizeResult = Any
"""advisor.optimizer.optimize.OptimizeResult (not imported: optimize.py imports this module)."""

BISECTION_STEPS = 24
"""Halvings of the arrival-rate interval when a tail target binds below the planned load: 2^-24 of the planned rate
(well below a task per hour for any rack row this tool sizes)."""
PLANNED = "planned load"


class TailCheck(Frozen):
    """One tail target at the operating rate."""

    target: str
    """What is checked, e.g. `p95 task time` or `p95 wait for a tool core, queue shared`."""
    value_s: float | None
    """The model's figure at the operating rate (None: unstable, no finite figure)."""
    target_s: float
    met: bool


class OperatingFigure(Frozen):
    """Tasks/h at the planned load with every tail target met (the headline), beside the sustainable maximum."""

    planned_load: float
    """Planned load fraction f of the sustainable throughput (slo.target_utilization, else the assumption)."""
    sustainable_tasks_per_hour: float
    """X: the saturation throughput (the smallest pool bound)."""
    planned_tasks_per_hour: float
    """f X."""
    operating_tasks_per_hour: float
    """The headline: the largest arrival rate <= f X at which every tail target is met."""
    limited_by: str
    """`planned load` (f X, every target met there), or the target that binds below it."""
    tails: list[TailCheck]
    """Each tail target at the operating rate (empty: the workload has none)."""
    note: str
    """The figure in one sentence."""


def calls_per_task(w: Workload, classes: list[str]) -> float:
    return sum(c.share * s.count for c in w.classes if c.name in classes for s in c.stages if isinstance(s, CpuStage))


def tail_checks(ev: Evaluation, w: Workload, a: ModelAssumptions) -> list[TailCheck]:
    """Every tail target of the workload checked on an evaluation at its operating point (open arrivals)."""
    out: list[TailCheck] = []
    slo = w.slo
    q_label = f"p{a.tail_quantile * 100:g}"
    if slo is not None and slo.p95_task_seconds:
        v = ev.p95_task_seconds
        out.append(TailCheck(target=f"{q_label} task time", value_s=v, target_s=slo.p95_task_seconds,
                             met=v is not None and v <= slo.p95_task_seconds))
    if w.has_tool_wait_target:
        lam = ev.arrival_rate_tasks_per_hour / 3600.0
        for q in ev.queues:
            n = calls_per_task(w, q.classes)
            target = w.tool_wait_target(q.classes)
            if n <= 0 or target is None:
                continue
            v = q.wait_scale * mmc_wait_quantile(q.servers, lam * n, q.mean_call_s, a.tail_quantile) \
                if lam > 0 else 0.0
            v = v if math.isfinite(v) else None
            out.append(TailCheck(target=f"{q_label} wait for a tool core, queue {q.name}", value_s=v,
                                 target_s=target, met=v is not None and v <= target))
    return out


def at_rate(config: Configuration, w: Workload, rack: Rack, catalog: Catalog, a: ModelAssumptions,
            tasks_per_hour: float) -> Evaluation:
    """The evaluator at open arrivals of `tasks_per_hour`."""
    cfg = config.model_copy(update={"operating_point": OperatingPoint(arrival_rate_per_hour=tasks_per_hour)})
    return evaluate(cfg, w, rack, catalog, a)


def meets_targets(config: Configuration, w: Workload, rack: Rack, catalog: Catalog, a: ModelAssumptions,
                  tasks_per_hour: float) -> tuple[bool, list[TailCheck]]:
    """Whether open arrivals at this rate run stable, within every tail target."""
    ev = at_rate(config, w, rack, catalog, a, tasks_per_hour)
    checks = tail_checks(ev, w, a)
    # stable, and live sandboxes (memory, disk) and I/O fit at this load (their loaded figures can exceed the
    # unloaded bounds inside X: models/pipeline.py warns of it)
    stable = tasks_per_hour < ev.throughput_tasks_per_hour and ev.mean_task_seconds is not None and all(
        u <= 1.0 for u in ev.utilization.values())
    return stable and all(c.met for c in checks), checks


def operating_figure(config: Configuration, w: Workload, rack: Rack, catalog: Catalog, a: ModelAssumptions,
                     sustainable_tasks_per_hour: float | None = None) -> OperatingFigure:
    """The operating figure of a configuration (`sustainable_tasks_per_hour`: X if already evaluated)."""
    f = w.planned_load(a.operating_load_fraction)
    x = sustainable_tasks_per_hour
    if x is None:
        x = evaluate(config, w, rack, catalog, a).throughput_tasks_per_hour
    planned = f * x
    if planned <= 0:
        return OperatingFigure(planned_load=f, sustainable_tasks_per_hour=x, planned_tasks_per_hour=0.0,
                               operating_tasks_per_hour=0.0, limited_by="no throughput", tails=[],
                               note="no throughput: nothing to operate")
    ok, checks = meets_targets(config, w, rack, catalog, a, planned)
    if ok:
        return OperatingFigure(planned_load=f, sustainable_tasks_per_hour=x, planned_tasks_per_hour=planned,
                               operating_tasks_per_hour=planned, limited_by=PLANNED, tails=checks,
                               note=f"{planned:,.0f} tasks/h at the planned {f:.0%} load with every tail target met "
                                    f"(sustainable maximum {x:,.0f} tasks/h)")
    missed = [c.target for c in checks if not c.met] or ["stability"]
    lo, hi = 0.0, planned
    lo_checks: list[TailCheck] = []
    for _ in range(BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        ok, c = meets_targets(config, w, rack, catalog, a, mid)
        if ok:
            lo, lo_checks = mid, c
        else:
            hi, missed = mid, [t.target for t in c if not t.met] or ["stability"]
    if lo <= 0:
        return OperatingFigure(
            planned_load=f, sustainable_tasks_per_hour=x, planned_tasks_per_hour=planned, operating_tasks_per_hour=0.0,
            limited_by=missed[0], tails=checks,
            note=f"{missed[0]}: not met at any load down to {hi:,.2g} tasks/h (the unloaded tasks alone miss it); "
                 f"sustainable maximum {x:,.0f} tasks/h")
    return OperatingFigure(
        planned_load=f, sustainable_tasks_per_hour=x, planned_tasks_per_hour=planned, operating_tasks_per_hour=lo,
        limited_by=missed[0], tails=lo_checks,
        note=f"{lo:,.0f} tasks/h ({lo / x:.0%} of the sustainable {x:,.0f} tasks/h): the {missed[0]} target binds "
             f"below the planned {f:.0%} load ({planned:,.0f} tasks/h)")


def with_operating(res: OptimizeResult, w: Workload, rack: Rack, catalog: Catalog,
                   a: ModelAssumptions) -> OptimizeResult:
    """The optimizer's answer with its operating figure."""
    if not res.configuration or res.evaluation is None:
        return res
    cfg = Configuration.model_validate(res.configuration)
    fig = operating_figure(cfg, w, rack, catalog, a, res.throughput_tasks_per_hour)
    return res.model_copy(update={"operating": fig})


def optimize_operating(optimize: Callable[..., OptimizeResult], workload: Workload, rack: Rack, catalog: Catalog,
                       **kw) -> OptimizeResult:
    """Objective max_operating_throughput (module docstring): the max-throughput answer, and when a tail target
    binds below its planned load, the best operating figure among it and each GPU SKU's own answer. `optimize`:
    advisor.optimizer.optimize.optimize."""
    import time

    t0 = time.perf_counter()
    kw = {**kw, "objective": "max_throughput"}
    base = optimize(workload, rack, catalog, **kw)
    if base.operating is None or base.operating.limited_by in (PLANNED, "no throughput"):
        return base
    gpu_ids = kw.get("gpu_ids") or sorted({g.id for g in catalog.gpus})
    best = base
    tried = []
    for g in gpu_ids:
        if len(gpu_ids) == 1:
            break
        try:
            alt = optimize(workload, rack, catalog, **{**kw, "gpu_ids": [g], "explain": False})
        except ValueError:
            continue
        tried.append(g)
        if alt.operating is not None and alt.operating.operating_tasks_per_hour > \
                best.operating.operating_tasks_per_hour * (1 + 1e-9):
            best = alt
    note = (f"objective max_operating_throughput: the {best.operating.limited_by} target binds below the planned "
            f"load, so the operating figure is not a function of the sustainable throughput alone; the best of the "
            f"max-throughput answer and {len(tried)} single-GPU-SKU answers is shown (not proven optimal)")
    return best.model_copy(update={"status": "feasible" if best.status == "optimal" else best.status,
                                   "seconds": time.perf_counter() - t0, "warnings": best.warnings + [note]})
