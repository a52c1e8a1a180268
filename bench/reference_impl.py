"""The evaluator's hot functions as they were at eb6e984, before the fast evaluator (issue 18), kept verbatim for
`bench/bench_evaluate.py`'s ratio and for the agreement tests (tests/test_fast_evaluator.py). Not used by the
product.

`previous_implementation()` runs `models.pipeline.evaluate` with these functions patched back in (scipy.stats cdf
bisection for the task-time quantiles, the full convolution algorithm without reuse, uncached serving
derivations)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence

import numpy as np
from scipy.stats import norm

import models.pipeline as pipeline
from models.performance import gpu_serving
from models.queueing import ClosedResult, Station, _log_delay, _log_station, birth_death_mean_number


def lognormal_mixture_quantile(weights, means, variances, q: float) -> float:
    mus, sigmas = [], []
    for m, v in zip(means, variances):
        s2 = math.log1p(v / (m * m)) if m > 0 else 0.0
        mus.append(math.log(m) - s2 / 2 if m > 0 else -math.inf)
        sigmas.append(math.sqrt(s2))

    def cdf(t: float) -> float:
        tot = 0.0
        for w, mu, sg in zip(weights, mus, sigmas):
            if mu == -math.inf:
                tot += w
            elif sg == 0:
                tot += w * (1.0 if math.log(t) >= mu else 0.0)
            else:
                tot += w * norm.cdf((math.log(t) - mu) / sg)
        return tot

    hi = max(means) * 2 + 1e-9
    while cdf(hi) < q:
        hi *= 2
    lo = 0.0
    for _ in range(100):
        mid = (lo + hi) / 2
        if mid > 0 and cdf(mid) >= q:
            hi = mid
        else:
            lo = mid
    return hi


def _log_convolve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    n = len(a)
    ma, mb = np.max(a), np.max(b)
    conv = np.convolve(np.exp(a - ma), np.exp(b - mb))[:n]
    with np.errstate(divide="ignore"):
        return np.log(conv) + ma + mb


def exact_mva(stations: Sequence[Station], think_s: float, population: int, queue_lengths: bool = True) -> ClosedResult:
    n_max = int(population)
    n_idx = np.arange(n_max + 1)
    base = [_log_station(s, n_max) for s in stations]
    base_delay = _log_delay(think_s, n_max)

    def log_g(parts: list[np.ndarray], delay: np.ndarray) -> np.ndarray:
        total = delay
        for lf in parts:
            total = _log_convolve(total, lf)
        return total

    rates_at_n = [float(np.asarray(s.rate(np.array([float(n_max)])))[0]) / s.demand_s for s in stations if s.demand_s > 0]
    # X(N) <= N / (Z + sum D): without it a network with many servers per station starts from a tilt far above its
    # throughput, and (X / tilt)^N underflows to a zero normalizing constant (e.g. three 992-server stations, N=992)
    cycle = think_s + sum(s.demand_s for s in stations)
    x_tilt = min(rates_at_n + [n_max / cycle if cycle > 0 else math.inf])
    if not math.isfinite(x_tilt) or x_tilt <= 0:
        x_tilt = 1.0
    for _ in range(2):
        lt = math.log(x_tilt)
        logs = [lf + lt * n_idx for lf in base]
        delay = base_delay + lt * n_idx
        total = log_g(logs, delay)
        with np.errstate(invalid="ignore", over="ignore"):
            xs = x_tilt * np.exp(total[:-1] - total[1:])
        if math.isfinite(xs[-1]) and xs[-1] > 0:
            x_tilt = float(xs[-1])
    ql = np.full(len(stations), np.nan)
    if queue_lengths:
        for i in range(len(stations)):
            if stations[i].demand_s <= 0:
                ql[i] = 0.0
                continue
            rest = log_g([lf for j, lf in enumerate(logs) if j != i], delay)
            with np.errstate(invalid="ignore"):
                logp = logs[i] + rest[::-1] - total[-1]
            p = np.exp(np.where(np.isfinite(logp), logp, -np.inf))
            if np.sum(p) > 0:
                ql[i] = float(np.sum(n_idx * p) / np.sum(p))
            else:
                h = 1e-4
                up = log_g([lf + h * n_idx if j == i else lf for j, lf in enumerate(logs)], delay)[-1]
                dn = log_g([lf - h * n_idx if j == i else lf for j, lf in enumerate(logs)], delay)[-1]
                ql[i] = (up - dn) / (2 * h)
    x = float(xs[-1])
    return ClosedResult(n_max, x, ql, ql / x, think_s)


@contextlib.contextmanager
def previous_implementation():
    """models.pipeline with eb6e984's quantiles, closed-network solver and uncached derivations patched in."""
    saved = {k: getattr(pipeline, k) for k in
             ("lognormal_mixture_quantiles", "exact_mva", "birth_death_mean_number", "cached_gpu_serving",
              "closed_loop_fixed_point", "max_arrival_for_wait", "_mean_plan", "_plan_means")}
    pipeline.lognormal_mixture_quantiles = lambda w, m, v, qs: [lognormal_mixture_quantile(w, m, v, q) for q in qs]
    # no kept fixed points (the solver is the previous one) and no kept M/M/c inversions
    fixed_point = saved["closed_loop_fixed_point"]
    pipeline.closed_loop_fixed_point = lambda solve, network, think_s, population, queue_lengths=True, key=None: \
        fixed_point(solve, network, think_s, population, queue_lengths)
    pipeline.max_arrival_for_wait = saved["max_arrival_for_wait"].__wrapped__
    # the population search's means from the whole per-stage walk, as before the plan
    pipeline._mean_plan = lambda workload, class_queue, gpu, pools, a: (workload, class_queue, gpu, pools, a)
    pipeline._plan_means = lambda plan, waits: pipeline._class_moments(*plan, waits)[0]
    pipeline.exact_mva = exact_mva
    pipeline.birth_death_mean_number = lambda lam, rate, cap, key=None: birth_death_mean_number(lam, rate, cap)
    pipeline.cached_gpu_serving = gpu_serving
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(pipeline, k, v)
