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
    return sol.values[b.x], _x_bound(sol, b, s), sol.status


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
    sc = scenarios_from_data({"workload": "swe-agent", "rack": "air-40kw", "solver": "cbc", "time_limit_s": 60,
                              "grid": {"workload.tool_share": [0.7857]}})
    r = resolve(sc[0])
    out = solve_job(r.inputs("hybrid"), r.catalog_json)
    assert out["error"] is None
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
