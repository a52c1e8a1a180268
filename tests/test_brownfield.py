"""Brownfield racks (`--existing`) and migration plans (advisor/optimizer/migration.py): owned servers are never
removed or changed without `allow_removal`, the answer is never below the owned configuration, the exhaustive
oracle agrees on small instances, every migration step is a buildable configuration whose figure the evaluator
confirms, and the CLI, HTTP API and batch paths accept it."""

from __future__ import annotations

import functools
import json
import random
from collections import Counter

import pytest
import yaml
from typer.testing import CliRunner

from advisor.cli.main import app
from advisor.optimizer.compare import compare_layouts
from advisor.optimizer.migration import NotACandidate, option_key
from advisor.optimizer.optimize import optimize
from advisor.optimizer.settings import OptimizerSettings
from advisor.studies.batch import read_rows, run_batch
from advisor.studies.scenarios import base_scenario, resolve, scenarios_from_data
from conftest import MINI_DIR
from models.assumptions import ModelAssumptions
from models.config import Configuration
from models.pipeline import evaluate
from models.tco import CostAssumptions
from oracle import candidate_options, oracle, rack_switch_of, rack_vectors, random_instance

REL = 1e-6
OWNED = {"name": "owned", "servers": [
    {"chassis": "gpu4", "cpu": "cpu-a", "gpu": "gpu-x", "gpus_per_server": 4, "count": 2,
     "orchestration_cores_per_gpu": 2.0}]}
"""Two 4-GPU servers with cpu-a: not what a greenfield r40 answer holds (it picks cpu-b and 8-GPU servers)."""


def _close(a: float, b: float, rel: float = REL) -> bool:
    return abs(a - b) <= rel * max(1.0, abs(a), abs(b))


def _counts(servers) -> Counter:
    c: Counter = Counter()
    for s in servers:
        c[s.rack, option_key(s)] += s.count
    return c


def _keeps(res, existing: Configuration) -> bool:
    got = _counts(res.servers)
    return all(got[k] >= n for k, n in _counts(existing.servers).items())


@functools.cache
def _mini_solve(layout: str = "hybrid", racks: int = 1, **kw):
    from advisor.catalog import load_catalog

    cat = load_catalog(MINI_DIR)
    ex = kw.pop("existing", None)  # a JSON string (hashable for the cache)
    existing = Configuration.model_validate_json(ex) if ex else Configuration.model_validate(OWNED)
    settings = OptimizerSettings(assumptions=ModelAssumptions(costs=CostAssumptions(
        salvage_fraction=kw.pop("salvage", 0.0))))
    return cat, existing, optimize(cat.workloads["agent"], cat.racks["r40"], cat, layout=layout, racks=racks,
                                   explain=False, existing=existing, settings=settings, **kw)


# ------------------------------------------------------------------------------------------ fixed servers


@pytest.mark.parametrize("layout", ["hybrid", "b"])
def test_owned_servers_stay_and_the_answer_is_not_worse(layout):
    cat, existing, res = _mini_solve(layout)
    assert res.status == "optimal", res.message
    assert _keeps(res, existing), res.servers
    wl, rack = cat.workloads["agent"], cat.racks["r40"]
    ev_owned = evaluate(existing, wl, rack, cat)
    assert res.throughput_tasks_per_hour >= ev_owned.throughput_tasks_per_hour * (1 - REL)
    # the answer adds servers, and fits the rack
    assert sum(s.count for s in res.servers) > sum(g.count for g in existing.servers)
    ev = evaluate(Configuration.model_validate(res.configuration), wl, rack, cat)
    assert ev.within_budgets and _close(ev.throughput_tasks_per_hour, res.throughput_tasks_per_hour)
    # and never more than greenfield
    green = optimize(wl, rack, cat, layout=layout, explain=False)
    assert res.throughput_tasks_per_hour <= green.throughput_tasks_per_hour * (1 + REL)


def test_owned_servers_stay_in_their_rack_of_a_row():
    owned = {"name": "owned", "racks": 2, "servers": [{**OWNED["servers"][0], "rack": 1, "count": 1}]}
    _, existing, res = _mini_solve("hybrid", racks=2, existing=json.dumps(owned))
    assert res.status in ("optimal", "feasible"), res.message
    assert _keeps(res, existing), res.servers


def test_removal_allowed_reaches_greenfield_and_pays_salvage():
    cat, existing, res = _mini_solve("hybrid", allow_removal=True)
    wl, rack = cat.workloads["agent"], cat.racks["r40"]
    green = optimize(wl, rack, cat, explain=False)
    assert _close(res.throughput_tasks_per_hour, green.throughput_tasks_per_hour)
    # with a capital budget: what is bought, less salvage of what goes, stays within it
    budget = 200_000.0
    _, _, cap = _mini_solve("hybrid", allow_removal=True, capital_budget_usd=budget, salvage=0.5)
    _, _, keep = _mini_solve("hybrid", capital_budget_usd=budget)
    assert cap.throughput_tasks_per_hour >= keep.throughput_tasks_per_hour * (1 - REL)
    assert _keeps(keep, existing)
    spent = 0.0
    got, own = _counts(cap.servers), _counts(existing.servers)
    for step in cap.migration.steps[1:]:
        for d in step.added:
            spent += d.price_usd_each * d.count
        for d in step.removed:
            spent -= 0.5 * d.price_usd_each * d.count
    assert spent <= budget * (1 + REL), (spent, got, own)
    assert _close(cap.migration.total_cost_usd, spent)


def test_software_only_keeps_exactly_the_hardware():
    cat, existing, res = _mini_solve("hybrid", software_only=True)
    assert _counts(res.servers) == _counts(existing.servers)
    assert res.migration is None
    ev_owned = evaluate(existing, cat.workloads["agent"], cat.racks["r40"], cat)
    assert res.throughput_tasks_per_hour >= ev_owned.throughput_tasks_per_hour * (1 - REL)


def test_owned_servers_over_the_budgets_are_named(mini_catalog):
    too_many = Configuration.model_validate({"servers": [{**OWNED["servers"][0], "count": 20}]})
    with pytest.raises(ValueError, match=r"exceeds the budgets of rack profile r40 .*rack 0"):
        optimize(mini_catalog.workloads["agent"], mini_catalog.racks["r40"], mini_catalog, explain=False,
                 existing=too_many)
    with pytest.raises(ValueError, match="has 2 racks, the request 1"):
        optimize(mini_catalog.workloads["agent"], mini_catalog.racks["r40"], mini_catalog, explain=False,
                 existing=Configuration.model_validate({"racks": 2, "servers": OWNED["servers"]}))


def test_a_cpu_tier_is_no_candidate_of_layout_b_and_compare_says_so(mini_catalog):
    owned = Configuration.model_validate({"servers": [*OWNED["servers"],
                                                      {"chassis": "cpu1u", "cpu": "cpu-b", "count": 2}]})
    wl, rack = mini_catalog.workloads["agent"], mini_catalog.racks["r40"]
    with pytest.raises(NotACandidate, match=r"servers\[1\] \(cpu1u.*layout b has no CPU-only tool nodes"):
        optimize(wl, rack, mini_catalog, layout="b", explain=False, existing=owned)
    cmp = compare_layouts(wl, rack, mini_catalog, explain=False, existing=owned, time_limit_s=30)
    by = {r.layout: r for r in cmp.results}
    assert by["a"].status == by["b"].status == "infeasible"
    assert by["b"].infeasibility[0].group == "fixed_servers"
    assert by["hybrid"].throughput_tasks_per_hour > 0 and _keeps(by["hybrid"], owned)
    assert cmp.best_layout == "hybrid"


# ------------------------------------------------------------------------------------------ oracle


def _owned_instance(seed: int):
    """A random oracle instance and a random owned rack: about half of a random feasible rack vector."""
    inst = random_instance(seed)
    opts = candidate_options(inst.catalog, inst.workload, inst.rack, "hybrid")
    vecs = [v for v in rack_vectors(opts, inst.rack, rack_switch_of(inst.catalog, inst.rack)) if sum(v) >= 2]
    rng = random.Random(seed)
    v = rng.choice(vecs) if vecs else ()
    owned = {o.key: n // 2 for o, n in zip(opts, v) if n // 2}
    return inst, opts, owned


@pytest.mark.parametrize("seed", [1000, 1001, 1002, 1003, 1008, 1014, 1024])
def test_brownfield_matches_oracle(seed):
    inst, opts, owned = _owned_instance(seed)
    assert owned, "the seeds are chosen to draw owned servers; a seed that draws none tests nothing"
    by_key = {o.key: o for o in opts}
    groups = []
    for k, n in owned.items():
        p = by_key[k].profile
        groups.append({"chassis": p.chassis.id, "cpu": p.cpu.id, "gpu": p.gpu.id if p.gpu else None,
                       "gpus_per_server": p.gpus, "count": n,
                       "orchestration_cores_per_gpu": (p.engine_min_cores / p.gpus) if p.gpus else 0.0})
    existing = Configuration.model_validate({"servers": [{k: v for k, v in g.items() if v is not None}
                                                         for g in groups]})
    res = optimize(inst.workload, inst.rack, inst.catalog, layout="hybrid", explain=False, existing=existing)
    orc = oracle(inst.catalog, inst.workload, inst.rack, "hybrid", owned=owned)
    ctx = f"seed {seed}: optimizer {res.throughput_tasks_per_hour}, oracle {orc.tasks_per_hour} {orc.counts}"
    assert _close(res.throughput_tasks_per_hour, orc.tasks_per_hour, 1e-5), ctx
    assert _keeps(res, existing), ctx
    ev_owned = evaluate(existing, inst.workload, inst.rack, inst.catalog)
    assert res.throughput_tasks_per_hour >= ev_owned.throughput_tasks_per_hour * (1 - REL), ctx
    assert orc.tasks_per_hour <= oracle(inst.catalog, inst.workload, inst.rack, "hybrid").tasks_per_hour + 1e-6


# ------------------------------------------------------------------------------------------ migration


def test_migration_steps_are_buildable_and_ordered():
    cat, existing, res = _mini_solve("hybrid")
    wl, rack = cat.workloads["agent"], cat.racks["r40"]
    mig = res.migration
    assert mig is not None and mig.steps[0].action == "as_is" and len(mig.steps) >= 2
    assert _close(mig.steps[-1].tasks_per_hour, res.throughput_tasks_per_hour)
    assert _close(mig.existing_tasks_per_hour, evaluate(existing, wl, rack, cat).throughput_tasks_per_hour)
    assert mig.total_cost_usd == pytest.approx(sum(s.cost_usd for s in mig.steps))
    prev = None
    for s in mig.steps:
        cfg = Configuration.model_validate(s.configuration)
        ev = evaluate(cfg, wl, rack, cat)
        assert ev.within_budgets, s.step
        assert _close(ev.throughput_tasks_per_hour, s.tasks_per_hour), s.step
        assert _keeps(type("R", (), {"servers": cfg.servers})(), existing), s.step  # no removal allowed
        if prev is not None:
            assert _close(s.gain_tasks_per_hour, s.tasks_per_hour - prev.tasks_per_hour)
            assert s.changes and s.checks
        assert any(c.metric == "sustained throughput" and _close(c.expected, s.tasks_per_hour) for c in s.checks)
        prev = s
    # purchases are priced from the catalog: the sum of the added servers' prices
    bought = sum(d.price_usd_each * d.count for s in mig.steps for d in s.added)
    assert _close(mig.total_cost_usd, bought)
    added = Counter()
    for s in mig.steps:
        for d in s.added:
            added[d.rack, f"{d.chassis}|{d.cpu}|{d.gpu or '-'}|{d.gpus_per_server}"] += d.count
    assert _counts(existing.servers) + added == _counts(res.servers)


def test_starved_engine_is_repaired_first(mini_catalog):
    """Owned GPU servers reserving fewer host cores than their engines' floor: the plan's first step reserves them
    (the evaluator's as-configured figure assumes the engines keep up, and the notes say so)."""
    owned = Configuration.model_validate({"servers": [{**OWNED["servers"][0], "orchestration_cores_per_gpu": 0.5}]})
    res = optimize(mini_catalog.workloads["agent"], mini_catalog.racks["r40"], mini_catalog, explain=False,
                   existing=owned)
    steps = res.migration.steps
    assert steps[1].action == "reconfigure" and steps[1].cost_usd == 0
    assert any("host cores per GPU for the serving engine" in c for c in steps[1].changes)
    assert any("floor" in n for n in res.migration.notes)


# ------------------------------------------------------------------------------------------ front ends


def test_cli_existing_and_removal(tmp_path):
    owned = tmp_path / "owned.yaml"
    owned.write_text(yaml.safe_dump(OWNED))
    r = CliRunner().invoke(app, ["optimize", "-w", "agent", "-r", "r40", "--catalog", str(MINI_DIR), "--existing",
                                 str(owned), "--json"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["migration"]["steps"][0]["action"] == "as_is"
    cfg = Configuration.model_validate(data["configuration"])
    assert _keeps(type("R", (), {"servers": cfg.servers})(), Configuration.model_validate(OWNED))
    r = CliRunner().invoke(app, ["optimize", "-w", "agent", "-r", "r40", "--catalog", str(MINI_DIR), "--existing",
                                 str(owned), "--allow-removal", "--salvage-fraction", "0.3"],
                           env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert r.exit_code == 0, r.output
    assert "Migration steps" in r.stdout and "check:" in r.stdout
    bad = CliRunner().invoke(app, ["optimize", "-w", "agent", "-r", "r40", "--catalog", str(MINI_DIR),
                                   "--existing", str(tmp_path / "none.yaml")])
    assert bad.exit_code == 2 and "--existing" in bad.stderr


def test_api_optimize_and_compare_accept_existing(tmp_path_factory):
    from api_server import Server

    s = Server(tmp_path_factory.mktemp("api"), workers=1, queue_wait_s=1.0).start()
    try:
        with s.client() as c:
            r = c.post("/v1/optimize", json={"workload": "agent", "rack": "r40", "explain": False,
                                             "existing": OWNED, "time_limit_s": 30})
            assert r.status_code == 200, r.text
            body = r.json()
            assert body["migration"]["steps"][-1]["tasks_per_hour"] == pytest.approx(
                body["throughput_tasks_per_hour"], rel=REL)
            cfg = Configuration.model_validate(body["configuration"])
            assert _keeps(type("R", (), {"servers": cfg.servers})(), Configuration.model_validate(OWNED))
            r = c.post("/v1/compare", json={"workload": "agent", "rack": "r40", "existing": OWNED,
                                            "allow_removal": True, "time_limit_s": 30})
            assert r.status_code == 200, r.text
            assert {x["layout"] for x in r.json()["results"]} == {"a", "b", "hybrid"}
            bad = c.post("/v1/optimize", json={"workload": "agent", "rack": "r40",
                                               "existing": {"servers": [{**OWNED["servers"][0], "count": 20}]}})
            assert bad.status_code == 422 and "exceeds the budgets" in bad.text
    finally:
        s.stop()


def test_batch_scenario_with_existing(tmp_path):
    (tmp_path / "owned.yaml").write_text(yaml.safe_dump(OWNED))
    f = tmp_path / "scen.yaml"
    f.write_text(yaml.safe_dump({"catalog": str(MINI_DIR), "workload": "agent", "rack": "r40", "layouts": ["hybrid"],
                                 "time_limit_s": 30, "scenarios": [{"name": "owned", "existing": "owned.yaml"},
                                                                   {"name": "green"}]}))
    from advisor.studies.scenarios import load_scenarios

    scen = load_scenarios(f)
    assert resolve(scen[0]).existing is not None and resolve(scen[1]).existing is None
    assert "existing" not in resolve(scen[1]).inputs("hybrid")  # greenfield hashes unchanged
    run_batch(scen, tmp_path / "out", workers=0, export=False)
    rows = {r["scenario"]: r for r in read_rows(tmp_path / "out")}
    assert rows["owned"]["error"] is None, rows["owned"]["error"]
    cfg = Configuration.model_validate(json.loads(rows["owned"]["configuration_json"]))
    assert _keeps(type("R", (), {"servers": cfg.servers})(), Configuration.model_validate(OWNED))
    assert rows["owned"]["throughput"] <= rows["green"]["throughput"] * (1 + REL)
    inline = scenarios_from_data({**yaml.safe_load(f.read_text()), "catalog": str(MINI_DIR),
                                  "scenarios": [{"name": "inline", "existing": OWNED, "allow_removal": True}]})
    assert resolve(inline[0]).inputs("hybrid")["allow_removal"] is True
    assert base_scenario("agent", "r40").existing is None


# ------------------------------------------------------------------------------------------ determinism


def test_brownfield_answer_is_deterministic_across_runs_and_backends(mini_catalog):
    from test_determinism import BACKEND, assert_same, canonical

    wl, rack = mini_catalog.workloads["agent"], mini_catalog.racks["r40"]
    owned = Configuration.model_validate(OWNED)
    runs = {b: optimize(wl, rack, mini_catalog, explain=False, existing=owned, allow_removal=True, backend=b,
                        capital_budget_usd=300_000.0) for b in ("cbc", "ortools")}
    again = optimize(wl, rack, mini_catalog, explain=False, existing=owned, allow_removal=True,
                     capital_budget_usd=300_000.0)
    assert_same(canonical(runs["cbc"]), canonical(again), "cbc twice")
    assert_same(canonical(runs["cbc"], BACKEND), canonical(runs["ortools"], BACKEND), "cbc against ortools")


def test_min_cost_counts_owned_servers_as_paid_for(mini_catalog):
    """Owned servers cost nothing to keep: asked for less than they deliver, min_cost buys nothing (a greenfield
    price on owned servers would remove them to cut cost)."""
    wl, rack = mini_catalog.workloads["agent"], mini_catalog.racks["r40"]
    owned = Configuration.model_validate(OWNED)
    have = evaluate(owned, wl, rack, mini_catalog).throughput_tasks_per_hour
    res = optimize(wl, rack, mini_catalog, explain=False, existing=owned, allow_removal=True, objective="min_cost",
                   required_tasks_per_hour=0.3 * have)
    assert res.throughput_tasks_per_hour >= 0.3 * have * (1 - REL)
    assert res.migration.total_cost_usd == 0.0
    assert _keeps(res, owned)


# ------------------------------------------------------------------------------------------ report


def test_report_has_the_migration_block_and_brownfield_sweeps(mini_catalog):
    from advisor.report.html import SECTIONS, render_report
    from advisor.requests import ReportRequest

    req = ReportRequest(workload="agent", rack="r40", existing=Configuration.model_validate(OWNED),
                        power_factors=[0.1, 1.0], tool_factors=[1.0, 2.0], time_limit_s=30, sweep_budget_s=60)
    html, data = render_report(req, mini_catalog)
    assert "<h3 id=\"migration\">From the servers you own to this rack</h3>" in html
    for sid in SECTIONS:
        assert f'<section id="{sid}">' in html
    mig = data["migration"]
    assert mig["steps"][0]["action"] == "as_is" and len(mig["steps"]) >= 2
    assert mig["recommended_tasks_per_hour"] == pytest.approx(data["glance"]["tasks_per_hour"], rel=REL)
    for step in mig["steps"]:
        assert f"{step['tasks_per_hour']:,.0f}" in html
    # the sweeps keep the owned servers: at 10% of the rack's power they do not fit, an infeasible point
    low = next(p for p in data["sensitivity"]["power"]["points"] if p["factor"] == 0.1)
    assert set(low["status"].values()) == {"infeasible"}
    cfg = Configuration.model_validate(data["chosen"]["configuration"])
    assert _keeps(type("R", (), {"servers": cfg.servers})(), Configuration.model_validate(OWNED))
    green, gdata = render_report(ReportRequest(workload="agent", rack="r40", sensitivity=False, time_limit_s=30),
                                 mini_catalog)
    assert gdata["migration"] is None and 'id="migration"' not in green
