"""The simulator against exact queueing results, the trace generator/fitter round trip, and bad-row reporting."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
from typer.testing import CliRunner

from advisor.catalog import load_workload
from advisor.errors import InputError
from advisor.simulation.des import (
    CPU,
    IO,
    DELAY,
    GPU,
    ClassSpec,
    QueueSpec,
    SimModel,
    SimSettings,
    SkuSpec,
    StageSpec,
    stage_blocks as _blocks,
    build_model,
    simulate_model,
)
from advisor.simulation.fit import fit_workload, read_traces, stage_shares
from advisor.simulation.traces import generate_spans, write_spans
from models.config import Configuration
from models.queueing import Station, exact_mva, mmc_mean_wait
from models.workload import Workload


def _model(stages: list[StageSpec], skus=(), queues=None, name="t") -> SimModel:
    cls = ClassSpec("c", 1.0, 0.0, "q" if queues else None, stages, _blocks(stages))
    return SimModel([cls], list(skus), queues or {}, name, name)


def _within(sim: dict, exact: float, slack: float = 0.0) -> bool:
    return abs(sim["mean"] - exact) <= sim["half_width"] + slack * exact


def test_mmc_pool_matches_erlang_c(mini_catalog):
    """One exponential CPU stage on a 4-slot tool queue, open Poisson arrivals at 80% load: M/M/4."""
    wl = Workload.model_validate({
        "id": "mmc", "name": "mmc", "source": "test", "served_model": mini_catalog.served_models.entries[
            next(iter(mini_catalog.served_models.entries))],
        "classes": [{"name": "c", "share": 1.0, "stages": [
            {"resource": "cpu", "name": "tool", "count": 1, "core_seconds": 2.0, "parallelism": 1, "cv": 1.0}]}]})
    cpu_server = next(c for c in mini_catalog.chassis if c.role == "cpu")
    cfg = Configuration.model_validate({"servers": [{"chassis": cpu_server.id, "cpu": "cpu-a", "count": 1,
                                                     "queue_cores": {"shared": 4}}]})
    model = build_model(cfg, wl, mini_catalog)
    q = model.queues["shared"]
    assert q.slots == 4
    s = 2.0 / q.per_core_perf
    lam = 0.8 * 4 / s
    res = simulate_model(model, SimSettings(arrival_rate_per_hour=lam * 3600, duration_s=20000, warmup_s=500,
                                            replications=5, seed=11))
    wq = mmc_mean_wait(4, lam, s)
    assert _within(res["tool_wait_mean_s"]["shared"], wq), (res["tool_wait_mean_s"], wq)
    assert _within(res["mean_task_seconds"], wq + s), (res["mean_task_seconds"], wq + s)
    assert res["utilization"]["cpu:shared"]["mean"] == pytest.approx(0.8, abs=0.02)
    assert res["truncated"] == 0


def test_closed_network_matches_exact_mva():
    """GPU replica (processor sharing, load-dependent rate b/(L0+(b-1)d)) + 2-slot exponential tool queue + an
    exponential delay, N agents: a product-form network, so exact MVA gives its throughput."""
    l0, d, tool_s, think, n = 2.0, 0.5, 3.0, 4.0, 12
    stages = [StageSpec("c/gen", "gen", GPU, 1, 0, 1.0, rel=[1.0]),
              StageSpec("c/tool", "tool", CPU, 1, 0, 1.0, mean_s=tool_s, queue="q"),
              StageSpec("c/wait", "wait", DELAY, 1, 0, 1.0, mean_s=think)]
    sku = SkuSpec("g", 1, l0, d, 1000, 1.0, 1.0, 1, 1)
    model = _model(stages, [sku], {"q": QueueSpec("q", 2, 1.0, 2, 1.0, 0.0)})
    res = simulate_model(model, SimSettings(agents=n, duration_s=20000, warmup_s=500, replications=5, seed=5))
    stations = [Station("gpu", l0, lambda b: b / (l0 + (b - 1) * d) * l0),
                Station("cpu", tool_s, lambda b: np.minimum(b, 2))]
    x = exact_mva(stations, think, n).throughput * 3600
    assert _within(res["throughput_tasks_per_hour"], x), (res["throughput_tasks_per_hour"], x)


def _two_length_loop() -> SimModel:
    """Two classes of pure delays, 10 s and 1,000 s, half the tasks each: a closed loop of N agents completes
    N / 505 tasks/s exactly."""
    short = [StageSpec("s/wait", "wait", DELAY, 1, 0, 0.0, mean_s=10.0)]
    long = [StageSpec("l/wait", "wait", DELAY, 1, 0, 0.0, mean_s=1000.0)]
    return SimModel([ClassSpec("s", 0.5, 0.0, None, short, _blocks(short)),
                     ClassSpec("l", 0.5, 0.0, None, long, _blocks(long))], [], {}, "two", "two")


def test_closed_loop_starts_near_its_steady_state():
    """After one long-task time of warm-up, a short window already sees the steady loop: agents start in the
    classes' time-weighted mix at random points of a task. (All started at 0 in the arrival mix, the short agents
    turn long within a few short tasks and the long tasks end together: the previous engine,
    bench/reference_sim.py, counted 4,553 tasks/h in this window against the exact 1,426.)"""
    n = 200
    res = simulate_model(_two_length_loop(), SimSettings(agents=n, duration_s=300, warmup_s=1000, replications=5,
                                                         seed=4, drain=False))
    x = res["throughput_tasks_per_hour"]
    assert x["mean"] == pytest.approx(n / 505 * 3600, rel=0.1), x
    assert _within(x, n / 505 * 3600), x


def test_replications_in_worker_processes_give_the_serial_figures():
    """`workers` only changes where the replications run: each has its own seed, so the figures are identical."""
    l0, d = 2.0, 0.5
    stages = [StageSpec("c/gen", "gen", GPU, 3, 0.5, 1.0, rel=[1.0]),
              StageSpec("c/tool", "tool", CPU, 3, 0.5, 1.0, mean_s=3.0, queue="q"),
              StageSpec("c/wait", "wait", DELAY, 1, 0, 1.0, mean_s=4.0)]
    model = _model(stages, [SkuSpec("g", 2, l0, d, 8, 1.0, 1.0, 1, 2)], {"q": QueueSpec("q", 4, 1.0, 4, 1.0, 0.0)})
    runs = [simulate_model(model, SimSettings(agents=10, duration_s=2000, warmup_s=100, replications=3, seed=9,
                                              workers=w)) for w in (1, 2)]
    serial, parallel = ([{k: v for k, v in r.items() if k != "wall_s"} for r in run["per_replication"]]
                        for run in runs)
    assert serial == parallel
    assert runs[0]["throughput_tasks_per_hour"] == runs[1]["throughput_tasks_per_hour"]
    assert len({r["throughput_tasks_per_hour"] for r in serial}) == 3  # the replications do differ
    with pytest.raises(InputError, match="workers"):
        simulate_model(model, SimSettings(agents=10, duration_s=100, replications=2, workers=0))


def _closed_loop_sim(cfg, wl, catalog, n: int, x_cf: float, tasks: int, replications: int) -> dict:
    """n agents in the simulator, about `tasks` measured tasks per replication, warm-up of 3 mean task times at the
    closed form's throughput x_cf (tasks/h), tasks followed to their end."""
    from advisor.simulation.des import auto_duration

    dur = auto_duration(x_cf, n / x_cf * 3600.0 / 4, tasks)
    return simulate_model(build_model(cfg, wl, catalog), SimSettings(
        agents=n, duration_s=dur, warmup_s=min(3.0 * n / x_cf * 3600.0, dur), replications=replications,
        seed=2026, drain=True, wall_clock_s=600))


def test_closed_loop_with_high_scv_tool_queue_matches_simulation(builtin):
    """CPU-bound swe-agent on one HGX B200 (28 tool cores: 14 slots; tool-call SCV ~30), closed loop at twice the
    knee population: the closed form's throughput within 6% and its p95 task time within 7% of the simulator
    (4 replications x ~2,500 tasks, tasks followed to their end). Before the closed loop carried the call-time
    spread (and had unrounded servers), its p95 was 8% low here and its throughput 6% high."""
    from advisor.simulation.des import closed_form_at

    wl, rack = builtin.workloads["swe-agent"], builtin.racks["liquid-130kw"]
    cfg = Configuration.model_validate({"name": "cpu-bound-swe", "servers": [
        {"chassis": "hgx-b200-10u", "cpu": "xeon-8480c", "gpu": "b200", "gpus_per_server": 8, "count": 1,
         "orchestration_cores_per_gpu": 2.0, "queue_cores": {"shared": 28.0}}]})
    ev = closed_form_at(cfg, wl, rack, builtin)
    assert ev.queues[0].wait_scale > 10  # the high-spread regime this test is about
    n = math.ceil(2 * ev.throughput_tasks_per_hour / 3600.0 * ev.unloaded_task_seconds)
    cf = closed_form_at(cfg, wl, rack, builtin, agents=n)
    x_cf = cf.closed_loop.throughput_tasks_per_hour
    sim = _closed_loop_sim(cfg, wl, builtin, n, x_cf, tasks=2500, replications=4)
    assert x_cf == pytest.approx(sim["throughput_tasks_per_hour"]["mean"], rel=0.06)
    assert cf.p95_task_seconds == pytest.approx(sim["p95_task_seconds"]["mean"], rel=0.07)


def test_gpu_batch_limit_caps_throughput():
    """Saturated replica with batch limit B completes B / (L0 + (B-1) d) calls per second."""
    l0, d, b = 1.0, 0.25, 4
    model = _model([StageSpec("c/gen", "gen", GPU, 1, 0, 0.5, rel=[1.0])], [SkuSpec("g", 1, l0, d, b, 1.0, 1.0, 1, 1)])
    res = simulate_model(model, SimSettings(agents=40, duration_s=5000, warmup_s=100, replications=3, seed=1))
    cap = b / (l0 + (b - 1) * d) * 3600
    assert res["throughput_tasks_per_hour"]["mean"] == pytest.approx(cap, rel=0.02)
    assert res["utilization"]["gpu"]["mean"] == pytest.approx(1.0, abs=0.01)


def test_counts_keep_their_mean():
    """Gamma counts with stochastic rounding keep fractional means (16.7) exactly on average."""
    stages = [StageSpec("c/wait", "wait", DELAY, 2.7, 0.8, 0.0, mean_s=1.0)]
    res = simulate_model(_model(stages), SimSettings(arrival_rate_per_hour=3600, duration_s=20000, warmup_s=0,
                                                     replications=2, seed=3))
    assert res["mean_task_seconds"]["mean"] == pytest.approx(2.7, rel=0.03)


# ------------------------------------------------------------------------------------------------- traces and fit
PROFILE = {
    "id": "known", "name": "known", "source": "test", "served_model": "llama-3.1-70b",
    "classes": [
        {"name": "short", "share": 0.6, "sandbox_memory_gb": 0.5, "stages": [
            {"resource": "delay", "name": "start", "count": 1, "seconds": 2.0, "cv": 1.0},
            {"resource": "gpu", "name": "gen", "count": 5, "count_cv": 0.5, "cv": 0.8,
             "new_input_tokens": 800, "cached_input_tokens": 4000, "output_tokens": 300},
            {"resource": "cpu", "name": "tool", "count": 5, "count_cv": 0.5, "core_seconds": 4.0,
             "parallelism": 2, "cv": 1.5}]},
        {"name": "long", "share": 0.4, "sandbox_memory_gb": 2.0, "stages": [
            {"resource": "gpu", "name": "gen", "count": 12, "count_cv": 0.3, "cv": 1.0,
             "new_input_tokens": 1000, "cached_input_tokens": 9000, "output_tokens": 500},
            {"resource": "cpu", "name": "test", "count": 1, "core_seconds": 30.0, "parallelism": 1, "cv": 1.0}]},
    ],
}
TOL_SHARE = 0.03  # absolute, class shares
TOL_COUNT = 0.06  # relative, mean counts
TOL_MEAN = 0.08  # relative, mean tokens / core-seconds / seconds


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_trace_round_trip(builtin, tmp_path, suffix):
    wl = load_workload(PROFILE, builtin)
    cpu = builtin.cpus["epyc-9965"]  # measured on a CPU slower than the reference: fit must undo it
    spans = generate_spans(wl, 3000, seed=7, gpu=builtin.gpus["h100-sxm"], cpu=cpu)
    path = tmp_path / f"t{suffix}"
    write_spans(spans, path)
    read = read_traces(path)
    assert not read.bad and len(read.spans) == len(spans)
    fitted = load_workload(fit_workload(read, cpu.per_core_perf, "llama-3.1-70b"), builtin)
    for c in wl.classes:
        fc = fitted.class_named(c.name)
        assert fc.share == pytest.approx(c.share, abs=TOL_SHARE)
        assert fc.sandbox_memory_gb == pytest.approx(c.sandbox_memory_gb)
        assert [s.name for s in fc.stages] == [s.name for s in c.stages]
        for s, f in zip(c.stages, fc.stages):
            assert f.resource == s.resource
            assert f.count == pytest.approx(s.count, rel=TOL_COUNT)
            if s.count_cv:
                assert f.count_cv == pytest.approx(s.count_cv, abs=0.08)
            if s.resource == "gpu":
                assert f.output_tokens == pytest.approx(s.output_tokens, rel=TOL_MEAN)
                assert f.new_input_tokens == pytest.approx(s.new_input_tokens, rel=TOL_MEAN)
                assert f.cached_input_tokens == pytest.approx(s.cached_input_tokens, rel=TOL_MEAN)
                assert f.cv == pytest.approx(s.cv, abs=0.1)
            elif s.resource == "cpu":
                assert f.core_seconds == pytest.approx(s.core_seconds, rel=TOL_MEAN)
                assert f.parallelism == pytest.approx(s.parallelism)
                assert f.cv == pytest.approx(s.cv, abs=0.15)
            else:
                assert f.seconds == pytest.approx(s.seconds, rel=TOL_MEAN)
    shares = stage_shares(read, seed=1, boot=300)
    assert sum(v["share"] for v in shares.values()) == pytest.approx(1.0)
    for v in shares.values():
        assert v["lo"] <= v["share"] <= v["hi"]
    assert stage_shares(read, seed=1, boot=300) == shares  # seeded


def test_bad_rows_reported_by_line(tmp_path):
    good = {"task_id": "a", "class": "c", "stage": "s", "resource": "delay", "start": 0, "end": 1}
    lines = [
        json.dumps(good),
        json.dumps({**good, "start": 2, "end": 3}),
        json.dumps({**good, "start": 5, "end": 4}),  # 3: end before start
        json.dumps({**good, "resource": "tpu"}),  # 4: unknown resource
        "",
        json.dumps({k: v for k, v in good.items() if k != "stage"}),  # 6: missing field
        "{not json",  # 7
        json.dumps({**good, "resource": "gpu"}),  # 8: gpu without tokens
    ]
    p = tmp_path / "t.jsonl"
    p.write_text("\n".join(lines) + "\n")
    read = read_traces(p)
    assert [b[0] for b in read.bad] == [3, 4, 6, 7, 8]
    assert "end" in read.bad[0][1] and "resource" in read.bad[1][1] and "stage" in read.bad[2][1]
    assert len(read.spans) == 2
    notes = fit_workload(read, 1.0, "llama-3.1-70b")["notes"]
    assert "5 bad row(s)" in notes and "3, 4, 6, 7, 8" in notes

    c = tmp_path / "t.csv"
    c.write_text("task_id,class,stage,resource,start,end\na,c,s,delay,0,1\na,c,s,delay,3,2\na,c,s,cpu,x,2\n")
    read = read_traces(c)
    assert [b[0] for b in read.bad] == [3, 4]


def test_otel_export_mapping(tmp_path):
    def attr(k, v):
        key = "intValue" if isinstance(v, int) else "stringValue"
        return {"key": k, "value": {key: v}}

    def span(name, start, end, **a):
        return {"name": name, "startTimeUnixNano": str(int(start * 1e9)), "endTimeUnixNano": str(int(end * 1e9)),
                "attributes": [attr(k, v) for k, v in a.items()]}

    base = {"agent.task_id": "t1", "agent.class": "c"}
    spans = [
        span("chat", 0, 2, **base, **{"agent.stage": "gen", "agent.resource": "llm", "gen_ai.usage.input_tokens": 100,
                                      "gen_ai.usage.output_tokens": 50}),
        span("bash", 2, 5, **base, **{"agent.stage": "tool", "agent.resource": "tool", "agent.cores": 2}),
        span("http", 0, 1),  # not an agent span
        span("bad", 6, 5, **base, **{"agent.stage": "x", "agent.resource": "delay"}),
    ]
    p = tmp_path / "otel.json"
    p.write_text(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}))
    read = read_traces(p)
    assert read.format == "otel-json" and read.skipped_non_agent == 1
    assert [b[0] for b in read.bad] == [4]
    assert {(s.stage, s.resource) for s in read.spans} == {("gen", "gpu"), ("tool", "cpu")}
    data = fit_workload(read, 1.0, "llama-3.1-70b")
    st = {s["name"]: s for s in data["classes"][0]["stages"]}
    assert st["gen"]["output_tokens"] == 50 and st["tool"]["core_seconds"] == pytest.approx(6.0)


def test_empty_trace_is_an_error(tmp_path):
    p = tmp_path / "empty.jsonl"
    p.write_text("")
    with pytest.raises(InputError, match="empty"):
        read_traces(p)
    p.write_text(json.dumps({"task_id": "a", "class": "c", "stage": "s", "resource": "delay", "start": 2, "end": 1}))
    with pytest.raises(InputError, match="no usable rows"):
        read_traces(p)


def test_cli_gen_fit_simulate(tmp_path):
    from advisor.cli.main import app

    runner = CliRunner()
    tr = tmp_path / "t.jsonl"
    r = runner.invoke(app, ["gen-traces", "--workload", "batch-generation", "-n", "300", "-o", str(tr), "--seed", "2"])
    assert r.exit_code == 0, r.output
    out = tmp_path / "w.yaml"
    r = runner.invoke(app, ["fit", str(tr), "-o", str(out), "--served-model", "llama-3.1-70b"])
    assert r.exit_code == 0, r.output
    assert r.output.index("Stage shares") < r.output.index("wrote")
    cfg = tmp_path / "c.yaml"
    cfg.write_text("name: one\nservers:\n  - {chassis: dgx-h100, cpu: xeon-8480c, gpu: h100-sxm, gpus_per_server: 8, "
                   "count: 1, orchestration_cores_per_gpu: 2}\n")
    r = runner.invoke(app, ["simulate", str(cfg), "--workload", str(out), "--rack", "air-40kw", "--arrival-rate",
                            "20000", "--duration", "300", "--replications", "2", "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    thr = res["simulation"]["throughput_tasks_per_hour"]["mean"]
    assert math.isclose(thr, 20000, rel_tol=0.1)


SANDBOX_LIMITED = {  # bench/validate.py's hgx-b200+ampere/model-eval/r0.75: sandbox memory of the agent-run queue binds
    "name": "sandbox-limited-hybrid", "servers": [
        {"chassis": "hgx-b200-10u", "cpu": "xeon-8480c", "gpu": "b200", "gpus_per_server": 8, "count": 1,
         "orchestration_cores_per_gpu": 2.0, "queue_cores": {}},
        {"chassis": "ampere-1u-1s", "cpu": "ampereone-a192-32x", "count": 1,
         "queue_cores": {"agent-run": 99.0, "rescore": 41.0}}],
    "queues": [{"name": "agent-run", "classes": ["agent-run"]}, {"name": "rescore", "classes": ["rescore"]}]}


def test_agents_beyond_the_sandboxes_wait_for_one(builtin):
    """More agents than sandboxes hold: the live population is the one whose class task times fill the queue that
    fills first (Little's law per class), the others queue for a sandbox of that queue, and the wait is part of
    the task times of its classes only."""
    from advisor.simulation.des import closed_form_at
    from models.pipeline import _sandbox_population

    wl, rack = builtin.workloads["model-eval"], builtin.racks["liquid-130kw"]
    cfg = Configuration.model_validate(SANDBOX_LIMITED)
    n = 213
    ev = closed_form_at(cfg, wl, rack, builtin, agents=n)
    cl = ev.closed_loop
    x = cl.throughput_tasks_per_hour / 3600.0
    assert cl.agents < n and not cl.capped
    assert cl.sandbox_wait_seconds == pytest.approx((n - cl.agents) / x, rel=1e-12)
    assert ev.mean_task_seconds == pytest.approx(n / x, rel=1e-9)  # Little's law over every agent
    assert "105 live" in ev.operating_point or f"{cl.agents} live" in ev.operating_point
    warn = next(w for w in ev.warnings if "wait for memory" in w)
    share = next(c.share for c in wl.classes if c.name == "agent-run")
    assert f"{(n - cl.agents) / (x * share):,.0f} s on average" in warn and "'agent-run'" in warn
    # the live population: agent-run's sandboxes full at the class task times of the live network
    at_live = closed_form_at(cfg, wl, rack, builtin, agents=cl.agents)
    times = {st.task_class: 0.0 for st in at_live.stage_times}
    for st in at_live.stage_times:
        times[st.task_class] += st.service_s + st.wait_s
    pools = {q.name: q.sandbox_memory_gb for q in at_live.queues}
    mem = sum(c.share * times[c.name] * c.sandbox_memory_gb for c in wl.classes if c.name == "agent-run")
    t_mix = sum(c.share * times[c.name] for c in wl.classes)
    assert abs(pools["agent-run"] * t_mix / mem - cl.agents) <= 2  # a fixed point, up to whole agents
    assert at_live.closed_loop.sandbox_wait_seconds == 0.0
    # the wait lengthens agent-run's tasks only: the p95 of the mix rises well above the live loop's
    assert ev.p95_task_seconds > at_live.p95_task_seconds + 0.5 * (n - cl.agents) / (x * share)
    # with every class equally long the population is the share-weighted one (the formula before task times)
    from models.pipeline import _queue_pools, _queues, resolve_groups
    from models.assumptions import ModelAssumptions

    queues = _queues(cfg, wl)
    groups, _ = resolve_groups(cfg, wl, builtin, ModelAssumptions(), rack)
    qp = _queue_pools(groups, queues)
    cq = {c: q.name for q in queues for c in q.classes}
    pop, tight, held = _sandbox_population(wl, queues, cq, qp, {c.name: 7.0 for c in wl.classes})
    expect = min(qp.mem[q.name] / sum(c.share * c.sandbox_memory_gb for c in wl.classes if cq[c.name] == q.name)
                 for q in queues)
    assert pop == pytest.approx(expect, rel=1e-12) and (tight, held) == ("agent-run", "memory")



TWO_LIMITED = {  # bench/validate.py's hgx-b200+ampere/rl-rollout/r0.5: both queues' sandbox memory limits agents
    "name": "two-limited-queues", "servers": [
        {"chassis": "hgx-b200-10u", "cpu": "xeon-8480c", "gpu": "b200", "gpus_per_server": 8, "count": 1,
         "orchestration_cores_per_gpu": 2.0, "queue_cores": {}},
        {"chassis": "ampere-1u-1s", "cpu": "ampereone-a192-32x", "count": 1,
         "queue_cores": {"finished": 81.0, "capped": 107.0}}],
    "queues": [{"name": "finished", "classes": ["finished"]}, {"name": "capped", "classes": ["capped"]}]}


def _two_limited(builtin, n: int | None = None):
    from advisor.simulation.des import closed_form_at

    wl, rack = builtin.workloads["rl-rollout"], builtin.racks["liquid-130kw"]
    cfg = Configuration.model_validate(TWO_LIMITED)
    if n is None:
        ev = closed_form_at(cfg, wl, rack, builtin)
        n = math.ceil(2 * ev.throughput_tasks_per_hour / 3600.0 * ev.unloaded_task_seconds)
    return cfg, wl, n, closed_form_at(cfg, wl, rack, builtin, agents=n)


def test_two_limited_queues_share_the_wait(builtin):
    """Two queues whose sandboxes both limit the agents, one of them bound by its tool cores: the agents beyond the
    live ones wait at both (docs/model.md 6.3, `_waiting_split`), the queue whose cores bind more per task, and the
    waits still add up to N / X less the live loop's task times (Little's law over every agent)."""
    _cfg, wl, n, ev = _two_limited(builtin)
    cl = ev.closed_loop
    x = cl.throughput_tasks_per_hour / 3600.0
    assert cl.agents < n and cl.sandbox_wait_seconds == pytest.approx((n - cl.agents) / x, rel=1e-12)
    assert ev.mean_task_seconds == pytest.approx(n / x, rel=1e-9)
    warn = next(w for w in ev.warnings if "agents wait for" in w)
    waits = {q: float(w.replace(",", "")) for w, q in
             re.findall(r"([0-9,.]+) s on average for a task of queue '([a-z]+)'", warn)}
    share = {c.name: c.share for c in wl.classes}
    assert set(waits) == {"finished", "capped"} and min(waits.values()) > 0
    assert waits["capped"] > waits["finished"]  # cpu:capped is the bottleneck: its tasks pile up
    # each rounded to a second in the warning
    assert sum(share[c] * w for c, w in waits.items()) == pytest.approx((n - cl.agents) / x, abs=1.0)


def test_two_limited_queues_p95_matches_simulation(builtin):
    """The same loop in the simulator (4 replications x ~2,500 tasks, tasks followed to their end): throughput
    within 6%, and the closed form's p95 task time within 15% (issue #17's target; 3,401 s against 3,789 +- 229 s
    when written, -10.2%). Charging the whole wait to the queue that fills first gave 2,610 s (-31%); sharing it
    out with only each task's own gamma spread, 3,260 s (-14.0%)."""
    cfg, wl, n, ev = _two_limited(builtin)
    x_cf = ev.closed_loop.throughput_tasks_per_hour
    sim = _closed_loop_sim(cfg, wl, builtin, n, x_cf, tasks=2500, replications=4)
    assert x_cf == pytest.approx(sim["throughput_tasks_per_hour"]["mean"], rel=0.06)
    assert ev.p95_task_seconds == pytest.approx(sim["p95_task_seconds"]["mean"], rel=0.15)

def _held(ev, wl, queue: str) -> float:
    """Live tasks of the mix `queue`'s sandbox memory holds at the class task times of evaluation `ev`."""
    times = {st.task_class: 0.0 for st in ev.stage_times}
    for st in ev.stage_times:
        times[st.task_class] += st.service_s + st.wait_s
    mem = {q.name: q.sandbox_memory_gb for q in ev.queues}[queue]
    members = [c for c in wl.classes if c.name in times and c.sandbox_memory_gb > 0 and c.name == queue]
    return mem * sum(c.share * times[c.name] for c in wl.classes) / sum(
        c.share * times[c.name] * c.sandbox_memory_gb for c in members)


def test_sustainable_is_the_loop_the_sandboxes_hold(builtin):
    """docs/model.md 5.3: where the sandboxes cannot hold the population that would reach the capacity bounds, the
    sustainable throughput is the closed loop of the largest population they hold at that loop's own task times
    (bound `sandboxes:<q>`, said in a warning); a slightly larger one does not fit. Without the tolerance the
    capacity figure stands."""
    from advisor.simulation.des import closed_form_at
    from models.assumptions import ModelAssumptions
    from models.pipeline import SANDBOX_POPULATION_RTOL, capacity_tasks_per_hour

    wl, rack = builtin.workloads["model-eval"], builtin.racks["liquid-130kw"]
    cfg = Configuration.model_validate(SANDBOX_LIMITED)
    ev = closed_form_at(cfg, wl, rack, builtin)
    assert ev.bottleneck == "sandboxes:agent-run" and ev.bottleneck_kind == "memory"
    mem_b = next(b.tasks_per_hour for b in ev.bounds if b.name == "memory:agent-run")
    assert capacity_tasks_per_hour(ev) == mem_b and ev.next_bottleneck == "memory:agent-run"
    tol = ModelAssumptions().sandbox_limit_tolerance
    assert ev.throughput_tasks_per_hour < mem_b * (1 - tol)
    assert any(w.startswith("sandboxes:agent-run binds at") for w in ev.warnings)
    k = ev.closed_loop.agents
    at_k = closed_form_at(cfg, wl, rack, builtin, agents=k)
    assert at_k.closed_loop.sandbox_wait_seconds == 0.0  # all k live
    assert at_k.closed_loop.throughput_tasks_per_hour == pytest.approx(ev.throughput_tasks_per_hour, rel=1e-9)
    assert _held(at_k, wl, "agent-run") >= k  # they fit at their own task times...
    n = k + max(1, math.ceil(SANDBOX_POPULATION_RTOL * k)) + 1
    assert _held(closed_form_at(cfg, wl, rack, builtin, agents=n), wl, "agent-run") < n  # ...a few more do not
    # the operating point follows the sustainable figure
    frac = wl.planned_load(ModelAssumptions().operating_load_fraction)
    assert ev.arrival_rate_tasks_per_hour == pytest.approx(frac * ev.throughput_tasks_per_hour, rel=1e-12)
    loose = closed_form_at(cfg, wl, rack, builtin, assumptions=ModelAssumptions(sandbox_limit_tolerance=0.9))
    assert loose.bottleneck == "memory:agent-run" and loose.throughput_tasks_per_hour == mem_b
    assert not any(b.name.startswith("sandboxes:") for b in loose.bounds)


def test_sandbox_limited_closed_loop_matches_simulation(builtin):
    """Hybrid model-eval whose agent-run sandboxes hold half of 213 agents: the closed form's throughput within 5%
    and its p95 task time within 10% of the simulator's (3 replications x ~1,000 tasks, tasks followed to their
    end), and the sustainable throughput at most 5% above the saturated simulator's. Before the wait for a sandbox
    entered the task times and the population the class task times, the closed form was 23% high in throughput
    and 36% low in p95 here, and the sustainable figure (the memory bound) 21% high (docs/validation.md)."""
    from advisor.simulation.des import closed_form_at

    wl, rack = builtin.workloads["model-eval"], builtin.racks["liquid-130kw"]
    cfg = Configuration.model_validate(SANDBOX_LIMITED)
    n = 213
    cf = closed_form_at(cfg, wl, rack, builtin, agents=n)
    x_cf = cf.closed_loop.throughput_tasks_per_hour
    sim = _closed_loop_sim(cfg, wl, builtin, n, x_cf, tasks=1000, replications=3)
    assert sim["truncated"] == 0
    assert x_cf == pytest.approx(sim["throughput_tasks_per_hour"]["mean"], rel=0.05)
    assert cf.p95_task_seconds == pytest.approx(sim["p95_task_seconds"]["mean"], rel=0.10)
    assert cf.mean_task_seconds == pytest.approx(sim["mean_task_seconds"]["mean"], rel=0.05)
    # 213 agents are twice what the sandboxes hold: the simulator runs saturated, and the sustainable throughput
    # (the headline, docs/model.md 5.3) must not exceed what it sustains by more than 5% (issue #17 item 3)
    headline = closed_form_at(cfg, wl, rack, builtin).throughput_tasks_per_hour
    assert headline <= 1.05 * sim["throughput_tasks_per_hour"]["mean"]


def test_engine_figures_are_pinned():
    """The engine's event order is part of its results: for a fixed seed the figures are exactly those of the engine
    at b81f162 (SimPy's env.run over one calendar of tuples). This model makes same-time events on purpose (constant
    delays, tool and model calls; tasks admitted together when a larger sandbox frees), so the tie order between a
    task's wake, a GPU completion and SimPy's own events, and between tasks waking at the very same time, matters;
    two SKUs with small batch limits exercise the pool's choice of replica and its FIFO."""
    a = [StageSpec("a/w", "w", DELAY, 1, 0, 0.0, mean_s=1.0), StageSpec("a/g", "g", GPU, 2, 0, 0.0, rel=[1.0, 0.8]),
         StageSpec("a/t", "t", CPU, 2, 0, 0.0, mean_s=2.0, queue="q")]
    b = [StageSpec("b/w", "w", DELAY, 1, 0, 0.0, mean_s=1.0), StageSpec("b/g", "g", GPU, 3, 0.5, 0.5, rel=[0.5, 0.4]),
         StageSpec("b/t", "t", CPU, 3, 0.5, 1.0, mean_s=1.0, queue="q"),
         StageSpec("b/i", "i", IO, 1, 0, 0.0, mean_s=0.5, queue="q")]
    model = SimModel([ClassSpec("a", 0.5, 2.0, "q", a, _blocks(a)), ClassSpec("b", 0.5, 1.0, "q", b, _blocks(b))],
                     [SkuSpec("g", 1, 1.0, 0.0, 3, 1.0, 1.0, 1, 1), SkuSpec("h", 1, 1.2, 0.1, 2, 1.0, 1.0, 1, 1)],
                     {"q": QueueSpec("q", 6, 1.0, 3, 1.0, 6.0, 0.0, 2)}, "pin", "pin")
    res = simulate_model(model, SimSettings(agents=12, duration_s=400, warmup_s=20, replications=2, seed=7))
    assert res["tasks_measured"] == 453
    assert res["throughput_tasks_per_hour"]["mean"] == 2038.5
    assert res["mean_task_seconds"]["mean"] == 21.31506192575906
    assert res["p95_task_seconds"]["mean"] == 26.671876390122303
    assert res["gpu_mean_call_s"]["mean"] == 0.6951952562110926
    assert res["tool_wait_mean_s"]["q"]["mean"] == 0.07222443116995779
    assert res["utilization"]["gpu"]["mean"] == 0.2167479553181771
