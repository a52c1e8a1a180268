"""Compare layouts A, B and hybrid on the same input, and chip-level against rack-level ratios."""

from __future__ import annotations

import math
from typing import Literal

from advisor.deadline import Deadline
from advisor.optimizer.layout_fit import LayoutFit, layout_fit
from advisor.report.names import pool  # people's words: the note is shown as is in the report
from advisor.optimizer.migration import NotACandidate
from advisor.optimizer.optimize import MATERIAL_GAIN, OptimizeResult, not_a_candidate_result, optimize
from advisor.optimizer.settings import OptimizerSettings
from advisor.parallel import run_all
from advisor.layouts import LAYOUTS, TIE_RTOL, Outcome, best_layout, tied_layouts
from models.base import Frozen
from models.catalog import Catalog
from models.hardware import Rack
from models.performance import gpu_serving
from models.pipeline import needs_queue
from models.workload import Workload



class LayoutComparison(Frozen):
    results: list[OptimizeResult]
    ratio_vs_a: dict[str, float | None]
    """Throughput of each layout over layout A's (None when A delivers nothing)."""
    best_layout: str
    summary: str
    layout_fit: LayoutFit | None = None
    """Which layout the workload's stage shares call for and the tool share at which the choice flips (on layout A's
    answer; advisor/optimizer/layout_fit.py). None when A has no answer or the workload has no tool stages."""
    hybrid_note: str | None = None
    """When hybrid ties B: why, in one sentence, and which constraint would have to bind for isolation to pay; when
    hybrid beats B: what the isolation bought."""


def hybrid_tie_note(workload: Workload, b: OptimizeResult, hybrid: OptimizeResult) -> str | None:
    """Why hybrid equals B, or None when it does not (hybrid ahead beyond the tie tolerance, or either has no
    answer). Isolated queues pay only where a shared queue's tool-wait target (`slo:<queue>`) binds on the calls of
    classes that do not need that target: on their own queue those calls can run their cores busier."""
    if b.throughput_tasks_per_hour <= 0 or not tied_layouts(
            [Outcome(r.layout, r.throughput_tasks_per_hour, r.power_w, r.gap) for r in (b, hybrid)]) == ["b", "hybrid"]:
        return None
    if hybrid.throughput_tasks_per_hour > b.throughput_tasks_per_hour * (1 + TIE_RTOL):
        gap = max(b.gap or 0.0, hybrid.gap or 0.0)
        return (f"Hybrid ties B within the solver's optimality gap ({gap:.1%}; B {b.status}, hybrid "
                f"{hybrid.status}): hybrid's {hybrid.throughput_tasks_per_hour:,.0f} tasks/h against B's "
                f"{b.throughput_tasks_per_hour:,.0f} is not proven better, since B's search bounds its own optimum "
                f"only by {b.throughput_tasks_per_hour * (1 + (b.gap or 0.0)):,.0f} tasks/h.")
    pays = ("isolation pays only when a shared queue's tool-wait target binds on the tool calls of classes that "
            "do not need it")
    tools = [c for c in workload.classes if needs_queue(c)]
    targets = {c.name: workload.class_tool_wait_target(c) for c in tools}
    if len(tools) < 2:
        return f"Hybrid equals B: only one class needs a tool queue, so there is nothing to isolate; {pays}."
    if all(t is None for t in targets.values()):
        return (f"Hybrid equals B: no class has a tool-wait target, and without one a shared queue pools its cores at "
                f"least as well as isolated queues; {pays}.")
    if len(set(targets.values())) == 1:
        t = next(iter(targets.values()))
        return (f"Hybrid equals B: every class has the same {t:g} s tool-wait target, so isolated queues would be held "
                f"to it too and lose the shared queue's pooling; {pays}.")
    tight = min((t, n) for n, t in targets.items() if t is not None)
    if "slo:shared" not in b.binding_constraints and not b.bottleneck.startswith("slo:"):
        return (f"Hybrid equals B: the tightest tool-wait target ({tight[0]:g} s, class {tight[1]}) does not bind "
                f"B's shared queue (B is bound by {pool(b.bottleneck)}); isolation would pay once that target bound "
                "there, i.e. once the other classes' tool work is a large enough share of the rack's power that "
                "holding it to the target costs cores.")
    return (f"Hybrid equals B: the tightest tool-wait target ({tight[0]:g} s, class {tight[1]}) binds B's shared "
            f"queue, but hybrid's isolated queues did not deliver more (hybrid: {hybrid.status}); isolation pays "
            "once the cores it frees on the other classes' queue outweigh the pooling the shared queue loses.")


def hybrid_win_note(workload: Workload, b: OptimizeResult, hybrid: OptimizeResult) -> str | None:
    """What isolation bought when hybrid is ahead of B beyond the tie (None otherwise): which target held B's shared
    queue, and how busy hybrid runs the queues that no longer carry it."""
    if b.throughput_tasks_per_hour <= 0 or hybrid.throughput_tasks_per_hour <= 0 or tied_layouts(
            [Outcome(r.layout, r.throughput_tasks_per_hour, r.power_w, r.gap) for r in (b, hybrid)]) != ["hybrid"]:
        return None
    gain = hybrid.throughput_tasks_per_hour / b.throughput_tasks_per_hour - 1
    proven = b.status == "optimal" or (b.gap is not None and
                                       hybrid.throughput_tasks_per_hour > b.throughput_tasks_per_hour * (1 + b.gap))
    head = (f"Hybrid beats B by {gain:.1%} ({hybrid.throughput_tasks_per_hour:,.0f} against "
            f"{b.throughput_tasks_per_hour:,.0f} tasks/h{'' if proven else ', B not proven optimal'})")
    tools = [c for c in workload.classes if needs_queue(c)]
    targets = {c.name: workload.class_tool_wait_target(c) for c in tools}
    if not (b.bottleneck.startswith("slo:") or any(g.startswith("slo:") for g in b.binding_constraints)) or \
            all(t is None for t in targets.values()):
        return f"{head}: its queue partition {hybrid.partition} fits the rack better than one shared queue."
    tight = min((t, n) for n, t in targets.items() if t is not None)
    free = [q for q in hybrid.queues if tight[1] not in q.get("classes", [])]
    busy = ", ".join(f"{q['name']} at {q['utilization']:.0%}" for q in free if q.get("utilization") is not None)
    shared = ", ".join(f"{q['utilization']:.0%}" for q in b.queues if q.get("utilization") is not None)
    return (f"{head}: B's shared queue is held to the tightest tool-wait target ({tight[0]:g} s, class {tight[1]}) "
            f"for every class's calls, so it keeps cores idle (core utilization {shared or 'n/a'} at the planned "
            f"load); hybrid gives "
            f"class {tight[1]} its own queue and runs the other classes' tool cores busier "
            f"({busy or 'without that target'}).")


def compare_layouts(workload: Workload, rack: Rack, catalog: Catalog, deadline: Deadline | None = None,
                    **kw) -> LayoutComparison:
    """A, B and hybrid on the same input. `time_limit_s` (or the settings') is for the whole comparison: each layout
    gets an equal share of what is left when it starts (advisor/deadline.py), within `deadline` if given."""
    results: list = []
    limit = kw.pop("time_limit_s", None) or (kw.get("settings") or OptimizerSettings()).time_limit_s
    clock = Deadline(limit, parent=deadline)
    workers = (kw.get("settings") or OptimizerSettings()).concurrent_solves

    def solve_layout(item: tuple[int, str]) -> OptimizeResult:
        i, lay = item
        # a layout started now shares what is left with the layouts that will run after it on its worker
        share = clock.share(max(1, math.ceil((len(LAYOUTS) - i) / workers)))
        try:
            return optimize(workload, rack, catalog, layout=lay, deadline=share, **kw)
        except NotACandidate as e:  # owned servers this layout cannot hold (a CPU tier in layout a or b)
            return not_a_candidate_result(lay, kw.get("backend", "cbc"), str(e))

    for lay, res in zip(LAYOUTS, run_all(solve_layout, list(enumerate(LAYOUTS)), workers)):
        prev = results[-1] if results else None
        if (kw.get("objective", "max_throughput") == "max_throughput" and prev is not None
                and prev.throughput_tasks_per_hour > res.throughput_tasks_per_hour * (1 + MATERIAL_GAIN)):
            # Each layout relaxes the one before, so the previous answer is valid here too. optimize() checks this
            # itself, unless its time ran out first (status time_limit) or the layouts ran side by side: keep the
            # comparison monotone anyway. Its status is this layout's: proven only if it meets this layout's own
            # bound.
            bound = res.bound_tasks_per_hour
            x = prev.throughput_tasks_per_hour
            proven = bound is not None and x >= bound * (1 - 2e-6) and prev.status == "optimal"
            res = prev.model_copy(update={
                "layout": lay, "bound_tasks_per_hour": bound,
                "status": "optimal" if proven else ("time_limit" if res.status == "time_limit" else "feasible"),
                "gap": None if bound is None else max(0.0, (bound - x) / max(1e-9, x)),
                "warnings": prev.warnings + [
                    f"layout {lay}'s own search ({res.status}, {res.throughput_tasks_per_hour:,.0f} tasks/h) ended "
                    f"below layout {prev.layout}'s answer, which is also valid for {lay}; that answer is shown"]})
        results.append(res)
    a = results[0].throughput_tasks_per_hour
    ratios = {r.layout: (r.throughput_tasks_per_hour / a if a > 0 else None) for r in results}
    best_id = best_layout(Outcome(r.layout, r.throughput_tasks_per_hour, r.power_w, r.gap) for r in results)
    best = next((r for r in results if r.layout == best_id), results[0])
    op = best.operating
    best_figure = (f"{op.operating_tasks_per_hour:,.0f} tasks/h at the planned {op.planned_load:.0%} load "
                   f"({best.throughput_tasks_per_hour:,.0f} sustainable)") if op is not None else \
        f"{best.throughput_tasks_per_hour:,.0f} tasks/h"
    if a > 0:
        summary = (f"best layout {best.layout}: {best_figure}, "
                   f"{best.throughput_tasks_per_hour / a:.2f}x GPU-first (A: {a:,.0f} tasks/h sustainable)")
    else:
        summary = f"best layout {best.layout}: {best_figure}; GPU-first delivers none"
    fit = layout_fit(results[0].configuration, workload, rack, catalog, kw.get("settings"))
    by = {r.layout: r for r in results}
    note = (hybrid_tie_note(workload, by["b"], by["hybrid"]) or hybrid_win_note(workload, by["b"], by["hybrid"])
            if "b" in by and "hybrid" in by else None)
    return LayoutComparison(results=results, ratio_vs_a=ratios, best_layout=best.layout, summary=summary,
                            layout_fit=fit, hybrid_note=note)


class SideResult(Frozen):
    sku: str
    per_chip: float
    """Chip-level figure (see `per_chip_metric`)."""
    throughput_tasks_per_hour: float
    units_in_row: int
    """Sockets (CPU) or GPUs (GPU) of this SKU the optimizer placed."""
    servers: int = 0
    """Servers holding those units (GPU servers for a GPU; servers with this CPU for a CPU)."""
    power_w: float
    bottleneck: str
    binding_constraints: list[str]

    @property
    def installed(self) -> float:
        """Chip capacity in the rack: units placed x the per-chip figure."""
        return self.units_in_row * self.per_chip


class RatioFactors(Frozen):
    """rack ratio = efficiency x scheduling, each b over a.

    efficiency = installed chip capacity b / a = chip ratio x unit-count ratio (more useful chips within the same
    power, cooling and space); scheduling = (tasks/h per unit of installed capacity) b / a (less idle time: how much
    of what is installed turns into finished tasks). Their product is the rack ratio by construction."""

    chip: float
    units: float
    """Units placed, b over a (sockets or GPUs)."""
    efficiency: float
    """chip x units: installed capacity, b over a."""
    scheduling: float
    """Throughput per unit of installed capacity, b over a."""


class ChipVsRack(Frozen):
    kind: Literal["cpu", "gpu"]
    per_chip_metric: str
    a: SideResult
    b: SideResult
    chip_ratio: float
    """b over a, chip level."""
    rack_ratio: float | None
    """b over a, rack level under the same budgets."""
    factors: RatioFactors | None = None
    """The rack ratio as efficiency x scheduling (None without a rack ratio)."""
    explanation: str


def ratio_factors(a: SideResult, b: SideResult) -> RatioFactors | None:
    """Split b's rack ratio over a into efficiency (installed capacity) and scheduling (tasks per unit of it)."""
    if min(a.installed, b.installed, a.throughput_tasks_per_hour) <= 0:
        return None
    return RatioFactors(chip=b.per_chip / a.per_chip, units=b.units_in_row / a.units_in_row,
                        efficiency=b.installed / a.installed,
                        scheduling=(b.throughput_tasks_per_hour / b.installed)
                        / (a.throughput_tasks_per_hour / a.installed))


def chip_vs_rack(kind: Literal["cpu", "gpu"], sku_a: str, sku_b: str, workload: Workload, rack: Rack,
                 catalog: Catalog, layout: str = "hybrid", **kw) -> ChipVsRack:
    sides = []
    for sku in (sku_a, sku_b):
        if kind == "gpu":
            g = catalog.gpus[sku]
            per_chip = gpu_serving(workload, g, kw.get("settings", OptimizerSettings()).assumptions
                                   .tensor_parallel_domain_gpus).tasks_per_s_per_gpu() * 3600.0
            res = optimize(workload, rack, catalog, layout=layout, gpu_ids=[sku], explain=False, **kw)
            mine = [s for s in res.servers if s.gpu == sku]
            units = sum(s.count * s.gpus_per_server for s in mine)
            metric = "serving tasks/h per GPU (model calibration or roofline)"
        else:
            c = catalog.cpus[sku]
            per_chip = c.cores * c.per_core_perf
            res = optimize(workload, rack, catalog, layout=layout, cpu_ids=[sku], explain=False, **kw)
            mine = [s for s in res.servers if s.cpu == sku]
            units = sum(s.count * catalog.chassis[s.chassis].cpu_sockets for s in mine)
            metric = "socket throughput: cores x per-core performance (reference cores)"
        sides.append(SideResult(sku=sku, per_chip=per_chip, throughput_tasks_per_hour=res.throughput_tasks_per_hour,
                                units_in_row=units, servers=sum(s.count for s in mine), power_w=res.power_w,
                                bottleneck=res.bottleneck, binding_constraints=res.binding_constraints))
    a, b = sides
    missing = [x.sku for x in sides if x.units_in_row == 0]
    chip = b.per_chip / a.per_chip
    if missing:
        return ChipVsRack(kind=kind, per_chip_metric=metric, a=a, b=b, chip_ratio=chip, rack_ratio=None,
                          explanation=(f"no configuration within the budgets uses {', '.join(missing)} (no catalog "
                                       f"chassis in layout {layout} takes it, or none that fits the rack), so there is "
                                       "no rack-level ratio to compare"))
    rack_ratio = b.throughput_tasks_per_hour / a.throughput_tasks_per_hour if a.throughput_tasks_per_hour else None
    f = ratio_factors(a, b)
    unit = "GPUs" if kind == "gpu" else "sockets"
    why = (f"per chip {b.sku} is {chip:.2f}x {a.sku}; in the rack it is "
           + (f"{rack_ratio:.2f}x" if rack_ratio is not None else "n/a") + ". "
           + (f"Efficiency {f.efficiency:.2f}x: {b.units_in_row} {unit} of {b.sku} in {b.servers} servers fit "
              f"against {a.units_in_row} {unit} of {a.sku} in {a.servers} ({f.units:.2f}x the chips, each "
              f"{chip:.2f}x as fast). Scheduling {f.scheduling:.2f}x: each unit of installed {b.sku} capacity "
              f"finishes {f.scheduling:.2f}x the tasks of {a.sku}'s (bottleneck {b.bottleneck} against "
              f"{a.bottleneck}). {f.efficiency:.2f} x {f.scheduling:.2f} = {rack_ratio:.2f}. "
              if f is not None and rack_ratio is not None else "")
           + "Power, cooling and space decide how many chips fit, and the rest of the rack (GPU or CPU) decides how "
           "much of their capacity turns into finished tasks.")
    return ChipVsRack(kind=kind, per_chip_metric=metric, a=a, b=b, chip_ratio=chip, rack_ratio=rack_ratio,
                      factors=f, explanation=why)
