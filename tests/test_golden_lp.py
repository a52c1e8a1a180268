"""Golden LP files of the formulation's variants (tests/test_optimizer.py keeps the default hybrid one): layout A,
two racks, a capital budget, a brownfield row (owned servers, removal at a salvage value), tail-wait capacity curves and the TCO objective's dispatch. A change to any of them
shows up as a diff to review; `UPDATE_GOLDEN=1 python -m pytest tests/test_golden_lp.py` rewrites them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from advisor.catalog import load_catalog
from advisor.optimizer.formulation import FixedServers, Problem, build
from advisor.optimizer.objectives import add_tco
from advisor.optimizer.options import enumerate_options
from advisor.optimizer.settings import OptimizerSettings
from advisor.solver.backends import to_pulp
from models.catalog import Catalog
from models.hardware import RackSystem
from models.tco import CostAssumptions
from models.workload import Slo, Workload

MINI = Path(__file__).parent / "data" / "mini"
GOLDEN = Path(__file__).parent / "golden"
LOAD_FRACTION = 0.8
"""The TCO variant's operating point (the evaluator's default planned load)."""


def _with_storage(cat):
    """The mini catalog with local NVMe on every chassis and a rack-scale system of two gpu4 trays, and its agent
    workload with sandbox disk and an io stage per class."""
    chassis = [c.model_copy(update={"local_nvme_gb": 3840.0 * 2, "local_nvme_mbps": 4770.0 * 2}) for c in cat.chassis]
    tray = next(c for c in chassis if c.id == "gpu4").model_copy(
        update={"id": "tray", "height_u": 1, "gpu_counts": [4], "part_of_system": "sys2"})
    system = RackSystem(id="sys2", name="two-tray system", source="test", compute_tray="tray", compute_trays=2,
                        switch_trays=1, switch_tray_u=1, power_shelves=1, power_shelf_u=1, height_u=4,
                        shared_power_w=500.0, weight_kg=100.0, scale_up_domain_gpus=8)
    cat = Catalog.build(cpus=list(cat.cpus), gpus=list(cat.gpus), chassis=[*chassis, tray], racks=list(cat.racks),
                        served_models=list(cat.served_models), systems=[system])
    data = load_catalog(MINI).workloads["agent"].model_dump()
    for c in data["classes"]:
        c["sandbox_disk_gb"] = 10.0
        c["stages"].append({"name": "io", "resource": "io", "count": 3, "read_mb": 400.0, "write_mb": 100.0})
    return cat, Workload.model_validate(data)


def _problem(layout: str = "hybrid", racks: int = 1, **kw) -> Problem:
    cat = load_catalog(MINI)
    wl = cat.workloads["agent"]
    if kw.pop("storage", False):
        cat, wl = _with_storage(cat)
    if kw.pop("tail_wait", False):
        wl = wl.model_copy(update={"slo": Slo(tool_wait_p95_seconds=0.5)})
    s = OptimizerSettings()
    opts, servings = enumerate_options(cat, wl, cat.racks["r15"], layout, s.layout_a_orchestration_cores_per_gpu,
                                       s.assumptions.host_os_reserved_memory_gb,
                                       s.assumptions.tensor_parallel_domain_gpus)
    partition = [["edit", "test"]] if layout != "hybrid" else [["edit"], ["test"]]
    return Problem(wl, cat.racks["r15"], racks, opts, servings, partition, **kw)


def _tco_model():
    p = _problem()
    b = build(p)
    add_tco(b.model, b, p, CostAssumptions(), LOAD_FRACTION, None)
    return b.model


VARIANTS = {
    "layout_a": lambda: build(_problem("a")).model,
    "two_racks": lambda: build(_problem(racks=2)).model,
    "capital": lambda: build(_problem(capital_budget_usd=400_000.0)).model,
    "tail_wait": lambda: build(_problem("b", tail_wait=True, slo_curves=True)).model,
    "tco": _tco_model,
    "storage_system": lambda: build(_problem(storage=True)).model,
    "brownfield": lambda: build(_problem(racks=2, capital_budget_usd=400_000.0, fixed=FixedServers(
        counts={(0, "gpu4|cpu-a|gpu-x|4"): 1, (1, "cpu1u|cpu-b|-|0"): 3}, allow_removal=True,
        salvage_fraction=0.25))).model,
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_golden_variant(variant, tmp_path):
    model = VARIANTS[variant]()
    out = tmp_path / f"{variant}.lp"
    to_pulp(model)[0].writeLP(str(out))
    text = out.read_text()
    golden = GOLDEN / f"mini_{variant}.lp"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        golden.write_text(text)
    assert golden.exists(), f"no golden file for {variant}; run with UPDATE_GOLDEN=1"
    assert text == golden.read_text(), (
        f"the {variant} formulation changed: review the diff and regenerate with "
        "UPDATE_GOLDEN=1 python -m pytest tests/test_golden_lp.py")


def test_variants_hold_their_distinctive_groups():
    """Each variant really exercises what it is named for (a golden file of the wrong model would pass)."""
    groups = {v: {c.group.split(":")[0] for c in f().constraints} for v, f in VARIANTS.items()}
    assert "capital" in groups["capital"] and "capital" not in groups["two_racks"]
    assert "slo" in groups["tail_wait"]
    assert {"energy_dispatch", "operating_rate"} <= groups["tco"]
    assert {"sandbox_disk", "io_bandwidth", "sandbox_memory"} <= groups["storage_system"]
    assert "sandbox_disk" not in groups["capital"]
    assert "fixed_servers" in groups["brownfield"] and "fixed_servers" not in groups["capital"]
    p = _problem(storage=True)
    assert any(o.profile.chassis.id == "sys2" for o in p.options), "the system is a candidate"
    assert not any(o.profile.chassis.id == "tray" for o in p.options), "its tray alone is not"
    two = VARIANTS["two_racks"]()
    assert {c.name for c in two.constraints} >= {"power_r0", "power_r1", "space_r1"}
    a = build(_problem("a"))
    assert not a.u, "layout A fixes orchestration cores: no u variables"
