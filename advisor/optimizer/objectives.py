"""Cost objectives for the MILP: total cost of ownership per hour as linear terms, and the two TCO objectives.

Cost per hour = capital amortization + idle draw of every server (both linear in server counts) + dynamic energy of
the work at the operating throughput L (tasks/h), dispatched within each pool to its most efficient capacity: flow
variables per server option carry the pool's work, bounded by that option's capacity, so the solver's cheapest
dispatch is the efficient-first dispatch `models.tco` evaluates.

- `min_tco_for_throughput`: L is the required throughput R (tasks/h the planner must serve) and the sustainable
  throughput must keep the operating load fraction: X >= R / f. One MILP.
- `min_cost_per_task`: L = f X; minimize cost(n, L) / L by Dinkelbach's method: with q the best ratio so far,
  minimize cost - q L; a non-negative optimum proves q optimal, otherwise the new solution's ratio is smaller.
"""

from __future__ import annotations

from dataclasses import dataclass

from advisor.optimizer.formulation import HOUR_S, Built, Problem, _queue_coeffs
from advisor.solver import LinearModel, Solution, solve
from models.tco import (
    HOURS_PER_MONTH,
    J_PER_KWH,
    CostAssumptions,
    capital_usd_per_hour,
    cpu_joules_per_reference_core_s,
    gpu_joules_per_task,
    idle_draw_w,
)
from models.performance import call_mix
from models.workload import GpuStage
from models.errors import InputError

TCO_OBJECTIVES = ("min_cost_per_task", "min_tco_for_throughput")
OPERATING_RATE = "L_op"
"""Variable: tasks per hour at the operating point."""


@dataclass
class TcoTerms:
    cost: dict[str, float]
    """Variable name to USD per hour per unit."""
    rate: str
    """The operating-rate variable."""
    constant_usd_per_hour: float
    """Cost that no decision changes: rack gear's draw and space."""


def _energy_usd_per_h_per_w(costs: CostAssumptions) -> float:
    return costs.pue * costs.electricity_usd_per_kwh / 1000.0


def add_tco(m: LinearModel, b: Built, p: Problem, costs: CostAssumptions, load_fraction: float,
            operating_tasks_per_hour: float | None) -> TcoTerms:
    """Add dispatch flows and return the cost-per-hour terms. `operating_tasks_per_hour` fixes L (min TCO for a
    throughput); None ties it to the sustainable throughput (L = load_fraction x X)."""
    usd_w = _energy_usd_per_h_per_w(costs)
    usd_j = costs.pue * costs.electricity_usd_per_kwh / J_PER_KWH
    if operating_tasks_per_hour is None:
        lam = m.var(OPERATING_RATE, 0, None)
        m.add("operating_rate", "operating_rate", {lam: 1.0, b.x: -load_fraction}, "==", 0.0)
    else:
        lam = m.var(OPERATING_RATE, operating_tasks_per_hour, operating_tasks_per_hour)
    constant = p.racks * (p.rack.reserved_power_w * costs.rack_reserved_draw_fraction * usd_w
                          + costs.space_usd_per_rack_month / HOURS_PER_MONTH)
    cost: dict[str, float] = {}
    count: dict[int, list[str]] = {}
    for (_, i), v in b.n.items():
        pr = p.options[i].profile
        if pr.price_usd is None:
            raise InputError(f"a cost objective needs prices; server {p.options[i].key} has none")
        count.setdefault(i, []).append(v)
        cost[v] = capital_usd_per_hour(pr.price_usd, costs) + idle_draw_w(pr.chassis, pr.cpu, pr.gpu, pr.gpus,
                                                                          costs) * usd_w
    if p.switch is not None:  # top-of-rack switches draw like the rack's other shared gear (models.tco)
        for v in b.k.values():
            cost[v] = p.switch.power_w * costs.rack_reserved_draw_fraction * usd_w
    orch_core_s = call_mix(p.workload).orchestration_core_s_per_task
    has_llm = any(isinstance(s, GpuStage) for c in p.workload.classes for s in c.stages)
    if has_llm:
        flow = {lam: -1.0}
        for i, names in sorted(count.items()):
            pr = p.options[i].profile
            if not pr.gpus or pr.gpu_tasks_per_s <= 0:
                continue
            e = m.var(f"e_o{i}", 0, None)
            flow[e] = 1.0
            serve = f"s_o{i}"
            if p.options[i].flexible_orchestration and serve in m.vars:
                m.add(f"dispatch_gpu_o{i}", "energy_dispatch", {e: 1.0, serve: -1.0}, "<=", 0.0)
            else:
                m.add(f"dispatch_gpu_o{i}", "energy_dispatch",
                      {e: 1.0, **{v: -pr.serving_tasks_per_s * HOUR_S for v in names}}, "<=", 0.0)
            j = gpu_joules_per_task(pr.gpu, pr.gpus, pr.gpu_tasks_per_s, costs) + \
                orch_core_s * cpu_joules_per_reference_core_s(pr.chassis, pr.cpu, costs)
            cost[e] = j * usd_j
        m.add("dispatch_gpu", "energy_dispatch", flow, "==", 0.0)
    work, *_ = _queue_coeffs(p)
    for qi, _qname in enumerate(p.queue_names):
        if work[qi] <= 0:
            continue
        flow = {lam: -1.0}
        for (i, q2), yv in sorted(b.y.items()):
            if q2 != qi:
                continue
            pr = p.options[i].profile
            t = m.var(f"t_o{i}_q{qi}", 0, None)
            flow[t] = 1.0
            # work x t / 3600 reference-core-s per s <= per-core speed x cores
            m.add(f"dispatch_cpu_o{i}_q{qi}", "energy_dispatch", {t: work[qi] / HOUR_S, yv: -pr.per_core_perf},
                  "<=", 0.0)
            cost[t] = work[qi] * cpu_joules_per_reference_core_s(pr.chassis, pr.cpu, costs) * usd_j
        m.add(f"dispatch_cpu_q{qi}", "energy_dispatch", flow, "==", 0.0)
    return TcoTerms(cost, lam, constant)


def cost_per_hour(terms: TcoTerms, values: dict[str, float]) -> float:
    return terms.constant_usd_per_hour + sum(c * values.get(k, 0.0) for k, c in terms.cost.items())


def solve_tco(model: LinearModel, b: Built, p: Problem, objective: str, backend: str, costs: CostAssumptions,
              load_fraction: float, mip_gap: float, time_left, max_iterations: int,
              operating_tasks_per_hour: float | None = None) -> tuple[Solution, LinearModel, list[str]]:
    """Solve a TCO objective on `model` (the layout's MILP, with any stage constraints already added)."""
    notes: list[str] = []
    m = model.copy()
    terms = add_tco(m, b, p, costs, load_fraction,
                    operating_tasks_per_hour if objective == "min_tco_for_throughput" else None)
    m.maximize = False
    if objective == "min_tco_for_throughput":
        m.objective = dict(terms.cost)
        return solve(m, backend, time_left(), mip_gap), m, notes
    # Dinkelbach: start from the most throughput (the ratio of any feasible answer is a valid start).
    start = m.copy()
    start.objective, start.maximize = {b.x: 1.0}, True
    sol = solve(start, backend, time_left(), mip_gap)
    if not sol.has_solution or sol.values.get(terms.rate, 0.0) <= 0:
        return sol, start, notes
    best = sol
    for _ in range(max_iterations):
        q = cost_per_hour(terms, best.values) / best.values[terms.rate]
        step = m.copy()
        step.objective = dict(terms.cost)
        step.objective[terms.rate] = step.objective.get(terms.rate, 0.0) - q
        nxt = solve(step, backend, time_left(), mip_gap, hint=best.values)
        if not nxt.has_solution or nxt.values.get(terms.rate, 0.0) <= 0:
            notes.append("cost per task: a Dinkelbach step found no solution; the best ratio so far is returned")
            best.status, best.gap = "feasible", None
            return best, step, notes
        ratio = cost_per_hour(terms, nxt.values) / nxt.values[terms.rate]
        value = cost_per_hour(terms, nxt.values) - q * nxt.values[terms.rate]
        if ratio < q * (1 - mip_gap):
            best = nxt
        if value >= -max(mip_gap, 1e-9) * cost_per_hour(terms, best.values):
            # cost - q L >= 0 everywhere (to the step's proven gap): q is the least cost per task
            best.status, best.gap = nxt.status, nxt.gap
            return best, step, notes
    notes.append(f"cost per task: Dinkelbach stopped after {max_iterations} iterations without proving the ratio "
                 "optimal")
    best.status, best.gap = "feasible", None
    return best, step, notes
