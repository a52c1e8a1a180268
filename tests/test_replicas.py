"""Serving replicas are whole tensor/pipeline-parallel groups of one SKU inside one scale-up domain (issue 16).

Facts held to: DeepSeek-R1 (671 GB of FP8 weights) fits no H100 NVL server and no DGX H100 (8 x 80 GB x 0.9 = 576 GB
usable), but one 8x H200 (physical-facts "R1 minimal serving"); every answer places GPUs in whole replicas and gives
the serving engine at least vLLM's 2 + N cores per replica; calibrations are used only at the served precision.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from advisor.catalog import builtin_catalog, load_catalog, load_workload
from advisor.optimizer.optimize import optimize
from advisor.optimizer.options import enumerate_options
from advisor.optimizer.settings import OptimizerSettings
from models.config import Configuration
from models.performance import gpu_rates, gpu_serving
from models.pipeline import evaluate
from models.workload import Workload
from oracle import assert_buildable
from tiers import tiered


@functools.cache
def cat():
    return builtin_catalog()


def wl(name: str) -> Workload:
    return load_workload(name, cat())


def one_server(chassis: str, cpu: str, gpu: str, gpus: int, orch: float = 2.0, count: int = 1) -> Configuration:
    return Configuration.model_validate({"servers": [{"chassis": chassis, "cpu": cpu, "gpu": gpu, "gpus_per_server": gpus,
                                                      "count": count, "orchestration_cores_per_gpu": orch}]})


def pcie_cpu() -> str:
    ch = cat().chassis["pcie-4gpu-2u"]
    return ch.default_cpu or next(c.id for c in cat().cpus if ch.accepts_cpu(c))


@pytest.mark.parametrize("gpus", [1, 2, 4])
def test_r1_on_h100_nvl_serves_nothing_and_says_why(gpus):
    ev = evaluate(one_server("pcie-4gpu-2u", pcie_cpu(), "h100-nvl", gpus), wl("swe-agent"), cat().racks["air-40kw"],
                  cat())
    assert ev.throughput_tasks_per_hour == 0.0
    pool, = ev.serving
    assert (pool.gpu, pool.replicas, pool.gpus_used, pool.gpus_idle) == ("h100-nvl", 0, 0, gpus)
    assert pool.weights_gb == pytest.approx(671.0)
    usable = gpus * 94 * 0.9
    reason = next(w for w in ev.warnings if "hosts no replica" in w)
    assert "deepseek-r1 needs >= " in reason and "h100-nvl" in reason and f"{usable:,.0f} GB" in reason
    assert any("serves nothing" in w for w in ev.warnings)


def test_r1_needs_h200_not_h100_in_one_dgx():
    """One DGX H100 (576 GB usable) cannot hold R1; one 8x H200 (1,015 GB usable) can: HBM decides, not FLOPS."""
    rack = cat().racks["air-40kw"]
    h100 = evaluate(one_server("dgx-h100", "xeon-8480c", "h100-sxm", 8), wl("swe-agent"), rack, cat())
    h200 = evaluate(one_server("dgx-h100", "xeon-8480c", "h200-sxm", 8), wl("swe-agent"), rack, cat())
    assert h100.throughput_tasks_per_hour == 0.0 and h100.serving[0].replicas == 0
    assert h200.serving[0].replicas == 1 and h200.serving[0].tp_degree == 8
    assert h200.throughput_tasks_per_hour > 0
    s = h200.serving[0]
    assert s.kv_gb_per_replica == pytest.approx(8 * 141 * 0.9 - 671)
    assert s.max_batch == int(s.kv_gb_per_replica // s.kv_gb_per_call)


def test_no_tp_degree_beyond_the_domain():
    """Old behaviour: TP grew to 16 past the 4 GPUs present. Now every shape stays inside the domain."""
    for w in ("swe-agent", "model-eval", "rl-rollout", "batch-generation", "interactive-rl-mix"):
        for g in cat().gpus:
            for d in (1, 2, 4, 8):
                s = gpu_serving(wl(w), g, d, 8)
                assert s.replica_gpus <= d
                if s.fits:
                    assert s.replicas(d) * s.replica_gpus <= d


def test_hbm_enters_throughput_through_the_kv_batch_limit():
    """Two uncalibrated GPUs equal but for HBM: more HBM gives a larger batch and more throughput where memory binds,
    the same throughput where the engine's max batch binds."""
    base = cat().gpus["h100-nvl"]
    big = base.model_copy(update={"id": "h100-nvl-big", "memory_gb": 141.0})
    w = wl("rl-rollout")  # long contexts: KV binds
    small_s, big_s = gpu_serving(w, base, 4, 8), gpu_serving(w, big, 4, 8)
    assert small_s.batch_limit < w.served_model.max_batch_per_replica
    assert big_s.batch_limit > small_s.batch_limit
    assert big_s.tasks_per_s(4) > small_s.tasks_per_s(4) * 1.01
    short = wl("batch-generation")  # 3,000-token contexts: 8 GPUs hold the engine's 1,024
    a, b = gpu_serving(short, base, 8, 8), gpu_serving(short, big, 8, 8)
    assert a.batch_limit == b.batch_limit == short.served_model.max_batch_per_replica
    assert a.tasks_per_s(8) == pytest.approx(b.tasks_per_s(8), rel=1e-12)


def test_fp4_calibrations_are_not_used_for_fp8_serving():
    w = wl("rl-rollout")
    assert w.served_model.precision == "fp8"
    b200 = gpu_serving(w, cat().gpus["b200"])
    assert not b200.rates.calibrated and b200.rates.basis.startswith("roofline: fp8")
    assert any(c.gpu == "b200" and c.precision == "fp4" for c in w.served_model.calibrations)
    h100 = gpu_serving(w, cat().gpus["h100-sxm"])
    assert h100.rates.calibrated and h100.rates.decode_tokens_per_s == 2675
    # the FP8 row of a GPU is used: give B200 one and it replaces the roofline
    fp8_row = {"gpu": "b200", "precision": "fp8", "prefill_tokens_per_s": 15000.0, "decode_tokens_per_s": 7000.0,
               "source": "test"}
    sm = type(w.served_model).model_validate({**w.served_model.model_dump(),
                                              "calibrations": [*w.served_model.model_dump()["calibrations"], fp8_row]})
    r = gpu_rates(sm, cat().gpus["b200"])
    assert r.calibrated and r.decode_tokens_per_s == 7000.0


def test_idle_gpus_add_nothing_and_are_warned():
    """A 3-GPU server of a model needing 2-GPU replicas hosts one replica; the third GPU adds no capacity."""
    mini = load_catalog(Path(__file__).parent / "data" / "mini")
    w = mini.workloads["agent"]
    ch = mini.chassis["gpu4"].model_copy(update={"gpu_counts": [2, 3, 4]})
    cat3 = type(mini).build(cpus=list(mini.cpus), gpus=list(mini.gpus), chassis=[ch] + [c for c in mini.chassis
                                                                                    if c.id != "gpu4"],
                            racks=list(mini.racks), served_models=list(mini.served_models), workloads=[w])
    cfg = lambda n: Configuration.model_validate({"servers": [
        {"chassis": "gpu4", "cpu": "cpu-a", "gpu": "gpu-x", "gpus_per_server": n, "count": 1,
         "orchestration_cores_per_gpu": 4}]})
    e2, e3 = (evaluate(cfg(n), w, mini.racks["r40"], cat3) for n in (2, 3))
    s3 = e3.serving[0]
    assert s3.tp_degree * s3.pp_degree == 2 and (s3.replicas, s3.gpus_used, s3.gpus_idle) == (1, 2, 1)
    gpu2 = next(b for b in e2.bounds if b.name == "gpu").tasks_per_hour
    gpu3 = next(b for b in e3.bounds if b.name == "gpu").tasks_per_hour
    assert gpu3 == pytest.approx(gpu2, rel=1e-12)
    assert any("1 of 3 GPUs host no replica" in x for x in e3.warnings)


def test_engine_floor_below_is_warned():
    ev = evaluate(one_server("dgx-h100", "xeon-8480c", "h100-sxm", 8, orch=0.5), wl("rl-rollout"),
                  cat().racks["air-40kw"], cat())
    assert any("below its floor of 10" in x for x in ev.warnings)


def test_layout_a_reserves_at_least_the_engine_floor():
    s = OptimizerSettings()
    for w in ("swe-agent", "model-eval", "rl-rollout", "batch-generation", "interactive-rl-mix"):
        for rack in ("air-40kw", "liquid-130kw"):
            opts, servings = enumerate_options(cat(), wl(w), cat().racks[rack], "a",
                                               s.layout_a_orchestration_cores_per_gpu,
                                               s.assumptions.host_os_reserved_memory_gb,
                                               s.assumptions.tensor_parallel_domain_gpus, prune=False)
            for o in opts:
                p = o.profile
                assert p.replicas >= 1
                assert p.orchestration_cores >= p.engine_min_cores - 1e-9
                assert p.engine_min_cores == p.replicas * (2 + servings[p.serving_key].replica_gpus)


_PRESETS = [("swe-agent", "air-40kw"), ("rl-rollout", "air-40kw"), ("model-eval", "liquid-130kw")]
_LAYOUTS = ["a", "b", "hybrid"]


# one layout per preset in the fast tier (each layout once), the other six in the slow tier
@pytest.mark.parametrize("workload,rack,layout", tiered(
    [(*p, _LAYOUTS[i]) for i, p in enumerate(_PRESETS)]
    + [(*p, lay) for i, p in enumerate(_PRESETS) for lay in _LAYOUTS if lay != _LAYOUTS[i]], fast=3))
def test_preset_answers_are_whole_replicas_with_engine_floor(workload, rack, layout):
    w = wl(workload)
    res = optimize(w, cat().racks[rack], cat(), layout=layout, explain=False, time_limit_s=60)
    assert res.throughput_tasks_per_hour > 0
    assert res.evaluation is not None and res.evaluation.serving
    cfg = Configuration.model_validate(res.configuration)
    assert_buildable(res.evaluation, cfg, w, cat())
    # the evaluator reproduces the MILP's prediction exactly (integer replicas on both sides)
    assert res.throughput_tasks_per_hour == pytest.approx(res.predicted_tasks_per_hour, rel=1e-6)


def test_optimize_refuses_a_model_no_gpu_can_hold_with_the_numbers():
    with pytest.raises(ValueError, match=r"served_model deepseek-r1: no candidate GPU server can hold one replica") as e:
        optimize(wl("swe-agent"), cat().racks["air-40kw"], cat(), layout="b", gpu_ids=["h100-nvl", "h100-sxm"],
                 explain=False)
    msg = str(e.value)
    assert "one replica of h100-nvl in this server" in msg and "338 GB" in msg
    assert "one replica of h100-sxm in this server" in msg and "576 GB" in msg and ">= 694 GB" in msg


def test_pipeline_parallel_only_where_the_catalog_allows_it():
    """A 300 GB model on 80 GB GPUs (72 GB usable) in a 6-GPU domain: TP alone tops out at 4 GPUs (288 GB) and hosts
    nothing; with max_pipeline_parallel 3 a TP 2 x PP 3 replica (432 GB) holds it, per-token latency on 2 GPUs."""
    mini = load_catalog(Path(__file__).parent / "data" / "mini")
    w = mini.workloads["agent"]
    big = w.served_model.model_copy(update={"total_params_b": 300.0, "active_params_b": 300.0})
    gpu = mini.gpus["gpu-x"]
    tp_only = gpu_serving(w.model_copy(update={"served_model": big}), gpu, 6, 8)
    assert not tp_only.fits and tp_only.replicas(6) == 0 and "at most 288 GB" in tp_only.reason
    pp = big.model_copy(update={"max_pipeline_parallel": 3})
    s = gpu_serving(w.model_copy(update={"served_model": pp}), gpu, 6, 8)
    assert s.fits and (s.tp_degree, s.pp_degree, s.replicas(6)) == (2, 3, 1)
    assert s.per_token_latency_s == pytest.approx(300e9 / (2 * 3.0e12 * big.bandwidth_efficiency))
    # full-batch work per call spreads over all 6 GPUs of the replica, latency only over the 2 of one stage
    tp2 = gpu_serving(w.model_copy(update={"served_model": big.model_copy(update={"total_params_b": 100.0, "active_params_b": 100.0})}), gpu, 2, 8)
    assert (tp2.tp_degree, tp2.pp_degree) == (2, 1)
    assert s.call_replica_s == pytest.approx(tp2.call_replica_s * 2 / 6, rel=1e-12)
    assert s.engine_cores_per_replica == 2 + 6
