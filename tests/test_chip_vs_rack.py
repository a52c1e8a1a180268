"""Chip vs rack: the rack ratio is efficiency x scheduling exactly, the README's built-in example holds, and the report
compares the answer's SKUs against the alternatives that matter (spec-sheet CPU, previous-generation GPU)."""

from __future__ import annotations

import math

import pytest

from advisor.catalog import builtin_catalog, load_workload
from advisor.optimizer.compare import SideResult, chip_vs_rack, ratio_factors
from advisor.optimizer.optimize import optimize
from advisor.report.html import cpu_pair, gpu_pair


@pytest.fixture(scope="module")
def cat():
    return builtin_catalog()


def _side(sku, per_chip, tph, units):
    return SideResult(sku=sku, per_chip=per_chip, throughput_tasks_per_hour=tph, units_in_row=units, servers=1,
                      power_w=1.0, bottleneck="gpu", binding_constraints=[])


@pytest.mark.parametrize("a,b", [((167.04, 4322.3, 6), (49.6, 4492.1, 12)), ((1.0, 10.0, 3), (1.2, 21.0, 5)),
                                 ((96.6, 3089.9, 32), (209.9, 3359.0, 16))])
def test_factors_multiply_to_the_rack_ratio(a, b):
    f = ratio_factors(_side("a", *a), _side("b", *b))
    rack = b[1] / a[1]
    assert f.efficiency * f.scheduling == pytest.approx(rack, rel=1e-12)
    assert f.chip * f.units == pytest.approx(f.efficiency, rel=1e-12)
    assert f.chip == pytest.approx(b[0] / a[0]) and f.units == pytest.approx(b[2] / a[2])


def test_no_factors_without_capacity():
    assert ratio_factors(_side("a", 1.0, 10.0, 0), _side("b", 1.0, 10.0, 2)) is None


def test_readme_example_rack_ratio_far_above_chip_ratio(cat):
    """The README's example: EPYC 9375F is 0.30x EPYC 9965 per socket but >= 1x per rack (rl-rollout, air-40kw)."""
    w, r = load_workload("rl-rollout", cat), cat.racks["air-40kw"]
    c = chip_vs_rack("cpu", "epyc-9965", "epyc-9375f", w, r, cat, layout="hybrid", time_limit_s=30)
    assert c.chip_ratio == pytest.approx(49.6 / 167.04)
    assert c.rack_ratio is not None and c.rack_ratio >= 1.0 and c.rack_ratio > 3 * c.chip_ratio
    f = c.factors
    assert f.efficiency * f.scheduling == pytest.approx(c.rack_ratio, rel=1e-12)
    assert (c.a.units_in_row, c.b.units_in_row) == (6, 12)  # the socket counts the README quotes
    assert f"{f.efficiency:.2f} x {f.scheduling:.2f} = {c.rack_ratio:.2f}" in c.explanation


def test_report_pairs(cat):
    w, r = load_workload("rl-rollout", cat), cat.racks["air-40kw"]
    res = optimize(w, r, cat, layout="hybrid", explain=False, time_limit_s=30)
    p = cpu_pair(res, cat)
    assert p is not None and p.kind == "cpu" and p.other != p.chosen
    boards = [cat.chassis[s.chassis] for s in res.servers if s.cpu == p.chosen]
    eligible = [c for c in cat.cpus if c.id != p.chosen and any(b.accepts_cpu(c) for b in boards)]
    best = max(c.cores * c.per_core_perf for c in eligible)
    assert math.isclose(cat.cpus[p.other].cores * cat.cpus[p.other].per_core_perf, best)
    g = gpu_pair(res, w, r, cat)
    assert g is not None and g.kind == "gpu"
    prev = cat.gpus[g.chosen].previous_generation
    assert prev is not None, g  # the answer's GPU (B200 here) has its previous generation in the catalog
    assert g.other == prev and "generation" in g.why
