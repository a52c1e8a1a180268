"""Catalog content (built-in) and catalog loading errors (broken copies of the mini fixture catalog)."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.catalog import load_catalog
from advisor.errors import InputError
from models.workload import SHARE_TOLERANCE

TABLE_NAMES = ["cpus", "gpus", "chassis", "racks", "served_models", "workloads", "switches"]


# ----------------------------------------------------------------------------------------------------------------
# Built-in catalog
# ----------------------------------------------------------------------------------------------------------------


def test_builtin_catalog_loads_every_table(builtin):
    for name in TABLE_NAMES:
        assert len(getattr(builtin, name)) > 0, name
    # The two example configurations and the DGX checks below need these ids.
    for table, key in [("chassis", "dgx-h100"), ("chassis", "hgx-b200-10u"), ("gpus", "h100-sxm"), ("gpus", "b200"),
                       ("cpus", "xeon-8480c"), ("cpus", "xeon-8570"), ("racks", "air-40kw"),
                       ("workloads", "swe-agent"), ("workloads", "rl-rollout")]:
        assert key in getattr(builtin, table), (table, key)


@pytest.mark.parametrize("table", TABLE_NAMES)
def test_every_builtin_entry_has_a_source(builtin, table):
    for e in getattr(builtin, table):
        assert isinstance(e.source, str) and e.source.strip(), f"{table} {e.id} has no source"


def test_every_calibration_has_a_source(builtin):
    for sm in builtin.served_models:
        for c in sm.calibrations:
            assert c.source.strip(), f"served model {sm.id} calibration for {c.gpu} has no source"


def test_builtin_ids_are_lowercase_dashed(builtin):
    import re

    for table in TABLE_NAMES:
        for e in getattr(builtin, table):
            assert re.fullmatch(r"[a-z0-9][a-z0-9.\-]*", e.id), f"{table} id {e.id!r}"


def test_builtin_physical_sanity(builtin):
    for c in builtin.cpus:
        assert c.tdp_w > 0 and c.cores > 0 and c.per_core_perf > 0, c.id
        assert c.threads >= c.cores and c.boost_ghz >= c.base_ghz, c.id
    for g in builtin.gpus:
        assert g.tdp_w > 0, g.id
        assert g.memory_gb > 0 and g.memory_bandwidth_tbps > 0, g.id
        assert g.bf16_tflops > 0 and g.fp8_tflops >= g.bf16_tflops, g.id
    for ch in builtin.chassis:
        assert ch.base_power_w > 0 and ch.memory_gb > 0 and ch.height_u > 0, ch.id
    for r in builtin.racks:
        assert r.power_kw > 0, r.id
        assert 0 <= r.reserved_u < r.height_u, r.id
        assert 0 <= r.reserved_power_w < r.power_kw * 1000, r.id
        # The rack can remove the heat it can power (air plus liquid), or the budget is not physical.
        assert (r.air_cooling_kw + r.liquid_cooling_kw) > 0, r.id


def test_builtin_racks_electrical_network_weight(builtin):
    """Every built-in rack has a sourced feed model whose surviving, derated capacity covers its provisioned power
    (so power_kw stays the documented budget), a weight rating, and a switch that takes every chassis' ports."""
    from models.rack_physics import downlinks

    for r in builtin.racks:
        assert r.redundancy == "2N" and r.feed_budget_w is not None, r.id
        assert r.continuous_load_factor == 0.8, r.id  # NEC 210.20(A)
        assert r.feed_budget_w >= r.power_kw * 1000, (r.id, r.feed_budget_w)
        assert "NEC 210.20(A)" in r.source, r.id
        assert r.max_weight_kg is not None and r.max_weight_kg > r.reserved_weight_kg, r.id
        if r.tor_switch is not None:
            sw = builtin.switches[r.tor_switch]
            # per host: a rack-scale system's trays are cabled one by one
            assert all(-(-ch.network_ports // ch.compute_trays) <= downlinks(r, sw) for ch in builtin.chassis), r.id


def test_builtin_chassis_psus_carry_their_nameplate(builtin):
    """With the PSUs a chassis needs (N of N+M), it can draw its largest nameplate figure."""
    for ch in builtin.chassis:
        if ch.psus is None:
            continue
        top_gpu = max((g.tdp_w for g in builtin.gpus if ch.accepts_gpu(g)), default=0.0)
        top_cpu = max(c.tdp_w for c in builtin.cpus if ch.accepts_cpu(c))
        plate = ch.base_power_w + ch.cpu_sockets * top_cpu + max(ch.gpu_counts or [0]) * top_gpu
        assert (ch.psus_required or ch.psus) * ch.psu_w >= plate, (ch.id, plate)


def test_chassis_default_cpu_is_accepted(builtin):
    for ch in builtin.chassis:
        if ch.default_cpu is None:
            continue
        assert ch.default_cpu in builtin.cpus, ch.id
        cpu = builtin.cpus[ch.default_cpu]
        assert ch.accepts_cpu(cpu), f"{ch.id} does not accept its default CPU {cpu.id} ({cpu.platform})"


def test_every_chassis_accepts_some_catalog_cpu(builtin):
    for ch in builtin.chassis:
        assert any(ch.accepts_cpu(c) for c in builtin.cpus), ch.id


def test_every_gpu_chassis_accepts_some_catalog_gpu(builtin):
    gpu_chassis = [ch for ch in builtin.chassis if ch.role == "gpu"]
    assert gpu_chassis
    for ch in gpu_chassis:
        assert any(ch.accepts_gpu(g) for g in builtin.gpus), ch.id


def test_cpu_chassis_accept_no_gpu(builtin):
    for ch in builtin.chassis:
        if ch.role == "cpu":
            assert not any(ch.accepts_gpu(g) for g in builtin.gpus), ch.id


def system_power_w(catalog, chassis_id: str, cpu_id: str, gpu_id: str, gpus: int) -> float:
    ch = catalog.chassis[chassis_id]
    return ch.base_power_w + ch.cpu_sockets * catalog.cpus[cpu_id].tdp_w + gpus * catalog.gpus[gpu_id].tdp_w


def test_dgx_h100_system_power_is_documented_10200_w(builtin):
    # NVIDIA DGX H100 user guide: 10.2 kW maximum system power (2x Xeon 8480C, 8x H100 SXM5).
    ch = builtin.chassis["dgx-h100"]
    assert ch.default_cpu == "xeon-8480c" and ch.cpu_sockets == 2 and 8 in ch.gpu_counts
    assert ch.accepts_gpu(builtin.gpus["h100-sxm"])
    assert system_power_w(builtin, "dgx-h100", "xeon-8480c", "h100-sxm", 8) == pytest.approx(10_200, abs=0.5)


def test_dgx_b200_system_power_is_documented_14300_w(builtin):
    # NVIDIA DGX B200 user guide: 14.3 kW maximum system power (2x Xeon 8570, 8x B200).
    ch = builtin.chassis["hgx-b200-10u"]
    assert ch.default_cpu == "xeon-8570" and ch.cpu_sockets == 2 and 8 in ch.gpu_counts
    assert ch.accepts_gpu(builtin.gpus["b200"])
    assert system_power_w(builtin, "hgx-b200-10u", "xeon-8570", "b200", 8) == pytest.approx(14_300, abs=0.5)


def test_server_profile_power_matches_hand_sum_for_dgx(builtin):
    # The model's per-server power is the same base + sockets x CPU TDP + GPUs x GPU TDP.
    from models.performance import gpu_serving
    from models.server import server_profile

    w = builtin.workloads["swe-agent"]
    ch, cpu, gpu = builtin.chassis["dgx-h100"], builtin.cpus["xeon-8480c"], builtin.gpus["h100-sxm"]
    prof = server_profile(ch, cpu, gpu, 8, 2, w, gpu_serving(w, gpu), 32.0)
    assert prof.power_w == pytest.approx(10_200, abs=0.5)
    assert prof.air_heat_w + prof.liquid_heat_w == pytest.approx(prof.power_w)


@pytest.mark.parametrize("wid", ["batch-generation", "model-eval", "rl-rollout", "swe-agent", "interactive-rl-mix"])
def test_workload_class_shares_sum_to_one(builtin, wid):
    w = builtin.workloads[wid]
    assert sum(c.share for c in w.classes) == pytest.approx(1.0, abs=SHARE_TOLERANCE)
    assert all(0 < c.share <= 1 for c in w.classes)


def test_every_workload_is_checked(builtin):
    assert {w.id for w in builtin.workloads} == {"batch-generation", "model-eval", "rl-rollout", "swe-agent",
                                                 "interactive-rl-mix"}


def test_every_calibration_names_a_catalog_gpu(builtin):
    models = list(builtin.served_models) + [w.served_model for w in builtin.workloads]
    n = 0
    for sm in models:
        for c in sm.calibrations:
            assert c.gpu in builtin.gpus, f"served model {sm.id} calibration names unknown GPU {c.gpu!r}"
            n += 1
    assert n > 0


def test_workloads_serve_catalog_models(builtin):
    for w in builtin.workloads:
        assert w.served_model.id in builtin.served_models, w.id
        # the workload carries the catalog's entry, not a stale copy
        assert w.served_model == builtin.served_models[w.served_model.id], w.id


# ----------------------------------------------------------------------------------------------------------------
# Broken catalogs: InputError naming the file, the entry and the field
# ----------------------------------------------------------------------------------------------------------------


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) >= 1, f"fixture changed: {old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def load_error(folder: Path) -> str:
    with pytest.raises(InputError) as ei:
        load_catalog(folder)
    msg = str(ei.value)
    assert "Traceback" not in msg
    return msg


def test_mini_catalog_loads(mini_catalog):
    assert len(mini_catalog.cpus) == 2 and len(mini_catalog.gpus) == 2 and len(mini_catalog.chassis) == 3
    assert list(mini_catalog.workloads.entries) == ["agent"]


def test_negative_tdp_names_file_entry_field(mini_copy):
    edit(mini_copy / "cpus.yaml", "tdp_w: 400", "tdp_w: -400")  # cpu-b, the second entry
    msg = load_error(mini_copy)
    assert "cpus.yaml" in msg
    assert "cpu-b" in msg and "entries[1]" in msg
    assert "tdp_w" in msg
    assert "greater than 0" in msg


def test_unknown_previous_generation_names_the_entry(mini_copy):
    edit(mini_copy / "gpus.yaml", "price_usd: 25000", "price_usd: 25000, previous_generation: gpu-old")  # gpu-x
    msg = load_error(mini_copy)
    assert "gpus.yaml" in msg and "gpu-x" in msg and "previous_generation" in msg and "gpu-old" in msg


def test_builtin_previous_generations_are_catalog_gpus():
    from advisor.catalog import builtin_catalog

    cat = builtin_catalog()
    prev = {g.id: g.previous_generation for g in cat.gpus if g.previous_generation}
    assert prev and all(p in cat.gpus and p != g for g, p in prev.items())


def test_unknown_field_names_file_entry_field(mini_copy):
    edit(mini_copy / "gpus.yaml", "price_usd: 25000", "price_usd: 25000, tdp_watts: 700")  # gpu-x
    msg = load_error(mini_copy)
    assert "gpus.yaml" in msg
    assert "gpu-x" in msg and "entries[0]" in msg
    assert "tdp_watts" in msg and "unknown field" in msg


def test_unknown_field_in_chassis(mini_copy):
    edit(mini_copy / "chassis.yaml", "base_power_w: 300,", "base_power_w: 300, gpu_count: 0,")  # cpu1u
    msg = load_error(mini_copy)
    assert "chassis.yaml" in msg and "cpu1u" in msg and "gpu_count" in msg and "unknown field" in msg


def test_shares_not_summing_to_one_names_file_workload_and_field(mini_copy):
    edit(mini_copy / "workloads" / "agent.yaml", "share: 0.4", "share: 0.3")  # 0.6 + 0.3 = 0.9
    msg = load_error(mini_copy)
    assert "agent.yaml" in msg
    assert "share" in msg
    assert "0.9" in msg


def test_unknown_served_model_names_file_field_and_suggests(mini_copy):
    edit(mini_copy / "workloads" / "agent.yaml", "served_model: m70", "served_model: m71")
    msg = load_error(mini_copy)
    assert "agent.yaml" in msg
    assert "served_model" in msg
    assert "'m71'" in msg
    assert "m70" in msg.split("'m71'", 1)[1]  # the suggestion comes after the bad id


def test_duplicate_id_names_file_entry_field(mini_copy):
    edit(mini_copy / "cpus.yaml", "id: cpu-b", "id: cpu-a")
    msg = load_error(mini_copy)
    assert "cpu-a" in msg and "duplicate" in msg and "id" in msg
    # A user with a folder of catalog files must be told which file holds the duplicate.
    assert "cpus.yaml" in msg


def test_unknown_calibration_gpu_names_file_entry_field(mini_copy):
    edit(mini_copy / "served_models.yaml", "gpu: gpu-x", "gpu: gpu-z")
    msg = load_error(mini_copy)
    assert "served_models.yaml" in msg and "m70" in msg and "calibrations[0].gpu" in msg and "gpu-z" in msg


def test_unknown_default_cpu_names_file_entry_field(mini_copy):
    edit(mini_copy / "chassis.yaml", "default_cpu: cpu-a", "default_cpu: cpu-c")  # first occurrence: gpu8
    msg = load_error(mini_copy)
    assert "chassis.yaml" in msg and "gpu8" in msg and "default_cpu" in msg and "cpu-c" in msg


def test_missing_table_file_names_the_file(mini_copy):
    (mini_copy / "racks.yaml").unlink()
    msg = load_error(mini_copy)
    assert "racks.yaml" in msg and "no such file" in msg


def test_invalid_yaml_names_the_file(mini_copy):
    (mini_copy / "gpus.yaml").write_text("entries: [ {id: gpu-x, \n")
    msg = load_error(mini_copy)
    assert "gpus.yaml" in msg and "YAML" in msg
