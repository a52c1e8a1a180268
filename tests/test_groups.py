"""The constraint-group registry: every group the optimizer writes is registered, the model refuses others, and the
table in docs/model.md is the one the registry generates."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from advisor.optimizer.groups import BUDGET_GROUPS, GROUPS, group_of, markdown_table
from advisor.solver.linear import LinearModel

DOC = Path(__file__).resolve().parents[1] / "docs" / "model.md"


def test_docs_table_is_generated_from_the_registry():
    text = DOC.read_text()
    m = re.search(r"<!-- groups:begin -->\n(.*?)<!-- groups:end -->", text, re.S)
    assert m, "docs/model.md lost its groups table markers"
    assert m.group(1).strip() == markdown_table().strip(), (
        "docs/model.md's table of constraint groups is stale: paste `python -m advisor.optimizer.groups`")


def test_model_refuses_an_unregistered_group():
    m = LinearModel("t", check_group=group_of)
    x = m.var("x", 0, 1)
    m.add("ok", "tool_cores:shared", {x: 1.0}, "<=", 1.0)
    with pytest.raises(KeyError, match="not registered"):
        m.add("bad", "powr", {x: 1.0}, "<=", 1.0)
    assert m.copy().check_group is group_of


def test_budgets_have_units_and_titles():
    assert set(BUDGET_GROUPS) >= {"power", "cooling_air", "cooling_liquid", "space", "capital"}
    for g in GROUPS.values():
        assert g.title and g.unit and g.statement, g


def test_every_group_a_solve_writes_is_registered(mini_catalog):
    """A real build of each layout: every constraint's group resolves in the registry (the check runs in add())."""
    from advisor.catalog import load_rack, load_workload
    from advisor.optimizer.optimize import optimize

    w = load_workload("agent", mini_catalog)
    r = load_rack("r15", mini_catalog)
    for layout in ("a", "b", "hybrid"):
        res = optimize(w, r, mini_catalog, layout=layout, explain=True)
        assert res.status == "optimal"
        for c in res.constraints:
            group_of(c.group)


# ------------------------------------------------------------------------------------------- the three backends


def test_highs_backend_agrees_with_cbc_and_ortools(mini_catalog):
    """The same MILP through the three registered backends: one optimum (HiGHS is the third, via SciPy)."""
    from test_golden_lp import VARIANTS

    from advisor.solver import solve

    for name, make in VARIANTS.items():
        model = make()
        if name == "tco":  # the TCO variant has no objective of its own until solve_tco sets one
            continue
        got = {b: solve(model, b, 60.0, 1e-9) for b in ("cbc", "ortools", "highs")}
        assert {s.status for s in got.values()} == {"optimal"}, (name, {b: s.status for b, s in got.items()})
        ref = got["cbc"].objective
        for b, s in got.items():
            assert s.objective == pytest.approx(ref, rel=1e-6, abs=1e-6), (name, b)


def test_importing_advisor_leaves_pulp_alone():
    import subprocess
    import sys

    code = ("import subprocess, pulp.apis.coin_api as c; import advisor.solver, advisor.optimizer.optimize; "
            "assert c.subprocess is subprocess, c.subprocess")
    subprocess.run([sys.executable, "-c", code], check=True)
