"""Optimize one layout: build the MILP, solve in stages (GPU-first, throughput, tie-breaks), explain the answer."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Literal

from pydantic import Field

from advisor.deadline import Deadline
from advisor.optimizer.certificate import Certificate
from advisor.optimizer.certificate import ceiling_tasks_per_hour
from advisor.optimizer.certificate import search as local_search
from advisor.optimizer.groups import BUDGET_GROUPS, BUDGET_UNITS
from advisor.optimizer.formulation import (SECANT_PREFIX, Built, Problem, build, cost_terms, gpu_capacity_terms,
                                 per_rack_count_bound, power_terms, slo_queues)
from advisor.optimizer.options import Layout, ServerOption, enumerate_options, prune_dominated, system_misfits
from advisor.optimizer.settings import OptimizerSettings
from advisor.optimizer.migration import Migration
from advisor.solver import LinearModel, Solution, Var, solve
from advisor.optimizer.objectives import TCO_OBJECTIVES, solve_tco
from advisor.parallel import run_all
from advisor.optimizer.failures import Failures, optimize_with_spares, with_failures
from advisor.optimizer.operating import BISECTION_STEPS, OperatingFigure, optimize_operating, with_operating
from models.base import Frozen
from models.catalog import Catalog
from models.config import Configuration, OperatingPoint, Queue, ServerGroup
from models.hardware import Rack
from models.pipeline import Evaluation, capacity_tasks_per_hour, evaluate, needs_queue
from models.rack_physics import rack_switch
from models.tco import Tco
from models.performance import cpu_call_seconds, stage_gpu_latency_s
from models.workload import CpuStage, DelayStage, GpuStage, Workload
from models.errors import InputError

Objective = Literal["max_throughput", "max_operating_throughput", "min_cost", "min_power", "min_cost_per_task",
                    "min_tco_for_throughput"]
MIN_USEFUL_TASKS_PER_HOUR = 1.0
"""Target used to diagnose a request where nothing fits: the budgets that would let one task per hour through."""
MATERIAL_GAIN = 1e-6
"""A fallback answer replaces the search's own only when it delivers more by this relative margin (the search's
tie-breaks may give up to `throughput_tie_tolerance` of throughput for lower power)."""
RELAXES = {"hybrid": "b", "b": "a"}
"""Each layout's feasible set contains the one named here."""
BUDGET_FIELDS = {"power": "power_kw", "power_feed": "feeds, feed_kw or feed_voltage_v x feed_current_a, redundancy, "
                 "continuous_load_factor",
                 "cooling_air": "air_cooling_kw", "cooling_liquid": "liquid_cooling_kw", "space": "height_u",
                 "weight": "max_weight_kg", "network_ports": "server ports of the tor_switch",
                 "capital": "capital budget"}
"""The rack field (or input) that sets each budget, for messages."""


class ServerChoice(Frozen):
    chassis: str
    cpu: str
    gpu: str | None
    gpus_per_server: int
    count: int
    rack: int
    orchestration_cores_per_gpu: float
    queue_cores: dict[str, float]
    """Cores per server in each tool queue."""
    power_w_each: float
    space_u_each: int


class ConstraintStatus(Frozen):
    group: str
    name: str
    used: float
    available: float
    unit: str
    binding: bool
    """True when the slack is too small for one more server (budgets) or zero (throughput limits)."""


class ShadowPrice(Frozen):
    group: str
    tasks_per_hour_per_unit: float
    """Marginal throughput per extra unit of the budget (LP relaxation: servers treated as divisible)."""
    unit: str
    what_it_takes: str | None = None
    """Integer re-solve with this budget raised by 10%: the throughput it gives."""


class Infeasibility(Frozen):
    group: str
    message: str
    shortfall: float | None
    unit: str


class OptimizeResult(Frozen):
    layout: str
    status: str
    """optimal, feasible (stopped at the gap), time_limit (best found, gap given), infeasible."""
    gap: float | None
    solver: str
    seconds: float
    partition: list[list[str]]
    throughput_tasks_per_hour: float
    """The evaluator's throughput of the chosen configuration."""
    predicted_tasks_per_hour: float
    """The MILP's objective; equals the evaluator's within solver tolerance."""
    servers: list[ServerChoice]
    cores_per_gpu: float | None
    """Host cores per GPU (all host cores over all GPUs)."""
    orchestration_cores_per_gpu: float | None
    queues: list[dict]
    power_w: float
    space_u: int
    air_heat_w: float
    liquid_heat_w: float
    gpu_idle_fraction: float
    bottleneck: str
    binding_constraints: list[str]
    constraints: list[ConstraintStatus]
    shadow_prices: list[ShadowPrice] = Field(default_factory=list)
    infeasibility: list[Infeasibility] = Field(default_factory=list)
    configuration: dict
    """Feed to `advisor evaluate` (servers, queues, racks)."""
    evaluation: Evaluation | None
    tco: Tco | None = None
    """Cost and energy of the answer at its operating point (the evaluation's `tco`)."""
    operating: OperatingFigure | None = None
    """The headline: tasks/h at the planned load with every tail target met, beside the sustainable maximum."""
    failures: Failures | None = None
    """Spares held back and the throughput with one GPU server, one CPU node and one power feed lost."""
    message: str = ""
    warnings: list[str] = Field(default_factory=list)
    migration: Migration | None = None
    """Brownfield (`existing`): ordered steps from the owned configuration to this one."""
    bound_tasks_per_hour: float | None = None
    """Max-throughput objectives: a proven upper bound on the throughput of any answer over the partitions tried
    (None when none is proven, e.g. when the time limit stopped a search). `optimal` means the throughput reaches
    it within the requested gap."""
    certificate: Certificate | None = None
    """Local search around the answer (advisor/optimizer/certificate.py): neighbours checked and the best gain
    among them."""


def partitions(workload: Workload, layout: Layout, servings: dict | None = None) -> list[list[list[str]]]:
    """Queue partitions to try: A and B share one queue; hybrid also tries isolated and tool-heavy/inference-heavy
    (classes whose unloaded time is mostly tool CPU against the rest). When the classes' tool-wait targets differ,
    hybrid tries the isolated queues first."""
    need = [c for c in workload.classes if needs_queue(c)]
    names = [c.name for c in need]
    if not names:
        return [[]]
    out = [[names]]
    if layout == "hybrid" and len(names) > 1:
        out.append([[n] for n in names])
        if len(names) > 2:
            serving = next(iter(servings.values())) if servings else None

            def tool_share(c) -> float:
                cpu = sum(s.count * cpu_call_seconds(s, 1.0) for s in c.stages if isinstance(s, CpuStage))
                gpu = sum(s.count * stage_gpu_latency_s(s, workload.served_model, serving)
                          for s in c.stages if isinstance(s, GpuStage)) if serving else 0.0
                tot = cpu + gpu + sum(s.count * s.seconds for s in c.stages if isinstance(s, DelayStage))
                return cpu / tot if tot else 0.0
            heavy = [c.name for c in need if tool_share(c) >= 0.5]
            light = [c.name for c in need if tool_share(c) < 0.5]
            if heavy and light:
                out.append([heavy, light])
        if len({workload.tool_wait_target([n]) for n in names}) > 1:
            # The classes' tool-wait targets differ: a shared queue holds every call to the tightest one, which is
            # what isolation removes. Try the isolated queues first, so that a time limit spent on the shared
            # queue's tail-wait curves never leaves them untried.
            out.insert(0, out.pop(1))
    return out


_LABELS = {"id", "name", "source", "notes"}
"""Catalog fields that name an entry or cite its figures; two SKUs equal in everything else are twins."""


def drop_twin_skus(options: list[ServerOption], servings: dict) -> tuple[list[ServerOption], dict]:
    """Keep one SKU of each set of twins (the first id), so that the answer never depends on which of several
    interchangeable SKUs a solver happened to pick. CPUs are twins when their catalog figures are equal; GPUs when
    their figures and their servings of the workload's model (calibrations name GPU ids) are equal. A twin's
    servers are dropped only when every one of them has its counterpart with the kept SKU (same chassis and GPU
    count; the filters or layout A's default CPU may leave some out): then the options are the same up to names, and
    so is every answer, also where a sandbox-memory limit makes one CPU (GPU) SKU per queue (row) a constraint."""
    def figures(sku) -> str:
        return sku.model_dump_json(exclude=_LABELS)

    def gpu_sig(g) -> tuple:
        serv = sorted((k.split("@", 1)[1], repr(replace(v, gpu_id="", rates=replace(v.rates, basis=""))))
                      for k, v in servings.items() if v.gpu_id == g.id)
        return figures(g), tuple(serv)

    def key(o: ServerOption, cpu: str | None = None, gpu: str | None = None) -> tuple:
        pr = o.profile
        return (pr.chassis.id, cpu or pr.cpu.id, gpu or (pr.gpu.id if pr.gpu else None), pr.gpus)

    for kind in ("gpu", "cpu"):
        skus = {}
        for o in options:
            sku = o.profile.gpu if kind == "gpu" else o.profile.cpu
            if sku is not None:
                skus.setdefault(sku.id, sku)
        first: dict = {}
        rep = {}
        for sid in sorted(skus):
            sig = gpu_sig(skus[sid]) if kind == "gpu" else figures(skus[sid])
            rep[sid] = first.setdefault(sig, sid)
        present = {key(o) for o in options}
        drop = set()
        for sid, r in rep.items():
            if sid == r:
                continue
            mine = [o for o in options if (o.gpu_id if kind == "gpu" else o.cpu_id) == sid]
            if all((key(o, gpu=r) if kind == "gpu" else key(o, cpu=r)) in present for o in mine):
                drop.add(sid)
        if drop:
            options = [o for o in options if (o.gpu_id if kind == "gpu" else o.cpu_id) not in drop]
            if kind == "gpu":
                servings = {k: v for k, v in servings.items() if v.gpu_id not in drop}
    return options, servings


def _fix(model: LinearModel, name: str, terms: dict[str, float], sense: str, rhs: float, group: str) -> LinearModel:
    m = model.copy()
    m.add(name, group, terms, sense, rhs)  # type: ignore[arg-type]
    return m


_Clock = Deadline
"""The whole optimization's time budget (advisor/deadline.py): loops stop starting new solves once it is spent."""


def tie_break_objective(b: Built, p: Problem) -> dict[str, float]:
    """The tie-breaks of max_throughput as one weighted sum: power, cost and orchestration cores, each over its
    largest possible value (so the sum is at most one). `throughput_objective` weighs them into its first solve."""
    total_power = sum(per_rack_count_bound(o, p.rack) * o.profile.power_w for o in p.options) * p.racks + 1.0
    if p.switch is not None:
        total_power += len(b.k) * b.model.vars[next(iter(b.k.values()))].ub * p.switch.power_w if b.k else 0.0
    total_cost = sum(per_rack_count_bound(o, p.rack) * (o.profile.price_usd or 0) for o in p.options) * p.racks
    total_cores = sum(o.profile.cores * per_rack_count_bound(o, p.rack) for o in p.options) * p.racks + 1.0
    obj: dict[str, float] = {}
    for k, v in power_terms(b, p).items():
        obj[k] = obj.get(k, 0.0) + 0.5 * v / total_power
    for k, v in cost_terms(b, p).items():
        if total_cost:
            obj[k] = obj.get(k, 0.0) + 0.25 * v / total_cost
    for v in b.u.values():  # reserve no more orchestration cores than needed
        obj[v] = 0.25 / total_cores
    return obj


def throughput_objective(b: Built, p: Problem, s: OptimizerSettings) -> dict[str, float]:
    """Throughput less the tie-breaks, weighted so that all of them together are worth less than
    `throughput_tie_tolerance` of the throughput (a lexicographic order in effect)."""
    budget = s.throughput_tie_tolerance * b.x_upper
    obj = {k: -budget * v for k, v in tie_break_objective(b, p).items()}
    obj[b.x] = obj.get(b.x, 0.0) + 1.0
    return obj


RANK_STEP = (math.sqrt(5.0) - 1.0) / 2.0
"""Rank weights 1 + frac((i + 1) x this) for option i: distinct and with no small integer relation between them,
so that two different server mixes practically never weigh the same (linear weights 1, 2, 3, ... do: swapping one
server of option i for one of i + 1 while another swap goes the other way leaves their sum unchanged)."""


def rank_objective(b: Built) -> dict[str, float]:
    """The last tie-break: a fixed weight per option (by its index in the enumeration, i.e. sorted by chassis, CPU,
    GPU ids and GPU count), so that answers equal in every figure the optimizer ranks are ordered by what they are
    made of, the same way by every backend."""
    return {v: 1.0 + ((i + 1) * RANK_STEP) % 1.0 for (_, i), v in b.n.items()}


WINDOW_FLOOR = 1e-6
"""Relative width of the windows after the first tie-break stage (least power, then cost): as wide as the MIP gap
that stage is solved to, so that two answers the gap cannot tell apart are both passed on to the next stage
instead of each backend keeping the one it happened to find."""


def _within_bounds(model: LinearModel, hint: dict[str, float] | None) -> dict[str, float] | None:
    """A starting point clipped to the variable bounds (polished LP values may sit 1e-13 outside them, which PuLP
    refuses), integers rounded."""
    if hint is None:
        return None
    out = {}
    for k, val in hint.items():
        v = model.vars.get(k)
        if v is None:
            continue
        val = max(v.lb, val) if v.ub is None else min(max(v.lb, val), v.ub)
        out[k] = float(round(val)) if v.integer else val
    return out


def _solve_started(model: LinearModel, backend: str, clock: _Clock, s: OptimizerSettings,
                   hint: dict[str, float] | None) -> Solution:
    """Solve from a starting point. CBC (through PuLP's warm start) was seen to return a fractional point of the
    relaxation as its `optimal` MIP answer; such an answer is solved again without the start."""
    sol = solve(model, backend, clock.left(), s.mip_gap, hint=_within_bounds(model, hint))
    if hint is not None and sol.has_solution and not _integral(model, sol):
        sol = solve(model, backend, clock.left(), s.mip_gap)
    return sol


def _integral(model: LinearModel, sol: Solution, tol: float = 1e-5) -> bool:
    return all(abs(sol.values.get(k, 0.0) - round(sol.values.get(k, 0.0))) <= tol
               for k, v in model.vars.items() if v.integer)


def _lexicographic(model: LinearModel, b: Built, backend: str, s: OptimizerSettings, clock: _Clock,
                   hint: dict[str, float] | None, stages: list[tuple[str, dict[str, float], bool]]
                   ) -> tuple[Solution, LinearModel]:
    """Solve `model` for the first stage's objective, then each next stage's among the answers within a window of
    the previous stage's optimum, warm-started from it: `throughput_tie_tolerance` (relative, absolute below one)
    of the first stage's, WINDOW_FLOOR of each later one's (near-ties there go on to the next stage).

    Weights alone cannot do this in one solve: the later objectives would have to be worth less than the MIP gap, so
    a solver may stop on any of the tied answers, and CBC and SCIP stop on different ones (the first stage may still
    carry them as small weights, which speeds it up). Each later stage is an objective of its own, which the
    relative gap resolves. The first stage's status, gap and bound are the answer's (they speak of the objective the
    user asked for); the values are the last stage's. A first stage stopped by the
    time limit, or a later stage that finds nothing, ends the sequence with the answer so far. Returns the
    solution and the first stage's model (the windows depend on the backend's figures, so polishing leaves them
    out)."""
    name, objective, maximize = stages[0]
    m = model.copy()
    m.objective, m.maximize = objective, maximize
    first = _solve_started(m, backend, clock, s, hint)
    if not first.has_solution or b.x not in first.values or first.status == "time_limit":
        return first, m
    sol, cur = first, m
    for name, objective, maximize in stages[1:]:
        if clock.no_time():
            break
        if not objective:  # nothing to rank by (no prices): the next stage keeps this one's window
            continue
        value = sum(a * sol.values.get(k, 0.0) for k, a in cur.objective.items())
        rel = s.throughput_tie_tolerance if cur is m else max(s.throughput_tie_tolerance, WINDOW_FLOOR)
        tol = rel * max(1.0, abs(value))
        nxt_model = _fix(cur, f"tie_{name}", cur.objective, ">=" if cur.maximize else "<=",
                         value - tol if cur.maximize else value + tol, "tie_window")
        nxt_model.objective, nxt_model.maximize = objective, maximize
        nxt_model = _with_curve_free_bound(nxt_model, name, backend, clock, s)
        nxt = _solve_started(nxt_model, backend, clock, s, sol.values)
        if not nxt.has_solution or b.x not in nxt.values or not _integral(nxt_model, nxt):
            break
        sol, cur = nxt, nxt_model
    return Solution(first.status, first.objective, sol.values, best_bound=first.best_bound, gap=first.gap,
                    seconds=first.seconds, backend=first.backend), m


def _with_curve_free_bound(model: LinearModel, name: str, backend: str, clock: _Clock,
                           s: OptimizerSettings) -> LinearModel:
    """A tie-break stage of a model with tail-wait curves, with its objective bounded by the same stage solved
    without the curves (a relaxation, so the bound cuts off no answer). The curves' multiple-choice segments relax
    to their chord, so a solver's own bound on such a stage stays far from its optimum: on the built-in batch grid's
    hybrid at tool share 0.9, CBC proved the least-power stage in 26.3 s alone and in 3.6 s with this bound (the
    curve-free stage: 0.1 s). The model is returned unchanged when it has no curves or the bound is unknown."""
    free = [c for c in model.constraints if not c.group.startswith("slo")]
    if len(free) == len(model.constraints) or clock.no_time():
        return model
    relaxed = LinearModel(f"{model.name}_curve_free", dict(model.vars), free, dict(model.objective), model.maximize)
    r = solve(relaxed, backend, clock.left(), s.mip_gap)
    bound = r.best_bound if r.best_bound is not None else (r.objective if r.status == "optimal" else None)
    if bound is None or not math.isfinite(bound):
        return model
    slack = PROOF_SLACK * max(1.0, abs(bound))
    return _fix(model, f"bound_{name}", model.objective, "<=" if model.maximize else ">=",
                bound + slack if model.maximize else bound - slack, "stage_bound")


def _solve_stages(b: Built, p: Problem, layout: Layout, objective: Objective, backend: str,
                  s: OptimizerSettings, clock: _Clock, hint: dict[str, float] | None = None
                  ) -> tuple[Solution, LinearModel, list[str]]:
    """Lexicographic stages; returns the final solution and model."""
    notes: list[str] = []
    model = b.model
    if layout == "a":
        gcap = gpu_capacity_terms(b, p)
        if gcap:
            m1 = model.copy()
            m1.objective, m1.maximize = gcap, True
            s1 = solve(m1, backend, clock.left(), s.mip_gap)
            if not s1.has_solution:
                return s1, m1, notes
            model = _fix(model, "gpu_first", gcap, ">=", s1.objective * (1 - s.throughput_tie_tolerance) - 1e-6,
                         "gpu_first")
    if objective == "max_throughput":
        # Most throughput (with the tie-breaks as small weights: the proven gap is the same, and solvers find the
        # answer faster than with X alone); then least power; then least cost; then the option ranks. The later
        # stages read server counts only (the continuous split is polish's to make canonical): where a stage held
        # the orchestration cores too, SCIP reported a better objective than its own values gave; and power and
        # cost as one weighted sum left mixes within the gap of each other, which CBC and SCIP ranked differently.
        stages = [("throughput", throughput_objective(b, p, s), True)]
        if s.answer_detail == "full":
            stages += [("power", power_terms(b, p), False),
                       ("cost", cost_terms(b, p) if any(cost_terms(b, p).values()) else {}, False),
                       ("rank", rank_objective(b), False)]
        sol, m = _lexicographic(model, b, backend, s, clock, hint, stages)
        return sol, m, notes
    if objective in TCO_OBJECTIVES:
        return solve_tco(model, b, p, objective, backend, s.assumptions.costs,
                         p.workload.planned_load(s.assumptions.operating_load_fraction),
                         s.mip_gap, clock.left, s.dinkelbach_iterations, p.operating_tasks_per_hour)
    if p.required_tasks_per_hour is None:
        raise InputError(f"objective {objective} needs required_tasks_per_hour")
    first = cost_terms(b, p) if objective == "min_cost" else power_terms(b, p)
    if objective == "min_cost" and not any(first.values()):
        raise InputError("min_cost needs prices; the candidate servers have none")
    # Least cost (power); then the most throughput those servers give; then the option ranks.
    sol, m = _lexicographic(model, b, backend, s, clock, hint, [
        (objective, first, False), ("throughput", {b.x: 1.0}, True), ("rank", rank_objective(b), False)])
    return sol, m, notes


def _without_count_bounds(b: Built) -> dict:
    """Server-count variables without the per-rack upper bounds (those bounds are derived from the budgets, so a
    what-if that moves a budget must not keep them)."""
    counts = set(b.n.values()) | set(b.k.values())
    return {k: (Var(v.name, v.lb, None, v.integer) if k in counts else v) for k, v in b.model.vars.items()}


def _diagnose(b: Built, p: Problem, backend: str, s: OptimizerSettings, clock: _Clock) -> list[Infeasibility]:
    """Which single budget, raised, makes the request feasible, and by how much (minimum extra per rack)."""
    out: list[Infeasibility] = []
    if not p.options:
        return out
    if b.has_sku_choice:  # big-M constants there come from the budgets too: diagnose the capacity model
        b = build(p, memory=False)
    free = _without_count_bounds(b)
    for g in BUDGET_GROUPS:
        cons = [c for c in b.model.constraints if c.group == g]
        if not cons:
            continue
        m = LinearModel("diagnose", dict(free), [c for c in b.model.constraints if c.group != g], {}, False)
        slack = m.var("slack", 0, None)
        for c in cons:
            m.add(c.name, c.group, {**c.terms, slack: -1.0}, c.sense, c.rhs)
        m.objective = {slack: 1.0}
        sol = solve(m, backend, clock.left(), s.mip_gap)
        if sol.has_solution:
            extra = sol.values[slack]
            unit = BUDGET_UNITS[g]
            avail = cons[0].rhs
            out.append(Infeasibility(group=g, shortfall=extra, unit=unit, message=(
                f"raising {g} ({BUDGET_FIELDS[g]}) by {extra:,.0f} {unit}{' per rack' if g != 'capital' else ''} "
                f"(from {avail:,.0f} to {avail + extra:,.0f} {unit}{_budget_basis(g, p.rack)}) makes it feasible")))
    out.sort(key=lambda i: (i.shortfall or math.inf) / max(1.0, next(
        c.rhs for c in b.model.constraints if c.group == i.group)))
    if out or not p.options:
        return out
    # No single budget is enough: relax them together, minimizing the sum of relative increases.
    groups = [g for g in BUDGET_GROUPS if any(c.group == g for c in b.model.constraints)]
    m = LinearModel("diagnose_joint", dict(free), [c for c in b.model.constraints if c.group not in groups],
                    {}, False)
    slack = {g: m.var(f"slack_{g}", 0, None) for g in groups}
    rhs = {}
    for c in b.model.constraints:
        if c.group in groups:
            m.add(c.name, c.group, {**c.terms, slack[c.group]: -1.0}, c.sense, c.rhs)
            rhs[c.group] = max(1.0, c.rhs)
    m.objective = {slack[g]: 1.0 / rhs[g] for g in groups}
    sol = solve(m, backend, clock.left(), s.mip_gap)
    if not sol.has_solution:
        return out
    for g in groups:
        extra = sol.values[slack[g]]
        if extra > 1e-6:
            unit = BUDGET_UNITS[g]
            out.append(Infeasibility(group=g, shortfall=extra, unit=unit, message=(
                f"together with the others listed, raise {g} ({BUDGET_FIELDS[g]}) by {extra:,.0f} {unit}"
                f"{' per rack' if g != 'capital' else ''} (from {rhs[g]:,.0f} to {rhs[g] + extra:,.0f} {unit})")))
    return out


def _budget_basis(group: str, rack: Rack) -> str:
    """How a rack budget's right-hand side is made, for messages."""
    if group == "power_feed" and rack.feed_rating_w is not None:
        return (f" = {rack.redundancy}: {rack.surviving_feeds} of {rack.feeds} feeds x {rack.feed_rating_w:,.0f} W x "
                f"{rack.continuous_load_factor:g} - {rack.reserved_power_w:,.0f} W reserved")
    if group == "weight" and rack.max_weight_kg is not None:
        return f" = max_weight_kg {rack.max_weight_kg:,.0f} - reserved_weight_kg {rack.reserved_weight_kg:,.0f}"
    if group == "network_ports":
        return " free"
    return ""


def _configuration(b: Built, p: Problem, sol: Solution, layout: Layout) -> tuple[Configuration, list[ServerChoice]]:
    totals: dict[int, int] = {}
    for (r, i), v in b.n.items():
        totals[i] = totals.get(i, 0) + int(round(sol.values.get(v, 0.0)))
    groups, choices = [], []
    for (r, i), v in sorted(b.n.items()):
        cnt = int(round(sol.values.get(v, 0.0)))
        if cnt <= 0:
            continue
        o = p.options[i]
        orch_per_gpu = o.profile.orchestration_cores_per_gpu
        if i in b.u:
            orch_per_gpu = max(0.0, sol.values.get(b.u[i], 0.0)) / (totals[i] * o.profile.gpus)
            orch_per_gpu = min(orch_per_gpu, o.profile.cores / o.profile.gpus)
            orch_per_gpu = 0.0 if orch_per_gpu < 1e-9 else orch_per_gpu  # solver noise (the model takes >= 1e-9)
        tool_cores = o.profile.cores - orch_per_gpu * o.profile.gpus if i in b.u else o.profile.tool_cores
        qc = {}
        for qi, qn in enumerate(p.queue_names):
            yv = b.y.get((i, qi))
            if yv is not None:
                qc[qn] = max(0.0, sol.values.get(yv, 0.0)) / totals[i]
        tot = sum(qc.values())
        if tot > tool_cores:  # solver tolerance
            qc = {k: v * tool_cores / tot for k, v in qc.items()}
        qc = {k: v for k, v in qc.items() if v > 1e-9}
        pr = o.profile
        groups.append(ServerGroup(chassis=pr.chassis.id, cpu=pr.cpu.id, gpu=pr.gpu.id if pr.gpu else None,
                                  gpus_per_server=pr.gpus, count=cnt, rack=r,
                                  orchestration_cores_per_gpu=orch_per_gpu, queue_cores=qc))
        choices.append(ServerChoice(chassis=pr.chassis.id, cpu=pr.cpu.id, gpu=pr.gpu.id if pr.gpu else None,
                                    gpus_per_server=pr.gpus, count=cnt, rack=r,
                                    orchestration_cores_per_gpu=orch_per_gpu, queue_cores=qc,
                                    power_w_each=pr.power_w, space_u_each=pr.space_u))
    queues = [Queue(name=qn, classes=cls) for qn, cls in zip(p.queue_names, p.partition) if cls]
    op = OperatingPoint(arrival_rate_per_hour=p.operating_tasks_per_hour) if p.operating_tasks_per_hour \
        else OperatingPoint()
    cfg = Configuration(name=f"layout {layout}", workload=p.workload.id, rack=p.rack.id, racks=p.racks,
                        servers=groups or [], queues=queues or None, operating_point=op) if groups else None
    return cfg, choices


def _constraint_status(b: Built, p: Problem, sol: Solution) -> list[ConstraintStatus]:
    out = []
    vals = sol.values
    min_need = {
        "power": min((o.profile.power_w for o in p.options), default=0),
        "power_feed": min((o.profile.power_w for o in p.options), default=0),
        "weight": min((o.profile.chassis.weight_kg for o in p.options), default=0),
        "network_ports": min((o.profile.chassis.network_ports for o in p.options if o.profile.chassis.network_ports),
                             default=0),
        "cooling_air": min((o.profile.air_heat_w for o in p.options if o.profile.air_heat_w > 0), default=0),
        "cooling_liquid": min((o.profile.liquid_heat_w for o in p.options if o.profile.liquid_heat_w > 0), default=0),
        "space": min((o.profile.space_u for o in p.options), default=0),
        "capital": min((o.profile.price_usd or 0 for o in p.options), default=0),
    }
    exact = p.fixed is not None and p.fixed.exact
    if exact:
        owned = float(sum(p.fixed.counts.values()))
        out.append(ConstraintStatus(group="fixed_servers", name="fixed_servers", used=owned, available=owned,
                                    unit="servers", binding=True))
    for c in b.model.constraints:
        if c.group == "network_ports":  # ports placed against the ports the rack's switches offer
            used = sum(a * vals.get(k, 0.0) for k, a in c.terms.items() if a > 0)
            avail = -sum(a * vals.get(k, 0.0) for k, a in c.terms.items() if a < 0)
            kv = next(k for k, a in c.terms.items() if a < 0)
            full = round(vals.get(kv, 0.0)) >= b.model.vars[kv].ub  # no room for another switch
            out.append(ConstraintStatus(group=c.group, name=c.name, used=used, available=avail, unit="ports",
                                        binding=full and avail - used < min_need["network_ports"] - 1e-9))
        elif c.group in BUDGET_GROUPS:
            used = sum(a * vals.get(k, 0.0) for k, a in c.terms.items())
            # with the owned servers kept exactly (keep_hardware) nothing is bought, so no budget can bind: the
            # servers themselves do (the fixed_servers status below)
            binding = c.rhs - used < min_need[c.group] - 1e-9 and not exact
            out.append(ConstraintStatus(group=c.group, name=c.name, used=used, available=c.rhs,
                                        unit=BUDGET_UNITS[c.group], binding=binding))
        elif c.group in ("gpu_serving",) or c.group.startswith(("tool_cores:", "sandbox_memory:", "sandbox_disk:",
                                                                                   "io_bandwidth:")):
            pos = sum(a * vals.get(k, 0.0) for k, a in c.terms.items() if a > 0)
            neg = -sum(a * vals.get(k, 0.0) for k, a in c.terms.items() if a < 0)
            out.append(ConstraintStatus(group=c.group, name=c.name, used=pos, available=neg, unit="scaled",
                                        binding=neg > 0 and pos >= neg * (1 - 1e-6)))
    return out


def _shadow_prices(b: Built, p: Problem, backend: str, s: OptimizerSettings, clock: _Clock, layout: Layout,
                   x_best: float, explain_resolve: bool) -> list[ShadowPrice]:
    from advisor.optimizer.rows import polish
    from advisor.solver.highs import lp as _lp

    # The LP relaxation is solved in process by HiGHS whatever the backend: where budgets bind together (a rack's
    # power and air cooling, say) its duals are not unique, and CLP and GLOP put them on different budgets; CBC
    # also prints them to 8 digits. One LP solver makes the shadow prices a function of the input alone.
    relax = b.model.copy()
    relax.vars = {k: type(v)(v.name, v.lb, v.ub, False) for k, v in relax.vars.items()}
    lp = _lp(relax, {b.x: 1.0})
    prices = []
    if lp is None or not lp[1]:
        return prices
    duals = lp[1]
    groups = [g for g in BUDGET_GROUPS if any(c.group == g for c in b.model.constraints)]
    what_if_clock = clock.within(max(0.0, clock.remaining()) * s.explain_time_share)

    def what_it_takes(g: str) -> str | None:
        """Re-solve with budget `g` 10% larger (the gain a planner gets for it)."""
        cons = [c for c in b.model.constraints if c.group == g]
        if not (explain_resolve and x_best > 0 and cons[0].rhs > 0 and not what_if_clock.no_time()):
            return None
        cons_1 = [c if c.group != g else type(c)(c.name, c.group, c.terms, c.sense, c.rhs * WHAT_IF_FACTOR)
                  for c in b.model.constraints]
        if p.racks > 1 and layout != "a":
            aggregates, x_more, proven = _row_what_if(b, p, cons_1, backend, s, what_if_clock)
            if aggregates:
                return said(g, x_more, proven)
        m = LinearModel("what_if", _without_count_bounds(b), cons_1, {b.x: 1.0}, True)
        if layout == "a":
            gcap = gpu_capacity_terms(b, p)
            m1 = m.copy()
            m1.objective = gcap
            s1 = solve(m1, backend, what_if_clock.left(), s.mip_gap)
            if s1.has_solution:
                m.add("gpu_first", "gpu_first", gcap, ">=", s1.objective * (1 - s.throughput_tie_tolerance) - 1e-6)
        sol = solve(m, backend, what_if_clock.left(), s.mip_gap)
        if not sol.has_solution:
            return None
        sol = polish(m, sol, [({b.x: 1.0}, True)])  # X in full precision (CBC prints 8 digits)
        return said(g, sol.values[b.x], sol.status == "optimal")

    def said(g: str, x_more: float | None, proven: bool) -> str | None:
        rhs = next(c.rhs for c in b.model.constraints if c.group == g)
        return what_if_sentence(g, rhs, x_best, x_more, proven)

    # the re-solves are independent: run them side by side (advisor/parallel.py)
    takes = run_all(what_it_takes, groups, s.concurrent_solves)
    for g, t in zip(groups, takes):
        names = [c.name for c in b.model.constraints if c.group == g]
        dual = sum(abs(duals.get(n, 0.0)) for n in names) / len(names)
        scale, label_unit = _price_unit(g)
        prices.append(ShadowPrice(group=g, tasks_per_hour_per_unit=dual * scale, unit=label_unit, what_it_takes=t))
    return prices


WHAT_IF_FACTOR = 1.1
"""The "what it takes" re-solves raise one budget by this factor (+10%)."""


def what_if_sentence(group: str, rhs: float, x_best: float, x_more: float | None, proven: bool) -> str | None:
    """The "+10% of a budget" sentence: `rhs` the budget per rack, `x_best` the answer's throughput, `x_more` the
    re-solve's (None: no answer on the clock), `proven` whether the re-solve proved its optimum."""
    if x_more is None:
        return None
    if not proven:
        # the answer itself stays within the larger budget, so an unproven re-solve's gain is a lower bound, and
        # never below zero
        x_more = max(x_more, x_best)
    gain = x_more - x_best
    gain = 0.0 if abs(gain) <= 1e-9 * x_best else gain  # not "-0 tasks/h" for rounding noise
    scale, label_unit = _price_unit(group)
    told = (f"{gain:+,.0f} tasks/h ({gain / x_best:+.1%})" if proven else
            f"at least {gain:+,.0f} tasks/h ({gain / x_best:+.1%}; the re-solve stopped at its time limit, so more "
            "may be possible)")
    return (f"+10% {group} ({rhs * (WHAT_IF_FACTOR - 1) / scale:,.1f} {label_unit}"
            f"{' per rack' if group != 'capital' else ''}) gives {told}")


def _row_what_if(b: Built, p: Problem, constraints: list, backend: str, s: OptimizerSettings,
                 clock: Deadline) -> tuple[bool, float | None, bool]:
    """The row's X with one budget raised, by the rack-pattern search the row itself was solved with (a row of a
    thousand racks is a MILP of tens of thousands of variables; its patterns are one rack's). Returns whether the
    row aggregates into patterns (else the caller solves the row MILP), X (None: no answer on the clock) and whether
    X is proven optimal."""
    from advisor.optimizer.rows import polish, solve_row

    # A count bound comes from the budgets (the most that fit one rack), so one budget x WHAT_IF_FACTOR allows at
    # most that factor times (bound + 1) servers; the pattern search needs a finite bound.
    counts = set(b.n.values()) | set(b.k.values())
    vars_ = {k: (Var(v.name, v.lb, math.ceil(WHAT_IF_FACTOR * (v.ub + 1)), v.integer)
                 if k in counts and v.ub is not None else v) for k, v in b.model.vars.items()}
    m = LinearModel("what_if", vars_, constraints, {b.x: 1.0}, True, b.model.check_group)

    def master(agg: Built) -> Solution:
        sol = solve(agg.model, backend, clock.left(), s.mip_gap)
        return polish(agg.model, sol, [({b.x: 1.0}, True)])  # X in full precision (CBC prints 8 digits)

    res = solve_row(replace(b, model=m), p, master, [], clock.remaining, s.mip_gap, s.row_pattern_iterations,
                    s.row_pattern_enumeration_limit, 0.0)
    if res is None:
        return False, None, False
    if not res.solution.has_solution:
        return True, None, False
    return True, res.solution.values[b.x], res.solution.status == "optimal"


def _price_unit(group: str) -> tuple[float, str]:
    """A budget's shadow price is quoted per kW where the budget is in W."""
    unit = BUDGET_UNITS[group]
    return (1000.0, "kW") if unit == "W" else (1.0, unit)


def optimize(
    workload: Workload,
    rack: Rack,
    catalog: Catalog,
    layout: Layout = "hybrid",
    racks: int = 1,
    backend: str = "cbc",
    time_limit_s: float | None = None,
    objective: Objective = "max_throughput",
    required_tasks_per_hour: float | None = None,
    capital_budget_usd: float | None = None,
    gpu_ids: list[str] | None = None,
    cpu_ids: list[str] | None = None,
    settings: OptimizerSettings | None = None,
    explain: bool = True,
    existing: Configuration | None = None,
    allow_removal: bool = False,
    software_only: bool = False,
    _plan: bool = True,
    spares: int = 0,
    certify: bool = True,
    deadline: Deadline | None = None,
) -> OptimizeResult:
    """`existing`: the servers the user owns stay in the answer (brownfield; advisor/optimizer/migration.py), or
    with `allow_removal` may go at their salvage value; the answer then carries a migration plan.
    `software_only`: exactly the owned servers, only their core split optimized.
    `spares`: servers of each kind held back (advisor/optimizer/failures.py).
    `certify`: run the local-search certificate on the answer (internal sub-solves leave it to the caller).
    `deadline`: the request's clock (advisor/deadline.py); this call ends by it and by its own time limit."""
    owned_kw = (dict(existing=existing, allow_removal=allow_removal, software_only=software_only)
                if existing is not None else {})
    if objective == "max_operating_throughput" or spares > 0:
        # the wrappers solve several times: one clock for all of them
        deadline = Deadline(time_limit_s or (settings or OptimizerSettings()).time_limit_s, parent=deadline)
    if objective == "max_operating_throughput":  # advisor/optimizer/operating.py
        return optimize_operating(optimize, workload, rack, catalog, layout=layout, racks=racks,
                                  backend=backend, time_limit_s=time_limit_s,
                                  required_tasks_per_hour=required_tasks_per_hour,
                                  capital_budget_usd=capital_budget_usd, gpu_ids=gpu_ids, cpu_ids=cpu_ids,
                                  settings=settings, explain=explain, spares=spares, certify=certify,
                                  deadline=deadline, **owned_kw)
    if spares > 0:  # advisor/optimizer/failures.py
        return optimize_with_spares(optimize, workload, rack, catalog, spares, layout=layout, racks=racks,
                                    backend=backend, time_limit_s=time_limit_s, objective=objective,
                                    required_tasks_per_hour=required_tasks_per_hour,
                                    capital_budget_usd=capital_budget_usd, gpu_ids=gpu_ids, cpu_ids=cpu_ids,
                                    settings=settings, explain=explain, certify=certify, deadline=deadline,
                                    **owned_kw)
    s = settings or OptimizerSettings()
    full = Deadline(time_limit_s or s.time_limit_s, parent=deadline)
    # the search leaves the certificate its share of the clock
    clock = Deadline(full.limit * (1 - s.certificate_time_share), parent=full) if certify else full
    t0 = time.perf_counter()
    switch = rack_switch(rack, catalog)
    options, servings = enumerate_options(
        catalog, workload, rack, layout, s.layout_a_orchestration_cores_per_gpu,
        s.assumptions.host_os_reserved_memory_gb, s.assumptions.tensor_parallel_domain_gpus, gpu_ids, cpu_ids,
        costs=s.assumptions.costs)
    has_llm = any(isinstance(st, GpuStage) for c in workload.classes for st in c.stages)
    if has_llm and servings and not any(v.fits for v in servings.values()):
        # no GPU candidate (after the filters) can hold one replica: say why, per GPU, for its largest domain
        largest = {}
        for v in servings.values():
            if v.gpu_id not in largest or v.domain_gpus > largest[v.gpu_id].domain_gpus:
                largest[v.gpu_id] = v
        raise InputError(f"served_model {workload.served_model.id}: no candidate GPU server can hold one replica: "
                         + "; ".join(largest[g].reason for g in sorted(largest)))
    servings = {k: v for k, v in servings.items() if v.fits}
    options, servings = drop_twin_skus(options, servings)
    fixed = existing_ev = None
    if existing is not None:
        from advisor.optimizer.migration import check_existing, owned_servers, with_engine_floor

        existing, existing_ev = check_existing(existing, workload, rack, racks, catalog, s)
        options, servings, fixed = owned_servers(existing, options, servings, catalog, workload, rack, layout, s,
                                                 allow_removal, software_only)
        baseline = with_engine_floor(existing, options)
        baseline_ev = existing_ev if baseline == existing else evaluate(baseline, workload, rack, catalog,
                                                                        s.assumptions)
    owned = {k for _, k in fixed.counts} if fixed is not None else set()
    warnings_pre: list[str] = []
    misfits = system_misfits(catalog, workload, rack, gpu_ids, cpu_ids)
    has_llm = any(isinstance(st, GpuStage) for c in workload.classes for st in c.stages)
    if misfits and not any(o.profile.gpus for o in options) and (has_llm or not options):
        raise InputError("no candidate GPU server fits an empty rack: " + "; ".join(misfits))
    if gpu_ids is not None:  # the user asked for these GPUs: say why a system of them is not a candidate
        warnings_pre += [m + " (left out of the candidates)" for m in misfits]
    operating_tasks_per_hour = None
    if objective == "min_tco_for_throughput":
        if required_tasks_per_hour is None:
            raise InputError("objective min_tco_for_throughput needs required_tasks_per_hour (the tasks/h to serve)")
        # Serve R tasks/h at the planned load fraction f: sustainable throughput at least R / f.
        operating_tasks_per_hour = required_tasks_per_hour
        required_tasks_per_hour = required_tasks_per_hour / workload.planned_load(s.assumptions.operating_load_fraction)
    if capital_budget_usd is not None or objective == "min_cost" or objective in TCO_OBJECTIVES:
        priced = [o for o in options if o.profile.price_usd is not None or o.key in owned]
        if len(priced) < len(options):
            warnings_pre.append(f"{len(options) - len(priced)} candidate servers without a known price were left "
                                "out (a capital budget or a cost objective needs prices)")
        if not priced:
            raise InputError("a capital budget needs server prices, and no candidate server has a complete price "
                             "(chassis + CPUs + GPUs); add price_usd to the catalog entries you consider")
        options = priced
    # Without sandbox memory in play only capacity matters, so a smaller Pareto set of servers is exact.
    if objective == "max_throughput" and capital_budget_usd is None:
        capacity_options = prune_dominated(options, capacity_only=True)
    elif objective in TCO_OBJECTIVES:
        capacity_options = prune_dominated(options, capacity_only=True, costs=s.assumptions.costs)
    else:
        capacity_options = options
    if owned:  # owned servers stay candidates whatever dominates them
        keep = {o.key for o in capacity_options} | owned
        capacity_options = [o for o in options if o.key in keep]
    single = None
    if racks > 1 and objective == "max_throughput" and fixed is None:
        # R copies of the best single rack are a valid answer for R identical racks; the row search must beat it.
        single = optimize(workload, rack, catalog, layout=layout, racks=1, backend=backend,
                          deadline=clock.share(3), objective=objective,
                          capital_budget_usd=None, gpu_ids=gpu_ids, cpu_ids=cpu_ids, settings=settings,
                          explain=False, certify=False) if capital_budget_usd is None else None
    space = _SearchSpace(workload, rack, racks, options, capacity_options, servings, capital_budget_usd,
                         required_tasks_per_hour, operating_tasks_per_hour, s, switch, fixed, layout, objective,
                         backend)
    best, any_coupled, proven_ub = _search_partitions(space, clock)
    p, b, sol, notes, ev_best = best.problem, best.built, best.solution, best.notes, best.evaluation
    if objective == "max_throughput" and sol.has_solution and b.x in sol.values:
        _label(sol, ev_best.throughput_tasks_per_hour if ev_best is not None else 0.0, proven_ub, s, clock,
               s.throughput_tie_tolerance * b.x_upper)
    elif (sol.has_solution and p.required_tasks_per_hour is not None and ev_best is not None
          and ev_best.throughput_tasks_per_hour < p.required_tasks_per_hour * (1 - 1e-6)):
        # The cost objectives solve relaxations where memory couples the SKUs: their optimum is a bound, proven
        # only when the evaluator confirms the answer delivers what is required.
        sol.status, sol.gap = "feasible", None
        notes = notes + [f"the evaluator gives {ev_best.throughput_tasks_per_hour:,.1f} tasks/h, below the "
                         f"{p.required_tasks_per_hour:,.1f} required: not proven (sandbox memory couples the SKUs)"]
    notes = warnings_pre + notes
    # Shadow prices and +10% re-solves speak of throughput; for a cost objective they would answer another question.
    too_small = None
    if not p.options:
        every, _ = enumerate_options(
            catalog, workload, rack, layout, s.layout_a_orchestration_cores_per_gpu,
            s.assumptions.host_os_reserved_memory_gb, s.assumptions.tensor_parallel_domain_gpus, gpu_ids, cpu_ids,
            prune=False, costs=s.assumptions.costs, fit=False)
        too_small = _too_small_diagnosis(every, rack, catalog)
    result = _result(p, b, sol, notes, layout, backend, s, clock, t0, explain and objective == "max_throughput",
                     ev_best, too_small)
    bound = proven_ub if objective == "max_throughput" else None
    if _exceeds(result.throughput_tasks_per_hour, bound):
        bound = None
    budget = s.throughput_tie_tolerance * b.x_upper
    result = result.model_copy(update={"bound_tasks_per_hour": bound})
    if racks > 1 and single is not None and single.configuration:
        rep = _replicate(single, racks, p, layout, backend, s, t0, options)
        if rep is not None and rep.throughput_tasks_per_hour > result.throughput_tasks_per_hour * (1 + MATERIAL_GAIN):
            result = _relabel(rep, bound, s, clock, budget)
    proven = objective == "max_throughput" and _proven(result.throughput_tasks_per_hour, bound, s, budget)
    if any_coupled and layout in RELAXES and objective == "max_throughput" and not proven and not clock.no_time():
        # Memory or tail-wait limits left the search unproven: an answer of the layout this one relaxes is also
        # an answer here, so never return less than it (keeps hybrid >= B >= A).
        try:
            sub = optimize(workload, rack, catalog, layout=RELAXES[layout], racks=racks, backend=backend,
                           deadline=clock, objective=objective,
                           required_tasks_per_hour=required_tasks_per_hour, capital_budget_usd=capital_budget_usd,
                           gpu_ids=gpu_ids, cpu_ids=cpu_ids, settings=settings, explain=explain, existing=existing,
                           allow_removal=allow_removal, software_only=software_only, _plan=False, certify=False)
        except ValueError:  # the owned servers are no candidates of the relaxed layout (a CPU tier in layout b)
            sub = None
        if sub is not None and sub.throughput_tasks_per_hour > result.throughput_tasks_per_hour * (1 + MATERIAL_GAIN):
            result = _relabel(sub.model_copy(update={
                "layout": layout, "seconds": time.perf_counter() - t0, "bound_tasks_per_hour": bound,
                "warnings": sub.warnings + [f"layout {RELAXES[layout]}'s answer (also valid for {layout}) delivers "
                                            "more under the tail-wait/memory limits than this layout's own search"]}),
                bound, s, clock, budget)
    if certify and result.configuration and fixed is None and not (
            s.answer_detail == "throughput" and result.status == "optimal"):  # a proven answer has no better neighbour
        # owned servers are not the certificate's to move (its neighbours would add or remove them freely)
        result = _certify(result, p, options, layout, objective, capital_budget_usd, s, full, t0, bound, budget)
    if existing is not None and existing_ev is not None:
        from advisor.optimizer.migration import plan_migration

        if objective == "max_throughput":  # a cost objective ranks by cost, not by tasks/h
            result = _keep_at_least_owned(result, baseline, baseline_ev, options)
        if _plan and s.answer_detail == "full" and not software_only and result.configuration:
            def software_split(hw: Configuration) -> OptimizeResult:
                return optimize(workload, rack, catalog, layout=layout, racks=racks, backend=backend,
                                deadline=clock, settings=settings, explain=False,
                                existing=hw, software_only=True, certify=False)
            result = result.model_copy(update={"migration": plan_migration(
                existing, existing_ev, baseline_ev, result, workload, rack, catalog, s, options, software_split)})
    result = with_operating(result, workload, rack, catalog, s.assumptions)
    if s.answer_detail == "throughput" and spares == 0:
        return result
    return with_failures(result, workload, rack, catalog, s.assumptions, spares, expired=full.expired)


@dataclass(frozen=True)
class _SearchSpace:
    """What the partition search of `optimize` reads: the request, the candidates and the settings."""

    workload: Workload
    rack: Rack
    racks: int
    options: list[ServerOption]
    """Every candidate (the memory-coupled solves use them all)."""
    capacity_options: list[ServerOption]
    """The candidates a capacity-only solve needs (Pareto-pruned)."""
    servings: dict
    capital_budget_usd: float | None
    required_tasks_per_hour: float | None
    operating_tasks_per_hour: float | None
    settings: OptimizerSettings
    switch: object
    fixed: object
    layout: Layout
    objective: Objective
    backend: str


@dataclass
class _Candidate:
    """The search's best answer so far, as the evaluator judged it."""

    key: tuple
    """Ranking key: (evaluated tasks/h, -power) for throughput objectives, `_cost_key` for the others."""
    problem: Problem
    built: Built
    solution: Solution
    notes: list[str]
    coupled: bool
    """Memory or tail-wait limits made the search on its partition heuristic (other partitions are worth trying)."""
    evaluation: Evaluation | None


@dataclass
class _PartitionState:
    """One queue partition's place in the search: the solves so far and what the next one adds."""

    part: tuple
    problem: Problem
    memory: bool = False
    """The next solve carries sandbox memory (SKU-choice binaries)."""
    coupled: bool = False
    """Memory or tail-wait limits bound this partition's answer, so its search went on past the relaxation."""
    iterations: int = 0
    ub: float | None = None
    """Proven bound on X over this partition (the smallest of its solves' bounds; None: unknown)."""
    done: bool = False


def _search_partitions(sp: _SearchSpace, clock: Deadline) -> tuple[_Candidate, bool, float | None]:
    """Solve each queue partition's memory-free and tail-wait-free relaxation first, then go on, partition by
    partition, to the coupled models where the evaluator shows they bind, and keep the answer the evaluator rates
    best. The relaxations come first because one partition's relaxed answer often reaches the bound of every
    partition: then no coupled solve (the expensive ones) can change the answer. Returns the best, whether any
    partition's search was coupled, and the proven bound on X over the partitions (None: unknown)."""
    best: _Candidate | None = None
    proven_ub: float | None = 0.0  # largest proven bound over the partitions tried (None: some unknown)
    parts = partitions(sp.workload, sp.layout, sp.servings)
    states: list[_PartitionState] = []
    for pi, part in enumerate(parts):
        if pi > 0 and best is not None and not best.coupled and len(parts[0]) == 1:
            break  # without memory or tail limits in play one shared queue is never worse than split ones
        if pi > 0 and clock.no_time():
            proven_ub = None  # partitions left untried
            break
        st = _PartitionState(part, Problem(
            sp.workload, sp.rack, sp.racks, sp.capacity_options, sp.servings, part, sp.capital_budget_usd,
            sp.required_tasks_per_hour, operating_tasks_per_hour=sp.operating_tasks_per_hour, settings=sp.settings,
            switch=sp.switch, fixed=sp.fixed))
        states.append(st)
        best = _partition_step(sp, st, best, clock)
    for st in states:
        while not st.done and not clock.no_time():
            if (sp.objective == "max_throughput" and best is not None and best.problem.partition != st.part
                    and st.ub is not None and _proven(best.key[0], st.ub, sp.settings, 0.0)):
                break  # this partition's bound cannot beat the answer in hand: its coupled solves cannot either
            best = _partition_step(sp, st, best, clock)
    for st in states:
        proven_ub = None if (proven_ub is None or st.ub is None) else max(proven_ub, st.ub)
    return best, any(st.coupled for st in states), proven_ub


def _partition_step(sp: _SearchSpace, st: _PartitionState, best: _Candidate | None, clock: Deadline
                    ) -> _Candidate | None:
    """One solve of a partition's search (the relaxation, then with memory, then with tail-wait curves, as the
    evaluator shows each binds); returns the best candidate so far and marks the partition done when nothing more
    would change its answer."""
    s = sp.settings
    p = st.problem
    st.iterations += 1
    st.done = st.iterations >= s.slo_iterations  # unless an added limit below asks for one more solve
    p.options = sp.options if st.memory else sp.capacity_options
    if st.iterations > 1 and st.ub is not None:
        # the partition's relaxation bounds every later solve of it (they only add memory or curves); its bound
        # already carries the tie-break budget, so no wider slack is needed (a cap looser by the MIP gap left CBC
        # unable to close that gap: 15 s instead of 0.6 s on the built-in grid's hybrid solve at tool share 0.79)
        p.x_cap = st.ub + PROOF_SLACK * max(1.0, st.ub)
    p.x_floor = _x_floor(sp, st, best)
    # With memory (and no tail-wait curves) the routing over mixed SKUs is solved by branch and bound on
    # utilization bands; every other stage is one solve. ub: a proven bound on X where the stage's model is a
    # relaxation of the evaluator (None where it is not, or unknown).
    nodes, ub = _solve_coupled(p, sp.layout, sp.objective, sp.backend, s, clock, sp.racks, st.memory)
    key, pn, b, sol, notes, ev, _, _ = nodes[0]
    if p.slo_curves and _slo_mixed_speeds(p) and sp.objective == "max_throughput":
        # the curves assume the slowest speed of a mix: conservative, not a relaxation; the bound comes from the
        # same model with every core at the fastest speed, unless the answer already reaches the bound of this
        # partition's curve-free relaxation (then that bound is the proof, at no cost)
        x_ev = ev.throughput_tasks_per_hour if ev is not None else 0.0
        ub = st.ub if st.ub is not None and _proven(x_ev, st.ub, s, 0.0) else \
            _slo_relaxed_bound(p, sp.layout, sp.backend, s, clock, sp.racks, st.memory)
    if sp.objective == "max_throughput" and ub is not None:
        st.ub = ub if st.ub is None else min(st.ub, ub)
    if not sol.has_solution or b.x not in sol.values:
        st.done = True
        if best is None or (best.key[0] < 0 and not best.solution.has_solution):
            return _Candidate((-1.0, 0.0), replace(p, x_cap=None), b, sol, notes, st.coupled, None)
        return best
    x_mip = sol.values[b.x]
    x_eval = ev.throughput_tasks_per_hour if ev is not None else 0.0
    # Every candidate is judged by what the evaluator says it delivers (and, for cost objectives, costs). On a tie
    # (within solver precision) the solve with the tail-wait curves wins: its prediction is the evaluated figure,
    # while the relaxation's prediction ignores the target.
    tie = (p.slo_curves and sp.objective == "max_throughput" and best is not None
           and key[0] >= best.key[0] * (1 - s.throughput_tie_tolerance))
    if best is None or key > best.key or tie:
        best = _Candidate(key, replace(pn), b, sol, notes, False, ev)
    more = False
    if ev is not None and not (sp.objective == "max_throughput" and ub is not None and best.problem.partition != st.part
                               and _proven(best.key[0], ub, s, 0.0)):
        # (otherwise this partition's relaxation cannot beat the answer in hand, within the proof's tolerance: its
        # memory or tail-wait solves would not change the answer, and its bound is already counted)
        short = [bd for bd in ev.bounds if bd.tasks_per_hour < x_mip * (1 - 1e-7)]
        if not st.memory and any(bd.kind in ("memory", "disk") for bd in short):
            st.memory = st.coupled = more = True
        elif not p.slo_curves and slo_queues(p) and any(bd.kind == "slo" for bd in short):
            # Tail-wait target, lazily as for memory: the solve without it is a relaxation, so an answer whose
            # evaluated slo bounds do not bind is optimal. Otherwise re-solve with the slo:<q> capacity curves.
            # They couple the queues (pooling favours sharing, the call-time mix splitting) and their core speed is
            # conservative for mixed SKUs: compare partitions and the relaxed layout, as for memory. This answer
            # misses the target as solved; if it is kept (the solve with curves does worse, e.g. on its time
            # limit), it is not proven optimal: the relaxation's X bounds the optimum.
            sol.status, sol.gap = "feasible", max(0.0, (x_mip - x_eval) / max(1e-9, x_eval))
            p.slo_curves = st.coupled = more = True
    st.done = st.done or not more
    if best.problem.partition == st.part:
        best = replace(best, coupled=st.coupled)
    return best


def _canonical(b: Built, p: Problem, model: LinearModel, sol: Solution, objective: Objective,
               s: OptimizerSettings) -> Solution:
    """The solver's answer in canonical form, so that the same input gives the same answer whichever backend
    solved it and however it broke ties the objective does not see: a row's servers spread over its identical
    racks as a function of the totals alone (`canonical_racks`), then every continuous value recomputed from the
    integers by deterministic LPs (`polish`; full precision, too, where CBC prints 8 digits).

    For the throughput objectives (and min_cost / min_power, whose objective the continuous part does not change)
    the LPs take, in order: the most throughput X those servers give; then the most serving capacity, i.e.
    orchestration cores enough to drive the GPUs, from cores the tools do not need at X; then no more orchestration
    cores than that serving needs; then every core left over to the tool queues. Cores that no constraint needs
    thus go to orchestration (up to what the GPUs use) and then to tools rather than idle: where the MILP is
    conservative (tail-wait curves assume the slowest core speed of a mix) that spare is headroom the evaluator
    credits. TCO objectives keep their own objective (it prices the dispatch flows)."""
    from advisor.optimizer.rows import canonical_racks, polish

    if not sol.has_solution or b.x not in sol.values:
        return sol
    if p.fixed is None:  # owned servers stay in their racks
        sol = canonical_racks(b, p, sol)
    if objective in TCO_OBJECTIVES:
        return polish(model, sol)
    serve = {v: 1.0 for v in (f"s_o{i}" for i in range(len(p.options))) if v in model.vars}
    return polish(model, sol, [({b.x: 1.0}, True), (serve, True), (dict.fromkeys(b.u.values(), 1.0), False),
                               (dict.fromkeys(b.y.values(), 1.0), True)])


PROOF_SLACK = 1e-9
"""Relative slack on comparisons of an evaluated throughput with a proven bound (floating-point noise)."""


def _x_bound(sol: Solution, b: Built, s: OptimizerSettings) -> float | None:
    """A proven upper bound on X (tasks/h) from a max-throughput solve: the solver's bound on its first objective
    (X less tie-breaks worth at most the tie budget; for rows, X itself) plus that budget. None when unknown.

    Where the model's tail-wait curves have secant segments (queues above `slo_curve_exact_servers`), each secant
    lies below the queue's capacity by at most `slo_curve_tolerance` of it: a configuration the evaluator accepts
    at X is accepted by the curves at X (1 - tolerance), so the bound is divided by (1 - tolerance)."""
    floor = b.model.vars[b.x].lb
    if not sol.has_solution and sol.status == "infeasible":
        if floor <= 0:
            return -math.inf
        bound = floor  # nothing at or above the floor (Problem.x_floor): the optimum lies below it
    else:
        bound = sol.best_bound
    if bound is None and sol.status == "optimal" and sol.objective is not None:
        bound = sol.objective
    if bound is None:
        return None
    bound += s.throughput_tie_tolerance * b.x_upper
    if any(name.startswith(SECANT_PREFIX) for name in b.model.vars):
        bound /= 1.0 - s.slo_curve_tolerance
    return bound


def _proven(x_eval: float, bound: float | None, s: OptimizerSettings, budget: float) -> bool:
    """Whether an evaluated throughput reaches a proven bound: within the requested gap, plus the solver's own
    optimality tolerance and the tie-break window (a solve reported optimal may sit OPTIMAL_GAP below its bound,
    and the tie-breaks keep X within `throughput_tie_tolerance` of it); `budget` is the tie-breaks' worth the
    bound carries (`_x_bound`)."""
    if bound is None or _exceeds(x_eval, bound):
        return False
    tol = max(s.mip_gap, OPTIMAL_GAP_SLACK) + s.throughput_tie_tolerance
    return x_eval >= (bound - budget) * (1 - tol) - PROOF_SLACK * max(1.0, x_eval)


def _exceeds(x_eval: float, bound: float | None) -> bool:
    """An evaluated answer above a "proven" bound: the bound's model was no relaxation there (a defect, never a
    proof), so nothing is proven by it."""
    return bound is not None and x_eval > bound * (1 + OPTIMAL_GAP_SLACK) + PROOF_SLACK * max(1.0, x_eval)


OPTIMAL_GAP_SLACK = 1e-6
"""A solver reports `optimal` within this relative gap (advisor/solver/backends.py OPTIMAL_GAP); bounds taken from
an `optimal` objective are widened by it."""


def _routing_spread(b: Built, p: Problem, sol: Solution) -> dict[str, float]:
    """Per routing dimension, how far the solution's flows are from proportional: max - min of flow / capacity
    over the SKUs with capacity (0 when forced)."""
    from advisor.optimizer.formulation import routing_dims

    vals = sol.values
    out: dict[str, float] = {}
    for dim in routing_dims(p):
        prefix = "gpu_route_hi_" if dim == "gpu" else f"cpu_route_hi_{dim}_"
        ratios = []
        for c in b.model.constraints:
            if not c.name.startswith(prefix):
                continue
            flow_var = next(k for k in c.terms if k.startswith(("xg_", "xs_")))
            a = c.terms[flow_var]
            hi = p.bands.get(dim, (0.0, 1.0))[1]
            cap = -sum(coef * vals.get(k, 0.0) for k, coef in c.terms.items() if k != flow_var) / max(hi, 1e-12)
            if cap > 1e-9:
                ratios.append(a * vals.get(flow_var, 0.0) / cap)
        out[dim] = (max(ratios) - min(ratios)) if len(ratios) > 1 else 0.0
    return out


def _slo_relaxed_bound(p: Problem, layout: Layout, backend: str, s: OptimizerSettings, clock: _Clock, racks: int,
                       memory: bool) -> float | None:
    """A proven bound on X under tail-wait curves that may mix core speeds: the same model with each queue's curve
    at the speed of its fastest core (faster cores only shorten calls and waits). Only the bound is read, so only
    the throughput stage is solved (the tie-break stages would rank servers nobody keeps)."""
    pr = replace(p, slo_relaxed=True, bands={})
    b = build(pr, memory=memory)
    s = s.model_copy(update={"answer_detail": "throughput"})
    if racks > 1 and pr.fixed is None:
        sol, _, _ = _solve_row(b, pr, layout, "max_throughput", backend, s, clock, memory)
    else:
        sol, _, _ = _solve_stages(b, pr, layout, "max_throughput", backend, s, clock)
    return _x_bound(sol, b, s)


def _has_sandboxes(p: Problem) -> bool:
    """Whether the memory model has routing to branch on (some queue holds sandbox memory or disk)."""
    return any(c.sandbox_memory_gb > 0 or c.sandbox_disk_gb > 0 for c in p.workload.classes)


def _x_floor(sp: _SearchSpace, st: _PartitionState, best: _Candidate | None) -> float | None:
    """X's floor for a coupled solve of a partition (`Problem.x_floor`): the evaluated answer in hand, less the
    tie-break window and, with tail-wait curves, the secants' tolerance (by which the evaluator may rate servers
    above the model's X). Throughput objective, one rack, an answer in hand and a solve past the relaxation only;
    not layout A, whose GPU-first stage must rank every configuration (the floor, and the curve segments it cuts,
    would narrow it: on interactive-rl-mix in air-40kw it picked fewer GPUs than the most the rack holds).

    Where the curves assume the slowest core speed of a mix, the model's X may fall further below what the
    evaluator gives a mix; a mix the floor cuts off then goes unseen, but the answer's label is read from the
    relaxations' bounds, so it never claims more than is proven."""
    if (sp.objective != "max_throughput" or sp.racks != 1 or st.iterations <= 1 or best is None
            or best.key[0] <= 0 or sp.layout == "a"):
        return None  # (layout A first maximizes GPU capacity over every configuration, which a floor would narrow)
    s = sp.settings
    tol = s.throughput_tie_tolerance + (s.slo_curve_tolerance if st.problem.slo_curves else 0.0)
    return best.key[0] * (1.0 - tol) - PROOF_SLACK * max(1.0, best.key[0])


def _solve_coupled(p: Problem, layout: Layout, objective: Objective, backend: str, s: OptimizerSettings,
                   clock: _Clock, racks: int, memory: bool = True):
    """Sandbox memory couples the routing over mixed SKUs (docs/model.md section 9.3): spatial branch and bound
    on the utilization bands of `build`'s `sku_routing` constraints. Each node solves the MILP on its bands, a
    relaxation of the evaluator there; its answer is evaluated. The answer is the best evaluated one; the proven
    bound is the largest relaxation bound of the open nodes. A node is split (its widest band among the
    dimensions its flows leave non-proportional, halved) only while its bound exceeds the best evaluated answer.

    Returns [(key, problem, built, solution, notes, evaluation)] of the nodes solved, best first, and the proven
    bound on X (None if unknown)."""
    import heapq

    from advisor.optimizer.formulation import routing_dims

    def node(bands: dict[str, tuple[float, float]]):
        pn = replace(p, bands=dict(bands))
        b = build(pn, memory=memory)
        if racks > 1 and pn.fixed is None:  # owned servers make the racks differ: no rack patterns
            sol, solved, notes = _solve_row(b, pn, layout, objective, backend, s, clock, memory)
        else:
            sol, solved, notes = _solve_stages(b, pn, layout, objective, backend, s, clock)
        ub = _x_bound(sol, b, s) if objective == "max_throughput" else None
        sol = _canonical(b, pn, solved, sol, objective, s)
        if pn.x_cap is not None or pn.x_floor is not None:
            # the cap and floor served the solve (X's bounds, the curves' ends); what-ifs must not inherit them
            pn = replace(pn, x_cap=None, x_floor=None)
            b = build(pn, memory=memory)
        ev = _evaluate_solution(b, pn, sol, layout, s) if sol.has_solution and b.x in sol.values else None
        x_eval = ev.throughput_tasks_per_hour if ev is not None else 0.0
        power = sum(a * sol.values.get(k, 0.0) for k, a in power_terms(b, pn).items()) if sol.has_solution else 0.0
        if objective == "max_throughput":
            key = (x_eval, -power)
        else:
            key = _cost_key(ev, objective, pn, power, sol, b) if sol.has_solution else (False, -math.inf, 0.0)
        return key, pn, b, sol, notes, ev, ub, capacity_tasks_per_hour(ev) if ev is not None else 0.0

    dims = routing_dims(p) if memory and _has_sandboxes(p) else []
    root = node({})
    done = [root]
    if objective != "max_throughput" or not dims or root[6] is None or not root[3].has_solution:
        return done, root[6]  # (no answer at all: none on any band either)
    # Nodes are closed against the best evaluated *capacity* figure, the one the MILP relaxes: the sandboxes' loop
    # (docs/model.md 5.3) lies below every node's bound and no branching on the bands closes that gap. The bound
    # stays valid (every configuration's figure is at most its capacity, at most its node's bound); the answer is
    # the best evaluated one, and its label says whether it reaches the bound.
    best_x = root[7]
    budget = s.throughput_tie_tolerance * root[2].x_upper
    heap: list = []
    seq = 0
    closed_ub = -math.inf  # bounds of nodes closed within the gap: the proven bound still covers them

    def push(nd, bands):
        nonlocal seq, closed_ub
        if nd[6] is None:
            return
        if _proven(best_x, nd[6], s, budget):
            closed_ub = max(closed_ub, nd[6])
        else:
            heapq.heappush(heap, (-nd[6], seq, bands, nd))
            seq += 1

    push(root, {})
    solves = 1
    unknown = False
    while heap:
        top = heap[0]
        if _proven(best_x, -top[0], s, budget):
            break
        if solves >= s.coupling_nodes or clock.no_time():
            break
        _, _, bands, nd = heapq.heappop(heap)
        spread = _routing_spread(nd[2], nd[1], nd[3]) if nd[3].has_solution else {}
        width = {d: bands.get(d, (0.0, 1.0))[1] - bands.get(d, (0.0, 1.0))[0] for d in dims}
        moving = [d for d in dims if spread.get(d, 0.0) > 1e-9] or dims
        dim = max(moving, key=lambda d: (width[d], -dims.index(d)))
        lo, hi = bands.get(dim, (0.0, 1.0))
        mid = (lo + hi) / 2
        for k, child in enumerate(((lo, mid), (mid, hi))):
            if k > 0 and clock.no_time():
                push(nd, bands)  # the other half is unexplored: the parent's bound still stands for it
                break
            cb = {**bands, dim: child}
            cn = node(cb)
            solves += 1
            done.append(cn)
            if cn[6] is None and cn[3].status != "infeasible":
                unknown = True
            if cn[7] > best_x:
                best_x = cn[7]
            push(cn, cb)
    bound = max(best_x, closed_ub) if not heap else max(best_x, closed_ub, -heap[0][0])
    if unknown:
        bound = None
    done.sort(key=lambda t: t[0], reverse=True)
    return done, bound


def _relabel(res: OptimizeResult, bound: float | None, s: OptimizerSettings, clock: _Clock,
             budget: float) -> OptimizeResult:
    """An answer taken from another search (copied racks, the relaxed layout, a better neighbour), labelled by
    this search's proven bound."""
    x = res.throughput_tasks_per_hour
    if _exceeds(x, bound):
        bound = None
    if _proven(x, bound, s, budget):
        return res.model_copy(update={"status": "optimal" if res.status != "time_limit" else res.status,
                                      "gap": max(0.0, (bound - x) / max(1e-9, x)), "bound_tasks_per_hour": bound})
    return res.model_copy(update={
        "status": "time_limit" if (clock.no_time() or res.status == "time_limit") else "feasible",
        "gap": None if bound is None else max(0.0, (bound - x) / max(1e-9, x)), "bound_tasks_per_hour": bound})


def _certify(result: OptimizeResult, p: Problem, options: list[ServerOption], layout: Layout, objective: Objective,
             capital_budget_usd: float | None, s: OptimizerSettings, clock: _Clock, t0: float,
             bound: float | None, budget: float) -> OptimizeResult:
    """Evaluate the answer's neighbours (advisor/optimizer/certificate.py); adopt a better one and lower the status."""
    cfg = Configuration.model_validate(result.configuration)
    cat = _catalog_of(replace(p, options=options))
    ev0 = result.evaluation
    if ev0 is None:
        return result
    need = p.required_tasks_per_hour

    def meets(ev: Evaluation) -> bool:
        return ev.throughput_tasks_per_hour >= need * (1 - 1e-6) if need is not None else \
            ev.throughput_tasks_per_hour > 0

    gpu0 = next((bd.tasks_per_hour for bd in ev0.bounds if bd.name == "gpu"), 0.0)

    def value(ev: Evaluation) -> float:
        if objective == "max_throughput":
            if layout == "a":  # GPU-first: never less GPU capacity
                gpu = next((bd.tasks_per_hour for bd in ev.bounds if bd.name == "gpu"), 0.0)
                if gpu < gpu0 * (1 - s.throughput_tie_tolerance):
                    return -math.inf
            return ev.throughput_tasks_per_hour
        if not meets(ev):
            return -math.inf
        t = ev.tco
        if objective == "min_power":
            return -ev.power_w
        if objective == "min_cost":
            v = t.capital_usd if t is not None else None
        elif objective == "min_cost_per_task":
            v = t.cost_usd_per_1000_tasks if t is not None else None
        else:
            v = t.cost_usd_per_hour if t is not None else None
        return -math.inf if v is None else -v

    queues = {q.name: list(q.classes) for q in cfg.queues} if cfg.queues else {}
    servings = {o.serving_key: p.servings[o.serving_key] for o in options if o.serving_key in p.servings}

    def promising(groups: list[ServerGroup], cur: Evaluation) -> bool:
        ceiling = ceiling_tasks_per_hour(groups, options, p.workload, queues, servings)
        if objective == "max_throughput":
            return ceiling > cur.throughput_tasks_per_hour * (1 + s.certificate_min_gain)
        return need is None or ceiling >= need * (1 - 1e-6)

    slowest = [0.0]

    def timed(c: Configuration) -> Evaluation:
        t = time.perf_counter()
        try:
            return evaluate(c, p.workload, p.rack, cat, s.assumptions)
        finally:
            slowest[0] = max(slowest[0], time.perf_counter() - t)

    # what follows the certificate evaluates the answer too: its operating figure (a bisection on the arrival rate)
    # and, per kind of server, the answer with one lost. Leave them their evaluations' worth of the clock.
    kinds = len({(g.chassis, g.cpu, g.gpu, g.gpus_per_server) for g in cfg.servers})
    after = (BISECTION_STEPS + 2) * (kinds + 2)
    cfg2, ev2, cert = local_search(
        cfg, value, timed, options, p.rack, capital_budget_usd, layout, s.certificate_min_gain,
        s.certificate_steps, lambda: clock.remaining() <= (2 + after) * slowest[0], ev0, promising)
    if not cert.adopted:
        return result.model_copy(update={"certificate": cert, "seconds": time.perf_counter() - t0})
    choices = []
    for g in cfg2.servers:
        o = next(o for o in options if (o.profile.chassis.id, o.profile.cpu.id, o.gpu_id, o.profile.gpus)
                 == (g.chassis, g.cpu, g.gpu, g.gpus_per_server))
        choices.append(ServerChoice(chassis=g.chassis, cpu=g.cpu, gpu=g.gpu, gpus_per_server=g.gpus_per_server,
                                    count=g.count, rack=g.rack,
                                    orchestration_cores_per_gpu=g.orchestration_cores_per_gpu,
                                    queue_cores=g.queue_cores or {}, power_w_each=o.profile.power_w,
                                    space_u_each=o.profile.space_u))
    gpus = sum(c.count * c.gpus_per_server for c in choices)
    orch = sum(c.count * c.gpus_per_server * c.orchestration_cores_per_gpu for c in choices)
    host = sum(c.count * next(o.profile.cores for o in options if o.profile.chassis.id == c.chassis
                              and o.profile.cpu.id == c.cpu and o.profile.gpus == c.gpus_per_server)
               for c in choices if c.gpu)
    new = result.model_copy(update={
        "seconds": time.perf_counter() - t0, "throughput_tasks_per_hour": ev2.throughput_tasks_per_hour,
        "predicted_tasks_per_hour": ev2.throughput_tasks_per_hour, "servers": choices,
        "cores_per_gpu": host / gpus if gpus else None, "orchestration_cores_per_gpu": orch / gpus if gpus else None,
        "queues": [q.model_dump() for q in ev2.queues], "power_w": ev2.power_w, "space_u": ev2.space_u,
        "air_heat_w": ev2.air_heat_w, "liquid_heat_w": ev2.liquid_heat_w, "gpu_idle_fraction": ev2.gpu_idle_fraction,
        "bottleneck": ev2.bottleneck, "configuration": cfg2.model_dump(mode="json", exclude_none=True),
        "evaluation": ev2, "tco": ev2.tco, "constraints": [], "shadow_prices": [],
        "message": _summary(ev2, result.binding_constraints), "certificate": cert,
        # the solver's notes stay; the evaluator's are the adopted answer's
        "warnings": [w for w in result.warnings if w not in ev0.warnings] + ev2.warnings + [
            f"the local search found {cert.adopted} better neighbour(s) of the solver's answer and returns the "
            "best (the MILP's relaxation missed them); constraint statuses and shadow prices are left out"] + ([
                f"the local search stopped at its {s.certificate_steps} steps (certificate_steps) with a neighbour "
                f"still {cert.best_gain:.2%} better: not a local optimum; allow more steps to go on"]
                if cert.best_gain is not None and cert.best_gain > s.certificate_min_gain else [])})
    if objective == "max_throughput":
        return _relabel(new, bound, s, clock, budget)
    return new.model_copy(update={"status": "feasible", "gap": None})


def _slo_mixed_speeds(p: Problem) -> bool:
    """Whether a tail-wait queue can take cores of more than one speed (its capacity curve is then conservative)."""
    return any(len(speeds) > 1 for _, _, speeds, _, _ in slo_queues(p))


def _label(sol: Solution, x_eval: float, bound: float | None, s: OptimizerSettings, clock: _Clock,
           budget: float) -> None:
    """Status and gap of a max-throughput answer from what is proven: `optimal` only when the evaluated
    throughput reaches the proven bound within the requested gap; otherwise `feasible` (or `time_limit` when the
    clock stopped the search) with the gap to the bound (None when no bound is proven). A solve stopped by its time
    limit whose answer reaches the bound is proven all the same (by the bound, not by the solver), so optimal."""
    if _proven(x_eval, bound, s, budget):
        if sol.status in ("time_limit", "feasible"):
            sol.status, sol.gap = "optimal", max(0.0, (bound - x_eval) / max(1e-9, x_eval))
        return
    if _exceeds(x_eval, bound):
        bound = None
    sol.gap = None if bound is None else max(0.0, (bound - x_eval) / max(1e-9, x_eval))
    if sol.status != "time_limit":
        sol.status = "time_limit" if clock.no_time() else "feasible"


def _solve_row(b: Built, p: Problem, layout: Layout, objective: Objective, backend: str, s: OptimizerSettings,
               clock: _Clock, memory: bool) -> tuple[Solution, LinearModel, list[str]]:
    """R identical racks. For max_throughput (layouts b and hybrid) solve the rack-pattern program of
    advisor/optimizer/rows.py, seeded with the best single rack; it proves its gap with a column-generation bound.
    Otherwise, or when the model does not aggregate, solve the row MILP directly from R copies of the best rack."""
    from advisor.optimizer.rows import solve_row

    single = _single_rack(p, layout, objective, backend, s, clock, memory)
    if objective == "max_throughput" and layout != "a":
        seeds = [] if single is None else [{i: int(round(single[1].values.get(v, 0.0))) for (_, i), v in
                                            single[0].n.items()}]
        res = solve_row(b, p, lambda agg: _solve_stages(agg, p, layout, objective, backend, s, clock)[0], seeds,
                        clock.remaining, s.mip_gap, s.row_pattern_iterations, s.row_pattern_enumeration_limit,
                        s.throughput_tie_tolerance * b.x_upper)
        if res is not None and res.solution.has_solution:
            return res.solution, b.model, res.notes
    hint = _replicated_start(b, p, single) if single is not None else None
    return _solve_stages(b, p, layout, objective, backend, s, clock, hint)


def _single_rack(p: Problem, layout: Layout, objective: Objective, backend: str, s: OptimizerSettings,
                 clock: _Clock, memory: bool) -> tuple[Built, Solution] | None:
    """The best single rack of this problem (same partition, caps and memory stage)."""
    if objective != "max_throughput" or layout == "a":
        return None
    p1 = replace(p, racks=1)
    b1 = build(p1, memory=memory)
    sol1, _, _ = _solve_stages(b1, p1, layout, objective, backend, s, clock)
    return (b1, sol1) if sol1.has_solution else None


def _replicated_start(b: Built, p: Problem, single: tuple[Built, Solution]) -> dict[str, float]:
    """A starting point for R identical racks: R copies of the best single rack (feasible, since every rack has the
    same budgets and row-level quantities scale by R). Identical racks make the search symmetric; starting from
    this copy means the answer is never worse than it."""
    b1, sol1 = single
    hint: dict[str, float] = {}
    count_names = set(b1.n.values())
    for name, val in sol1.values.items():
        if name in count_names:
            i = next(i for (_, i), v in b1.n.items() if v == name)
            for r in range(p.racks):
                if (r, i) in b.n:
                    hint[b.n[r, i]] = round(val)
        elif b1.model.vars[name].integer:
            hint[name] = round(val)  # SKU choices stay the same
        else:
            hint[name] = val * p.racks  # row-level flows and core counts scale with the racks
    return hint


def _replicate(single: OptimizeResult, racks: int, p: Problem, layout: Layout, backend: str,
               s: OptimizerSettings, t0: float, options: list[ServerOption]) -> OptimizeResult | None:
    """The single-rack answer copied into every rack, evaluated as a row (tool queues pool across racks)."""
    cfg = Configuration.model_validate(single.configuration)
    groups = [g.model_copy(update={"rack": r}) for r in range(racks) for g in cfg.servers]
    row = cfg.model_copy(update={"racks": racks, "servers": groups, "name": f"layout {layout}"})
    ev = evaluate(row, p.workload, p.rack, _catalog_of(replace(p, options=options)), s.assumptions)
    if not ev.within_budgets:
        return None
    choices = [ServerChoice(chassis=g.chassis, cpu=g.cpu, gpu=g.gpu, gpus_per_server=g.gpus_per_server,
                            count=g.count, rack=g.rack, orchestration_cores_per_gpu=g.orchestration_cores_per_gpu,
                            queue_cores=g.queue_cores or {}, power_w_each=c.power_w_each, space_u_each=c.space_u_each)
               for g, c in zip(groups, [c for _ in range(racks) for c in single.servers])]
    return single.model_copy(update={
        "seconds": time.perf_counter() - t0, "throughput_tasks_per_hour": ev.throughput_tasks_per_hour,
        "predicted_tasks_per_hour": ev.throughput_tasks_per_hour, "servers": choices,
        "queues": [q.model_dump() for q in ev.queues], "power_w": ev.power_w, "space_u": ev.space_u,
        "air_heat_w": ev.air_heat_w, "liquid_heat_w": ev.liquid_heat_w, "gpu_idle_fraction": ev.gpu_idle_fraction,
        "bottleneck": ev.bottleneck, "configuration": row.model_dump(mode="json", exclude_none=True),
        "evaluation": ev, "tco": ev.tco, "constraints": [], "shadow_prices": [], "message": _summary(ev, single.binding_constraints),
        "status": "feasible" if single.status == "optimal" else single.status, "gap": None,
        "warnings": single.warnings + [f"the row search did not beat {racks} copies of the best single rack; "
                                       "this is that copy (status feasible: not proven optimal for the row)"]})


def _evaluate_solution(b: Built, p: Problem, sol: Solution, layout: Layout, s: OptimizerSettings) -> Evaluation | None:
    cfg, _ = _configuration(b, p, sol, layout)
    return None if cfg is None else evaluate(cfg, p.workload, p.rack, _catalog_of(p), s.assumptions)


def _cost_key(ev: Evaluation | None, objective: Objective, p: Problem, power_w: float, sol: Solution,
              b: Built) -> tuple:
    """Rank candidates of a minimizing objective: first whether the evaluator confirms they deliver what is
    required, then the objective as the evaluator (or, for capital, the catalog) values it, then throughput."""
    x_eval = ev.throughput_tasks_per_hour if ev is not None else 0.0
    need = p.required_tasks_per_hour
    meets = x_eval >= need * (1 - 1e-6) if need is not None else x_eval > 0
    t = ev.tco if ev is not None else None
    if objective == "min_cost_per_task":
        value = t.cost_usd_per_1000_tasks if t is not None else None
    elif objective == "min_tco_for_throughput":
        value = t.cost_usd_per_hour if t is not None else None
    elif objective == "min_cost":
        value = sum(a * sol.values.get(k, 0.0) for k, a in cost_terms(b, p).items())
    else:
        value = power_w
    return (meets, -(math.inf if value is None else value), x_eval)


def _result(p: Problem, b: Built, sol: Solution, notes: list[str], layout: Layout, backend: str,
            s: OptimizerSettings, clock: _Clock, t0: float, explain: bool,
            ev: Evaluation | None = None, too_small: list[Infeasibility] | None = None) -> OptimizeResult:
    """The answer as the user sees it; `ev` is the evaluation the search already made of this solution."""
    empty = dict(servers=[], cores_per_gpu=None, orchestration_cores_per_gpu=None, queues=[], power_w=0.0, space_u=0,
                 air_heat_w=0.0, liquid_heat_w=0.0, gpu_idle_fraction=0.0, configuration={}, evaluation=None)
    if not p.options:
        diag = too_small or _empty_rack_diagnosis(p)
        msg = "no candidate server fits an empty rack within its budgets"
        if too_small:
            msg += ": " + "; ".join(d.message for d in too_small[:3])
        return OptimizeResult(layout=layout, status="infeasible", gap=None, solver=backend,
                              seconds=time.perf_counter() - t0, partition=p.partition, throughput_tasks_per_hour=0.0,
                              predicted_tasks_per_hour=0.0, bottleneck="none", binding_constraints=[], constraints=[],
                              infeasibility=diag, message=msg, **empty)
    if not sol.has_solution:
        status = "infeasible" if sol.status == "infeasible" else sol.status
        diag = _diagnose(b, p, backend, s, clock) if status == "infeasible" else []
        msg = ("infeasible: " + "; ".join(d.message for d in diag[:3])) if diag else f"no solution ({sol.status})"
        return OptimizeResult(layout=layout, status=status, gap=sol.gap, solver=backend,
                              seconds=time.perf_counter() - t0, partition=p.partition, throughput_tasks_per_hour=0.0,
                              predicted_tasks_per_hour=0.0, bottleneck="none", binding_constraints=[], constraints=[],
                              infeasibility=diag, message=msg, **empty)
    cfg, choices = _configuration(b, p, sol, layout)
    x_pred = sol.values[b.x]
    warnings = list(notes)
    if cfg is None:
        # Nothing useful fits: ask which budget would let even one task per hour through.
        p1 = replace(p, required_tasks_per_hour=MIN_USEFUL_TASKS_PER_HOUR)
        diag = _diagnose(build(p1, memory=False), p1, backend, s, clock) or _empty_rack_diagnosis(p)
        return OptimizeResult(layout=layout, status="infeasible", gap=sol.gap, solver=backend,
                              seconds=time.perf_counter() - t0, partition=p.partition, throughput_tasks_per_hour=0.0,
                              predicted_tasks_per_hour=0.0, bottleneck="none", binding_constraints=[], constraints=[],
                              infeasibility=diag,
                              message="no configuration gives any throughput within the budgets: "
                                      + "; ".join(d.message for d in diag[:3]), **empty)
    if ev is None:
        ev = evaluate(cfg, p.workload, p.rack, _catalog_of(p), s.assumptions)
    tol = 1e-4 * max(1.0, x_pred)
    # Under a required throughput the MILP's X is only a floor; delivering more is no discrepancy.
    if ev.throughput_tasks_per_hour < x_pred - tol or (
            ev.throughput_tasks_per_hour > x_pred + tol and p.required_tasks_per_hour is None):
        warnings.append(f"evaluator gives {ev.throughput_tasks_per_hour:,.1f} tasks/h, the MILP predicted {x_pred:,.1f}")
    cons = _constraint_status(b, p, sol)
    binding = sorted({c.group for c in cons if c.binding})
    gpus = sum(c.count * c.gpus_per_server for c in choices)
    host_cores = sum(c.count * next(o.profile.cores for o in p.options if o.profile.chassis.id == c.chassis
                                    and o.profile.cpu.id == c.cpu and o.profile.gpus == c.gpus_per_server)
                     for c in choices if c.gpu)
    orch = sum(c.count * c.gpus_per_server * c.orchestration_cores_per_gpu for c in choices)
    prices = _shadow_prices(b, p, backend, s, clock, layout, ev.throughput_tasks_per_hour, explain) if explain else []
    return OptimizeResult(
        layout=layout, status=sol.status, gap=sol.gap, solver=backend, seconds=time.perf_counter() - t0,
        partition=p.partition, throughput_tasks_per_hour=ev.throughput_tasks_per_hour, predicted_tasks_per_hour=x_pred,
        servers=choices, cores_per_gpu=(host_cores / gpus if gpus else None),
        orchestration_cores_per_gpu=(orch / gpus if gpus else None),
        queues=[q.model_dump() for q in ev.queues], power_w=ev.power_w, space_u=ev.space_u,
        air_heat_w=ev.air_heat_w, liquid_heat_w=ev.liquid_heat_w, gpu_idle_fraction=ev.gpu_idle_fraction,
        bottleneck=ev.bottleneck, binding_constraints=binding, constraints=cons, shadow_prices=prices,
        configuration=cfg.model_dump(mode="json", exclude_none=True), evaluation=ev, tco=ev.tco,
        warnings=warnings + ev.warnings, message=_summary(ev, binding),
    )


def _summary(ev: Evaluation, binding: list[str]) -> str:
    budgets = [g for g in binding if g in BUDGET_GROUPS]
    return (f"{ev.throughput_tasks_per_hour:,.0f} tasks/h; bottleneck {ev.bottleneck}; "
            f"binding budgets: {', '.join(budgets) or 'none'}")


def _empty_rack_diagnosis(p: Problem) -> list[Infeasibility]:
    return [Infeasibility(group="power", shortfall=None, unit="W",
                          message=f"rack {p.rack.id} offers {p.rack.usable_power_w:,.0f} W, "
                                  f"{p.rack.usable_u} U and {p.rack.air_cooling_kw:g} kW air cooling; "
                                  "no candidate server (after layout and SKU filters) fits or serves the workload")]


def _too_small_diagnosis(candidates: list[ServerOption], rack: Rack, catalog: Catalog) -> list[Infeasibility]:
    """Why no candidate server fits an empty rack: each budget that even the least demanding candidate (with the
    switches its NIC ports need) exceeds, naming the rack field and the numbers."""
    from advisor.optimizer.options import empty_rack_needs

    switch = rack_switch(rack, catalog)
    needs = [(o, empty_rack_needs(o.profile, rack, switch)) for o in candidates]
    out = []
    for g in BUDGET_GROUPS:
        over = [(nd[g][0], nd[g][1], o) for o, nd in needs if g in nd and nd[g][0] > nd[g][1]]
        if not over:
            continue
        need, have, o = min(over, key=lambda t: t[0])
        unit = BUDGET_UNITS[g]
        who = ("every candidate server needs" if len(over) == len(needs)
               else f"{len(over)} of {len(needs)} candidate servers need")
        out.append(Infeasibility(group=g, shortfall=need - have, unit=unit, message=(
            f"rack {rack.id}: {g} ({BUDGET_FIELDS[g]}) offers {have:,.2f} {unit}{_budget_basis(g, rack)}, and "
            f"{who} more, the least {o.profile.chassis.id} with {o.profile.gpus} x "
            f"{o.profile.gpu.id if o.profile.gpu else 'no GPU'}: {need:,.2f} {unit}")))
    counts = {d.group: sum(1 for _, nd in needs if d.group in nd and nd[d.group][0] > nd[d.group][1]) for d in out}
    return sorted(out, key=lambda d: -counts[d.group])


def _catalog_of(p: Problem) -> Catalog:
    """A catalog of just what the options use, for the evaluator."""
    cpus = {o.profile.cpu.id: o.profile.cpu for o in p.options}
    gpus = {o.profile.gpu.id: o.profile.gpu for o in p.options if o.profile.gpu}
    chassis = {o.profile.chassis.id: o.profile.chassis for o in p.options}
    return Catalog.build(cpus=cpus.values(), gpus=gpus.values(), chassis=chassis.values(),
                         switches=[p.switch] if p.switch is not None else [])


def _keep_at_least_owned(result: OptimizeResult, existing: Configuration, ev: Evaluation,
                         options: list[ServerOption]) -> OptimizeResult:
    """The answer, or the owned configuration as it is when the search returned less (a time limit, or a software
    split the search does not consider): keeping what you have is always an answer."""
    from advisor.optimizer.migration import option_key

    if result.throughput_tasks_per_hour >= ev.throughput_tasks_per_hour * (1 - MATERIAL_GAIN):
        return result
    prof = {o.key: o.profile for o in options}
    choices = [ServerChoice(chassis=g.chassis, cpu=g.cpu, gpu=g.gpu, gpus_per_server=g.gpus_per_server,
                            count=g.count, rack=g.rack, orchestration_cores_per_gpu=g.orchestration_cores_per_gpu,
                            queue_cores=g.queue_cores or {}, power_w_each=prof[option_key(g)].power_w,
                            space_u_each=prof[option_key(g)].space_u) for g in existing.servers]
    return result.model_copy(update={
        "status": "feasible", "gap": None, "throughput_tasks_per_hour": ev.throughput_tasks_per_hour,
        "predicted_tasks_per_hour": ev.throughput_tasks_per_hour, "servers": choices,
        "queues": [q.model_dump() for q in ev.queues], "power_w": ev.power_w, "space_u": ev.space_u,
        "air_heat_w": ev.air_heat_w, "liquid_heat_w": ev.liquid_heat_w, "gpu_idle_fraction": ev.gpu_idle_fraction,
        "bottleneck": ev.bottleneck, "configuration": existing.model_dump(mode="json", exclude_none=True),
        "evaluation": ev, "tco": ev.tco, "constraints": [], "shadow_prices": [],
        "message": f"{ev.throughput_tasks_per_hour:,.0f} tasks/h; bottleneck {ev.bottleneck}; keep the servers you "
                   "own as configured",
        "warnings": result.warnings + [
            f"the search's answer ({result.throughput_tasks_per_hour:,.0f} tasks/h, {result.status}) is below the "
            f"owned configuration as configured ({ev.throughput_tasks_per_hour:,.0f} tasks/h); that is shown"]})


def not_a_candidate_result(layout: str, backend: str, message: str, group: str = "fixed_servers") -> OptimizeResult:
    """An infeasible answer naming `group`: owned servers this layout cannot hold (compare keeps going with the
    other layouts), or, for a sweep point, a rack that holds no candidate server at all ("candidates")."""
    return OptimizeResult(
        layout=layout, status="infeasible", gap=None, solver=backend, seconds=0.0, partition=[],
        throughput_tasks_per_hour=0.0, predicted_tasks_per_hour=0.0, servers=[], cores_per_gpu=None,
        orchestration_cores_per_gpu=None, queues=[], power_w=0.0, space_u=0, air_heat_w=0.0, liquid_heat_w=0.0,
        gpu_idle_fraction=0.0, bottleneck="none", binding_constraints=[], constraints=[], configuration={},
        evaluation=None, message=message,
        infeasibility=[Infeasibility(group=group, message=message, shortfall=None, unit="servers")])
