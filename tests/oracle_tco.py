"""Exhaustive-enumeration oracle for the TCO objectives, independent of the MILP code.

Same scope as `tests/oracle.py` (layouts B and hybrid, one shared tool queue, no sandbox memory, no tool-wait SLO).
For every integer vector of server totals N the continuous part is a small LP solved with scipy (HiGHS), in tasks/h:

    serving      X <= S_fixed(N) + sum_o s_o,  s_o <= G_o N_o,  s_o <= k_o u_o,  u_o + y_o <= C_o N_o
    tool cores   X W <= sum_o perf_o y_o                        (y_o <= tool cores x N_o for fixed options)
    dispatch     sum_o e_o = L, e_o <= s_o (or fixed serving x N_o);  sum_o t_o = L, t_o W <= perf_o y_o
    cost/h       C(N) + sum_o a_o e_o + sum_o b_o t_o

with C(N) the amortized capital, idle draw and rack gear of N, and a_o, b_o the energy cost of one task/h served on
option o's GPUs or tool cores (`models.tco`). `min_tco_for_throughput` fixes L = R and X >= R / f; `min_cost_per_task`
sets L = f X and minimizes cost / L by the Charnes-Cooper transformation (z = v / L, tau = 1 / L), an exact LP.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import linprog

from advisor.optimizer.settings import OptimizerSettings
from models.performance import call_mix
from models.tco import (
    HOURS_PER_MONTH,
    J_PER_KWH,
    capital_usd_per_hour,
    cpu_joules_per_reference_core_s,
    gpu_joules_per_task,
    idle_draw_w,
)
from oracle import (HOUR_S, candidate_options, check_scope, has_llm, rack_switch_of, switches_by_total,
                    tool_work_per_task)


class _Lp:
    def __init__(self):
        self.names: list[str] = []
        self.ub: list[tuple[dict[str, float], float]] = []
        self.eq: list[tuple[dict[str, float], float]] = []

    def var(self, name: str) -> str:
        self.names.append(name)
        return name

    def arrays(self, rows):
        idx = {n: i for i, n in enumerate(self.names)}
        a = np.zeros((len(rows), len(self.names)))
        b = np.zeros(len(rows))
        for r, (terms, rhs) in enumerate(rows):
            for k, v in terms.items():
                a[r, idx[k]] += v
            b[r] = rhs
        return (a, b) if rows else (None, None)


def _fixed_cost_per_hour(options, counts, rack, racks, costs, switch_w: float = 0.0) -> float:
    """`switch_w`: the top-of-rack switches' power in the whole row (drawn like the rack's reserved gear)."""
    usd_w = costs.pue * costs.electricity_usd_per_kwh / 1000.0
    c = racks * (rack.reserved_power_w * costs.rack_reserved_draw_fraction * usd_w
                 + costs.space_usd_per_rack_month / HOURS_PER_MONTH)
    c += switch_w * costs.rack_reserved_draw_fraction * usd_w
    for o, n in zip(options, counts):
        p = o.profile
        c += n * (capital_usd_per_hour(p.price_usd, costs) + idle_draw_w(p.chassis, p.cpu, p.gpu, p.gpus, costs) * usd_w)
    return c


def _lp(options, counts, workload, costs):
    """The continuous part for fixed totals; returns the LP (rows with rhs that scale with N), cost terms, X and L."""
    lp = _Lp()
    usd_j = costs.pue * costs.electricity_usd_per_kwh / J_PER_KWH
    w = tool_work_per_task(workload)
    llm = has_llm(workload)
    orch = call_mix(workload).orchestration_core_s_per_task
    x, lam = lp.var("X"), lp.var("L")
    cost: dict[str, float] = {}
    serving = {x: 1.0}
    s_fixed = 0.0
    tools = {x: w / HOUR_S} if w > 0 else None
    gpu_flow, tool_flow = {lam: -1.0}, {lam: -1.0}
    for i, (o, n) in enumerate(zip(options, counts)):
        if n == 0:
            continue
        p = o.profile
        y = lp.var(f"y{i}") if p.tool_cores > 0 or o.flexible_orchestration else None
        if o.flexible_orchestration:
            s, u = lp.var(f"s{i}"), lp.var(f"u{i}")
            serving[s] = -1.0
            if math.isfinite(p.gpu_tasks_per_s):  # infinite without LLM calls
                lp.ub.append(({s: 1.0}, p.gpu_tasks_per_s * HOUR_S * n))
            if math.isfinite(p.orchestration_tasks_per_core_s):
                lp.ub.append(({s: 1.0, u: -p.orchestration_tasks_per_core_s * HOUR_S}, 0.0))
            lp.ub.append(({u: 1.0, y: 1.0}, p.cores * n))
        else:
            s_fixed += p.serving_tasks_per_s * HOUR_S * n
            if y is not None:
                lp.ub.append(({y: 1.0}, p.tool_cores * n))
        if tools is not None and y is not None:
            tools[y] = -p.per_core_perf
        if llm and p.gpus and p.gpu_tasks_per_s > 0:
            e = lp.var(f"e{i}")
            gpu_flow[e] = 1.0
            if o.flexible_orchestration:
                lp.ub.append(({e: 1.0, f"s{i}": -1.0}, 0.0))
            else:
                lp.ub.append(({e: 1.0}, p.serving_tasks_per_s * HOUR_S * n))
            cost[e] = usd_j * (gpu_joules_per_task(p.gpu, p.gpus, p.gpu_tasks_per_s, costs)
                               + orch * cpu_joules_per_reference_core_s(p.chassis, p.cpu, costs))
        if w > 0 and y is not None:
            t = lp.var(f"t{i}")
            tool_flow[t] = 1.0
            lp.ub.append(({t: w / HOUR_S, y: -p.per_core_perf}, 0.0))
            cost[t] = usd_j * w * cpu_joules_per_reference_core_s(p.chassis, p.cpu, costs)
    if llm:
        lp.ub.append((serving, s_fixed))
        lp.eq.append((gpu_flow, 0.0))
    if tools is not None:
        lp.ub.append((tools, 0.0))
        lp.eq.append((tool_flow, 0.0))
    return lp, cost, x, lam


def _solve(lp: _Lp, objective: dict[str, float]):
    c = np.zeros(len(lp.names))
    for k, v in objective.items():
        c[lp.names.index(k)] += v
    a_ub, b_ub = lp.arrays(lp.ub)
    a_eq, b_eq = lp.arrays(lp.eq)
    r = linprog(c, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=b_eq, bounds=[(0, None)] * len(c), method="highs")
    return r.fun if r.status == 0 else None


def min_tco_for_throughput(inst, layout: str, required_tasks_per_hour: float,
                           settings: OptimizerSettings | None = None) -> float | None:
    """Least cost per hour serving `required_tasks_per_hour` at the operating load fraction (None: infeasible)."""
    s = settings or OptimizerSettings()
    costs, f = s.assumptions.costs, s.assumptions.operating_load_fraction
    check_scope(inst.workload)
    options = candidate_options(inst.catalog, inst.workload, inst.rack, layout, s)
    best = None
    sw = rack_switch_of(inst.catalog, inst.rack)
    for v, k in switches_by_total(options, inst.rack, inst.racks, sw).items():
        lp, cost, x, lam = _lp(options, v, inst.workload, costs)
        lp.eq.append(({lam: 1.0}, required_tasks_per_hour))
        lp.ub.append(({x: -1.0}, -required_tasks_per_hour / f))
        val = _solve(lp, cost)
        if val is None:
            continue
        val += _fixed_cost_per_hour(options, v, inst.rack, inst.racks, costs, k * sw.power_w if sw else 0.0)
        best = val if best is None else min(best, val)
    return best


def min_cost_per_task(inst, layout: str, settings: OptimizerSettings | None = None) -> float | None:
    """Least cost per task (USD) at the operating load fraction of sustainable throughput."""
    s = settings or OptimizerSettings()
    costs, f = s.assumptions.costs, s.assumptions.operating_load_fraction
    check_scope(inst.workload)
    options = candidate_options(inst.catalog, inst.workload, inst.rack, layout, s)
    best = None
    sw = rack_switch_of(inst.catalog, inst.rack)
    for v, k in switches_by_total(options, inst.rack, inst.racks, sw).items():
        lp, cost, x, lam = _lp(options, v, inst.workload, costs)
        # Charnes-Cooper: every row with a right-hand side b becomes A z - b tau <= 0; L = 1 fixes the scale.
        tau = lp.var("tau")
        lp.ub = [({**terms, tau: -rhs} if rhs else terms, 0.0) for terms, rhs in lp.ub]
        lp.eq = [(terms, 0.0) for terms, _ in lp.eq] + [({lam: 1.0, x: -f}, 0.0), ({lam: 1.0}, 1.0)]
        val = _solve(lp, {**cost, tau: _fixed_cost_per_hour(options, v, inst.rack, inst.racks, costs,
                                                             k * sw.power_w if sw else 0.0)})
        if val is not None:
            best = val if best is None else min(best, val)
    return best
