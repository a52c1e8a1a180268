"""Tail-wait SLO inside the MILP: each tool queue's call rate is held below its capacity curve lambda_max(c).

The evaluator (models/pipeline.py) treats tool queue q as an M/M/c queue with c = floor(C_q / p_q) servers (C_q its
cores, p_q the call-time-weighted mean parallelism), mean call time t_q and Allen-Cunneen scale f_q = (1 + SCV_q)/2,
and its `slo:<q>` bound is lambda_max(c) / v_q, where lambda_max(c) is the largest call rate whose tail-quantile wait
is at most target / f_q (`models.queueing.max_arrival_for_wait`). lambda_max grows faster than linearly in c
(pooling), so the constraint  v_q X / 3600 <= lambda_max(c)  is not convex. Here it is written with one integer c
per queue and a multiple-choice (one binary per segment) piecewise-linear curve:

  breakpoints B_0 = 0 < B_1 = 1 < ... : every integer up to `slo_curve_exact_servers`, then segments as long as the
  lower secant  lambda(B_k) + (lambda(B_k + 1) - lambda(B_k)) (c - B_k)  stays within `slo_curve_tolerance`
  (relative) of lambda_max at the segment's last integer;
  h_k in {0,1}, sum_k h_k = 1;  B_k h_k <= c_k <= E_k h_k  (E_k the segment's last integer);  c = sum_k c_k integer;
  p_q c <= C_q                                                     (slo_servers:<q>)
  v_q X / 3600 <= sum_k lambda(B_k) h_k + s_k (c_k - B_k h_k)       (slo:<q>)

On unit segments the curve is exact; on longer ones the lower secant is below lambda_max at every integer because
lambda_max is convex in c there (checked at each segment's end and middle when it is built), so the answer always
meets the target in the evaluator and gives up at most `slo_curve_tolerance` of the queue's SLO capacity.

The mean call time depends on the queue's core speed (t_q = t_ref / speed). A queue may mix CPU SKUs; the curve uses
the slowest speed among the servers that can give it cores (slower calls, smaller lambda_max: conservative). It is
exact when the queue's cores come from one core speed.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from models.performance import cpu_call_seconds
from models.queueing import max_arrival_for_wait
from models.workload import CpuStage, Workload


@dataclass(frozen=True)
class QueueCalls:
    """What the evaluator's M/M/c model of one tool queue needs, at one core speed."""

    calls_per_task: float
    mean_call_s: float
    mean_parallelism: float
    wait_scale: float


def queue_calls(workload: Workload, classes: list[str], per_core_perf: float) -> QueueCalls | None:
    """The evaluator's per-queue sums (models/pipeline.py, `evaluate`) for a queue serving `classes`."""
    names = set(classes)
    calls = time_ = hold = m2 = 0.0
    for c in workload.classes:
        if c.name not in names:
            continue
        for s in c.stages:
            if isinstance(s, CpuStage):
                t = cpu_call_seconds(s, per_core_perf)
                calls += c.share * s.count
                time_ += c.share * s.count * t
                hold += c.share * s.count * t * s.parallelism
                m2 += c.share * s.count * t * t * (1.0 + s.cv * s.cv)
    if calls <= 0 or time_ <= 0:
        return None
    mean = time_ / calls
    scv = max(0.0, (m2 / calls) / mean ** 2 - 1.0)
    return QueueCalls(calls, mean, hold / time_, (1.0 + scv) / 2.0)


@functools.lru_cache(maxsize=200_000)
def _lam(servers: int, mean_call_s: float, wait_s: float, q: float) -> float:
    return max_arrival_for_wait(servers, mean_call_s, wait_s, q)


@dataclass(frozen=True)
class Segment:
    start: int
    end: int
    """Last integer server count of the segment (== start for an exact point)."""
    value: float
    """lambda_max(start), calls/s."""
    slope: float
    """lambda_max(start + 1) - lambda_max(start): the lower secant's slope (0 on exact points)."""


def curve(qc: QueueCalls, target_wait_s: float, quantile: float, max_servers: int, exact_servers: int,
          tolerance: float) -> list[Segment]:
    """Segments covering server counts 0..max_servers (see the module docstring)."""
    wait = target_wait_s / qc.wait_scale

    def lam(c: int) -> float:
        return _lam(c, qc.mean_call_s, wait, quantile)

    def below(start: int, slope: float, c: int) -> bool:
        return lam(start) + slope * (c - start) <= lam(c) * (1 + 1e-12)

    segs: list[Segment] = []
    c = 0
    while c <= max_servers:
        if c <= exact_servers or c == max_servers:
            segs.append(Segment(c, c, lam(c), 0.0))
            c += 1
            continue
        slope = lam(c + 1) - lam(c)
        length = 1
        # grow the segment (doubling) while the secant stays below lambda and within the tolerance at its end
        while c + 2 * length - 1 <= max_servers:
            e = c + 2 * length - 1
            mid = c + length
            if not (below(c, slope, e) and below(c, slope, mid)) or \
                    lam(e) - (lam(c) + slope * (e - c)) > tolerance * lam(e):
                break
            length *= 2
        end = min(max_servers, c + length - 1)
        segs.append(Segment(c, end, lam(c), slope if end > c else 0.0))
        c = end + 1
    return segs


def max_servers_bound(cores: float, qc: QueueCalls) -> int:
    return max(0, int(math.floor(cores / qc.mean_parallelism)))
