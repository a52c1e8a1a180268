"""Per-call costs: what one LLM call costs a GPU SKU, what one tool call costs a core.

GPU serving model (documented in docs/model.md):
- per-GPU prefill and decode tokens/s at full batch come from a calibration point or the roofline
  `mfu x dense TFLOPS / (2 x active params)`;
- tensor-parallel degree k: the smallest power of two whose usable memory holds the weights plus one call's KV;
- unloaded call latency L0 = prefill time on k GPUs + output tokens x per-token latency, where per-token latency
  = active weight bytes / (k x bandwidth x bandwidth_efficiency) (memory-bound decode at batch 1);
- full-batch work per call d (replica-seconds) = GPU-seconds at full-batch rates / k;
- a replica holding b calls finishes each in L(b) = L0 + (b - 1) d (step time grows linearly with batch), so its rate
  b / L(b) rises to 1/d; the batch is capped by KV memory and the engine's max_batch_per_replica.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

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
        if c.gpu == gpu.id:
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
    """One model served on one GPU SKU, for a workload's mean call."""

    gpu_id: str
    rates: GpuRates
    tp_degree: int
    """GPUs per model replica (tensor parallel)."""
    per_token_latency_s: float
    call_latency_s: float
    """L0: one call alone on a replica."""
    call_replica_s: float
    """d: replica-seconds per call at full batch."""
    batch_limit: int
    """Concurrent calls per replica."""
    calls_per_task: float
    fits: bool
    """False when no tensor-parallel degree up to 64 GPUs holds the weights."""

    def replica_rate(self, batch: np.ndarray) -> np.ndarray:
        """Calls per second one replica completes with `batch` calls in service (fluid batch, capped)."""
        b = np.minimum(np.asarray(batch, dtype=float), self.batch_limit)
        stretch = self.call_latency_s + np.maximum(b - 1.0, 0.0) * self.call_replica_s
        return b / stretch

    def pool_rate(self, n_calls: np.ndarray, gpus: float) -> np.ndarray:
        """Calls per second a pool of `gpus` GPUs completes with n calls present, spread evenly over replicas."""
        replicas = gpus / self.tp_degree
        n = np.asarray(n_calls, dtype=float)
        return replicas * self.replica_rate(n / replicas) if replicas > 0 else np.zeros_like(n)

    @property
    def max_replica_rate(self) -> float:
        return float(self.replica_rate(np.array([float(self.batch_limit)]))[0])

    def tasks_per_s_per_gpu(self) -> float:
        """Sustainable tasks per second per GPU (batch-limited saturation rate / calls per task)."""
        if self.calls_per_task == 0 or not self.fits:
            return math.inf if self.calls_per_task == 0 else 0.0
        return self.max_replica_rate / self.tp_degree / self.calls_per_task


MAX_TP_DEGREE = 64


def _serving_at(workload: Workload, gpu: GpuSku, k: int, mix: CallMix, rates: GpuRates) -> GpuServing:
    model = workload.served_model
    weights_b = model.total_params_b * GIGA * model.bytes_per_param
    kv_call_b = model.kv_bytes_per_token * mix.context_tokens
    usable_b = gpu.memory_gb * GIGA * model.memory_usable_fraction
    fits = k * usable_b >= weights_b + kv_call_b
    per_token = model.active_params_b * GIGA * model.bytes_per_param / (
        k * gpu.memory_bandwidth_tbps * TERA * model.bandwidth_efficiency
    )
    gpu_s = mix.effective_input_tokens / rates.prefill_tokens_per_s + mix.output_tokens / rates.decode_tokens_per_s
    d = gpu_s / k
    l0 = mix.effective_input_tokens / (rates.prefill_tokens_per_s * k) + mix.output_tokens * per_token
    l0 = max(l0, d)  # alone a call is never faster than its full-batch share
    kv_room = k * usable_b - weights_b
    by_memory = int(kv_room // kv_call_b) if kv_call_b > 0 else model.max_batch_per_replica
    batch = max(1, min(model.max_batch_per_replica, by_memory))
    return GpuServing(gpu.id, rates, k, per_token, l0, d, batch, mix.calls_per_task, fits)


DEFAULT_TP_DOMAIN = 8


def tp_cap(gpus_per_server: int, chassis_domain: int | None, largest_tp: int) -> int:
    """Largest tensor-parallel degree used by choice: the scale-up domain (the server's GPUs unless the chassis
    says more), never above `largest_tp`."""
    return max(1, min(largest_tp, chassis_domain or gpus_per_server))


def serving_key(gpu_id: str, cap: int) -> str:
    """Servings differ by GPU SKU and by the tensor-parallel cap their chassis allows."""
    return f"{gpu_id}@tp{cap}"


def gpu_serving(workload: Workload, gpu: GpuSku, max_tp: int = DEFAULT_TP_DOMAIN) -> GpuServing:
    """Serve the workload's model on this GPU with the tensor-parallel degree (a power of two) that gives the most
    tasks per second per GPU; among equal ones the smallest. Degrees that cannot hold the weights plus one call's
    KV cache are skipped; a serving engineer sizes TP the same way (room for a large batch beats the fewest GPUs).
    Degrees above `max_tp` (one NVLink domain) are used only when the weights need them: the model takes
    tensor-parallel scaling as linear, which holds inside a domain, not across the network."""
    mix = call_mix(workload)
    rates = gpu_rates(workload.served_model, gpu)
    best: GpuServing | None = None
    k = 1
    while k <= MAX_TP_DEGREE:
        cand = _serving_at(workload, gpu, k, mix, rates)
        if k > max_tp and best is not None:
            break
        if cand.fits and (best is None or cand.tasks_per_s_per_gpu() > best.tasks_per_s_per_gpu() * (1 + 1e-9)):
            best = cand
        k *= 2
    return best if best is not None else _serving_at(workload, gpu, MAX_TP_DEGREE, mix, rates)


def stage_gpu_latency_s(stage: GpuStage, model: ServedModel, serving: GpuServing) -> float:
    """Unloaded latency of one call of this stage on the given serving setup."""
    eff_in = stage.new_input_tokens + model.cached_token_cost_fraction * stage.cached_input_tokens
    gpu_s = eff_in / serving.rates.prefill_tokens_per_s + stage.output_tokens / serving.rates.decode_tokens_per_s
    l0 = eff_in / (serving.rates.prefill_tokens_per_s * serving.tp_degree) + stage.output_tokens * serving.per_token_latency_s
    return max(l0, gpu_s / serving.tp_degree)


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
