"""Total cost of ownership: arithmetic against a hand-computed case, the TCO objectives against enumeration,
both backends, and the evaluator reproducing what the optimizer chose."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from advisor.cli.main import app
from advisor.optimizer.optimize import optimize
from advisor.optimizer.settings import OptimizerSettings
from models.assumptions import ModelAssumptions
from models.config import Configuration
from models.performance import call_mix
from models.pipeline import evaluate, resolve_groups
from models.tco import Capacity, CostAssumptions, efficient_first_w
from oracle import oracle, random_instance
from oracle_tco import min_cost_per_task, min_tco_for_throughput
from tiers import tiered

REL = 1e-6


def _config(**op) -> Configuration:
    return Configuration.model_validate({"servers": [
        {"chassis": "gpu4", "cpu": "cpu-a", "gpu": "gpu-x", "gpus_per_server": 4, "count": 1,
         "orchestration_cores_per_gpu": 2},
        {"chassis": "cpu1u", "cpu": "cpu-a", "count": 1}], "operating_point": op})


def test_hand_computed_case(mini_catalog):
    wl, rack = mini_catalog.workloads["agent"], mini_catalog.racks["r40"]
    cfg = _config(arrival_rate_per_hour=100.0)
    ev = evaluate(cfg, wl, rack, mini_catalog)
    t = ev.tco
    # capital: gpu4 = 30,000 + 1 x 5,000 + 4 x 25,000 + 1,024 GB x 5 = 140,120; cpu1u = 8,000 + 2 x 5,000 + 5,120
    assert t.capital_usd == pytest.approx(140_120 + 23_120)
    assert t.capital_usd_per_hour == pytest.approx(163_240 / (5 * 8760))
    # idle: gpu4 1,200 x 0.6 + 300 x 0.3 + 4 x 700 x 0.1 = 1,090 W; cpu1u 300 x 0.6 + 2 x 300 x 0.3 = 360 W; gear 500 W
    idle_w = 1090 + 360 + 500
    # dynamic at 100 tasks/h: GPUs 4 x 700 x 0.9 J/s over the server's task rate, plus orchestration and tool
    # reference-core seconds at 300 W x 0.7 / 32 cores / perf 1.0 = 6.5625 J each (both servers run cpu-a)
    groups, _ = resolve_groups(cfg, wl, mini_catalog, ModelAssumptions())
    gpu_tps = groups[0].profile.gpu_tasks_per_s
    orch_s = call_mix(wl).orchestration_core_s_per_task
    tool_s = sum(c.share * s.count * s.core_seconds for c in wl.classes for s in c.stages if s.resource == "cpu")
    lam = 100.0 / 3600
    dyn_w = lam * (4 * 700 * 0.9 / gpu_tps + orch_s * 6.5625) + lam * tool_s * 6.5625
    assert t.it_power_w == pytest.approx(idle_w + dyn_w)
    assert t.facility_power_w == pytest.approx((idle_w + dyn_w) * 1.55)
    energy_h = (idle_w + dyn_w) * 1.55 / 1000 * 0.0806
    assert t.energy_usd_per_hour == pytest.approx(energy_h)
    assert t.space_usd_per_hour == 0.0
    assert t.cost_usd_per_hour == pytest.approx(163_240 / 43_800 + energy_h)
    assert t.cost_usd_per_1000_tasks == pytest.approx((163_240 / 43_800 + energy_h) / 100 * 1000)
    assert t.energy_wh_per_task == pytest.approx((idle_w + dyn_w) * 1.55 / 100)


def test_assumptions_move_the_figures(mini_catalog):
    wl, rack = mini_catalog.workloads["agent"], mini_catalog.racks["r40"]
    cfg = _config(arrival_rate_per_hour=100.0)
    base = evaluate(cfg, wl, rack, mini_catalog).tco
    costs = CostAssumptions(pue=1.2, electricity_usd_per_kwh=0.16, space_usd_per_rack_month=730.0,
                            amortization_years=4)
    t = evaluate(cfg, wl, rack, mini_catalog, ModelAssumptions(costs=costs)).tco
    assert t.energy_usd_per_hour == pytest.approx(base.energy_usd_per_hour * (1.2 / 1.55) * (0.16 / 0.0806))
    assert t.space_usd_per_hour == pytest.approx(1.0)  # 730 USD a month over 730 hours
    assert t.capital_usd_per_hour == pytest.approx(base.capital_usd_per_hour * 5 / 4)


def test_unpriced_parts_are_named(mini_catalog):
    wl, rack = mini_catalog.workloads["agent"], mini_catalog.racks["r40"]
    cat = mini_catalog
    ch = cat.chassis["cpu1u"].model_copy(update={"price_usd": None})
    from models.catalog import Catalog
    cat2 = Catalog.build(cpus=list(cat.cpus), gpus=list(cat.gpus), chassis=[*(c for c in cat.chassis if c.id != "cpu1u"), ch],
                         racks=list(cat.racks), served_models=list(cat.served_models), workloads=list(cat.workloads))
    t = evaluate(_config(), wl, rack, cat2).tco
    assert t.unpriced == ["chassis cpu1u"]
    assert t.capital_usd is None and t.cost_usd_per_1000_tasks is None
    assert t.energy_wh_per_task > 0  # energy needs no prices


def test_efficient_first_dispatch():
    slices = [Capacity(2.0, 10.0), Capacity(1.0, 4.0)]
    assert efficient_first_w(0.5, slices) == pytest.approx(2.0)
    assert efficient_first_w(2.0, slices) == pytest.approx(4.0 + 10.0)
    with pytest.raises(ValueError, match="exceeds"):
        efficient_first_w(3.5, slices)


SEEDS = tiered(range(24), 4)
"""Seeds of the enumeration oracles: the first 4 (both layouts) in the fast tier, the rest in the slow tier."""


@pytest.mark.parametrize("seed", SEEDS)
def test_min_cost_per_task_matches_enumeration(seed):
    inst = random_instance(seed, max_options=4, max_vectors=800, max_power_kw=20.0)
    layout = "hybrid" if seed % 2 else "b"
    want = min_cost_per_task(inst, layout)
    res = optimize(inst.workload, inst.rack, inst.catalog, layout=layout, objective="min_cost_per_task",
                   explain=False, time_limit_s=30)
    if want is None:
        assert res.status == "infeasible" or res.throughput_tasks_per_hour == 0
        return
    assert res.status == "optimal", res.message
    got = res.evaluation.tco.cost_usd_per_1000_tasks / 1000
    assert got == pytest.approx(want, rel=REL), inst


@pytest.mark.parametrize("seed", SEEDS)
def test_min_tco_for_throughput_matches_enumeration(seed):
    inst = random_instance(100 + seed, max_options=4, max_vectors=800, max_power_kw=20.0)
    layout = "hybrid" if seed % 2 else "b"
    top = optimize(inst.workload, inst.rack, inst.catalog, layout=layout, explain=False, time_limit_s=30)
    if top.throughput_tasks_per_hour == 0:
        # e.g. the serving engines' core floor takes every host core the tools need: enumeration agrees
        assert oracle(inst.catalog, inst.workload, inst.rack, layout).tasks_per_hour == pytest.approx(0.0, abs=1e-6)
        return
    f = OptimizerSettings().assumptions.operating_load_fraction
    need = top.throughput_tasks_per_hour * f * (0.3 + 0.6 * (seed % 5) / 4)
    want = min_tco_for_throughput(inst, layout, need)
    res = optimize(inst.workload, inst.rack, inst.catalog, layout=layout, objective="min_tco_for_throughput",
                   required_tasks_per_hour=need, explain=False, time_limit_s=30)
    assert want is not None
    assert res.status == "optimal", res.message
    assert res.evaluation.tco.operating_tasks_per_hour == pytest.approx(need)
    assert res.throughput_tasks_per_hour >= need / f * (1 - REL)
    assert res.evaluation.tco.cost_usd_per_hour == pytest.approx(want, rel=REL), inst


@pytest.mark.parametrize("objective", ["min_cost_per_task", "min_tco_for_throughput"])
def test_backends_agree(objective):
    inst = random_instance(7, max_options=4, max_vectors=800, max_power_kw=20.0)
    top = optimize(inst.workload, inst.rack, inst.catalog, layout="hybrid", explain=False, time_limit_s=30)
    need = top.throughput_tasks_per_hour * 0.4
    out = {}
    for backend in ("cbc", "ortools"):
        res = optimize(inst.workload, inst.rack, inst.catalog, layout="hybrid", objective=objective,
                       required_tasks_per_hour=need, backend=backend, explain=False, time_limit_s=30)
        t = res.evaluation.tco
        out[backend] = t.cost_usd_per_1000_tasks if objective == "min_cost_per_task" else t.cost_usd_per_hour
    assert out["cbc"] == pytest.approx(out["ortools"], rel=REL)


def test_cheaper_per_task_than_the_fastest_answer(mini_catalog):
    wl, rack = mini_catalog.workloads["agent"], mini_catalog.racks["r40"]
    fast = optimize(wl, rack, mini_catalog, layout="hybrid", explain=False)
    cheap = optimize(wl, rack, mini_catalog, layout="hybrid", objective="min_cost_per_task", explain=False)
    assert cheap.evaluation.tco.cost_usd_per_1000_tasks <= fast.evaluation.tco.cost_usd_per_1000_tasks * (1 + REL)
    # the saved configuration evaluates to the same cost
    again = evaluate(Configuration.model_validate(cheap.configuration), wl, rack, mini_catalog)
    assert again.tco.cost_usd_per_1000_tasks == pytest.approx(cheap.evaluation.tco.cost_usd_per_1000_tasks)


def test_min_tco_needs_a_throughput(mini_catalog):
    wl, rack = mini_catalog.workloads["agent"], mini_catalog.racks["r40"]
    with pytest.raises(ValueError, match="required_tasks_per_hour"):
        optimize(wl, rack, mini_catalog, objective="min_tco_for_throughput", explain=False)


def test_cli_objective_and_text(builtin):
    runner = CliRunner()
    r = runner.invoke(app, ["optimize", "-w", "swe-agent", "-r", "air-40kw", "--objective", "min_cost_per_task",
                            "--json", "--time-limit", "30"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    t = data["tco"]
    assert t["cost_usd_per_1000_tasks"] > 0 and t["energy_wh_per_task"] > 0
    r = runner.invoke(app, ["evaluate", "examples/gpu-first-h100-air40.yaml"])
    assert r.exit_code == 0, r.output
    assert "per 1,000 tasks" in r.stdout and "Wh per task" in r.stdout
    r = runner.invoke(app, ["optimize", "-w", "swe-agent", "-r", "air-40kw", "--objective", "min_tco_for_throughput"])
    assert r.exit_code != 0 and "required" in r.output


def test_older_results_file_gains_cost_columns(tmp_path):
    import sqlite3

    from advisor.studies.results import COLUMNS, connect

    old = [(c, t) for c, t in COLUMNS if c not in ("cost_usd_per_hour", "cost_usd_per_1000_tasks",
                                                   "energy_wh_per_task")]
    path = tmp_path / "results.sqlite"
    with sqlite3.connect(path) as db:
        db.execute(f"CREATE TABLE results ({', '.join(f'{c} {t}' for c, t in old)}, PRIMARY KEY (scenario, layout))")
        db.execute("INSERT INTO results (scenario, layout, hash, status, throughput) VALUES ('s', 'a', 'h', 'optimal', 5)")
    db = connect(path)
    cols = {r[1] for r in db.execute("PRAGMA table_info(results)")}
    assert {"cost_usd_per_hour", "cost_usd_per_1000_tasks", "energy_wh_per_task"} <= cols
    assert db.execute("SELECT throughput, cost_usd_per_hour FROM results").fetchall() == [(5.0, None)]
    db.close()


def test_api_cost_objectives_over_http(tmp_path):
    from api_server import Server

    s = Server(tmp_path, workers=1).start()
    try:
        with s.client() as c:
            r = c.post("/v1/optimize", json={"workload": "agent", "rack": "r40", "layout": "hybrid",
                                             "objective": "min_tco_for_throughput", "required_tasks_per_hour": 500,
                                             "explain": False, "assumptions": {"costs": {"pue": 1.2}}})
            assert r.status_code == 200, r.text
            body = r.json()
            assert body["tco"]["operating_tasks_per_hour"] == pytest.approx(500)
            assert body["tco"]["assumptions"]["pue"] == 1.2
            assert body["tco"]["facility_power_w"] == pytest.approx(body["tco"]["it_power_w"] * 1.2)
            r = c.post("/v1/optimize", json={"workload": "agent", "rack": "r40", "objective": "min_tco_for_throughput"})
            assert r.status_code == 422 and "required_tasks_per_hour" in r.text
            r = c.post("/v1/optimize", json={"workload": "agent", "rack": "r40",
                                             "assumptions": {"costs": {"pue": 0.5}}})
            assert r.status_code == 422 and "pue" in r.text
    finally:
        s.stop()
