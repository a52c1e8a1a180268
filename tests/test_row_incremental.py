"""A row's answer is checked rack by rack: the certificate's neighbours change one rack, so their budgets and their
capacity ceiling are the answer's own with that rack's share replaced, and the "+10% of a budget" re-solves of a row
go through the same rack-pattern search as the row itself. These tests hold the fast paths to the whole-list
computations they replace, and the loss cases to the request's clock."""

from __future__ import annotations

import functools
import re

import pytest

import advisor.optimizer.optimize as optimize_module
from advisor.catalog import builtin_catalog
from advisor.optimizer.certificate import (_canonical, _Neighbour, ceiling_tasks_per_hour, fits, fitting_usage,
                                           neighbours)
from advisor.optimizer.failures import failures
from advisor.optimizer.options import enumerate_options
from advisor.optimizer.optimize import optimize
from advisor.optimizer.settings import OptimizerSettings
from models.config import Configuration

RACKS = 3


@functools.cache
def _row():
    cat = builtin_catalog()
    w, r = cat.workloads["rl-rollout"], cat.racks["liquid-130kw"]
    res = optimize(w, r, cat, layout="b", racks=RACKS, explain=False)
    assert res.configuration and res.status == "optimal"
    s = OptimizerSettings()
    options, servings = enumerate_options(cat, w, r, "b", s.layout_a_orchestration_cores_per_gpu,
                                          s.assumptions.host_os_reserved_memory_gb,
                                          s.assumptions.tensor_parallel_domain_gpus)
    return cat, w, r, res, options, servings


def _configs():
    cat, w, r, res, options, servings = _row()
    cfg = Configuration.model_validate(res.configuration)
    # the answer, and the answer with its last rack emptied (its neighbours add servers to an empty rack)
    emptied = cfg.model_copy(update={"servers": [g for g in cfg.servers if g.rack != RACKS - 1]})
    return [cfg, emptied]


@pytest.mark.parametrize("which", [0, 1])
def test_neighbour_fast_paths_equal_the_whole_list(which):
    cat, w, r, res, options, servings = _row()
    cfg = _configs()[which]
    queues = {q.name: list(q.classes) for q in cfg.queues}
    base = fitting_usage(cfg.servers, options, r, RACKS)
    assert base is not None
    answer = _canonical(list(cfg.servers))
    n_fit = n = 0
    for nb in neighbours(cfg, options, list(queues), "b"):
        assert isinstance(nb, _Neighbour)
        n += 1
        plain = list(nb)
        assert plain == _canonical(plain)  # canonical as a whole, though only one rack was made so
        assert [g for g in plain if g.rack != nb.rack] == [g for g in answer if g.rack != nb.rack]
        assert nb[nb.lo:nb.hi] == [g for g in plain if g.rack == nb.rack]
        fast = fits(nb, options, r, RACKS, None, base)
        assert fast == fits(plain, options, r, RACKS, None)
        if fast:
            n_fit += 1
            assert ceiling_tasks_per_hour(nb, options, w, queues, servings) == pytest.approx(
                ceiling_tasks_per_hour(plain, options, w, queues, servings), rel=1e-12, abs=1e-9)
    assert n > 20 and n_fit > 5
    if which == 1:  # the emptied rack is among the racks the neighbours add to
        assert any(nb.rack == RACKS - 1 for nb in neighbours(cfg, options, list(queues), "b"))


def test_capital_budget_in_the_fast_path():
    cat, w, r, res, options, servings = _row()
    cfg = _configs()[0]
    base = fitting_usage(cfg.servers, options, r, RACKS)
    priced = sum(g.count * (next(o.profile.price_usd for o in options if (o.profile.chassis.id, o.profile.cpu.id,
                                                                          o.gpu_id, o.profile.gpus)
                                 == (g.chassis, g.cpu, g.gpu, g.gpus_per_server)) or 0.0) for g in cfg.servers)
    queues = [q.name for q in cfg.queues]
    for nb in list(neighbours(cfg, options, queues, "b"))[:200]:
        for budget in (priced, priced * 1.01):
            assert fits(nb, options, r, RACKS, budget, base) == fits(list(nb), options, r, RACKS, budget)


def _gains(res) -> dict[str, float | None]:
    out = {}
    for p in res.shadow_prices:
        m = re.search(r"gives (?:at least )?([+-][\d,]+) tasks/h", p.what_it_takes or "")
        out[p.group] = float(m.group(1).replace(",", "")) if m else None
    return out


def test_row_what_if_by_patterns_never_loses_throughput():
    """More of a budget never lowers the optimum: every +10% re-solve of a row by rack patterns gives an answer,
    and none below the answer it starts from."""
    cat, w, r, _, _, _ = _row()
    got = _gains(optimize(w, r, cat, layout="b", racks=RACKS, certify=False))
    assert "power" in got and all(v is not None and v >= 0 for v in got.values()), got
    assert got["power"] > 0  # power binds for this pair (the single rack's answer says so too)


@pytest.mark.slow
def test_row_what_if_by_patterns_beats_the_row_milp(monkeypatch):
    """The row MILP the re-solves used before (kept for rows that do not aggregate into patterns) gives, within the
    same clock, answers that are lower bounds: the pattern search finds at least as much for every budget (measured
    on this pair: the MILP even returned less than the starting answer for cooling_liquid, and nothing for space and
    weight, while proving nothing after 300 s on two racks)."""
    cat, w, r, _, _, _ = _row()
    by_patterns = _gains(optimize(w, r, cat, layout="b", racks=RACKS, certify=False))
    monkeypatch.setattr(optimize_module, "_row_what_if", lambda *a, **k: (False, None, False))
    by_milp = _gains(optimize(w, r, cat, layout="b", racks=RACKS, certify=False))
    assert by_patterns.keys() == by_milp.keys()
    for g, v in by_milp.items():
        if v is not None:
            assert by_patterns[g] >= v - 1, (g, by_patterns, by_milp)


def test_unproven_what_if_says_at_least():
    """A +10% re-solve cut off by its clock gives a lower bound on the gain: the sentence says "at least", and never
    a loss (the answer itself stays within the larger budget). A proven one states its gain as it is."""
    from advisor.optimizer.optimize import what_if_sentence

    base = 10_000.0
    assert what_if_sentence("power", 40_800.0, base, None, False) is None
    low = what_if_sentence("power", 40_800.0, base, base - 50.0, False)
    assert "gives at least +0 tasks/h (+0.0%" in low and "time limit" in low and "4.1 kW per rack" in low
    assert "gives at least +120 tasks/h (+1.2%" in what_if_sentence("space", 42.0, base, base + 120.0, False)
    proven = what_if_sentence("capital", 1e6, base, base + 120.0, True)
    assert proven.endswith("gives +120 tasks/h (+1.2%)") and "per rack" not in proven and "time limit" not in proven
    assert what_if_sentence("power", 40_800.0, base, base - 50.0, True).endswith("gives -50 tasks/h (-0.5%)")


@pytest.mark.slow
def test_unproven_row_what_if_says_at_least(monkeypatch):
    """The same through a row's re-solves (the rack-pattern path hands its proof status on)."""
    cat, w, r, res, _, _ = _row()
    base = res.predicted_tasks_per_hour
    monkeypatch.setattr(optimize_module, "_row_what_if", lambda *a, **k: (True, base + 120.0, False))
    out = optimize(w, r, cat, layout="b", racks=RACKS, certify=False)
    assert out.shadow_prices and all("at least +120 tasks/h" in (p.what_it_takes or "") for p in out.shadow_prices)


def test_loss_cases_keep_to_the_clock():
    cat, w, r, res, _, _ = _row()
    from advisor.optimizer.operating import with_operating

    res = with_operating(res, w, r, cat, OptimizerSettings().assumptions)
    full = failures(res, w, r, cat, OptimizerSettings().assumptions)
    out = failures(res, w, r, cat, OptimizerSettings().assumptions, expired=lambda: True)
    gpu_full = next(c for c in full.cases if c.loss == "one GPU server")
    gpu = next(c for c in out.cases if c.loss == "one GPU server")
    assert gpu_full.sustainable_tasks_per_hour is not None
    assert gpu.sustainable_tasks_per_hour is None and "time limit" in gpu.detail
    ticks = iter([False, True])  # one kind evaluated, then the clock runs out
    part = failures(res, w, r, cat, OptimizerSettings().assumptions, expired=lambda: next(ticks, True))
    kinds = len({(g.chassis, g.cpu, g.gpu, g.gpus_per_server) for g in
                 Configuration.model_validate(res.configuration).servers if g.gpu})
    one = next(c for c in part.cases if c.loss == "one GPU server")
    if kinds > 1:
        assert f"the 1 of {kinds} kinds evaluated before the time limit" in one.detail
    assert one.sustainable_tasks_per_hour is not None
