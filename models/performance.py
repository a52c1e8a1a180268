"""Per-call costs: what one LLM call costs a GPU SKU, what one tool call costs a core.

GPU serving model (documented in docs/model.md):
- per-GPU prefill and decode tokens/s at full batch come from a calibration point at the served precision or the
  roofline `mfu x dense TFLOPS / (2 x active params)`;
- a replica is k = tp x pp GPUs of one SKU inside one scale-up domain whose usable memory holds the weights plus
  the KV cache of the model's minimum batch; the shape giving the domain the most throughput is chosen, a domain
  holds floor(domain / k) whole replicas and the rest of its GPUs idle;
- unloaded call latency L0 = prefill time on tp GPUs + output tokens x per-token latency, where per-token latency
  = active weight bytes / (tp x bandwidth x bandwidth_efficiency) (memory-bound decode at batch 1);
- full-batch work per call d (replica-seconds) = GPU-seconds at full-batch rates / k;
- a replica holding b calls finishes each in L(b) = L0 + (b - 1) d (step time grows linearly with batch), so its rate
  b / L(b) rises to 1/d; the batch is capped by KV memory and the engine's max_batch_per_replica.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, replace

import numpy as np

from models.hardware import GpuSku
from models.workload import CpuStage, GpuStage, ServedModel, Workload

TFLOP = 1e12
GIGA = 1e9
TERA = 1e12


@dataclass(frozen=True)
class GpuRates:
    """Per-GPU serving rates for one model on one GPU SKU."""

    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    calibrated: bool
    basis: str


def gpu_rates(model: ServedModel, gpu: GpuSku) -> GpuRates:
    for c in model.calibrations:
        if c.gpu == gpu.id and c.precision == model.precision:
            return GpuRates(c.prefill_tokens_per_s, c.decode_tokens_per_s, True, c.source)
    tflops = gpu.fp8_tflops if model.precision == "fp8" else gpu.bf16_tflops
    flops_per_token = 2.0 * model.active_params_b * GIGA
    return GpuRates(
        prefill_tokens_per_s=model.prefill_mfu * tflops * TFLOP / flops_per_token,
        decode_tokens_per_s=model.decode_mfu * tflops * TFLOP / flops_per_token,
        calibrated=False,
        basis=(
            f"roofline: {model.precision} {tflops:g} TFLOPS x mfu (prefill {model.prefill_mfu:g}, "
            f"decode {model.decode_mfu:g}) / (2 x {model.active_params_b:g}B active params)"
        ),
    )


@dataclass(frozen=True)
class CallMix:
    """Rate-weighted mean LLM call of a workload (all classes share the GPU pool)."""

    calls_per_task: float
    effective_input_tokens: float
    """New input plus cached input x cached cost, per call."""
    new_plus_cached_tokens: float
    output_tokens: float
    context_tokens: float
    orchestration_core_s_per_task: float
    """Reference-core seconds of host orchestration per task."""


def call_mix(workload: Workload) -> CallMix:
    f = workload.served_model.cached_token_cost_fraction
    sm = workload.served_model
    calls = eff_in = raw_in = out = ctx = orch = 0.0
    for c in workload.classes:
        for s in c.stages:
            if isinstance(s, GpuStage):
                w = c.share * s.count
                calls += w
                eff_in += w * (s.new_input_tokens + f * s.cached_input_tokens)
                raw_in += w * (s.new_input_tokens + s.cached_input_tokens)
                out += w * s.output_tokens
                ctx += w * (s.new_input_tokens + s.cached_input_tokens + s.output_tokens)
                orch += w * (
                    sm.orchestration_core_seconds_per_call
                    + s.output_tokens / 1000.0 * sm.orchestration_core_seconds_per_1k_output_tokens
                )
    if calls == 0:
        return CallMix(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    return CallMix(calls, eff_in / calls, raw_in / calls, out / calls, ctx / calls, orch)


@dataclass(frozen=True)
class GpuServing:
    """One model served on one GPU SKU in one scale-up domain size, for a workload's mean call.

    A replica is `tp_degree x pp_degree` GPUs of one SKU inside one scale-up domain (`domain_gpus`); a domain holds
    `replicas_per_domain` whole replicas and its other GPUs idle. `fits` is False when no replica shape the domain
    allows holds the weights plus the KV cache of `min_batch_per_replica` calls (`reason` says why)."""

    gpu_id: str
    rates: GpuRates
    tp_degree: int
    """Tensor-parallel degree of one replica."""
    per_token_latency_s: float
    call_latency_s: float
    """L0: one call alone on a replica."""
    call_replica_s: float
    """d: replica-seconds per call at full batch."""
    batch_limit: int
    """Concurrent calls per replica: min(engine max batch, KV room / KV per call)."""
    calls_per_task: float
    fits: bool
    """False when no replica shape inside the domain holds the weights plus the minimum batch's KV cache."""
    pp_degree: int = 1
    """Pipeline-parallel stages of one replica."""
    domain_gpus: int = 0
    """GPUs of the scale-up domain replicas are placed in (0: one replica's worth, for per-GPU figures)."""
    weights_gb: float = 0.0
    kv_gb_per_call: float = 0.0
    """KV cache of one call of the workload's mean context."""
    hbm_gb_per_replica: float = 0.0
    """HBM of one replica's GPUs (raw, before the engine's usable fraction)."""
    kv_gb_per_replica: float = 0.0
    """Usable HBM left for KV cache after the weights (usable fraction x HBM - weights)."""
    need_gb: float = 0.0
    """Usable HBM a replica needs: weights plus the KV cache of `min_batch_per_replica` calls."""
    engine_cores_per_replica: float = 0.0
    """Floor on host cores the serving engine needs per replica (engine_host_cores_per_replica + per GPU x GPUs)."""
    reason: str = ""
    """Why no replica fits (empty when one does)."""

    @property
    def replica_gpus(self) -> int:
        return self.tp_degree * self.pp_degree

    @property
    def replicas_per_domain(self) -> int:
        return (self.domain_gpus or self.replica_gpus) // self.replica_gpus if self.fits else 0

    def replicas(self, gpus: int) -> int:
        """Whole replicas `gpus` GPUs of this SKU hold when they form domains of `domain_gpus` (a remainder smaller
        than a domain is a domain of its own)."""
        if not self.fits or gpus <= 0:
            return 0
        dom = self.domain_gpus or self.replica_gpus
        return (gpus // dom) * (dom // self.replica_gpus) + (gpus % dom) // self.replica_gpus

    def replica_rate(self, batch: np.ndarray) -> np.ndarray:
        """Calls per second one replica completes with `batch` calls in service (fluid batch, capped)."""
        b = np.minimum(np.asarray(batch, dtype=float), self.batch_limit)
        stretch = self.call_latency_s + np.maximum(b - 1.0, 0.0) * self.call_replica_s
        return b / stretch

    def pool_rate(self, n_calls: np.ndarray, replicas: int) -> np.ndarray:
        """Calls per second `replicas` whole replicas complete with n calls present, spread evenly over them."""
        n = np.asarray(n_calls, dtype=float)
        return replicas * self.replica_rate(n / replicas) if replicas > 0 else np.zeros_like(n)

    @property
    def max_replica_rate(self) -> float:
        return float(self.replica_rate(np.array([float(self.batch_limit)]))[0])

    def replica_tasks_per_s(self) -> float:
        """Sustainable tasks per second of one replica (batch-limited saturation rate / calls per task)."""
        if self.calls_per_task == 0:
            return math.inf
        return self.max_replica_rate / self.calls_per_task if self.fits else 0.0

    def tasks_per_s_per_gpu(self) -> float:
        """Tasks per second per GPU of one full domain (idle GPUs included)."""
        if self.calls_per_task == 0:
            return math.inf
        dom = self.domain_gpus or self.replica_gpus
        return self.replicas(dom) * self.replica_tasks_per_s() / dom if self.fits else 0.0

    def tasks_per_s(self, gpus: int) -> float:
        """Sustainable tasks per second of a server's `gpus` GPUs: its whole replicas only."""
        if self.calls_per_task == 0:
            return math.inf
        return self.replicas(gpus) * self.replica_tasks_per_s()

    def engine_cores(self, gpus: int) -> float:
        """Host-core floor of the serving engines on a server with `gpus` GPUs (its replicas only)."""
        return self.replicas(gpus) * self.engine_cores_per_replica


def _serving_at(workload: Workload, gpu: GpuSku, tp: int, pp: int, domain: int, mix: CallMix,
                rates: GpuRates) -> GpuServing:
    model = workload.served_model
    k = tp * pp
    weights_b = model.total_params_b * GIGA * model.bytes_per_param
    kv_call_b = model.kv_bytes_per_token * mix.context_tokens
    usable_b = gpu.memory_gb * GIGA * model.memory_usable_fraction
    need_b = weights_b + model.min_batch_per_replica * kv_call_b
    kv_room = k * usable_b - weights_b
    by_memory = int(kv_room // kv_call_b) if kv_call_b > 0 else model.max_batch_per_replica
    batch = max(0, min(model.max_batch_per_replica, by_memory))
    fits = kv_room >= 0 and batch >= model.min_batch_per_replica
    # one sequence passes every pipeline stage in turn: per-token time is the whole model over tp GPUs' bandwidth
    per_token = model.active_params_b * GIGA * model.bytes_per_param / (
        tp * gpu.memory_bandwidth_tbps * TERA * model.bandwidth_efficiency
    )
    gpu_s = mix.effective_input_tokens / rates.prefill_tokens_per_s + mix.output_tokens / rates.decode_tokens_per_s
    d = gpu_s / k
    l0 = mix.effective_input_tokens / (rates.prefill_tokens_per_s * tp) + mix.output_tokens * per_token
    l0 = max(l0, d)  # alone a call is never faster than its full-batch share
    return GpuServing(
        gpu.id, rates, tp, per_token, l0, d, max(1, batch), mix.calls_per_task, fits, pp_degree=pp,
        domain_gpus=domain, weights_gb=weights_b / GIGA, kv_gb_per_call=kv_call_b / GIGA,
        hbm_gb_per_replica=k * gpu.memory_gb, kv_gb_per_replica=kv_room / GIGA, need_gb=need_b / GIGA,
        engine_cores_per_replica=model.engine_host_cores_per_replica + model.engine_host_cores_per_gpu * k,
    )


DEFAULT_TP_DOMAIN = 8
"""Domain size for per-GPU figures outside a server (one 8-GPU HGX/OAM baseboard)."""


def replica_domain(gpus_per_server: int, chassis_domain: int | None) -> int:
    """GPUs one replica may span in a server: the server's GPUs, or fewer when the chassis says its scale-up fabric
    joins fewer. A replica never spans separately placed servers (a rack-scale system whose GPUs form one domain is
    placed as one unit)."""
    return max(1, min(gpus_per_server, chassis_domain or gpus_per_server))


def serving_key(gpu_id: str, domain: int) -> str:
    """Servings differ by GPU SKU and by the scale-up domain their replicas are placed in."""
    return f"{gpu_id}@d{domain}"


def _shapes(domain: int, max_pp: int) -> list[tuple[int, int]]:
    out = []
    tp = 1
    while tp <= domain:
        out += [(tp, pp) for pp in range(1, max_pp + 1) if tp * pp <= domain]
        tp *= 2
    return out


def gpu_serving(workload: Workload, gpu: GpuSku, domain_gpus: int = DEFAULT_TP_DOMAIN,
                tp_preferred: int | None = None) -> GpuServing:
    """Serve the workload's model on this GPU in scale-up domains of `domain_gpus` GPUs with the replica shape
    (tensor-parallel degree a power of two, times pipeline stages up to the model's `max_pipeline_parallel`, at
    most the domain) that gives the domain the most tasks per second; among equal ones the fewest GPUs per replica,
    then the fewest pipeline stages. Shapes whose usable HBM cannot hold the weights plus the KV cache of the
    model's minimum batch are skipped. Tensor-parallel degrees above `tp_preferred` (default: the domain) are used
    only when no smaller shape fits: the model takes TP scaling as linear, which holds best on one baseboard."""
    mix = call_mix(workload)
    rates = gpu_rates(workload.served_model, gpu)
    model = workload.served_model
    domain = max(1, domain_gpus)
    pref = tp_preferred or domain
    shapes = _shapes(domain, model.max_pipeline_parallel)
    best: GpuServing | None = None
    for allow_wide in (False, True):
        for tp, pp in shapes:
            if (tp > pref) != allow_wide:
                continue
            cand = _serving_at(workload, gpu, tp, pp, domain, mix, rates)
            if not cand.fits:
                continue
            if best is None or cand.tasks_per_s(domain) > best.tasks_per_s(domain) * (1 + 1e-9):
                best = cand
        if best is not None:
            return best
    tp, pp = max(shapes, key=lambda s: (s[0] * s[1], s[0]))
    worst = _serving_at(workload, gpu, tp, pp, domain, mix, rates)
    k = tp * pp
    reason = (f"{model.id} needs >= {worst.need_gb:,.0f} GB of usable HBM per replica ({worst.weights_gb:,.0f} GB "
              f"weights + KV for {model.min_batch_per_replica} calls of {mix.context_tokens:,.0f} tokens = "
              f"{model.min_batch_per_replica * worst.kv_gb_per_call:,.1f} GB); one replica of {gpu.id} in this "
              f"server (scale-up domain of {domain} GPUs) has at most {k * gpu.memory_gb * model.memory_usable_fraction:,.0f}"
              f" GB ({k} x {gpu.memory_gb:g} GB x {model.memory_usable_fraction:g} usable)")
    return replace(worst, reason=reason)


def stage_gpu_latency_s(stage: GpuStage, model: ServedModel, serving: GpuServing) -> float:
    """Unloaded latency of one call of this stage on the given serving setup."""
    eff_in = stage.new_input_tokens + model.cached_token_cost_fraction * stage.cached_input_tokens
    gpu_s = eff_in / serving.rates.prefill_tokens_per_s + stage.output_tokens / serving.rates.decode_tokens_per_s
    l0 = eff_in / (serving.rates.prefill_tokens_per_s * serving.tp_degree) + stage.output_tokens * serving.per_token_latency_s
    return max(l0, gpu_s / serving.replica_gpus)


def cpu_call_seconds(stage: CpuStage, per_core_perf: float) -> float:
    """Wall time of one tool call on cores of the given relative speed, work spread over its parallelism."""
    return stage.core_seconds / (stage.parallelism * per_core_perf)


SERVING_CACHE_SIZE = 256
"""Served-model derivations kept per (workload, GPU SKU, replica shape) by `cached_gpu_serving`."""
_serving_cache: dict[tuple, tuple] = {}
_serving_lock = threading.Lock()


def cached_gpu_serving(workload: Workload, gpu: GpuSku, *args, **kwargs) -> GpuServing:
    """`gpu_serving` remembered per (workload, GPU, arguments): an evaluation derives each serving setup once per
    configuration, and the same workload and catalog come back across evaluations. Keyed by object identity; the
    cache holds the (frozen) workload and GPU, so an identity is never reused for a different object while cached."""
    key = (id(workload), id(gpu), args, tuple(sorted(kwargs.items())))
    with _serving_lock:
        hit = _serving_cache.get(key)
    if hit is not None and hit[0] is workload and hit[1] is gpu:
        return hit[2]
    serving = gpu_serving(workload, gpu, *args, **kwargs)
    with _serving_lock:
        while len(_serving_cache) >= SERVING_CACHE_SIZE:
            _serving_cache.pop(next(iter(_serving_cache)))
        _serving_cache[key] = (workload, gpu, serving)
    return serving


def clear_serving_cache() -> None:
    with _serving_lock:
        _serving_cache.clear()
