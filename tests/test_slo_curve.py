"""The tail-wait SLO as capacity curves in the MILP (advisor/optimizer/slo_curve.py): the curve against the evaluator's
function, and the optimizer against a brute-force enumeration filtered by the evaluator's SLO check."""

from __future__ import annotations

import functools
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from advisor.optimizer.optimize import optimize
from advisor.optimizer.settings import OptimizerSettings
from advisor.optimizer.slo_curve import QueueCalls, curve
from models.config import Configuration
from models.pipeline import evaluate
from models.queueing import max_arrival_for_wait
from models.workload import Slo
from oracle import oracle, random_instance, tool_work_per_task
from oracle_slo import oracle_slo, queue_figures
from tiers import tiered

QUANTILE = OptimizerSettings().assumptions.tail_quantile
EXACT = OptimizerSettings(slo_curve_exact_servers=100_000)
"""Every server count a breakpoint: the curve is exact, so the optimum must equal the enumeration's."""


@pytest.mark.parametrize("mean,target,scale", [(2.0, 1.0, 1.0), (13.3, 0.5, 4.0), (0.8, 0.05, 1.5)])
def test_curve_is_exact_at_breakpoints_and_below_between(mean, target, scale):
    qc = QueueCalls(1.0, mean, 1.0, scale)
    tol = 1e-3
    segs = curve(qc, target, QUANTILE, 3000, 16, tol)
    assert segs[0].start == 0 and segs[-1].end == 3000
    assert all(a.end + 1 == b.start for a, b in zip(segs, segs[1:]))
    for sg in segs:
        for c in sorted({sg.start, (sg.start + sg.end) // 2, sg.end}):
            true = max_arrival_for_wait(c, mean, target / scale, QUANTILE)
            line = sg.value + sg.slope * (c - sg.start)
            assert line <= true * (1 + 1e-12), (sg, c)
            assert line >= true * (1 - tol) - 1e-12, (sg, c)
            if c == sg.start:
                assert line == pytest.approx(true, rel=1e-15)
    assert all(s.start == s.end for s in segs[:17])


@pytest.mark.parametrize("mean,target,scale", [(2.0, 1.0, 1.0), (13.3, 0.5, 4.0), (0.8, 0.05, 1.5), (40.0, 0.1, 5.0)])
def test_every_secant_is_within_the_tolerance_at_every_server_count(mean, target, scale):
    """The proven bound of a solve with secant segments is divided by (1 - tolerance) (optimize._x_bound): that needs
    each secant within the tolerance of the capacity at every integer of its segment, not only where the curve is
    built (its end and middle)."""
    qc = QueueCalls(1.0, mean, 1.0, scale)
    tol = OptimizerSettings().slo_curve_tolerance
    for sg in curve(qc, target, QUANTILE, 3000, OptimizerSettings().slo_curve_exact_servers, tol):
        for c in range(sg.start, sg.end + 1):
            true = max_arrival_for_wait(c, mean, target / scale, QUANTILE)
            line = sg.value + sg.slope * (c - sg.start)
            assert true * (1 - tol) - 1e-12 <= line <= true * (1 + 1e-12), (sg, c)


def _slo_instance(seed: int):
    """A one-CPU-SKU random instance with a tail-wait target tight enough to bind (or None)."""
    inst = random_instance(seed, max_power_kw=12.0, max_vectors=3000)
    if len(inst.catalog.cpus) != 1 or not inst.notes["llm"] or tool_work_per_task(inst.workload) <= 0:
        return None
    speed = next(iter(inst.catalog.cpus)).per_core_perf
    _, mean, _, scale = queue_figures(inst.workload, speed)
    target = mean * scale * (0.02 + 0.3 * ((seed * 7919) % 100) / 100)
    return inst, inst.workload.model_copy(update={"slo": Slo(tool_wait_p95_seconds=target)}), target


@functools.cache
def _binding_seeds(n: int) -> list[int]:
    out = []
    for seed in range(9000, 9400):
        got = _slo_instance(seed)
        if got is None:
            continue
        inst, wl, target = got
        free = oracle(inst.catalog, inst.workload, inst.rack, "b").tasks_per_hour
        with_slo, _ = oracle_slo(inst.catalog, wl, inst.rack, "b", target, QUANTILE)
        if 0 < with_slo < free * (1 - 1e-4):
            out.append(seed)
        if len(out) >= n:
            break
    return out


N_SLO = 12


@pytest.mark.parametrize("k", tiered(range(N_SLO), 1))
@pytest.mark.parametrize("layout", ["b", "hybrid"])
def test_slo_optimum_matches_enumeration(k, layout):
    seeds = _binding_seeds(N_SLO)
    assert len(seeds) == N_SLO
    inst, wl, target = _slo_instance(seeds[k])
    if layout == "hybrid" and len(wl.classes) > 1:
        wl = wl.model_copy(update={"classes": [wl.classes[0].model_copy(update={"share": 1.0})]})
    expect, vec = oracle_slo(inst.catalog, wl, inst.rack, layout, target, QUANTILE)
    res = optimize(wl, inst.rack, inst.catalog, layout=layout, explain=False, settings=EXACT)
    ctx = (seeds[k], layout, res.throughput_tasks_per_hour, expect, vec, res.status, res.warnings)
    assert res.throughput_tasks_per_hour == pytest.approx(expect, rel=1e-6), ctx
    assert res.predicted_tasks_per_hour == pytest.approx(res.throughput_tasks_per_hour, rel=1e-6), ctx
    # the evaluator is the judge: the configuration meets the tail-wait target at its throughput
    ev = evaluate(Configuration.model_validate(res.configuration), wl, inst.rack, inst.catalog)
    assert ev.within_budgets
    slo = [b for b in ev.bounds if b.kind == "slo"]
    assert slo and min(b.tasks_per_hour for b in slo) >= ev.throughput_tasks_per_hour * (1 - 1e-9)
    for q in ev.queues:
        if q.servers:
            lam = ev.throughput_tasks_per_hour / 3600 * q.calls_per_task if hasattr(q, "calls_per_task") else None
            if lam is not None:
                assert lam <= max_arrival_for_wait(q.servers, q.mean_call_s, target / q.wait_scale, QUANTILE) * (
                    1 + 1e-9)
    # with the default (coarser) curve the answer still meets the target and loses at most the curve tolerance
    dflt = optimize(wl, inst.rack, inst.catalog, layout=layout, explain=False)
    assert dflt.throughput_tasks_per_hour <= expect * (1 + 1e-6)
    assert dflt.throughput_tasks_per_hour >= expect * (1 - OptimizerSettings().slo_curve_tolerance) - 1e-6


def _mixed_speed_instance(seed: int):
    """A random instance with two CPU SKUs of different core speeds and a tail-wait target (or None)."""
    inst = random_instance(seed, max_power_kw=12.0, max_vectors=3000)
    speeds = {c.per_core_perf for c in inst.catalog.cpus}
    if len(speeds) < 2 or not inst.notes["llm"] or tool_work_per_task(inst.workload) <= 0:
        return None
    _, mean, _, scale = queue_figures(inst.workload, min(speeds))
    target = mean * scale * (0.02 + 0.3 * ((seed * 7919) % 100) / 100)
    return inst, inst.workload.model_copy(update={"slo": Slo(tool_wait_p95_seconds=target)})


@functools.cache
def _mixed_seeds(n: int) -> list[int]:
    return list(itertools.islice((s for s in range(9000, 9600) if _mixed_speed_instance(s) is not None), n))


N_MIXED = 8


@pytest.mark.parametrize("k", tiered(range(N_MIXED), 1))
def test_mixed_speed_bound_covers_every_one_speed_optimum(k):
    """Tail-wait curves over mixed core speeds are conservative (slowest speed of the mix), so the proven bound comes
    from the relaxation at each queue's fastest core (docs/model.md, "Status means proven"). Every answer that uses
    one CPU SKU is feasible for the mixed problem and its curves are exact, so the bound must cover each of them,
    and an `optimal` label must mean the answer reaches every one of them."""
    seed = _mixed_seeds(N_MIXED)[k]
    inst, wl = _mixed_speed_instance(seed)
    res = optimize(wl, inst.rack, inst.catalog, layout="b", explain=False)
    singles = [optimize(wl, inst.rack, inst.catalog, layout="b", explain=False, cpu_ids=[c.id])
               for c in inst.catalog.cpus]
    best_single = max(r.throughput_tasks_per_hour for r in singles)
    ctx = (seed, res.status, res.throughput_tasks_per_hour, res.bound_tasks_per_hour,
           [(r.status, r.throughput_tasks_per_hour) for r in singles])
    assert res.throughput_tasks_per_hour >= best_single * (1 - 1e-6), ctx
    if res.bound_tasks_per_hour is not None:
        assert res.bound_tasks_per_hour >= best_single * (1 - 1e-6), ctx
        assert res.bound_tasks_per_hour >= res.throughput_tasks_per_hour * (1 - 1e-9), ctx
    if res.status == "optimal":
        assert all(r.throughput_tasks_per_hour <= res.throughput_tasks_per_hour * (1 + 1e-6) for r in singles), ctx


@settings(max_examples=60, deadline=None, derandomize=True)
@given(mean=st.floats(0.05, 200.0), target=st.floats(0.01, 10.0), scale=st.floats(0.5, 20.0),
       faster=st.floats(1.0, 4.0), c=st.integers(1, 3000))
def test_capacity_grows_with_core_speed(mean, target, scale, faster, c):
    """The relaxed curves' premise (docs/model.md, "Status means proven"): a queue whose cores are all at most as
    fast as speed l has no more tail-wait capacity than the curve at speed l. Faster cores divide every call time
    (the spread, hence the Allen-Cunneen scale, is unchanged), and capacity never falls as calls shorten."""
    slow = max_arrival_for_wait(c, mean, target / scale, QUANTILE)
    fast = max_arrival_for_wait(c, mean / faster, target / scale, QUANTILE)
    assert fast >= slow * (1 - 1e-9)
    qs = QueueCalls(1.0, mean, 1.0, scale)
    qf = QueueCalls(1.0, mean / faster, 1.0, scale)
    top = max(c, 40)
    for a, b in zip(curve(qs, target, QUANTILE, top, 16, 1e-3), curve(qf, target, QUANTILE, top, 16, 1e-3)):
        if a.start == b.start:
            assert b.value >= a.value * (1 - 1e-9), (a, b)
