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
