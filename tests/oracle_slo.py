"""Brute-force oracle for the tail-wait SLO: enumerate server-count vectors and keep, for each, the best throughput
whose tool queue passes the evaluator's SLO check (written out here from docs/model.md sections 4.2 and 6.2, with
`models.queueing.max_arrival_for_wait` as the evaluator uses it).

Scope: one shared tool queue, one CPU SKU (one core speed), no sandbox memory, layouts b and hybrid. For fixed
server totals, X tasks/s is feasible iff, with u_min(X) the fewest orchestration cores that serve X (greedy by cores
per task/s), the remaining cores C = C_all - u_min(X) satisfy W X <= speed C and v X <= lambda_max(floor(C / p)).
Feasibility falls as X rises, so the best X is found by bisection.
"""

from __future__ import annotations

import math

from models.queueing import max_arrival_for_wait
from models.workload import CpuStage, Workload
from oracle import (HOUR_S, candidate_options, continuous_optimum, has_llm, rack_switch_of, tool_work_per_task,
                    total_vectors)

BISECTION_STEPS = 100


def queue_figures(workload: Workload, speed: float) -> tuple[float, float, float, float]:
    """(calls per task v, mean call time, mean parallelism, Allen-Cunneen scale) of the shared queue."""
    calls = t = hold = m2 = 0.0
    for c in workload.classes:
        for s in c.stages:
            if isinstance(s, CpuStage):
                call = s.core_seconds / (s.parallelism * speed)
                calls += c.share * s.count
                t += c.share * s.count * call
                hold += c.share * s.count * call * s.parallelism
                m2 += c.share * s.count * call * call * (1 + s.cv * s.cv)
    mean = t / calls
    return calls, mean, hold / t, (1 + max(0.0, m2 / calls / mean ** 2 - 1)) / 2


def best_with_slo(options, counts, workload: Workload, target_s: float, quantile: float) -> float:
    speeds = {o.profile.per_core_perf for o, n in zip(options, counts) if n}
    if not speeds:
        return 0.0
    assert len(speeds) == 1, "oracle scope: one core speed"
    speed = speeds.pop()
    v, mean, pbar, scale = queue_figures(workload, speed)
    w = tool_work_per_task(workload)
    s_fixed, c_all, flex = 0.0, 0.0, []
    for o, n in zip(options, counts):
        if not n:
            continue
        p = o.profile
        if o.flexible_orchestration:
            c_all += p.cores * n
            if p.gpu_tasks_per_s > 0:
                k = p.orchestration_tasks_per_core_s
                flex.append((0.0 if math.isinf(k) else 1.0 / k, p.gpu_tasks_per_s * n if math.isinf(k)
                             else min(p.gpu_tasks_per_s * n, k * p.cores * n)))
        else:
            s_fixed += p.serving_tasks_per_s * n
            c_all += p.tool_cores * n
    flex.sort()

    def u_min(x: float) -> float | None:
        need, u = x - s_fixed, 0.0
        for cost, cap in flex:
            if need <= 0:
                break
            take = min(cap, need)
            u += take * cost
            need -= take
        return u if need <= 1e-12 * max(1.0, x) else None

    def feasible(x: float) -> bool:
        u = u_min(x) if has_llm(workload) else 0.0
        if u is None:
            return False
        cores = c_all - u
        if w * x > speed * cores * (1 + 1e-12):
            return False
        servers = int(math.floor(cores / pbar + 1e-9))
        return v * x <= max_arrival_for_wait(servers, mean, target_s / scale, quantile) * (1 + 1e-12)

    lo, hi = 0.0, continuous_optimum(options, counts, workload)
    if feasible(hi):
        return hi
    for _ in range(BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if feasible(mid) else (lo, mid)
    return lo


def oracle_slo(catalog, workload: Workload, rack, layout: str, target_s: float, quantile: float,
               racks: int = 1) -> tuple[float, tuple[int, ...]]:
    """Best tasks/h meeting the tail-wait target, by enumeration; (tasks/h, server totals)."""
    options = candidate_options(catalog, workload, rack, layout)
    best, arg = 0.0, None
    for vec in total_vectors(options, rack, racks, rack_switch_of(catalog, rack)):
        x = best_with_slo(options, vec, workload, target_s, quantile)
        if x > best:
            best, arg = x, vec
    return best * HOUR_S, arg
