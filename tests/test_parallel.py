"""Solves side by side (advisor/parallel.py) and the throughput-only answer detail of sweep points: the same
answers as one at a time and full detail, in the same order, with errors and context variables carried over; and a
sweep point where nothing fits is an infeasible point, not a failed report."""

from __future__ import annotations

import contextvars
import threading
import time

import pytest

from advisor.catalog import builtin_catalog, load_catalog, load_rack, load_workload
from advisor.optimizer.compare import compare_layouts
from advisor.optimizer.optimize import optimize
from advisor.optimizer.settings import OptimizerSettings
from advisor.parallel import run_all
from advisor.report.html import render_report
from advisor.report.migration import sweep_point
from api_server import MINI
from tiers import tiered

_VAR: contextvars.ContextVar[str] = contextvars.ContextVar("test_parallel_var", default="unset")


def test_run_all_keeps_order_runs_side_by_side_and_carries_context():
    _VAR.set("caller")
    threads = set()

    def fn(i: int) -> tuple[int, str]:
        threads.add(threading.get_ident())
        time.sleep(0.05 * (3 - i))  # the first item ends last
        return i * i, _VAR.get()

    out = run_all(fn, [0, 1, 2], workers=2)
    assert out == [(0, "caller"), (1, "caller"), (4, "caller")]
    assert len(threads) == 2
    assert run_all(fn, [2], workers=4) == [(4, "caller")]
    assert run_all(fn, [1, 2], workers=1) == [(1, "caller"), (4, "caller")]


def test_run_all_raises_the_first_error_after_every_piece_ended():
    ended = []

    def fn(i: int) -> int:
        time.sleep(0.02)
        ended.append(i)
        if i in (1, 3):
            raise ValueError(f"piece {i}")
        return i

    with pytest.raises(ValueError, match="piece 1"):
        run_all(fn, range(5), workers=2)
    assert sorted(ended) == [0, 1, 2, 3, 4]


def _fields(r) -> tuple:
    return (r.layout, r.status, round(r.throughput_tasks_per_hour, 6),
            sorted((s.chassis, s.cpu, s.gpu or "", s.gpus_per_server, s.count) for s in r.servers))


PAIRS = [("agent", "r40", "mini"), ("swe-agent", "air-40kw", "builtin"), ("rl-rollout", "air-60kw", "builtin"),
         ("batch-generation", "liquid-130kw", "builtin")]


def _catalog(which: str):
    return load_catalog(MINI) if which == "mini" else builtin_catalog()


@pytest.mark.parametrize("workload,rack,which", tiered(PAIRS, fast=2))
def test_compare_side_by_side_equals_one_at_a_time(workload, rack, which):
    cat = _catalog(which)
    w, r = load_workload(workload, cat), load_rack(rack, cat)
    one = compare_layouts(w, r, cat, settings=OptimizerSettings(concurrent_solves=1), time_limit_s=120)
    two = compare_layouts(w, r, cat, settings=OptimizerSettings(concurrent_solves=2), time_limit_s=120)
    assert [_fields(x) for x in one.results] == [_fields(x) for x in two.results]
    assert one.best_layout == two.best_layout and one.ratio_vs_a == pytest.approx(two.ratio_vs_a)
    # shadow prices' +10% re-solves run side by side too: same sentences, same order
    for a, b in zip(one.results, two.results):
        assert [(p.group, p.what_it_takes) for p in a.shadow_prices] == \
            [(p.group, p.what_it_takes) for p in b.shadow_prices]


@pytest.mark.parametrize("workload,rack,which", tiered(PAIRS, fast=2))
def test_throughput_detail_keeps_the_optimum_and_its_label(workload, rack, which):
    """A sweep point's answer (answer_detail="throughput") has the full answer's tasks/h and status: the stages it
    leaves out only choose among throughput ties."""
    cat = _catalog(which)
    w, r = load_workload(workload, cat), load_rack(rack, cat)
    for lay in ("a", "b", "hybrid"):
        full = optimize(w, r, cat, layout=lay, explain=False)
        fast = optimize(w, r, cat, layout=lay, explain=False,
                        settings=OptimizerSettings(answer_detail="throughput"))
        assert fast.status == full.status
        assert fast.throughput_tasks_per_hour == pytest.approx(full.throughput_tasks_per_hour, rel=1e-6)
        assert full.failures is not None and fast.failures is None


def test_a_sweep_point_where_nothing_fits_is_an_infeasible_point():
    """Half of a 15 kW legacy rack holds no GPU server of the built-in catalog: the point is infeasible with the
    reason, and the report around it renders (it used to fail as a whole)."""
    cat = builtin_catalog()
    w, r = load_workload("swe-agent", cat), load_rack("legacy-air-15kw", cat)
    half = r.model_copy(update={"power_kw": r.power_kw * 0.5})
    res = sweep_point(w, half, cat, "b", {"time_limit_s": 30})
    assert res.status == "infeasible" and res.throughput_tasks_per_hour == 0
    assert res.infeasibility[0].group == "candidates" and "fits an empty rack" in res.message
    _, data = render_report({"workload": "swe-agent", "rack": "legacy-air-15kw", "power_factors": [0.5, 1.0],
                             "tool_factors": [1.0, 2.0], "time_limit_s": 60}, cat)
    half_point = data["sensitivity"]["power"]["points"][0]
    assert data["glance"]["tasks_per_hour"] > 0
    assert half_point["factor"] == 0.5 and set(half_point["status"].values()) == {"infeasible"}
    assert data["sensitivity"]["power"]["skipped"] == []
