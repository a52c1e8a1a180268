"""The partition search: every partition's relaxation before any coupled solve, and the relaxation's proven bound as
X's upper bound in a partition's tail-wait-curve solves (advisor/optimizer/optimize.py `_search_partitions`,
formulation `Problem.x_cap`; docs/model.md 9.6)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from advisor.deadline import Deadline
from advisor.optimizer.formulation import build
from advisor.optimizer.optimize import _solve_coupled, _solve_stages, _x_bound
from advisor.optimizer.settings import OptimizerSettings
from advisor.studies.batch import solve_job
from advisor.studies.scenarios import resolve, scenarios_from_data
from test_golden_lp import _problem


def _first_stage_x(p, backend: str = "cbc") -> tuple[float, float | None, str]:
    """X of the throughput stage alone, its proven bound, and its status."""
    s = OptimizerSettings().model_copy(update={"answer_detail": "throughput"})
    b = build(p, memory=False)
    sol, _, _ = _solve_stages(b, p, "b", "max_throughput", backend, s, Deadline(60))
    return sol.values.get(b.x), _x_bound(sol, b, s), sol.status


def _grid_hybrid(tool_share: float, time_limit_s: float) -> dict:
    """The built-in batch grid's hybrid solve at one tool share (bench/bench_batch.py --builtin: swe-agent on
    air-40kw, CBC), as the batch runs it; its row, checked free of errors."""
    sc = scenarios_from_data({"workload": "swe-agent", "rack": "air-40kw", "solver": "cbc",
                              "time_limit_s": time_limit_s, "grid": {"workload.tool_share": [tool_share]}})
    r = resolve(sc[0])
    out = solve_job(r.inputs("hybrid"), r.catalog_json)
    assert out["error"] is None
    return out


@pytest.mark.parametrize("backend", ["cbc", "highs"])
def test_the_relaxation_bound_cuts_off_no_curve_answer(backend):
    """With the cap at the curve-free relaxation's proven bound, the tail-wait-curve solve finds the same optimum as
    without it (the cap only removes LP-relaxation points above every integer answer)."""
    relaxed = _problem("b", tail_wait=True)
    x_relaxed, ub, status = _first_stage_x(relaxed, backend)
    assert status == "optimal" and ub is not None and ub >= x_relaxed
    curves = replace(relaxed, slo_curves=True)
    x_free, _, free_status = _first_stage_x(curves, backend)
    x_capped, capped_ub, capped_status = _first_stage_x(replace(curves, x_cap=ub), backend)
    assert free_status == capped_status == "optimal"
    assert x_free <= ub * (1 + 1e-9)  # the curves only restrict the relaxation
    assert x_capped == pytest.approx(x_free, rel=1e-6)
    assert capped_ub <= ub * (1 + 1e-9) + 1e-9


def test_an_answer_carries_no_relaxation_cap():
    """The cap serves the solve only: the model and problem an answer carries leave it out, since the "+10%" what-if
    re-solves raise budgets beyond it."""
    p = _problem("b", tail_wait=True, slo_curves=True)
    x, ub, _ = _first_stage_x(replace(p, slo_curves=False))
    s = OptimizerSettings()
    nodes, _ = _solve_coupled(replace(p, x_cap=ub), "b", "max_throughput", "cbc", s, Deadline(60), racks=1,
                              memory=False)
    _key, pn, b, sol, *_ = nodes[0]
    assert sol.has_solution and sol.values[b.x] <= ub * (1 + 1e-9)
    assert pn.x_cap is None and b.model.vars[b.x].ub is None


def test_built_in_grid_hybrid_reaches_its_relaxation_bound():
    """Regression on the built-in batch grid (bench/bench_batch.py --builtin): swe-agent on air-40kw at tool share
    0.7857, hybrid, CBC. Its first partition's relaxed answer misses the tail-wait target; the curve solve, capped at
    the relaxation's bound, proves an answer that reaches that bound (it ran to its time limit without the cap)."""
    out = _grid_hybrid(0.7857, 60)
    assert out["status"] == "optimal"
    assert out["throughput"] == pytest.approx(3348.08, rel=1e-5)


@pytest.mark.parametrize("backend", ["cbc", "highs"])
def test_a_tie_break_stage_keeps_its_optimum_under_the_curve_free_bound(backend):
    """`_with_curve_free_bound`: the least-power stage of a tail-wait-curve model carries the curve-free stage's
    optimum as a lower bound (group stage_bound), which cuts off no answer: the stage's optimum is the same with
    and without it; a model without curves is left as it is."""
    from advisor.optimizer.formulation import power_terms
    from advisor.optimizer.optimize import _with_curve_free_bound
    from advisor.solver import solve

    p = _problem("b", tail_wait=True, slo_curves=True)
    b = build(p, memory=False)
    s = OptimizerSettings()
    first = b.model.copy()
    first.objective, first.maximize = {b.x: 1.0}, True
    x = solve(first, backend, 60, s.mip_gap).objective
    stage = first.copy()
    stage.add("tie_throughput", "tie_window", {b.x: 1.0}, ">=", x * (1 - 1e-7))
    stage.objective, stage.maximize = power_terms(b, p), False
    bounded = _with_curve_free_bound(stage, "power", backend, Deadline(60), s)
    cut = [c for c in bounded.constraints if c.group == "stage_bound"]
    assert len(cut) == 1 and cut[0].sense == ">="
    free = solve(stage, backend, 60, s.mip_gap)
    with_cut = solve(bounded, backend, 60, s.mip_gap)
    assert free.status == with_cut.status == "optimal"
    assert with_cut.objective == pytest.approx(free.objective, rel=1e-9)
    assert cut[0].rhs <= free.objective * (1 + 1e-9)
    relaxed = _problem("b", tail_wait=True)  # no curves: nothing to bound
    rb = build(relaxed, memory=False)
    plain = rb.model.copy()
    plain.objective, plain.maximize = power_terms(rb, relaxed), False
    assert _with_curve_free_bound(plain, "power", backend, Deadline(60), s) is plain


@pytest.mark.parametrize("backend", ["cbc", "highs"])
def test_the_floor_cuts_off_no_answer_above_it(backend):
    """`Problem.x_floor`: with X's floor below the curve solve's optimum (and its cap above), the solve finds the same
    optimum; with the floor above it, the solve is infeasible and `_x_bound` reads the floor as the proven bound (the
    optimum lies below it), never minus infinity."""
    relaxed = _problem("b", tail_wait=True)
    _, ub, _ = _first_stage_x(relaxed, backend)
    curves = replace(relaxed, slo_curves=True)
    x_free, _, status = _first_stage_x(curves, backend)
    assert status == "optimal"
    for floor in (x_free * (1 - 1e-3), x_free * (1 - 1e-7)):
        x_floored, floored_ub, floored_status = _first_stage_x(replace(curves, x_floor=floor, x_cap=ub), backend)
        assert floored_status == "optimal"
        assert x_floored == pytest.approx(x_free, rel=1e-6)
        assert floored_ub >= x_free * (1 - 1e-9)
    above = x_free * (1 + 1e-3)
    x_none, above_ub, above_status = _first_stage_x(replace(curves, x_floor=above), backend)
    assert above_status == "infeasible"
    assert above_ub >= above and above_ub >= x_free


def test_an_answer_carries_no_floor():
    """As the cap: the model and problem an answer carries leave the floor out (what-ifs re-solve them)."""
    p = _problem("b", tail_wait=True, slo_curves=True)
    x, _, _ = _first_stage_x(p)
    nodes, _ = _solve_coupled(replace(p, x_floor=x * 0.99), "b", "max_throughput", "cbc", OptimizerSettings(),
                              Deadline(60), racks=1, memory=False)
    _key, pn, b, sol, *_ = nodes[0]
    assert sol.has_solution and sol.values[b.x] >= x * 0.99
    assert pn.x_floor is None and b.model.vars[b.x].lb == 0


def test_the_curve_cut_to_the_floor_and_cap_keeps_every_point_between():
    """`_within_needs`: the segments kept carry the full curve's secant values (same lines), cover every server count
    whose secant value lies between the floor's and the cap's call rates, end at the first count that reaches the
    cap's, and keep the full curve's indices (the variables' names)."""
    from advisor.optimizer.formulation import _within_needs
    from advisor.optimizer.slo_curve import QueueCalls, curve

    qc = QueueCalls(calls_per_task=40.0, mean_call_s=30.0, mean_parallelism=1.0, wait_scale=1.2)
    segs = curve(qc, 20.0, 0.95, 3000, 16, 1e-3)

    def values(ss):
        out = {}
        for _, sg in ss:
            for c in range(sg.start, sg.end + 1):
                out[c] = sg.value + sg.slope * (c - sg.start)
        return out

    full = values(enumerate(segs))
    top = max(full.values())
    for lo, hi in ((None, None), (0.2 * top, None), (None, 0.6 * top), (0.3 * top, 0.31 * top), (0.5 * top, 2 * top)):
        kept = _within_needs(segs, lo, hi)
        assert [k for k, _ in kept] == sorted(k for k, _ in kept)
        assert all(segs[k].start <= sg.start <= sg.end <= segs[k].end for k, sg in kept)
        part = values(kept)
        assert all(part[c] == pytest.approx(full[c], rel=1e-12) for c in part)
        reach = min((c for c, v in full.items() if hi is not None and v >= hi), default=max(full))
        want = {c for c, v in full.items() if (lo is None or v >= lo) and c <= reach}
        assert want <= set(part)
        assert max(part) == reach
        if lo is not None and hi is not None and hi < top:
            assert len(kept) < len(segs)


@pytest.mark.slow
def test_built_in_grid_hybrid_at_tool_share_0_9_is_labelled_by_its_bound():
    """Regression on the built-in batch grid at tool share 0.9, hybrid, CBC: the curves assume the slowest core speed
    of a mix, and the relaxed bound (every core at the fastest speed) stays 1.0% above the answer, so the answer is
    `feasible` with that gap (the floor and cap let the partitions' curve solves finish: they ran the whole 30 s time
    limit before)."""
    out = _grid_hybrid(0.9, 30)
    assert out["status"] == "feasible"
    assert out["throughput"] == pytest.approx(2824.465, rel=1e-5)
