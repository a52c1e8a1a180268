"""Operating thresholds from the pipeline model's operating point, as numbers.

The HTML report formats them ("how to operate it") and the exporters (`advisor.export`) turn them into Prometheus
alerting rules, so both say the same thing. Rule: alert at value + headroom x (limit - value), where the limit of a
utilization is 1 (saturation) and a queue's wait and depth thresholds are the model's figures at the alert load.
No threshold equals its expected value (an alert there would fire half the time in normal operation):
- tool-call wait: above the workload's tool-wait target when it has one (the operating point keeps the wait below
  it), else the wait quantile at the alert load; in both cases at least WAIT_RESOLUTION_S above the expected wait;
- calls waiting for a core: above the M/M/c tail quantile of the queue length at the operating point (the planned
  load), and above the expected (mean) number;
- GPU utilization: outside expected +/- headroom x (1 - expected), the band of the high alert mirrored below;
- GPU idle waiting on CPU tools: its value at the operating point plus headroom x (1 - value).
"""

from __future__ import annotations

import math
from typing import Literal

from models.assumptions import ModelAssumptions
from models.base import Frozen
from models.pipeline import Evaluation
from models.queueing import erlang_c, mmc_mean_wait, mmc_wait_quantile
from models.workload import CpuStage, Workload


WAIT_RESOLUTION_S = 0.001
"""Waits under a millisecond are scheduling noise, not queueing for a core: the report shows them as "< 1 ms" and
no wait alert sits below this."""


class QueueThresholds(Frozen):
    """One tool queue at the operating point and at the alert load."""

    queue: str
    classes: list[str]
    cores: float
    """Cores in the queue (sum over servers)."""
    servers: int
    """Concurrent tool calls the queue runs (the c of its M/M/c)."""
    mean_call_s: float
    mean_parallelism: float
    """Cores a tool call holds, averaged by core-time."""
    wait_scale: float = 1.0
    """Allen-Cunneen factor the M/M/c waits are scaled by (the evaluator's, for call-time variability)."""
    utilization: float
    """Busy share of the queue's cores at the operating point."""
    utilization_alert: float
    calls_per_s: float
    """Tool calls per second into the queue at the operating point."""
    calls_per_s_alert: float
    """Tool calls per second at which utilization reaches utilization_alert."""
    wait_tail_s: float
    """Tail (tail_quantile) wait for a core at the operating point, M/M/c."""
    wait_tail_alert_s: float
    """Tail wait for a core at the alert load."""
    wait_alert_s: float
    """Wait alert threshold: the tool-wait target when the workload has one, else wait_tail_alert_s; in both cases at
    least wait_tail_s + WAIT_RESOLUTION_S (never the expected value)."""
    wait_target_s: float | None = None
    """The queue's tool-wait target (the tightest of its classes', `Workload.tool_wait_target`), None without one."""
    waiting_calls_mean: float = 0.0
    """Mean tool calls waiting for a core at the operating point (M/M/c)."""
    waiting_calls_alert: int = 1
    """Alert when more calls than this wait: the tail_quantile of the M/M/c queue length at the operating point,
    and more than waiting_calls_mean."""
    run_queue_depth_per_core: float
    """(busy cores + waiting calls x mean parallelism) / cores at the operating point."""
    run_queue_depth_per_core_alert: float
    iowait_share_alert: float
    """Share of core time in I/O wait at which the alert fires: headroom x (1 - utilization)."""


class GpuThresholds(Frozen):
    utilization: float
    """Serving capacity in use at the operating point."""
    utilization_alert: float
    idle_on_cpu_fraction: float
    """Idle serving capacity at the operating point (1 - utilization) attributed to tasks in CPU tool stages, split
    as the model's gpu_idle_on_cpu_fraction is (by the share of non-GPU task time spent in tool stages)."""
    idle_on_cpu_alert: float
    utilization_low_alert: float = 0.0
    """While arrivals are at plan, alert below this: utilization - headroom x (1 - utilization), at least 0."""


class TaskTimeThreshold(Frozen):
    expected_s: float
    """Tail task completion time at the operating point."""
    alert_s: float | None
    """The SLO target when the workload has one, else the model's p99 (None when the model has none)."""
    alert_basis: Literal["slo", "model_p99"]


class OperatingThresholds(Frozen):
    headroom: float
    """Fraction of the way from the expected value to the limit at which alerts sit."""
    tail_quantile: float
    operating_point: str
    arrival_rate_tasks_per_hour: float
    pool_alerts: dict[str, float]
    """Utilization alert per pool of the evaluation (gpu, cpu:<queue>, memory:<queue>)."""
    queues: list[QueueThresholds]
    gpu: GpuThresholds | None
    task_time: TaskTimeThreshold | None

    @property
    def tail_label(self) -> str:
        return f"p{self.tail_quantile * 100:g}"


def calls_per_task(w: Workload, classes: list[str]) -> float:
    """Tool calls per task of the mix that go to a queue serving these classes."""
    return sum(c.share * s.count for c in w.classes if c.name in classes for s in c.stages
               if isinstance(s, CpuStage))


def alert_level(u: float, headroom: float) -> float:
    return u + headroom * (1.0 - u) if math.isfinite(u) else u


def mmc_queue_length_quantile(servers: int, arrival_rate: float, service_time: float, q: float) -> int:
    """Smallest k with P(calls waiting > k) <= 1 - q in M/M/c: P(Lq > k) = C rho^(k + 1) (C: Erlang C, rho =
    lambda / (c mu)). An unstable queue gives a very large number."""
    a = arrival_rate * service_time
    if servers <= 0 or a >= servers:
        return 2 ** 31 - 1
    if a <= 0:
        return 0
    c, rho = erlang_c(servers, a), a / servers
    tail = 1.0 - q
    if c * rho <= tail:
        return 0
    return max(0, math.ceil(math.log(tail / c) / math.log(rho) - 1.0 - 1e-12))


def idle_on_cpu_at(ev: Evaluation) -> float:
    """Idle GPU serving capacity at the operating point attributed to tasks in tool stages."""
    u = min(1.0, max(0.0, ev.utilization.get("gpu", 0.0)))
    rs = ev.resource_shares
    non_gpu = rs.get("cpu", 0.0) + rs.get("io", 0.0) + rs.get("delay", 0.0)
    return (1.0 - u) * (rs.get("cpu", 0.0) / non_gpu) if non_gpu > 0 else 0.0


def operating_thresholds(ev: Evaluation, w: Workload, assumptions: ModelAssumptions,
                         headroom: float) -> OperatingThresholds:
    q_tail = assumptions.tail_quantile
    lam = ev.arrival_rate_tasks_per_hour / 3600.0
    pool_alerts = {k: (alert_level(min(u, 1.0), headroom) if math.isfinite(u) else 1.0)
                   for k, u in ev.utilization.items()}
    queues = []
    for q in ev.queues:
        key = f"cpu:{q.name}"
        u = ev.utilization.get(key)
        if u is None or q.servers <= 0 or q.cores <= 0:
            continue
        lam_c = lam * calls_per_task(w, q.classes)
        target = w.tool_wait_target(q.classes)
        u_alert = pool_alerts[key]
        lam_alert = lam_c * (u_alert / u) if u > 0 else 0.0
        lq_op = lam_c * mmc_mean_wait(q.servers, lam_c, q.mean_call_s)
        lq_alert = lam_alert * mmc_mean_wait(q.servers, lam_alert, q.mean_call_s)
        # M/M/c waits scaled for call-time variability, as the evaluator's waits and its slo:<queue> bound are
        w_tail = q.wait_scale * mmc_wait_quantile(q.servers, lam_c, q.mean_call_s, q_tail)
        w_alert = q.wait_scale * mmc_wait_quantile(q.servers, lam_alert, q.mean_call_s, q_tail)
        depth_q = mmc_queue_length_quantile(q.servers, lam_c, q.mean_call_s, q_tail)
        queues.append(QueueThresholds(
            queue=q.name, classes=list(q.classes), cores=q.cores, servers=q.servers, mean_call_s=q.mean_call_s,
            mean_parallelism=q.mean_parallelism, wait_scale=q.wait_scale, utilization=u, utilization_alert=u_alert,
            calls_per_s=lam_c, calls_per_s_alert=lam_alert,
            wait_tail_s=w_tail, wait_tail_alert_s=w_alert,
            wait_alert_s=max(target if target else w_alert, w_tail + WAIT_RESOLUTION_S),
            wait_target_s=target, waiting_calls_mean=lq_op,
            waiting_calls_alert=max(depth_q, math.floor(lq_op) + 1) if math.isfinite(lq_op) else depth_q,
            run_queue_depth_per_core=(u * q.cores + lq_op * q.mean_parallelism) / q.cores,
            run_queue_depth_per_core_alert=(u_alert * q.cores + lq_alert * q.mean_parallelism) / q.cores,
            iowait_share_alert=headroom * (1 - u),
        ))
    gpu = None
    if ev.gpus != 0 and "gpu" in ev.utilization:
        idle_cpu = idle_on_cpu_at(ev)
        u = ev.utilization["gpu"]
        gpu = GpuThresholds(utilization=u, utilization_alert=pool_alerts["gpu"],
                            idle_on_cpu_fraction=idle_cpu, idle_on_cpu_alert=alert_level(idle_cpu, headroom),
                            utilization_low_alert=max(0.0, u - headroom * (1.0 - u)) if math.isfinite(u) else 0.0)
    task = None
    if ev.p95_task_seconds is not None:
        target = w.slo.p95_task_seconds if w.slo and w.slo.p95_task_seconds else None
        task = TaskTimeThreshold(expected_s=ev.p95_task_seconds,
                                 alert_s=target if target else ev.p99_task_seconds,
                                 alert_basis="slo" if target else "model_p99")
    return OperatingThresholds(headroom=headroom, tail_quantile=q_tail, operating_point=ev.operating_point,
                               arrival_rate_tasks_per_hour=ev.arrival_rate_tasks_per_hour, pool_alerts=pool_alerts,
                               queues=queues, gpu=gpu, task_time=task)
