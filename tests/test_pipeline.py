"""models.pipeline.evaluate on the mini fixture catalog: hand-worked numbers and hypothesis invariants.

Fixture numbers used below (tests/data/mini):
- cpu-a: 32 cores, 300 W, per_core_perf 1.0; cpu-b: 64 cores, 400 W, per_core_perf 0.8.
- gpu-x: 700 W, 80 GB, 3.0 TB/s, calibrated for m70 at 20,000 prefill / 3,000 decode tokens/s per GPU.
- gpu8: 8U, 2 sockets, 3,000 W base, 2,048 GB; gpu4: 4U, 1 socket, 1,200 W, 1,024 GB, GPUs <= 700 W;
  cpu1u: 1U, 2 sockets, 300 W, 1,024 GB.
- r40: 40 kW power and air, 42U, 2U and 500 W reserved; r15: 15 kW, 42U, 2U reserved, 0 W reserved.
- m70: 70B dense, 1 byte/param, 163,840 KV bytes/token, cached tokens cost 0.1, 90% memory usable,
  max batch 256, bandwidth efficiency 0.7, orchestration 0.05 core-s per call + 0.5 core-s per 1k output tokens.
- workload `agent`: edit (share 0.6, 1 GB sandbox): 8 x think (4,000 new + 20,000 cached in, 400 out),
  10 x tools (20 core-s, parallelism 1), 5 x net delay (1 s);
  test (share 0.4, 2 GB sandbox): 5 x think (3,000 new + 10,000 cached in, 300 out), 4 x build (120 core-s, par. 2).
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models.assumptions import ModelAssumptions
from models.config import Configuration
from models.performance import serving_key
from models.pipeline import HOUR_S, evaluate
from models.workload import Workload

GPU8_X_A = {"chassis": "gpu8", "cpu": "cpu-a", "gpu": "gpu-x", "gpus_per_server": 8, "count": 1,
            "orchestration_cores_per_gpu": 2}
CPU1U_B = {"chassis": "cpu1u", "cpu": "cpu-b", "count": 1}


def config(*groups, **extra) -> Configuration:
    return Configuration.model_validate({"servers": [dict(g) for g in groups], **extra})


@pytest.fixture(scope="module")
def agent(mini_catalog):
    return mini_catalog.workloads["agent"]


@pytest.fixture(scope="module")
def base_eval(mini_catalog, agent):
    return evaluate(config(GPU8_X_A, CPU1U_B), agent, mini_catalog.racks["r40"], mini_catalog)


def bound(ev, name):
    found = [b for b in ev.bounds if b.name == name]
    assert len(found) == 1, (name, [b.name for b in ev.bounds])
    return found[0].tasks_per_hour


# ----------------------------------------------------------------------------------------------------------------
# Hand-worked numbers
# ----------------------------------------------------------------------------------------------------------------

# Reference core-seconds of tool work per task: edit 0.6 x 10 x 20 + test 0.4 x 4 x 120 = 120 + 192 = 312.
CPU_WORK = 0.6 * 10 * 20 + 0.4 * 4 * 120


def test_cpu_work_hand_value():
    assert CPU_WORK == 312.0


def test_cpu_bound_is_cores_times_perf_over_core_seconds(base_eval):
    # gpu8 + cpu-a: 2 x 32 = 64 cores, 8 GPUs x 2 orchestration cores = 16 reserved, 48 tool cores at perf 1.0.
    # cpu1u + cpu-b: 2 x 64 = 128 tool cores at perf 0.8.
    expected = (48 * 1.0 + 128 * 0.8) / CPU_WORK * 3600  # = 150.4 / 312 x 3600 = 1,735.38 tasks/h
    assert bound(base_eval, "cpu:shared") == pytest.approx(expected, rel=1e-12)
    assert bound(base_eval, "cpu:shared") == pytest.approx(1735.3846153846, rel=1e-10)
    q = base_eval.queues[0]
    assert q.cores == 176
    assert q.per_core_perf == pytest.approx(150.4 / 176, rel=1e-12)


def test_cpu_bound_cpu_only_servers(mini_catalog, agent):
    # Three cpu1u nodes with cpu-a (64 cores at perf 1.0 each) next to the GPU server, which keeps 48 tool cores.
    ev = evaluate(config(GPU8_X_A, {"chassis": "cpu1u", "cpu": "cpu-a", "count": 3}), agent,
                  mini_catalog.racks["r40"], mini_catalog)
    assert bound(ev, "cpu:shared") == pytest.approx((48 + 3 * 64) / 312 * 3600, rel=1e-12)


def test_orchestration_bound_hand_value(base_eval):
    # Orchestration core-s per task: edit 0.6 x 8 x (0.05 + 0.4 x 0.5) + test 0.4 x 5 x (0.05 + 0.3 x 0.5)
    # = 1.2 + 0.4 = 1.6; 16 reserved cores at perf 1.0 -> 10 tasks/s = 36,000 tasks/h.
    per_task = 0.6 * 8 * (0.05 + 0.4 * 0.5) + 0.4 * 5 * (0.05 + 0.3 * 0.5)
    assert per_task == pytest.approx(1.6)
    assert bound(base_eval, "orchestration") == pytest.approx(16 / per_task * 3600, rel=1e-12)


def hand_gpu_serving():
    """Serving m70 on gpu-x, worked from the documented model (models/performance.py docstring)."""
    calls = 0.6 * 8 + 0.4 * 5  # 6.8 calls per task
    eff_in = (0.6 * 8 * (4000 + 0.1 * 20000) + 0.4 * 5 * (3000 + 0.1 * 10000)) / calls  # 5,411.8
    out = (0.6 * 8 * 400 + 0.4 * 5 * 300) / calls  # 370.6
    ctx = (0.6 * 8 * (4000 + 20000 + 400) + 0.4 * 5 * (3000 + 10000 + 300)) / calls  # 21,135
    weights = 70e9 * 1.0
    kv_call = 163840 * ctx  # 3.46 GB
    usable = 80e9 * 0.9
    best = None
    for k in (1, 2, 4, 8):  # tensor-parallel domain is 8 GPUs
        if k * usable < weights + kv_call:
            continue  # k = 1 does not hold 70 GB of weights + 3.5 GB of KV in 72 GB
        per_token = 70e9 * 1.0 / (k * 3.0e12 * 0.7)
        d = (eff_in / 20000 + out / 3000) / k
        l0 = max(eff_in / (20000 * k) + out * per_token, d)
        batch = min(256, int((k * usable - weights) // kv_call))
        replica_rate = batch / (l0 + (batch - 1) * d)
        per_gpu_tasks = replica_rate / k / calls
        if best is None or per_gpu_tasks > best["per_gpu_tasks"]:
            best = dict(k=k, per_token=per_token, d=d, l0=l0, batch=batch, per_gpu_tasks=per_gpu_tasks)
    return best


def test_gpu_bound_hand_value(base_eval):
    s = hand_gpu_serving()
    # k = 2: batch 21, 0.151 tasks/s/GPU; k = 4: batch 62, 0.249; k = 8: batch 146, 0.308 -> TP 8.
    assert s["k"] == 8 and s["batch"] == 146
    # one replica pool: gpu-x in the 8-GPU scale-up domain of one server, one TP 8 replica
    assert [p.key for p in base_eval.serving] == [serving_key("gpu-x", 8)]
    info = base_eval.serving[0]
    assert (info.gpu, info.tp_degree, info.pp_degree, info.replicas) == ("gpu-x", 8, 1, 1)
    assert (info.gpus_used, info.gpus_idle) == (8, 0)
    assert info.max_batch == 146
    assert info.hbm_gb_per_replica == pytest.approx(8 * 80)
    assert info.weights_gb == pytest.approx(70)
    assert info.kv_gb_per_replica == pytest.approx(8 * 80 * 0.9 - 70)
    assert info.engine_cores_per_replica == 2 + 8  # vLLM's 2 + N floor (the served model's defaults)
    assert info.calibrated is True
    assert info.call_latency_s == pytest.approx(s["l0"], rel=1e-12)
    assert info.call_replica_s == pytest.approx(s["d"], rel=1e-12)
    assert bound(base_eval, "gpu") == pytest.approx(8 * s["per_gpu_tasks"] * 3600, rel=1e-12)


def test_memory_bound_hand_value(base_eval):
    s = hand_gpu_serving()
    # Sandbox memory: gpu8 (2,048 - 32 GB OS) / 64 cores x 48 tool cores = 1,512 GB; cpu1u 1,024 - 32 = 992 GB.
    mem = (2048 - 32) / 64 * 48 + (1024 - 32)
    perf = 150.4 / 176  # capacity-weighted per-core speed of the shared queue

    def llm(new, cached, out):
        eff = new + 0.1 * cached
        return max(eff / (20000 * s["k"]) + out * s["per_token"], (eff / 20000 + out / 3000) / s["k"])

    t_edit = 8 * llm(4000, 20000, 400) + 10 * 20 / perf + 5 * 1.0
    t_test = 5 * llm(3000, 10000, 300) + 4 * 120 / (2 * perf)
    assert base_eval.unloaded_task_seconds == pytest.approx(0.6 * t_edit + 0.4 * t_test, rel=1e-12)
    gb_s_per_task = 0.6 * t_edit * 1.0 + 0.4 * t_test * 2.0
    assert bound(base_eval, "memory:shared") == pytest.approx(mem / gb_s_per_task * 3600, rel=1e-12)


def test_throughput_is_smallest_bound_and_names_it(base_eval):
    # CPU 1,735 < GPU 8,863 < memory 23,636 < orchestration 36,000 tasks/h.
    assert base_eval.bottleneck == "cpu:shared" and base_eval.bottleneck_kind == "cpu"
    assert base_eval.throughput_tasks_per_hour == pytest.approx(bound(base_eval, "cpu:shared"), rel=1e-15)
    # GPU idle at sustainable throughput: 1 - X / min(GPU, orchestration capacity).
    assert base_eval.gpu_idle_fraction == pytest.approx(
        1 - bound(base_eval, "cpu:shared") / bound(base_eval, "gpu"), rel=1e-12)
    assert 0 <= base_eval.gpu_idle_on_cpu_fraction <= base_eval.gpu_idle_fraction


def test_stage_and_resource_shares_sum_to_one(base_eval):
    assert set(base_eval.stage_shares) == {"edit/think", "edit/tools", "edit/net", "test/think", "test/build"}
    assert sum(base_eval.stage_shares.values()) == pytest.approx(1.0, abs=1e-12)
    assert all(v > 0 for v in base_eval.stage_shares.values())
    assert sum(base_eval.resource_shares.values()) == pytest.approx(1.0, abs=1e-12)
    # The delay share is the net stage's: 0.6 x 5 x 1 s over the mean task time.
    assert base_eval.resource_shares["delay"] == pytest.approx(3.0 / base_eval.mean_task_seconds, rel=1e-12)
    assert base_eval.stage_shares["edit/net"] == pytest.approx(3.0 / base_eval.mean_task_seconds, rel=1e-12)


def test_operating_point_default_is_80_percent(base_eval):
    assert base_eval.arrival_rate_tasks_per_hour == pytest.approx(0.8 * base_eval.throughput_tasks_per_hour)
    assert base_eval.utilization["cpu:shared"] == pytest.approx(0.8, rel=1e-12)
    assert base_eval.p50_task_seconds < base_eval.p95_task_seconds < base_eval.p99_task_seconds


def test_rack_power_and_space_hand_sum(base_eval):
    # gpu8: 3,000 + 2 x 300 + 8 x 700 = 9,200 W; cpu1u with cpu-b: 300 + 2 x 400 = 1,100 W; rack gear 500 W.
    assert base_eval.power_w == pytest.approx(9200 + 1100 + 500)
    assert base_eval.air_heat_w == pytest.approx(10800)  # all air-cooled
    assert base_eval.liquid_heat_w == 0
    assert base_eval.space_u == 8 + 1 + 2
    (r,) = base_eval.racks
    assert (r.power_w, r.space_u, r.power_budget_w, r.space_budget_u) == (10800, 11, 40000, 42)
    assert r.exceeded == [] and base_eval.within_budgets
    assert base_eval.gpus == 8 and base_eval.cores == 64 + 128


def test_two_racks_accounted_separately(mini_catalog, agent):
    cfg = config(GPU8_X_A, dict(CPU1U_B, rack=1, count=2), racks=2)
    ev = evaluate(cfg, agent, mini_catalog.racks["r40"], mini_catalog)
    r0, r1 = ev.racks
    assert (r0.power_w, r0.space_u) == (9200 + 500, 8 + 2)
    assert (r1.power_w, r1.space_u) == (2 * 1100 + 500, 2 * 1 + 2)
    assert ev.power_w == pytest.approx(9200 + 2 * 1100 + 2 * 500)
    assert ev.space_u == 14


def test_over_budget_still_evaluates_and_lists_overages(mini_catalog, agent):
    cfg = config(dict(GPU8_X_A, count=5), CPU1U_B)
    ev = evaluate(cfg, agent, mini_catalog.racks["r15"], mini_catalog)
    # 5 x 9,200 + 1,100 = 47,100 W against 15 kW (0 W reserved); 5 x 8 + 1 + 2 reserved = 43U against 42U.
    assert ev.power_w == pytest.approx(47100)
    assert ev.space_u == 43
    assert not ev.within_budgets
    (r,) = ev.racks
    by_kind = {e.split(":", 1)[0]: e for e in r.exceeded}
    assert set(by_kind) == {"power", "cooling_air", "space"}  # the liquid loop carries no heat here
    assert "over by 32,100 W" in by_kind["power"] and "47,100 W" in by_kind["power"]
    assert "over by 32,100 W" in by_kind["cooling_air"]
    assert "over by 1 U" in by_kind["space"] and "43 U" in by_kind["space"]
    assert sum("exceeds" in w for w in ev.warnings) == 3
    # Budgets do not change the model's throughput: the same servers under the 40 kW profile give the same.
    ev40 = evaluate(cfg, agent, mini_catalog.racks["r40"], mini_catalog)
    assert ev.throughput_tasks_per_hour > 0
    assert ev.throughput_tasks_per_hour == pytest.approx(ev40.throughput_tasks_per_hour, rel=1e-12)
    assert not ev40.within_budgets  # 47.6 kW and 43U exceed r40 too


# ----------------------------------------------------------------------------------------------------------------
# Hypothesis invariants over random configurations of the mini catalog
# ----------------------------------------------------------------------------------------------------------------

ORCH = st.sampled_from([0.5, 1.0, 2.0, 3.0])


@st.composite
def gpu_group(draw):
    kind = draw(st.sampled_from(["gpu8", "gpu4"]))
    if kind == "gpu8":
        gpu, gpus = draw(st.sampled_from(["gpu-x", "gpu-y"])), 8
    else:
        gpu, gpus = "gpu-x", draw(st.sampled_from([2, 4]))  # gpu4 takes GPUs up to 700 W
    return {"chassis": kind, "cpu": draw(st.sampled_from(["cpu-a", "cpu-b"])), "gpu": gpu, "gpus_per_server": gpus,
            "count": draw(st.integers(1, 3)), "orchestration_cores_per_gpu": draw(ORCH)}


@st.composite
def cpu_group(draw):
    return {"chassis": "cpu1u", "cpu": draw(st.sampled_from(["cpu-a", "cpu-b"])), "count": draw(st.integers(1, 6))}


any_group = st.one_of(gpu_group(), cpu_group())
groups_strategy = st.tuples(st.lists(gpu_group(), min_size=1, max_size=2),
                            st.lists(cpu_group(), max_size=2)).map(lambda t: t[0] + t[1])

FAST = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def ev_of(catalog, workload, groups, **extra):
    return evaluate(config(*groups, **extra), workload, catalog.racks["r40"], catalog)


@FAST
@given(groups=groups_strategy)
def test_throughput_never_exceeds_any_bound(mini_catalog, agent, groups):
    ev = ev_of(mini_catalog, agent, groups)
    for b in ev.bounds:
        assert ev.throughput_tasks_per_hour <= b.tasks_per_hour * (1 + 1e-12), b.name
    assert any(b.name == ev.bottleneck and b.tasks_per_hour == ev.throughput_tasks_per_hour for b in ev.bounds)
    assert ev.throughput_tasks_per_hour > 0
    assert sum(ev.stage_shares.values()) == pytest.approx(1.0, abs=1e-9)


@FAST
@given(groups=groups_strategy, extra=any_group, data=st.data())
def test_adding_servers_never_lowers_throughput(mini_catalog, agent, groups, extra, data):
    before = ev_of(mini_catalog, agent, groups).throughput_tasks_per_hour
    # one more server in an existing group
    i = data.draw(st.integers(0, len(groups) - 1))
    more = [dict(g) for g in groups]
    more[i]["count"] += 1
    assert ev_of(mini_catalog, agent, more).throughput_tasks_per_hour >= before * (1 - 1e-9)
    # a whole new group
    assert ev_of(mini_catalog, agent, groups + [extra]).throughput_tasks_per_hour >= before * (1 - 1e-9)


@FAST
@given(groups=groups_strategy, agents=st.integers(1, 2000))
def test_closed_loop_littles_law(mini_catalog, agent, groups, agents):
    ev = ev_of(mini_catalog, agent, groups, operating_point={"agents": agents})
    cl = ev.closed_loop
    assert cl is not None and not cl.capped
    # Only the agents whose sandboxes fit are live; the rest wait for memory (and the evaluation says so).
    assert cl.agents <= agents
    if cl.agents < agents:
        assert any("wait for memory" in w for w in ev.warnings)
    x = cl.throughput_tasks_per_hour / HOUR_S
    assert ev.arrival_rate_tasks_per_hour == pytest.approx(cl.throughput_tasks_per_hour, rel=1e-12)
    # every agent = X x mean task time (Little's law over the whole loop), with the task time built stage by stage
    # from the residence times plus, for the agents beyond what sandboxes hold, the wait for a sandbox
    assert ev.mean_task_seconds is not None
    assert agents == pytest.approx(x * ev.mean_task_seconds, rel=1e-6)
    assert cl.mean_task_seconds == pytest.approx(ev.mean_task_seconds, rel=1e-6)
    assert cl.sandbox_wait_seconds == pytest.approx((agents - cl.agents) / x, rel=1e-12)
    # a closed loop never beats the sustainable throughput
    assert cl.throughput_tasks_per_hour <= ev.throughput_tasks_per_hour * (1 + 1e-9)


def scaled_workload(w: Workload, factor: float) -> Workload:
    data = w.model_dump()
    for c in data["classes"]:
        for s in c["stages"]:
            if s["resource"] == "cpu":
                s["core_seconds"] *= factor
            elif s["resource"] == "delay":
                s["seconds"] *= factor
    return Workload.model_validate(data)


@FAST
@given(groups=groups_strategy)
def test_doubling_cpu_work_and_delays_halves_cpu_bound(mini_catalog, agent, groups):
    ev1 = ev_of(mini_catalog, agent, groups)
    ev2 = ev_of(mini_catalog, scaled_workload(agent, 2.0), groups)
    assert bound(ev2, "cpu:shared") == pytest.approx(bound(ev1, "cpu:shared") / 2, rel=1e-12)
    # LLM-side bounds do not move
    assert bound(ev2, "gpu") == pytest.approx(bound(ev1, "gpu"), rel=1e-12)
    assert bound(ev2, "orchestration") == pytest.approx(bound(ev1, "orchestration"), rel=1e-12)


@FAST
@given(groups=groups_strategy, data=st.data())
def test_throughput_invariant_to_group_order(mini_catalog, agent, groups, data):
    perm = data.draw(st.permutations(range(len(groups))))
    ev1 = ev_of(mini_catalog, agent, groups)
    ev2 = ev_of(mini_catalog, agent, [groups[i] for i in perm])
    assert ev2.throughput_tasks_per_hour == pytest.approx(ev1.throughput_tasks_per_hour, rel=1e-9)
    assert ev2.bottleneck == ev1.bottleneck or math.isclose(
        bound(ev1, ev1.bottleneck), bound(ev1, ev2.bottleneck), rel_tol=1e-9)
    assert {b.name: pytest.approx(b.tasks_per_hour, rel=1e-9) for b in ev1.bounds} == {
        b.name: b.tasks_per_hour for b in ev2.bounds}
    assert ev2.power_w == pytest.approx(ev1.power_w) and ev2.space_u == ev1.space_u


def test_assumptions_override_os_memory(mini_catalog, agent):
    # Reserving 64 GB instead of 32 GB per server leaves 2,048 - 64 = 1,984 GB on gpu8 and 960 GB on cpu1u.
    ev32 = evaluate(config(GPU8_X_A, CPU1U_B), agent, mini_catalog.racks["r40"], mini_catalog)
    ev64 = evaluate(config(GPU8_X_A, CPU1U_B), agent, mini_catalog.racks["r40"], mini_catalog,
                    ModelAssumptions(host_os_reserved_memory_gb=64))
    ratio = ((2048 - 64) / 64 * 48 + (1024 - 64)) / ((2048 - 32) / 64 * 48 + (1024 - 32))
    assert bound(ev64, "memory:shared") == pytest.approx(bound(ev32, "memory:shared") * ratio, rel=1e-12)
