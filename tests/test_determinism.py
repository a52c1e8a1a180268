"""Determinism (issue #8, item 4): the same input gives byte-identical JSON, timings excluded, across repeated runs,
processes (different PYTHONHASHSEED), the batch runner's worker modes, the two solver backends (instances with tied
optima included: twin SKUs, identical racks of a row, equal-cost and equal-throughput server mixes) and the HTTP API.

Small inputs only (the mini fixture catalog, filtered built-in presets), so the module runs in well under a minute.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from advisor.studies.batch import read_rows, run_batch
from advisor.catalog import builtin_catalog, load_catalog
from advisor.optimizer.compare import compare_layouts
from advisor.optimizer.optimize import optimize
from advisor.studies.scenarios import scenarios_from_data
from advisor.optimizer.settings import OptimizerSettings
from models.catalog import Catalog
from models.workload import Slo
from oracle import random_instance
from tiers import tiered

MINI = Path(__file__).parent / "data" / "mini"

# Keys left out of an OptimizeResult (wherever one appears: alone, or in a comparison's `results`) before comparing.
# Everything else (configuration, every figure, constraints, evaluation, TCO, messages, warnings, status) must match.
VOLATILE = {
    "seconds",  # wall-clock time of the optimization
}
BACKEND = VOLATILE | {
    "solver",  # the backend's name: what the cross-backend comparison varies
    "gap",  # the backend's own proof: CBC and SCIP stop with different bounds on the same answer (e.g. a row of
    #         racks: 4.5e-9 against 1.0e-9), and the gap is measured against the bound
    "bound_tasks_per_hour",  # that bound itself (the status, which says whether the answer meets it, must match)
}
# Batch result columns left out: when and where the solve ran, and how long it took.
BATCH_VOLATILE = {"solve_seconds", "started", "finished", "worker"}


def _strip(obj, exclude: set[str]):
    if isinstance(obj, dict):
        is_result = {"partition", "solver", "servers"} <= obj.keys()
        return {k: _strip(v, exclude) for k, v in obj.items() if not (is_result and k in exclude)}
    if isinstance(obj, list):
        return [_strip(v, exclude) for v in obj]
    return obj


def canonical(result, exclude: set[str] = VOLATILE) -> str:
    """A result as canonical JSON: the model's own JSON (model_dump_json, as the CLI and the API emit it, so an inf
    is null in all three), parsed, the excluded keys removed, dumped with sorted keys and fixed separators."""
    data = json.loads(result if isinstance(result, (str, bytes)) else result.model_dump_json())
    return json.dumps(_strip(data, exclude), sort_keys=True, separators=(",", ":"), allow_nan=False)


def _first_difference(a: str, b: str) -> str:
    da, db = json.loads(a), json.loads(b)

    def walk(x, y, path):
        if type(x) is not type(y):
            return f"{path}: {x!r} != {y!r}"
        if isinstance(x, dict):
            for k in sorted(set(x) | set(y)):
                if k not in x or k not in y:
                    return f"{path}.{k}: only on one side"
                d = walk(x[k], y[k], f"{path}.{k}")
                if d:
                    return d
        elif isinstance(x, list):
            if len(x) != len(y):
                return f"{path}: {len(x)} against {len(y)} entries"
            for i, (u, v) in enumerate(zip(x, y)):
                d = walk(u, v, f"{path}[{i}]")
                if d:
                    return d
        elif x != y:
            return f"{path}: {x!r} != {y!r}"
        return ""

    return walk(da, db, "") or "equal"


def assert_same(a: str, b: str, what: str = "") -> None:
    assert a == b, f"{what}: first difference at {_first_difference(a, b)}"


# ------------------------------------------------------------------------------------------------------- inputs


@pytest.fixture(scope="module")
def mini():
    return load_catalog(MINI)


def _twins(cat: Catalog) -> Catalog:
    """The mini catalog plus an exact copy of CPU cpu-a and of GPU gpu-y under other ids (gpu-y, uncalibrated, is
    served by the roofline, so its copy serves the model identically; gpu-x's calibration names its id)."""
    cpus = list(cat.cpus) + [cat.cpus["cpu-a"].model_copy(update={"id": "cpu-a2", "name": "A twin"})]
    gpus = list(cat.gpus) + [cat.gpus["gpu-y"].model_copy(update={"id": "gpu-y0", "name": "Y twin"})]
    return Catalog.build(cpus=cpus, gpus=gpus, chassis=list(cat.chassis), racks=list(cat.racks),
                         served_models=list(cat.served_models), workloads=list(cat.workloads))


def _workload(cat: Catalog, kind: str):
    w = cat.workloads["agent"]
    if kind == "no_memory":
        return w.model_copy(update={"classes": [c.model_copy(update={"sandbox_memory_gb": 0.0}) for c in w.classes]})
    if kind == "big_memory":  # sandbox memory binds: the SKU-choice model (one CPU SKU per queue, one GPU SKU)
        return w.model_copy(update={"classes": [c.model_copy(update={"sandbox_memory_gb": 20 * c.sandbox_memory_gb})
                                                for c in w.classes]})
    if kind == "slo":  # tail-wait target: the capacity-curve iterations
        return w.model_copy(update={"slo": Slo(tool_wait_p95_seconds=2.0)})
    return w


# --------------------------------------------------------------------------------------------- repeated runs


def test_optimize_repeats_byte_identical(mini):
    w = mini.workloads["agent"]
    for rk, racks, layout in ((mini.racks["r40"], 1, "hybrid"), (mini.racks["r15"], 2, "hybrid")):
        runs = [canonical(optimize(w, rk, mini, layout=layout, racks=racks, explain=False)) for _ in range(2)]
        assert_same(*runs, what=f"{racks} rack(s), {layout}")


def test_compare_repeats_byte_identical(mini):
    w, rk = mini.workloads["agent"], mini.racks["r15"]
    runs = [canonical(compare_layouts(w, rk, mini, explain=False)) for _ in range(2)]
    assert_same(*runs, what="compare")


# ------------------------------------------------------------------------------------------ across processes

CLI_CASE = dict(workload="swe-agent", rack="air-40kw", layout="hybrid", racks=2, gpu_ids=["h100-sxm", "h200-sxm"],
                cpu_ids=["epyc-9965", "xeon-6980p"])


def test_cli_in_two_processes_matches_in_process():
    """`advisor optimize --json` (explain on, as the CLI has it) in two fresh interpreters with different hash seeds,
    against the same call in this process."""
    c = CLI_CASE
    args = [sys.executable, "-c", "from advisor.cli.main import main; main()", "optimize", "-w", c["workload"],
            "-r", c["rack"], "--layout", c["layout"], "--racks", str(c["racks"]), "--json"]
    for g in c["gpu_ids"]:
        args += ["--gpu", g]
    for p in c["cpu_ids"]:
        args += ["--cpu", p]
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONHASHSEED": seed}) for seed in ("1", "4242")]
    cat = builtin_catalog()
    res = optimize(cat.workloads[c["workload"]], cat.racks[c["rack"]], cat, layout=c["layout"], racks=c["racks"],
                   backend="cbc", time_limit_s=60.0, gpu_ids=c["gpu_ids"], cpu_ids=c["cpu_ids"],
                   settings=OptimizerSettings(mip_gap=1e-6), explain=True)
    assert res.shadow_prices, "the explain case should carry shadow prices"
    here = canonical(res.model_dump_json(exclude={"evaluation"}))  # the CLI leaves the evaluation out
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        assert_same(canonical(out), here, what="CLI process against in-process")


# ---------------------------------------------------------------------------------------------- batch runner


def test_batch_worker_modes_give_identical_rows(tmp_path):
    data = {"catalog": str(MINI), "workload": "agent", "rack": "r15", "time_limit_s": 60,
            "scenarios": [{"name": "one", "layouts": ["a", "b", "hybrid"]},
                          {"name": "row", "racks": 2, "layouts": ["hybrid"]},
                          {"name": "ort", "solver": "ortools", "layouts": ["b"]}],
            "grid": {"rack.power_kw": [12, 15]}}
    scen = scenarios_from_data(data)
    tables = {}
    for mode, workers in (("inline", 0), ("pool", 2)):
        out = tmp_path / mode
        summary = run_batch(scen, out, workers=workers, export=False)
        assert summary.stats.errors == 0
        rows = sorted(read_rows(out), key=lambda r: (r["scenario"], r["layout"]))
        tables[mode] = json.dumps([{k: v for k, v in r.items() if k not in BATCH_VOLATILE} for r in rows],
                                  sort_keys=True, separators=(",", ":"))
    assert len(json.loads(tables["inline"])) == 10
    assert_same(tables["inline"], tables["pool"], what="batch rows, inline against process pool")


# --------------------------------------------------------------------------------------------- both backends

TIES = [
    # (catalog, workload kind, rack, racks, layout, extra optimize arguments)
    ("mini", "agent", "r40", 1, "a", {}),
    ("mini", "agent", "r40", 1, "hybrid", {}),
    ("mini", "agent", "r40", 2, "b", {}),  # a row through the rack-pattern master
    ("mini", "agent", "r40", 2, "hybrid", {}),  # identical racks: CBC and SCIP spread the same totals differently
    ("mini", "slo", "r15", 1, "b", {}),
    ("twins", "no_memory", "r40", 1, "hybrid", {}),  # twin SKUs, capacity model
    ("twins", "big_memory", "r15", 1, "hybrid", {}),  # twin SKUs under the one-SKU-per-queue memory model
    ("twins", "agent", "r40", 2, "hybrid", {"objective": "min_cost", "required_tasks_per_hour": 6000}),
    # ^ two mixes of equal cost, power and throughput (a cpu-a and a cpu-b server trade places)
    ("mini", "agent", "r40", 1, "hybrid", {"objective": "min_power", "required_tasks_per_hour": 3000}),
    ("mini", "agent", "r40", 1, "hybrid", {"capital_budget_usd": 200000}),
    ("mini", "agent", "r40", 1, "b", {"objective": "min_cost_per_task"}),
]


@pytest.mark.parametrize("cat_name,kind,rack,racks,layout,kw", tiered(TIES, 4),
                         ids=[f"{c}-{k}-{r}x{n}-{lay}-{'-'.join(map(str, kw.values())) or 'max'}"
                              for c, k, r, n, lay, kw in TIES])
def test_backends_give_the_same_canonical_answer(mini, cat_name, kind, rack, racks, layout, kw):
    cat = _twins(mini) if cat_name == "twins" else mini
    w = _workload(cat, kind)
    cbc, ort = (optimize(w, cat.racks[rack], cat, layout=layout, racks=racks, backend=b, explain=False, **kw)
                for b in ("cbc", "ortools"))
    assert cbc.status not in ("infeasible", "time_limit") and cbc.status == ort.status
    assert_same(canonical(cbc, BACKEND), canonical(ort, BACKEND), what="cbc against ortools")
    if cat_name == "twins":  # the first id of each set of twins
        assert not {"cpu-a2", "gpu-y0"} & {x for s in cbc.servers for x in (s.cpu, s.gpu)}


@pytest.mark.parametrize("layout", ["a", "hybrid"])
def test_backends_agree_with_explain(mini, layout):
    """Shadow prices and the +10% re-solves too (power and air cooling bind together in r40: degenerate duals)."""
    w, rk = mini.workloads["agent"], mini.racks["r40"]
    cbc, ort = (optimize(w, rk, mini, layout=layout, backend=b, explain=True) for b in ("cbc", "ortools"))
    assert cbc.shadow_prices and all(p.what_it_takes for p in cbc.shadow_prices)
    assert_same(canonical(cbc, BACKEND), canonical(ort, BACKEND), what="cbc against ortools, explained")


@pytest.mark.parametrize("seed,layout", [(1008, "hybrid"), (1018, "hybrid"), (1029, "b")])
def test_backends_agree_where_weights_alone_left_ties(seed, layout):
    """Random instances where one weighted solve let CBC and SCIP stop on different answers of equal throughput
    (the power and cost tie-breaks were worth less than the MIP gap)."""
    inst = random_instance(seed)
    cbc, ort = (optimize(inst.workload, inst.rack, inst.catalog, layout=layout, backend=b, explain=False)
                for b in ("cbc", "ortools"))
    assert_same(canonical(cbc, BACKEND), canonical(ort, BACKEND), what=f"seed {seed}")


def test_builtin_row_backends_agree():
    cat = builtin_catalog()
    cbc, ort = (optimize(cat.workloads["swe-agent"], cat.racks["legacy-air-15kw"], cat, layout="b", racks=3,
                         backend=b, cpu_ids=["epyc-9965", "xeon-6980p"], explain=False) for b in ("cbc", "ortools"))
    assert_same(canonical(cbc, BACKEND), canonical(ort, BACKEND), what="three racks of swe-agent")
    racks = [[(s.chassis, s.cpu, s.gpu, s.gpus_per_server, s.count) for s in cbc.servers if s.rack == r]
             for r in range(3)]
    assert racks == sorted(racks, reverse=True)  # canonical rack order: largest count vector first


@settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(2000, 9999), layout=st.sampled_from(["a", "b", "hybrid"]), racks=st.sampled_from([1, 2]))
def test_backends_agree_on_random_instances(seed, layout, racks):
    inst = random_instance(seed, racks=racks, max_power_kw=30.0 if racks == 1 else 12.0)
    cbc, ort = (optimize(inst.workload, inst.rack, inst.catalog, layout=layout, racks=racks, backend=b,
                         explain=False) for b in ("cbc", "ortools"))
    assert_same(canonical(cbc, BACKEND), canonical(ort, BACKEND), what=f"seed {seed}")


# -------------------------------------------------------------------------------------------------------- API


@pytest.mark.parametrize("solve_in", ["process", "thread"])
def test_api_answers_as_in_process(mini, tmp_path, solve_in):
    from fastapi.testclient import TestClient

    from advisor.api.app import create_app
    from advisor.api.settings import ApiSettings

    app = create_app(ApiSettings(database=tmp_path / "advisor.db", catalog=MINI, solve_in=solve_in), catalog=mini)
    w, rk = mini.workloads["agent"], mini.racks["r15"]
    with TestClient(app) as client:
        r = client.post("/v1/optimize", json={"workload": "agent", "rack": "r15", "layout": "hybrid", "racks": 2,
                                              "explain": False, "time_limit_s": 60})
        assert r.status_code == 200, r.text
        here = optimize(w, rk, mini, layout="hybrid", racks=2, time_limit_s=60, explain=False)
        assert_same(canonical(r.content), canonical(here), what="API optimize against in-process")
        r = client.post("/v1/compare", json={"workload": "agent", "rack": "r15", "time_limit_s": 60})
        assert r.status_code == 200, r.text
        here = compare_layouts(w, mini.racks["r15"], mini, time_limit_s=60, explain=False)
        assert_same(canonical(r.content), canonical(here), what="API compare against in-process")
