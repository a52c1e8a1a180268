"""Electrical feeds, top-of-rack switches and weight (issue 16 items 4-6, 8), held to sourced figures.

Sources (../shared/reference/physical-facts.md): DGX H100 8U, 10.2 kW, 130.45 kg, 6 PSUs 4+2; DGX B200 10U,
14.3 kW, 142.4 kg, 6 PSUs 5+1; NEC 210.20(A) 80% continuous load; 208 V 3-phase 60 A = 21.6 kVA (HP PDU manual);
DGX SuperPOD H100: 4 DGX H100 per 40.8 kW rack.
"""

from __future__ import annotations

import math

import pytest

from advisor.catalog import builtin_catalog, load_rack
from advisor.errors import InputError
from advisor.optimizer.optimize import optimize
from models.config import Configuration
from models.hardware import Chassis, Rack
from models.pipeline import evaluate

DGX_H100 = dict(chassis="dgx-h100", cpu="xeon-8480c", gpu="h100-sxm", gpus_per_server=8)
DGX_B200 = dict(chassis="hgx-b200-10u", cpu="xeon-8570", gpu="b200", gpus_per_server=8)


@pytest.fixture(scope="module")
def cat():
    return builtin_catalog()


def _rack(**kw) -> Rack:
    base = dict(id="t", name="test rack", source="test", power_kw=40.8, air_cooling_kw=40.8, liquid_cooling_kw=0.0,
                height_u=42, reserved_u=0, reserved_power_w=0.0)
    base.update(kw)
    return Rack.model_validate(base)


def _count(res, chassis: str) -> int:
    return sum(s.count for s in res.servers if s.chassis == chassis)


def _ev(cat, rack, server, count, workload="rl-rollout"):
    cfg = Configuration.model_validate({"servers": [{**server, "count": count}]})
    return evaluate(cfg, cat.workloads[workload], rack, cat)


# ------------------------------------------------------------------------------------------- sourced server fills


@pytest.mark.parametrize("power_kw,fit", [(40.8, 4), (20.4, 2)])
def test_dgx_h100_fill_a_rack_provisioned_at_10_2_kw_each(cat, power_kw, fit):
    rack = _rack(power_kw=power_kw, air_cooling_kw=power_kw)
    assert _ev(cat, rack, DGX_H100, fit).within_budgets
    over = _ev(cat, rack, DGX_H100, fit + 1)
    assert not over.within_budgets and any("power" in e for e in over.racks[0].exceeded)
    res = optimize(cat.workloads["rl-rollout"], rack, cat, layout="a", gpu_ids=["h100-sxm"], explain=False)
    assert _count(res, "dgx-h100") == fit, [(s.chassis, s.count) for s in res.servers]
    assert res.evaluation.racks[0].power_w == pytest.approx(fit * 10_200)
    assert res.evaluation.racks[0].space_u == fit * 8


def test_builtin_air_40kw_holds_four_dgx_h100_through_a_side_loss(cat):
    rack = cat.racks["air-40kw"]
    ev = _ev(cat, rack, DGX_H100, 4)
    assert ev.within_budgets
    ru = ev.racks[0]
    assert ru.power_w == pytest.approx(40_800) and ru.space_u == 32 + rack.reserved_u
    assert ru.weight_kg == pytest.approx(4 * 130.45 + rack.reserved_weight_kg)
    # 2N, 3 feeds per side of 208 V 3-phase 60 A: each 21.6 kVA x 0.8 = 17.3 kW; a side carries 40.8 kW
    assert [f.feed for f in ru.feeds] == ["A1", "A2", "A3", "B1", "B2", "B3"]
    for f in ru.feeds:
        assert f.rating_w == pytest.approx(math.sqrt(3) * 208 * 60 * 0.8)
        assert f.normal_w == pytest.approx(40_800 / 6) and f.one_lost_w == pytest.approx(40_800 / 3)
        assert not f.exceeded
    # the DGX H100 keeps 3 of its 6 PSUs on one side: 9.9 kW < 10.2 kW, reduced performance (user guide)
    assert any("dgx-h100" in w and "3 of 6 PSUs" in w for w in ev.warnings)


def test_two_dgx_b200_fit_40_8_kw_air_not_three(cat):
    rack = cat.racks["air-40kw"]
    assert _ev(cat, rack, DGX_B200, 2).within_budgets
    three = _ev(cat, rack, DGX_B200, 3)
    assert not three.within_budgets
    assert any(e.startswith("power:") for e in three.racks[0].exceeded), three.racks[0].exceeded
    for layout in ("a", "b"):
        res = optimize(cat.workloads["rl-rollout"], rack, cat, layout=layout, gpu_ids=["b200"], explain=False)
        b200 = [s for s in res.servers if s.gpu == "b200"]
        assert sum(s.count for s in b200) == 2, (layout, [(s.chassis, s.count) for s in res.servers])
        assert all(s.space_u_each == 10 and s.power_w_each >= 14_000 for s in b200)


def test_no_eight_gpu_b200_server_in_8u(cat):
    """The generic 8U HGX chassis gave an 8x B200 server 12.5 kW and 8U with no source (issue 16)."""
    for ch in cat.chassis:
        if ch.accepts_gpu(cat.gpus["b200"]) and 8 in ch.gpu_counts and ch.cooling == "air":
            assert ch.height_u >= 10 and ch.base_power_w >= 5_600, ch.id


def test_sourced_weights(cat):
    assert cat.chassis["dgx-h100"].weight_kg == 130.45
    assert cat.chassis["hgx-b200-10u"].weight_kg == 142.4
    for ch in cat.chassis:
        assert ch.weight_kg > 0
        assert "weight_kg" in ch.source or "weight" in (ch.notes or "").lower() or "kg" in ch.source, ch.id
    for r in cat.racks:
        assert r.max_weight_kg is not None, r.id
    for sw in cat.switches:
        assert sw.source.strip(), sw.id
        assert "assumption: power_w" in (sw.notes or ""), sw.id  # no primary source for switch power yet


# ------------------------------------------------------------------------------------------------ electrical


def test_feed_rating_and_redundancy_arithmetic():
    r = _rack(redundancy="2N", feeds=4, feed_voltage_v=400, feed_current_a=32, feed_phases=3)
    assert r.feed_rating_w == pytest.approx(math.sqrt(3) * 400 * 32)  # 22.2 kVA
    assert r.feed_budget_w == pytest.approx(2 * math.sqrt(3) * 400 * 32 * 0.8)
    assert _rack(redundancy="N+1", feeds=3, feed_kw=10).feed_budget_w == pytest.approx(2 * 10_000 * 0.8)
    assert _rack(redundancy="none", feeds=2, feed_kw=10).feed_budget_w == pytest.approx(2 * 10_000 * 0.8)
    assert _rack(feeds=1, feed_kw=10, feed_phases=1, continuous_load_factor=1.0).feed_budget_w == 10_000
    assert _rack().feed_budget_w is None


@pytest.mark.parametrize("kw,words", [
    (dict(redundancy="2N", feeds=3, feed_kw=10), ["2N", "even", "3"]),
    (dict(redundancy="N+1", feeds=1, feed_kw=10), ["N+1", "2 feeds"]),
    (dict(redundancy="2N", feeds=2), ["feed rating"]),
    (dict(feed_kw=10, feed_voltage_v=400, feed_current_a=32), ["feed_kw", "not both"]),
    (dict(uplinks_per_switch=4), ["tor_switch"]),
])
def test_bad_electrical_input_names_the_field(kw, words):
    with pytest.raises(ValueError) as e:
        _rack(**kw)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


TWO_N_SMALL = dict(redundancy="2N", feeds=2, feed_voltage_v=400, feed_current_a=32, feed_phases=3)
"""2N with one 400 V 3-phase 32 A feed per side: 22.2 kVA x 0.8 = 17.7 kW survives a side loss."""


def test_2n_feed_binds_and_infeasibility_names_it(cat):
    rack = _rack(**TWO_N_SMALL)
    wl = cat.workloads["rl-rollout"]
    res = optimize(wl, rack, cat, layout="a", gpu_ids=["h100-sxm"], explain=True)
    assert _count(res, "dgx-h100") == 1  # 40.8 kW provisioned, but one side carries only 17.7 kW
    assert "power_feed" in res.binding_constraints and "power" not in res.binding_constraints, res.binding_constraints
    assert "power_feed" in res.message
    assert any(sp.group == "power_feed" and sp.unit == "kW" for sp in res.shadow_prices)
    ev = _ev(cat, rack, DGX_H100, 2)
    ru = ev.racks[0]
    assert [f.feed for f in ru.feeds] == ["A1", "B1"]
    assert ru.feeds[0].normal_w == pytest.approx(10_200) and ru.feeds[0].one_lost_w == pytest.approx(20_400)
    assert ru.feeds[0].exceeded and any(e.startswith("power_feed:") and "2N" in e for e in ru.exceeded)
    # asking for what two DGX H100 deliver is infeasible, and the diagnosis names the feeds
    need = 1.5 * res.throughput_tasks_per_hour
    bad = optimize(wl, rack, cat, layout="a", gpu_ids=["h100-sxm"], objective="min_power",
                   required_tasks_per_hour=need, explain=False)
    assert bad.status == "infeasible"
    assert bad.infeasibility[0].group == "power_feed", [d.group for d in bad.infeasibility]
    assert "power_feed" in bad.message and "2N" in bad.message


def test_weight_binds_and_infeasibility_names_it(cat):
    rack = _rack(max_weight_kg=300.0)  # room for two DGX H100 (260.9 kg), not three
    wl = cat.workloads["rl-rollout"]
    res = optimize(wl, rack, cat, layout="a", gpu_ids=["h100-sxm"], explain=True)
    assert _count(res, "dgx-h100") == 2
    assert "weight" in res.binding_constraints, res.binding_constraints
    assert any(sp.group == "weight" and sp.unit == "kg" for sp in res.shadow_prices)
    assert not _ev(cat, rack, DGX_H100, 3).within_budgets
    bad = optimize(wl, rack, cat, layout="a", gpu_ids=["h100-sxm"], objective="min_power",
                   required_tasks_per_hour=1.2 * res.throughput_tasks_per_hour, explain=False)
    assert bad.status == "infeasible"
    assert bad.infeasibility[0].group == "weight", [d.group for d in bad.infeasibility]
    assert "max_weight_kg" in bad.message


def test_rack_too_weak_for_one_server_names_field_and_numbers(cat):
    rack = _rack(max_weight_kg=100.0)
    res = optimize(cat.workloads["rl-rollout"], rack, cat, layout="a", gpu_ids=["h100-sxm"], explain=False)
    assert res.status == "infeasible" and not res.servers
    assert res.infeasibility[0].group == "weight"
    assert "max_weight_kg" in res.message and "100.00 kg" in res.message and "130.00 kg" in res.message, res.message
    weak = _rack(**{**TWO_N_SMALL, "feed_current_a": 16})  # 11.1 kVA x 0.8 = 8.9 kW < 10.2 kW
    res = optimize(cat.workloads["rl-rollout"], weak, cat, layout="a", gpu_ids=["h100-sxm"], explain=False)
    assert res.status == "infeasible" and res.infeasibility[0].group == "power_feed"
    assert "every candidate server needs more" in res.message and "9,900.00 W" in res.message  # the 4U DLC server
    assert "8,868.10 W = 2N: 1 of 2 feeds x 11,085 W x 0.8" in res.message, res.message


def test_measured_peak_plans_below_nameplate():
    ch = Chassis.model_validate({**builtin_catalog().chassis["dgx-h100"].model_dump(), "id": "dgx-h100-measured",
                                 "measured_peak_fraction": 0.8})
    cat = builtin_catalog()
    from models.catalog import Catalog
    mine = Catalog.build(cpus=cat.cpus, gpus=cat.gpus, chassis=[ch], racks=[], served_models=cat.served_models,
                         workloads=cat.workloads, switches=cat.switches)
    server = {**DGX_H100, "chassis": "dgx-h100-measured"}
    cfg = Configuration.model_validate({"servers": [{**server, "count": 5}]})
    plate = evaluate(cfg, cat.workloads["rl-rollout"], _rack(), mine)
    peak = evaluate(cfg, cat.workloads["rl-rollout"], _rack(power_basis="measured_peak"), mine)
    assert plate.racks[0].power_w == pytest.approx(5 * 10_200) and not plate.within_budgets
    assert peak.racks[0].power_w == pytest.approx(5 * 8_160) and peak.within_budgets  # 40.8 kW


# --------------------------------------------------------------------------------------------------- network


def test_switches_follow_the_ports_and_count_against_budgets(cat):
    rack = _rack(power_kw=60, air_cooling_kw=60, tor_switch="sn5600", uplinks_per_switch=16)  # 48 server ports
    ev = _ev(cat, rack, DGX_H100, 4)  # 4 x 12 ports = 48: one switch
    ru = ev.racks[0]
    assert (ru.switches, ru.network_ports, ru.network_ports_available) == (1, 48, 48)
    assert ru.power_w == pytest.approx(4 * 10_200 + 1_800) and ru.space_u == 4 * 8 + 2
    cfg = Configuration.model_validate({"servers": [{**DGX_H100, "count": 4},
                                                    {"chassis": "cpu-1u-2s", "cpu": "epyc-9965", "count": 1}]})
    ru = evaluate(cfg, cat.workloads["rl-rollout"], rack, cat).racks[0]
    assert ru.switches == 2 and ru.network_ports == 50  # a hybrid layout's CPU node needs ports too
    assert ru.space_u == 4 * 8 + 1 + 2 * 2


def test_optimizer_places_switches_as_integers(cat):
    rack = _rack(power_kw=42.6, air_cooling_kw=42.6, tor_switch="sn5600", uplinks_per_switch=16)
    res = optimize(cat.workloads["rl-rollout"], rack, cat, layout="a", gpu_ids=["h100-sxm"], explain=False)
    # 4 DGX H100 (40.8 kW) + one 1.8 kW switch = 42.6 kW
    assert _count(res, "dgx-h100") == 4 and res.evaluation.racks[0].switches == 1
    less = optimize(cat.workloads["rl-rollout"], rack.model_copy(update={"power_kw": 42.5}), cat, layout="a",
                    gpu_ids=["h100-sxm"], explain=False)
    assert _count(less, "dgx-h100") == 3  # the switch's power counts


def test_switch_with_too_few_ports_for_one_server(cat):
    rack = _rack(tor_switch="sn5600", uplinks_per_switch=60)  # 4 server ports; a DGX H100 has 12
    with pytest.raises(ValueError) as e:
        optimize(cat.workloads["rl-rollout"], rack, cat, layout="a", gpu_ids=["h100-sxm"], explain=False)
    msg = str(e.value)
    assert "dgx-h100" in msg and "12" in msg and "4 server ports" in msg and "uplinks_per_switch" in msg, msg
    with pytest.raises(ValueError, match=r"servers\[0\].*12.*4 server ports"):
        _ev(cat, rack, DGX_H100, 1)
    with pytest.raises(InputError, match=r"uplinks_per_switch: 64 uplinks leave no server ports.*64 ports"):
        load_rack({**rack.model_dump(), "uplinks_per_switch": 64}, cat)
    with pytest.raises(InputError, match=r"tor_switch: unknown switch id 'sn560'"):
        load_rack({**rack.model_dump(), "tor_switch": "sn560"}, cat)


def test_evaluate_json_carries_feeds_weight_and_switches(cat):
    ev = _ev(cat, cat.racks["air-60kw"], DGX_B200, 3)
    data = ev.model_dump(mode="json")["racks"][0]
    for key in ("feeds", "feed_budget_w", "weight_kg", "weight_budget_kg", "switches", "switch_power_w",
                "network_ports", "network_ports_available"):
        assert key in data, key
    assert data["switches"] == 1 and len(data["feeds"]) == 4
    assert {"feed", "normal_w", "one_lost_w", "rating_w", "exceeded"} <= set(data["feeds"][0])


# ------------------------------------------------------------------------------------------------ golden LP

GOLDEN_PHYS = __import__("pathlib").Path(__file__).parent / "golden" / "mini_hybrid_rackphys.lp"


def test_golden_lp_with_feeds_weight_and_switches(tmp_path):
    """The mini golden problem (tests/golden/mini_hybrid.lp) in a rack with 2N feeds, a weight limit and a
    top-of-rack switch: power_feed, weight and network_ports rows and the integer k_r0 appear as documented."""
    import os

    from advisor.catalog import load_catalog
    from advisor.optimizer.formulation import Problem, build
    from advisor.optimizer.options import enumerate_options
    from advisor.optimizer.settings import OptimizerSettings
    from advisor.solver.backends import to_pulp
    from models.rack_physics import rack_switch
    from oracle import MINI

    cat = load_catalog(MINI)
    wl = cat.workloads["agent"]
    rack = cat.racks["r15"].model_copy(update={})
    rack = Rack.model_validate({**rack.model_dump(), "redundancy": "2N", "feeds": 2, "feed_kw": 16.0,
                                "max_weight_kg": 400.0, "reserved_weight_kg": 20.0, "tor_switch": "sw32",
                                "uplinks_per_switch": 8})
    s = OptimizerSettings()
    opts, servings = enumerate_options(cat, wl, rack, "hybrid", s.layout_a_orchestration_cores_per_gpu,
                                       s.assumptions.host_os_reserved_memory_gb,
                                       s.assumptions.tensor_parallel_domain_gpus)
    model = build(Problem(wl, rack, 1, opts, servings, [["edit", "test"]], switch=rack_switch(rack, cat))).model
    groups = {c.group for c in model.constraints}
    assert {"power_feed", "weight", "network_ports"} <= groups
    assert model.vars["k_r0"].integer and model.vars["k_r0"].ub == rack.usable_u // 1  # space alone: 1U switches
    out = tmp_path / "golden.lp"
    to_pulp(model)[0].writeLP(str(out))
    text = out.read_text()
    if os.environ.get("UPDATE_GOLDEN") == "1":
        GOLDEN_PHYS.write_text(text)
    assert GOLDEN_PHYS.exists(), "no golden file; run with UPDATE_GOLDEN=1"
    assert text == GOLDEN_PHYS.read_text(), "the formulation changed: review the diff and regenerate with UPDATE_GOLDEN=1"
