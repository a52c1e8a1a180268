"""Batch runs and what-if studies: scenario files and overrides, batch = single optimize runs, resume after kill -9,
Dask = local, crossover by bisection = dense sweep, Pareto fronts non-dominated and feasible, robustness figures.

Every solve uses the mini fixture catalog and a small rack so the module stays within a few minutes on 2 cores.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from advisor.studies.batch import DB_NAME, Runner, make_jobs, read_rows, run_batch, solve_job
from advisor.errors import InputError
from advisor.optimizer.optimize import optimize
from advisor.studies.scenarios import (
    TOOL_SHARE,
    base_scenario,
    load_scenarios,
    resolve,
    scenarios_from_data,
    unloaded_task_time,
    vary,
)
from advisor.studies.whatif import crossover, non_dominated, pareto, parse_vary, robustness, sweep
from models.config import Configuration
from models.pipeline import evaluate
from models.tco import CostAssumptions

MINI = Path(__file__).parent / "data" / "mini"
ADVISOR = Path(sys.executable).parent / "advisor"
REL = 1e-6
GRID = {
    "catalog": str(MINI), "workload": "agent", "rack": "r15", "time_limit_s": 30,
    "scenarios": [{"name": "A", "layouts": ["a"]}, {"name": "B", "layouts": ["b"]},
                  {"name": "H", "layouts": ["hybrid"]}],
    "grid": {"rack.power_kw": [9, 12, 15], "workload.tool_share": [0.2, 0.45, 0.6, 0.75, 0.9, 0.97]},
}


def _close(a, b, rel=REL) -> bool:
    return abs(a - b) <= rel * max(1.0, abs(a), abs(b))


def _rows(out: Path) -> dict[tuple[str, str], dict]:
    return {(r["scenario"], r["layout"]): r for r in read_rows(out)}


# ---------------------------------------------------------------------------------------------- scenarios


def test_override_paths_and_errors():
    s = base_scenario("agent", "r15", catalog=str(MINI))
    r = resolve(vary(s, {"rack.power_kw": 60, "workload.classes[0].stages[1].core_seconds": 45,
                         "workload.classes[test].stages[build].count": 3}))
    assert r.rack.power_kw == 60.0
    assert r.workload.classes[0].stages[1].core_seconds == 45.0
    assert r.workload.classes[1].stages[1].count == 3.0
    for bad, words in [("workload.classes[5].share", "no index 5"), ("rack.powr_kw", "no field 'powr_kw'"),
                       ("workload.classes[0].stages[2].core_secs", "workload.classes[0].stages[2]"),
                       ("workload.classes[nope].share", "no entry named 'nope'")]:
        with pytest.raises(InputError, match="override") as e:
            resolve(vary(s, {bad: 1}))
        assert bad in str(e.value) and words in str(e.value)
    with pytest.raises(InputError, match=r"rack\.power_kw"):  # the model's own check names the path
        resolve(vary(s, {"rack.power_kw": -1}))


@pytest.mark.parametrize("share", [0.05, 0.3, 0.5, 0.8, 0.95])
def test_tool_share_is_exact(mini_catalog, share):
    s = base_scenario("agent", "r15", catalog=str(MINI))
    r = resolve(vary(s, {TOOL_SHARE: share}))
    base = resolve(s)
    t = unloaded_task_time(r.workload, mini_catalog.gpus["gpu-x"], 8)
    assert t.tool_share == pytest.approx(share, rel=1e-12)
    # one factor for every CPU stage; GPU and delay stages untouched
    ratios = {round(sb.core_seconds / s0.core_seconds, 12)
              for cb, c0 in zip(r.workload.classes, base.workload.classes)
              for sb, s0 in zip(cb.stages, c0.stages) if sb.resource == "cpu"}
    assert len(ratios) == 1
    # a reference GPU of another speed gives another factor
    r2 = resolve(vary(s, {TOOL_SHARE: share, "reference_gpu": "gpu-y"}))
    assert unloaded_task_time(r2.workload, mini_catalog.gpus["gpu-y"], 8).tool_share == pytest.approx(share)


def test_hash_is_canonical_and_name_free():
    s = base_scenario("agent", "r15", catalog=str(MINI), overrides={"rack.power_kw": 12})
    a, b = resolve(s), resolve(vary(s, {"rack.power_kw": 12.0}, name="other"))
    assert a.input_hash("a") == b.input_hash("a") != a.input_hash("b")
    assert a.input_hash("a") != resolve(vary(s, {"rack.power_kw": 12.5})).input_hash("a")


def test_yaml_csv_grid_and_samples(tmp_path):
    (tmp_path / "s.csv").write_text(
        "name,catalog,workload,rack,layouts,rack.power_kw,workload.tool_share\n"
        f"one,{MINI},agent,r15,a;hybrid,12,\ntwo,{MINI},agent,r15,b,,0.5\n")
    sc = load_scenarios(tmp_path / "s.csv")
    assert [s.name for s in sc] == ["one", "two"]
    assert sc[0].layouts == ["a", "hybrid"] and sc[0].overrides == {"rack.power_kw": 12}
    assert sc[1].overrides == {TOOL_SHARE: 0.5}
    data = {"catalog": str(MINI), "workload": "agent", "rack": "r15",
            "grid": {"rack.power_kw": [10, 12], "racks": [1, 2]},
            "samples": {"n": 5, "seed": 3, "vary": {
                "workload.classes[0].stages[1].core_seconds": {"low": 5, "high": 80, "dist": "loguniform"},
                "rack.air_cooling_kw": [10, 20]}}}
    sc = scenarios_from_data(data)
    assert len(sc) == 4 * 5 and len({s.name for s in sc}) == 20
    again = scenarios_from_data(data)
    assert [s.overrides for s in sc] == [s.overrides for s in again]  # seeded
    for s in sc:
        assert 5 <= s.overrides["workload.classes[0].stages[1].core_seconds"] <= 80
        assert 10 <= s.overrides["rack.air_cooling_kw"] <= 20
    with pytest.raises(InputError, match="neither"):
        scenarios_from_data({**data, "grid": {"power_kw": [1]}})


# ---------------------------------------------------------------------------------------------- batch


def test_grid_batch_matches_single_runs(tmp_path):
    scen = scenarios_from_data(GRID)
    assert len(scen) >= 50
    summary = run_batch(scen, tmp_path, workers=2)
    assert summary.stats.rows == len(scen) and summary.stats.errors == 0
    rows = _rows(tmp_path)
    assert len(rows) == len(scen)
    for s in scen:
        r = resolve(s)
        assert r.rack.power_kw == s.overrides["rack.power_kw"]
        lay = s.layouts[0]
        single = optimize(r.workload, r.rack, r.catalog, layout=lay, racks=s.racks, time_limit_s=s.time_limit_s,
                          explain=False)
        row = rows[(s.name, lay)]
        assert row["hash"] == r.input_hash(lay)
        assert row["status"] == single.status, s.name
        assert _close(row["throughput"], single.throughput_tasks_per_hour), s.name
        assert _close(row["power_w"], single.power_w), s.name
        assert json.loads(row["configuration_json"]) == single.configuration, s.name
    for name in ("results.csv", "results.json", "report.html"):
        assert (tmp_path / name).stat().st_size > 0
    html = (tmp_path / "report.html").read_text()
    assert "<svg" in html and not re.search(r"(src|href)=[\"']?(https?:)?//", html)  # self-contained


def test_rerun_skips_and_duplicates_solve_once(tmp_path):
    s = base_scenario("agent", "r15", catalog=str(MINI), layouts=["a", "b"], time_limit_s=30)
    scen = [vary(s, {"rack.power_kw": 12}, name="x"), vary(s, {"rack.power_kw": 12}, name="x-again"),
            vary(s, {"rack.power_kw": 9}, name="y")]
    st = run_batch(scen, tmp_path, workers=0, export=False).stats
    assert (st.rows, st.solved, st.copied, st.skipped) == (6, 4, 2, 0)
    more = scen + [vary(s, {"rack.power_kw": 9.0}, name="y-copy")]
    st = run_batch(more, tmp_path, workers=0, export=False).stats
    assert (st.rows, st.solved, st.copied, st.skipped) == (8, 0, 2, 6)
    rows = _rows(tmp_path)
    assert rows[("y-copy", "b")]["throughput"] == rows[("y", "b")]["throughput"]


def test_failures_are_rows_and_the_batch_goes_on(tmp_path):
    s = base_scenario("agent", "r15", catalog=str(MINI), layouts=["b"], time_limit_s=30)
    scen = [vary(s, {"rack.power_kw": 12}, name="ok"),
            vary(s, {"objective": "min_cost"}, name="raises"),  # optimize raises: no required throughput
            vary(s, {"workload.classes[0].share": 0.9}, name="invalid"),  # shares no longer sum to 1
            vary(s, {"rack.power_kw": 9}, name="crashes"),
            vary(s, {"rack.power_kw": 10}, name="ok2")]
    st = run_batch(scen, tmp_path, workers=2, export=True, solve_fn=_crash_at_9kw).stats
    rows = _rows(tmp_path)
    assert rows[("ok", "b")]["status"] == rows[("ok2", "b")]["status"] == "optimal"
    assert "required_tasks_per_hour" in rows[("raises", "b")]["error"]
    assert "shares sum to" in rows[("invalid", "b")]["error"]
    assert "worker process died" in rows[("crashes", "b")]["error"]
    assert st.errors == 3


def _crash_at_9kw(inputs: dict, catalog: dict) -> dict:
    """Test solve function: the worker process dies hard on one scenario (importable by forkserver workers)."""
    if inputs["rack"]["power_kw"] == 9.0:
        os._exit(3)
    return solve_job(inputs, catalog)


def test_heaviest_solves_are_dispatched_first(tmp_path):
    """With more than one worker the queue is longest-first (hybrid, then B, then A; rows before single racks), so
    a heavy solve does not start last and leave the other worker idle; with one worker the scenarios' order
    stays."""
    from advisor.studies.batch import expected_work

    s = base_scenario("agent", "r15", catalog=str(MINI), layouts=["a", "b", "hybrid"], time_limit_s=30)
    scen = [vary(s, {"rack.power_kw": 12}, name="one"), vary(s, {"rack.power_kw": 12, "racks": 2}, name="row")]
    order: dict[int, list[tuple[str, str]]] = {}

    class Recording(Runner):
        def _submit(self, ex, job):
            order.setdefault(self.workers, []).append((job.scenario, job.layout))
            return super()._submit(ex, job)

    for workers in (1, 2):
        with Recording(tmp_path / f"w{workers}", workers=workers, progress=False) as runner:
            st = runner.run(scen)
        assert st.solved == 6 and st.errors == 0
    assert order[1] == [(n, lay) for n in ("one", "row") for lay in ("a", "b", "hybrid")]
    assert order[2] == [("row", "hybrid"), ("one", "hybrid"), ("row", "b"), ("one", "b"), ("row", "a"), ("one", "a")]
    jobs = {(j.scenario, j.layout): j for j in make_jobs(scen)}
    assert expected_work(jobs[("one", "hybrid")]) > expected_work(jobs[("row", "b")])


def test_kill_9_midway_then_rerun(tmp_path):
    data = {**GRID, "scenarios": [{"name": "K", "layouts": ["a", "b"]}],
            "grid": {"rack.power_kw": [9, 11, 13, 15], "workload.tool_share": [0.3, 0.6, 0.8, 0.9]}}
    f = tmp_path / "scen.yaml"
    f.write_text(yaml.safe_dump(data))
    total = 32
    out = tmp_path / "out"
    proc = subprocess.Popen([str(ADVISOR), "batch", str(f), "-o", str(out), "--workers", "2", "--quiet"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    done = 0
    t0 = time.time()
    try:
        while time.time() - t0 < 120 and proc.poll() is None:
            time.sleep(0.2)
            if (out / DB_NAME).exists():
                try:
                    with sqlite3.connect(out / DB_NAME, timeout=5) as db:
                        done = db.execute("SELECT COUNT(*) FROM results").fetchone()[0]
                except sqlite3.OperationalError:
                    continue
                if done >= 6:
                    break
        assert proc.poll() is None, f"batch ended before the kill: {proc.stderr.read().decode()[-2000:]}"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the orphaned workers of the session started above
        except ProcessLookupError:
            pass
    with sqlite3.connect(out / DB_NAME) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        before = db.execute("SELECT COUNT(*) FROM results").fetchone()[0]
        assert db.execute("SELECT COUNT(*) FROM results WHERE status IS NULL OR hash IS NULL").fetchone()[0] == 0
    assert 6 <= before < total
    st = run_batch(f, out, workers=2).stats
    assert st.skipped == before and st.solved == total - before and st.errors == 0
    with sqlite3.connect(out / DB_NAME) as db:
        assert db.execute("SELECT COUNT(*) FROM results").fetchone()[0] == total
        assert db.execute("SELECT COUNT(DISTINCT scenario || '|' || layout) FROM results").fetchone()[0] == total
        assert db.execute("SELECT COUNT(DISTINCT hash) FROM results").fetchone()[0] == total


def test_dask_matches_local(tmp_path):
    distributed = pytest.importorskip("distributed")
    data = {**GRID, "scenarios": [{"name": "D"}], "grid": {"workload.tool_share": [0.3, 0.7, 0.9],
                                                           "rack.power_kw": [10, 15]}}
    scen = scenarios_from_data(data)
    run_batch(scen, tmp_path / "local", workers=2, export=False)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        st = run_batch(scen, tmp_path / "dask", scheduler=client, export=False).stats
    assert st.solved == 18 and st.errors == 0
    local, remote = _rows(tmp_path / "local"), _rows(tmp_path / "dask")
    assert local.keys() == remote.keys()
    for k, a in local.items():
        b = remote[k]
        assert a["hash"] == b["hash"] and a["status"] == b["status"]
        assert _close(a["throughput"], b["throughput"])
        assert json.loads(a["configuration_json"]) == json.loads(b["configuration_json"])


def test_report_escapes_names(tmp_path):
    s = base_scenario("agent", "r15", catalog=str(MINI), layouts=["a"], time_limit_s=30)
    run_batch([vary(s, {"rack.power_kw": 12}, name="<script>alert(1)</script>")], tmp_path, workers=0)
    html = (tmp_path / "report.html").read_text()
    assert "<script>alert" not in html and "&lt;script&gt;alert" in html


# ---------------------------------------------------------------------------------------------- what-if


def test_crossover_agrees_with_dense_sweep(tmp_path):
    base = base_scenario("agent", "r15", catalog=str(MINI), layouts=["a", "hybrid"], time_limit_s=30)
    with Runner(tmp_path, workers=2) as runner:
        res = crossover(base, TOOL_SHARE, 0.3, 0.7, runner, tol=0.01, scan=4)
        assert len(res.crossovers) == 1, res.sentences()
        c = res.crossovers[0]
        assert c.half_width <= 0.01 and (c.before, c.after) == ("a", "hybrid")
        assert res.sentence().startswith("hybrid overtakes a at tool_share = ")
        step = 0.005
        path, values = parse_vary(f"{TOOL_SHARE}=0.4:0.6:{step}")
        dense = sweep(base, [(path, values)], runner)
    winners = [(p["values"][TOOL_SHARE], p["best"]) for p in dense.points]
    changes = [(x0, x1) for (x0, w0), (x1, w1) in zip(winners, winners[1:]) if w0 != w1]
    assert len(changes) == 1 and winners[0][1] == "a" and winners[-1][1] == "hybrid"
    x0, x1 = changes[0]
    # the crossover lies in (x0, x1]; the bisection's interval [value - hw, value + hw] must meet it
    assert c.value - c.half_width <= x1 + 1e-12 and c.value + c.half_width >= x0 - 1e-12
    assert abs(c.value - (x0 + x1) / 2) <= c.half_width + step


@pytest.mark.parametrize("against", ["cost", "power"])
def test_pareto_front_non_dominated_and_feasible(tmp_path, mini_catalog, against):
    base = base_scenario("agent", "r15", catalog=str(MINI), time_limit_s=30,
                         overrides={TOOL_SHARE: 0.8}, layouts=["b", "hybrid"])
    with Runner(tmp_path, workers=2) as runner:
        res = pareto(base, runner, against=against, points=5)
    front = res.front
    assert len(front) >= 2
    for p in front:
        for q in front:
            if p is not q:
                assert not (q.throughput >= p.throughput and q.cost <= p.cost
                            and (q.throughput > p.throughput or q.cost < p.cost))
    assert non_dominated(res.candidates) == front
    r = resolve(base)
    for p in front:
        cfg = Configuration.model_validate(p.configuration)
        ev = evaluate(cfg, r.workload, r.rack, mini_catalog)
        assert ev.within_budgets and all(not u.exceeded for u in ev.racks)
        assert _close(ev.throughput_tasks_per_hour, p.throughput)
        if p.target is not None:
            assert ev.throughput_tasks_per_hour >= p.target * (1 - 1e-6)
        assert _close(ev.power_w, p.power_w)
        if against == "cost":
            price = sum(g.count * (mini_catalog.chassis[g.chassis].price_usd + mini_catalog.chassis[g.chassis]
                                   .cpu_sockets * mini_catalog.cpus[g.cpu].list_price_usd
                                   + g.gpus_per_server * (mini_catalog.gpus[g.gpu].price_usd if g.gpu else 0)
                                   + mini_catalog.chassis[g.chassis].memory_gb * CostAssumptions().memory_usd_per_gb)
                        for g in cfg.servers)
            assert _close(price, p.cost)
    # more throughput never comes cheaper along the front
    pts = sorted((p.cost, p.throughput) for p in front)
    assert all(b[1] > a[1] for a, b in zip(pts, pts[1:]))


def test_robustness_regret(tmp_path):
    data = {"catalog": str(MINI), "workload": "agent", "rack": "r15", "time_limit_s": 30, "layouts": ["a", "hybrid"],
            "samples": {"n": 6, "seed": 11, "vary": {TOOL_SHARE: [0.2, 0.95],
                                                     "rack.power_kw": {"low": 8, "high": 15}}}}
    scen = scenarios_from_data(data)
    with Runner(tmp_path, workers=2) as runner:
        (res,) = robustness(scen, runner)
    assert res.draws == 6 and sum(x.wins for x in res.layouts) == 6
    assert math.isclose(sum(x.win_share for x in res.layouts), 1.0)
    for x in res.layouts:
        assert 0 <= x.mean_regret <= x.p95_regret + 1e-12 <= x.max_regret + 1e-12 <= 1
    hybrid = next(x for x in res.layouts if x.layout == "hybrid")
    assert hybrid.max_regret < 1e-5 and hybrid.top_share == 1.0  # hybrid can do all that A does
    assert "draws" in res.sentence()


def test_cli_sweep_and_crossover(tmp_path):
    env = {**os.environ, "COLUMNS": "200"}
    out = tmp_path / "sw"
    p = subprocess.run([str(ADVISOR), "sweep", "-w", "agent", "-r", "r15", "--catalog", str(MINI), "--layout", "a",
                        "--layout", "hybrid", "--vary", "rack.power_kw=9:15:6", "-o", str(out), "-j", "2", "-q"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    assert (out / "sweep.csv").exists() and (out / "sweep.svg").exists()
    assert len((out / "sweep.csv").read_text().splitlines()) == 1 + 2 * 2
    p = subprocess.run([str(ADVISOR), "crossover", "-w", "agent", "-r", "r15", "--catalog", str(MINI),
                        "--layout", "a", "--layout", "hybrid", "--vary", "workload.tool_share=0.3:0.7",
                        "--tol", "0.05", "--scan", "2", "-o", str(out), "-j", "2", "-q"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "hybrid overtakes a at tool_share = " in p.stdout
    p = subprocess.run([str(ADVISOR), "sweep", "-w", "agent", "-r", "r15", "--catalog", str(MINI),
                        "--vary", "rack.nope=1:2:1", "-q"], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 2 and "rack.nope" in p.stderr
