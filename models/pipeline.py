"""Closed-form pipeline model of agentic tasks on a configured rack (no simulation, no solver, no I/O).

An agent task runs its class's stages (LLM calls on the GPU pool, tool calls on one tool queue's cores, and waits
that hold nothing). The model computes:
- the throughput bound of every pool (GPU compute, host orchestration, each tool queue's cores, each queue's
  sandbox memory, each queue's tail-wait target) and the sustainable throughput, their minimum;
- latencies at an operating point: open arrivals (GPU batching station solved as a birth-death chain, tool queues
  as M/M/c) or a closed loop of agents (exact product-form solution with load-dependent stations);
- stage time shares, utilization, GPU idle time and the part of it spent waiting on CPU stages;
- power, air and liquid heat, space and weight per rack against the rack budgets, the load on each power feed in
  normal operation and after a feed (side) is lost, and the top-of-rack switches the servers' NIC ports need.
Equations and sources: docs/model.md.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
from pydantic import Field

from models.assumptions import ModelAssumptions
from models.base import Frozen, Unbounded
from models.catalog import Catalog, UnknownId
from models.config import SHARED_QUEUE, Configuration, OperatingPoint, Queue
from models.distributions import lognormal_mixture_quantiles
from models.hardware import Rack
from models.performance import (GpuServing, cached_gpu_serving, call_mix, cpu_call_seconds, replica_domain,
                                serving_key, stage_gpu_latency_s)
from models.queueing import (
    Station,
    arrival_queue_pmf,
    birth_death_mean_number,
    closed_loop_fixed_point,
    closed_loop_scale,
    closed_network_rates,
    exact_mva,
    max_arrival_for_wait,
    mmc_mean_wait,
    mmc_wait_second_moment,
    multiserver_wait_moments,
    variability_station,
)
from models.rack_physics import (FeedLoad, check_server_ports, feed_loads, planning_power_fraction, psu_warning,
                                 rack_switch, switches_needed)
from models.server import ServerProfile, server_profile
from models.tco import ServerUse, Tco, tco
from models.workload import CpuStage, GpuStage, IoStage, ServedModel, Workload
from models.errors import InputError

HOUR_S = 3600.0
MEMORY_NEAR_BINDING = 0.05
"""A sandbox-memory bound within this relative distance of the binding one is warned about as binding (at load it
binds first: sandboxes live longer than the unloaded task time it assumes)."""
WAIT_AGREEMENT = 1e-6
"""Relative agreement between a closed-loop station's wait from Little's law ((R - D) / v) and from the arrival
theorem (`multiserver_wait_moments`) within which the former sets the scale of the wait's second moment; the two are
equal in exact arithmetic, and differ only where the wait is negligible and (R - D) is rounding noise."""
LABEL_TOLERANCE = 1e-6
"""Relative slack within which GPU and orchestration capacity count as equal when naming the serving bottleneck
(an optimizer sizes orchestration exactly to the GPUs; rounding should not flip the label)."""


class Bound(Frozen):
    """One resource's limit on throughput."""

    name: str
    """`gpu`, `orchestration`, `cpu:<queue>`, `memory:<queue>`, `disk:<queue>`, `io:<queue>`, `slo:<queue>` or
    `sandboxes:<queue>` (the closed loop of the live tasks that queue's sandboxes hold at loaded task times; listed
    only when it lies below the capacity bounds, docs/model.md 5.3)."""
    kind: str
    """gpu, orchestration, cpu, memory, disk, io or slo (`sandboxes:<queue>` is of kind memory or disk)."""
    tasks_per_hour: float
    """Largest throughput this resource alone allows."""
    detail: str
    """How the figure is made, in words and numbers."""


class StageTime(Frozen):
    """Time one stage takes per task at the operating point."""

    task_class: str
    stage: str
    resource: str
    service_s: float
    """Time per task in service (count x per-occurrence time, batching slowdown included for GPU stages)."""
    wait_s: float
    """Time per task waiting for a core (tool stages) or for an I/O stream (io stages)."""
    share: float
    """Fraction of the mix's mean task time."""


class RackUsage(Frozen):
    """Budgets used in one rack."""

    rack: int
    power_w: float
    air_heat_w: float
    liquid_heat_w: float
    space_u: int
    power_budget_w: float
    air_cooling_w: float
    liquid_cooling_w: float
    space_budget_u: int
    exceeded: list[str]
    """Budgets this rack exceeds, with by how much."""
    feed_budget_w: float | None = None
    """What the feeds carry after the loss the redundancy covers, at the continuous-load factor (None: no feed
    model)."""
    feeds: list[FeedLoad] = Field(default_factory=list)
    """Per power feed: load in normal operation and with one feed (2N: one side) lost, against its derated rating."""
    weight_kg: float = 0.0
    """Servers, switches and reserved gear."""
    weight_budget_kg: float | None = None
    """The rack's static load rating (None: not limited)."""
    switches: int = 0
    """Top-of-rack switches the servers' NIC ports need (ceil(ports / server ports per switch))."""
    switch_power_w: float = 0.0
    """Their power (inside power_w and air_heat_w)."""
    network_ports: int = 0
    """Server NIC ports on the top-of-rack switches."""
    network_ports_available: int = 0
    """Server ports the placed switches offer."""


class QueueFigures(Frozen):
    name: str
    classes: list[str]
    cores: float
    """Cores in the queue."""
    per_core_perf: float
    """Capacity-weighted per-core speed relative to the reference core."""
    servers: int
    """Concurrent tool calls the queue runs (cores / mean parallelism, rounded down)."""
    mean_call_s: float
    mean_parallelism: float
    """Cores a tool call holds, averaged by core-time."""
    wait_scale: float = 1.0
    """Allen-Cunneen factor (1 + SCV of call time) / 2 applied to the M/M/c waits."""
    utilization: Unbounded
    """At the operating point (null in JSON: calls but no cores)."""
    wait_mean_s: float | None
    """Mean wait per tool call at the operating point (None if unstable)."""
    sandbox_memory_gb: float
    sandbox_disk_gb: float = 0.0
    """Local disk the queue's cores bring for sandboxes (their share of their servers' NVMe)."""
    io_mbps: float = 0.0
    """Local NVMe bandwidth the queue's cores bring (MB/s)."""
    io_streams: int = 0
    """Calls' I/O the queue's drives serve at once at one stream's bandwidth (io_mbps / io_stream_mbps, rounded
    down)."""
    io_mean_call_s: float = 0.0
    """Mean unloaded time of one I/O stage occurrence."""
    io_utilization: Unbounded = 0.0
    """I/O bandwidth utilization at the operating point (null in JSON: I/O but no bandwidth)."""
    io_wait_mean_s: float | None = 0.0
    """Mean wait for an I/O stream per I/O stage occurrence at the operating point (None if unstable)."""


class ServingPool(Frozen):
    """One replica pool: the servers whose GPUs run the same replica shape of one GPU SKU."""

    key: str
    """Pool id: GPU SKU and scale-up domain size (`<gpu>@d<GPUs>`)."""
    gpu: str
    """GPU SKU id."""
    domain_gpus: int
    """GPUs of one scale-up domain (the server's GPUs, or the chassis' smaller fabric)."""
    replicas: int
    """Whole model replicas the pool hosts."""
    tp_degree: int
    """Tensor-parallel GPUs per replica."""
    pp_degree: int
    """Pipeline-parallel stages per replica."""
    gpus_used: int
    """GPUs inside replicas: replicas x tp_degree x pp_degree."""
    gpus_idle: int
    """GPUs of the pool hosting no replica (they add no capacity)."""
    hbm_gb_per_replica: float
    """HBM of one replica's GPUs (raw)."""
    weights_gb: float
    """Model weights held by each replica."""
    kv_gb_per_replica: float
    """Usable HBM left for KV cache per replica (engine usable fraction x HBM - weights)."""
    kv_gb_per_call: float
    """KV cache of one call at the workload's mean context."""
    min_batch: int
    """Calls whose KV cache a replica must hold to count (the served model's `min_batch_per_replica`)."""
    max_batch: int
    """Concurrent calls per replica: min(engine max batch, KV room / KV per call)."""
    engine_cores_per_replica: float
    """Floor on host cores the serving engine needs per replica."""
    call_latency_s: float
    """L0: one call alone on a replica."""
    call_replica_s: float
    """d: replica-seconds per call at full batch."""
    prefill_tokens_per_s: float
    """Per GPU, at full batch."""
    decode_tokens_per_s: float
    """Per GPU, at full batch."""
    precision: str
    """Precision the model is served at (calibrations at another precision are not used)."""
    calibrated: bool
    """True when the rates come from a measurement at the served precision, False for the roofline fallback."""
    basis: str
    """Where the rates come from."""
    reason: str = ""
    """Why the pool hosts no replica (empty when it hosts some)."""


class ClosedLoop(Frozen):
    agents: int
    """Live agents: the agents given, or as many as sandbox memory and disk hold when that is fewer."""
    capped: bool
    """True when the memory-limited population exceeded the MVA cap."""
    throughput_tasks_per_hour: float
    mean_task_seconds: float | None
    """Mean task time of every agent given (its wait for a sandbox included): agents / throughput. None when the
    loop completes no tasks (a stage every task needs has no capacity)."""
    sandbox_wait_seconds: float = 0.0
    """Mean over the tasks of the wait for a sandbox before a task starts, when more agents are given than
    sandboxes hold ((agents given - live agents) / throughput; the tasks of the queue whose sandboxes fill wait,
    the others do not)."""


class Evaluation(Frozen):
    """Everything the closed-form model says about a configuration."""

    configuration: str
    workload: str
    rack_profile: str
    throughput_tasks_per_hour: float
    """Sustainable throughput: the smallest pool bound."""
    bottleneck: str
    """Name of the binding bound."""
    bottleneck_kind: str
    bounds: list[Bound]
    bottleneck_stage: str | None = None
    """`class/stage` that puts the most work on the bottleneck pool."""
    next_bottleneck: str | None = None
    """The bound that would bind next if the bottleneck were relieved."""
    relief_gain: float | None = None
    """Throughput gain available by relieving the bottleneck before the next bound binds (fraction, e.g. 0.25)."""
    gpu_idle_fraction: float
    """At sustainable throughput: fraction of GPU serving capacity left unused."""
    gpu_idle_on_cpu_fraction: float
    """The part of the idle fraction attributed to tasks waiting on tool (CPU) stages rather than plain delays."""
    operating_point: str
    arrival_rate_tasks_per_hour: float
    utilization: dict[str, Unbounded]
    """Per pool at the operating point (null in JSON: load on a pool with no capacity)."""
    queues: list[QueueFigures]
    stage_times: list[StageTime]
    stage_shares: dict[str, float]
    """`class/stage` to its fraction of mean task time at the operating point (sums to 1)."""
    resource_shares: dict[str, float]
    """gpu, cpu, cpu_wait, io, io_wait, delay: fraction of mean task time."""
    unloaded_task_seconds: float
    mean_task_seconds: float | None
    p50_task_seconds: float | None
    p95_task_seconds: float | None
    p99_task_seconds: float | None
    slo_met: bool | None
    """p95 task time within the workload's target at the operating point (None without a target)."""
    closed_loop: ClosedLoop | None
    power_w: float
    air_heat_w: float
    liquid_heat_w: float
    space_u: int
    racks: list[RackUsage]
    within_budgets: bool
    gpus: int
    cores: int
    serving: list[ServingPool] = Field(default_factory=list)
    """One entry per replica pool: replica shape, whole replicas, GPUs used and idle, HBM, KV cache and batch."""
    tco: Tco | None = None
    """Cost and energy at the operating point (capped at sustainable throughput)."""
    warnings: list[str] = Field(default_factory=list)


@dataclass
class _Group:
    index: int
    count: int
    rack: int
    profile: ServerProfile
    queue_cores: dict[str, float]


def capacity_tasks_per_hour(ev: Evaluation) -> float:
    """The sustainable throughput before the sandboxes' loaded-time loop (docs/model.md 5.3): the smallest capacity
    bound, the figure the optimizer's linear model relaxes."""
    if ev.bottleneck.startswith("sandboxes:"):
        return next(b.tasks_per_hour for b in ev.bounds if b.name == ev.next_bottleneck)
    return ev.throughput_tasks_per_hour


def needs_queue(c) -> bool:
    """A class needs a tool queue when it has tool or io stages or holds sandbox memory or disk."""
    return c.sandbox_memory_gb > 0 or c.sandbox_disk_gb > 0 or any(isinstance(s, (CpuStage, IoStage))
                                                                    for s in c.stages)


def _queues(config: Configuration, workload: Workload) -> list[Queue]:
    if config.queues is None:
        return [Queue(name=SHARED_QUEUE, classes=[c.name for c in workload.classes])]
    known = {c.name for c in workload.classes}
    listed: set[str] = set()
    for i, q in enumerate(config.queues):
        for c in q.classes:
            if c not in known:
                raise InputError(f"queues[{i}] names class {c!r}, which the workload does not have")
        listed.update(q.classes)
    for c in workload.classes:
        if needs_queue(c) and c.name not in listed:
            raise InputError(f"class {c.name!r} has tool or io stages or sandboxes but no queue serves it")
    return list(config.queues)


def resolve_groups(
    config: Configuration, workload: Workload, catalog: Catalog, assumptions: ModelAssumptions,
    rack: Rack | None = None,
) -> tuple[list[_Group], dict[str, GpuServing]]:
    """Server groups with their per-server profiles. With `rack`: power planned on the rack's basis, NIC ports
    checked against its switch, and a rack-scale system the rack profile cannot hold even when empty is an error
    naming the rack's fields and the numbers (None: nameplate, no checks)."""
    queues = _queues(config, workload)
    switch = rack_switch(rack, catalog) if rack is not None else None
    servings: dict[str, GpuServing] = {}
    groups: list[_Group] = []
    profiles: dict[tuple, object] = {}  # a row repeats the same servers rack after rack: one profile per kind
    for i, g in enumerate(config.servers):
        where = f"servers[{i}]"
        try:
            chassis = catalog.chassis[g.chassis]
        except UnknownId as e:
            raise InputError(f"{where}.chassis: {e}") from None
        if chassis.part_of_system is not None:
            raise InputError(f"{where}.chassis: {chassis.id} is a compute tray of the rack-scale system "
                             f"{chassis.part_of_system} and is placed only as part of it; give chassis "
                             f"{chassis.part_of_system} (the whole system) instead")
        try:
            cpu = catalog.cpus[g.cpu]
        except UnknownId as e:
            raise InputError(f"{where}.cpu: {e}") from None
        try:
            gpu = catalog.gpus[g.gpu] if g.gpu else None
        except UnknownId as e:
            raise InputError(f"{where}.gpu: {e}") from None
        if not chassis.accepts_cpu(cpu):
            raise InputError(f"{where}: chassis {chassis.id} does not take CPU {cpu.id} (platform {cpu.platform})")
        if gpu is not None:
            if not chassis.accepts_gpu(gpu):
                raise InputError(f"{where}: chassis {chassis.id} does not take GPU {gpu.id}")
            if g.gpus_per_server not in chassis.gpu_counts:
                raise InputError(
                    f"{where}.gpus_per_server: {g.gpus_per_server} not in chassis {chassis.id} options {chassis.gpu_counts}"
                )
            domain = replica_domain(g.gpus_per_server, chassis.scale_up_domain_gpus)
            skey = serving_key(gpu.id, domain)
            if skey not in servings:
                servings[skey] = cached_gpu_serving(workload, gpu, domain, assumptions.tensor_parallel_domain_gpus)
        elif chassis.role == "gpu":
            raise InputError(f"{where}: chassis {chassis.id} is a GPU server; give gpu and gpus_per_server")
        try:
            kind = (chassis.id, cpu.id, gpu.id if gpu else None, g.gpus_per_server, g.orchestration_cores_per_gpu)
            prof = profiles.get(kind)
            if prof is None:
                if rack is not None:
                    check_server_ports(chassis, rack, switch)
                prof = profiles[kind] = server_profile(
                    chassis, cpu, gpu, g.gpus_per_server, g.orchestration_cores_per_gpu, workload,
                    servings.get(skey) if gpu else None, assumptions.host_os_reserved_memory_gb,
                    skey if gpu else None, assumptions.costs,
                    planning_power_fraction(chassis, rack) if rack is not None else 1.0,
                )
        except ValueError as e:
            raise InputError(f"{where}: {e}") from None
        if chassis.rack_scale_system and rack is not None:
            short = rack.shortfalls(prof.power_w, prof.air_heat_w, prof.liquid_heat_w, prof.space_u,
                                    chassis.weight_kg)
            if short:
                raise InputError(f"{where}.chassis: rack-scale system {chassis.id} is placed whole, and rack "
                                 f"profile {rack.id} cannot hold one: " + "; ".join(short))
        if g.queue_cores is None:
            qc = {queues[0].name: prof.tool_cores}
        else:
            qc = dict(g.queue_cores)
            total = sum(qc.values())
            if total > prof.tool_cores + 1e-9:
                raise InputError(
                    f"{where}.queue_cores: {total:g} cores per server, but only {prof.tool_cores:g} are left after "
                    "orchestration"
                )
        groups.append(_Group(i, g.count, g.rack, prof, qc))
    return groups, servings


@dataclass(frozen=True)
class _GpuPool:
    """The GPU serving pool: capacity per replica pool (SKU and domain), orchestration, and call routing."""

    servings: dict[str, GpuServing]
    served_model: ServedModel
    has_llm: bool
    gpu_compute: float
    """GPU compute capacity, tasks/s."""
    orch: float
    """Orchestration capacity of the GPU servers, tasks/s."""
    serving_cap: float
    """Per server the smaller of GPU and orchestration capacity, summed, tasks/s."""
    cap_by_sku: dict[str, float]
    compute_by_sku: dict[str, float]
    gpus_by_sku: dict[str, float]
    replicas_by_sku: dict[str, int]
    route: dict[str, float]
    """Share of the LLM calls each replica pool serves (proportional to its serving capacity)."""
    rate_key: tuple
    """Equal keys <=> equal `rate` functions: lets the queueing solvers reuse a solved station (GpuServing
    hashes)."""

    def stage_latency(self, stage: GpuStage) -> float:
        """Unloaded latency of one occurrence of an LLM stage, averaged over the routing."""
        if not self.servings:
            return 0.0
        route, servings = self.route, self.servings
        return sum(route[k] * stage_gpu_latency_s(stage, self.served_model, servings[k]) for k in route)

    def rate(self, n: np.ndarray) -> np.ndarray:
        """Service-rate multiplier of the pool with n calls present (for the queueing solvers)."""
        total = np.zeros_like(np.asarray(n, dtype=float))
        for sku, s in self.servings.items():
            theta = self.cap_by_sku[sku] / self.compute_by_sku[sku] if self.compute_by_sku[sku] > 0 else 0.0
            total = total + theta * s.pool_rate(np.asarray(n, dtype=float) * self.route[sku],
                                                self.replicas_by_sku[sku])
        return total


@dataclass(frozen=True)
class _QueuePools:
    """Per tool queue: cores, reference-core capacity, sandbox memory, disk and I/O bandwidth, per-core speed."""

    cores: dict[str, float]
    cap: dict[str, float]
    mem: dict[str, float]
    disk: dict[str, float]
    io: dict[str, float]
    perf: dict[str, float]


@dataclass(frozen=True)
class _Demands:
    """Per class the unloaded task time; per queue the share-weighted demands one task of the mix puts on it."""

    unloaded: dict[str, float]
    cpu_work: dict[str, float]
    """Reference core-seconds per task."""
    cpu_calls: dict[str, float]
    """Tool calls per task."""
    cpu_call_time: dict[str, float]
    """Call-seconds per task (for the mean call time)."""
    cpu_hold: dict[str, float]
    """Core-seconds of wall time held."""
    cpu_call_m2: dict[str, float]
    """Second moment of call time (share-weighted sum)."""
    mem: dict[str, float]
    """Sandbox GB-seconds per task."""
    disk: dict[str, float]
    """Sandbox disk GB-seconds per task."""
    io_mb: dict[str, float]
    """MB of sandbox I/O per task."""
    io_calls: dict[str, float]
    """I/O stage occurrences per task."""
    io_time: dict[str, float]
    """Unloaded I/O seconds per task."""
    io_m2: dict[str, float]
    """Second moment of one I/O occurrence's time (share-weighted sum)."""


@dataclass(frozen=True)
class _Slots:
    """Per queue: tool slots, mean call time and Allen-Cunneen scale; I/O streams, mean I/O time and scale."""

    servers: dict[str, int]
    mean_call: dict[str, float]
    wait_scale: dict[str, float]
    io_streams: dict[str, int]
    io_mean_call: dict[str, float]
    io_wait_scale: dict[str, float]


@dataclass(frozen=True)
class _Bottleneck:
    """The binding bound, the sustainable throughput, the next bound and the stage loading the bottleneck most."""

    binding: Bound
    x_star: float
    """Sustainable throughput, tasks/s."""
    next_b: Bound | None
    relief: float | None
    stage: str | None


@dataclass(frozen=True)
class _Idle:
    """Unloaded time per task of the mix by resource, and the GPU idle fractions at sustainable throughput."""

    mix_time: dict[str, float]
    gpu_idle: float
    gpu_idle_cpu: float


@dataclass(frozen=True)
class _GpuCalls:
    """LLM calls per task of the mix and their mean unloaded latency."""

    calls_per_task: float
    mean_l0: float


@dataclass(frozen=True)
class _Waits:
    """At the operating point: GPU batching stretch, per-queue waits (mean, second moment) and stability."""

    gpu_stretch: float
    qwait: dict[str, float]
    qwait2: dict[str, float]
    iowait: dict[str, float]
    iowait2: dict[str, float]
    stable: bool
    sandbox_wait: dict[str, float] = field(default_factory=dict)
    """Closed loop with more agents than sandboxes: per class, mean wait for a sandbox before a task starts, s."""
    sandbox_wait_var: dict[str, float] = field(default_factory=dict)
    """Its variance per class, s^2."""


@dataclass(frozen=True)
class _Operating:
    """The operating point: arrival rate (tasks/s), its label, the closed loop and the waits there."""

    lam: float
    label: str
    closed: ClosedLoop | None
    waits: _Waits


@dataclass(frozen=True)
class _TaskTimes:
    """Stage times and shares, per-class task-time moments and the task-time quantiles at the operating point."""

    stage_times: list[StageTime]
    means: list[float]
    mix_mean: float
    stage_shares: dict[str, float]
    resource_shares: dict[str, float]
    p50: float | None
    p95: float | None
    p99: float | None
    slo_met: bool | None
    mean_task: float = 0.0
    """Mean task time with the wait for a sandbox (the stage shares are of mix_mean, the time after it)."""


def evaluate(
    config: Configuration,
    workload: Workload,
    rack: Rack,
    catalog: Catalog,
    assumptions: ModelAssumptions | None = None,
) -> Evaluation:
    """The closed-form model of `config` running `workload` in racks of profile `rack`: bounds, bottleneck,
    latencies at the operating point, rack budgets and TCO. Each step below is a module-level function; warnings
    are appended in the order the steps run."""
    a = assumptions or ModelAssumptions()
    warnings: list[str] = []
    queues = _queues(config, workload)
    groups, servings = resolve_groups(config, workload, catalog, a, rack)
    class_queue = {c: q.name for q in queues for c in q.classes}
    gpu = _gpu_pool(groups, servings, workload)
    _gpu_warnings(gpu, groups, workload, warnings)
    pools = _queue_pools(groups, queues)
    dem = _demands(workload, class_queue, gpu, pools, a.io_stream_mbps)
    bounds, serving_name = _capacity_bounds(gpu, pools, dem, queues)
    slots = _tool_slots(queues, pools, dem, workload, a, bounds, warnings)
    bn = _bottleneck(bounds, serving_name, workload, class_queue, gpu, pools, a.io_stream_mbps)
    idle = _gpu_idle(workload, class_queue, gpu, pools, a.io_stream_mbps, bn.x_star)
    calls = _gpu_calls(workload, gpu)
    closed, waits, sandbox = _closed_loop(config.operating_point, workload, queues, class_queue, a, gpu, pools, dem,
                                          slots, idle, calls, bn.binding.tasks_per_hour, warnings)
    sb_bound = _sandbox_bound(sandbox, bn, a)
    if sb_bound is not None:
        bounds = [*bounds, sb_bound]
        bn = _bottleneck(bounds, serving_name, workload, class_queue, gpu, pools, a.io_stream_mbps)
        idle = _gpu_idle(workload, class_queue, gpu, pools, a.io_stream_mbps, bn.x_star)
    opp = _operating_point(config.operating_point, workload, queues, a, gpu, dem, slots, bn, calls, closed, waits,
                           warnings)
    opp = _check_stable(opp, warnings)
    _memory_binding_warning(bounds, bn.binding, opp, config.operating_point, warnings)
    tt = _task_times(workload, class_queue, gpu, pools, dem, a, opp.waits)
    util = _utilization(queues, workload, class_queue, gpu, pools, dem, tt, opp, warnings)
    queue_figs = _queue_figures(queues, pools, dem, slots, util, opp.waits)
    racks = _rack_budgets(groups, rack, config.racks, catalog, warnings)
    serving_info = _serving_pools(gpu, workload)
    lam, stable = opp.lam, opp.waits.stable
    return Evaluation(
        configuration=config.name, workload=workload.id, rack_profile=rack.id,
        throughput_tasks_per_hour=bn.binding.tasks_per_hour, bottleneck=bn.binding.name,
        bottleneck_kind=bn.binding.kind, bounds=bounds, bottleneck_stage=bn.stage,
        next_bottleneck=bn.next_b.name if bn.next_b else None, relief_gain=bn.relief,
        gpu_idle_fraction=idle.gpu_idle, gpu_idle_on_cpu_fraction=idle.gpu_idle_cpu,
        operating_point=opp.label, arrival_rate_tasks_per_hour=lam * HOUR_S, utilization=util,
        queues=queue_figs, stage_times=tt.stage_times,
        stage_shares=tt.stage_shares, resource_shares=tt.resource_shares,
        unloaded_task_seconds=sum(c.share * dem.unloaded[c.name] for c in workload.classes),
        mean_task_seconds=tt.mean_task if stable else None,
        p50_task_seconds=tt.p50, p95_task_seconds=tt.p95, p99_task_seconds=tt.p99, slo_met=tt.slo_met,
        closed_loop=opp.closed,
        power_w=sum(r.power_w for r in racks), air_heat_w=sum(r.air_heat_w for r in racks),
        liquid_heat_w=sum(r.liquid_heat_w for r in racks), space_u=sum(r.space_u for r in racks),
        racks=racks, within_budgets=not any(r.exceeded for r in racks),
        gpus=sum(g.count * g.profile.gpus for g in groups), cores=sum(g.count * g.profile.cores for g in groups),
        serving=serving_info, warnings=warnings,
        tco=configuration_tco(groups, queues, workload, rack, config.racks,
                              min(lam * HOUR_S, bn.x_star * HOUR_S), a, sum(r.switch_power_w for r in racks)),
    )


def _gpu_pool(groups: list[_Group], servings: dict[str, GpuServing], workload: Workload) -> _GpuPool:
    """GPU pool capacity per SKU, orchestration limits per group, routing proportional to capacity."""
    gpu_compute = sum(g.count * g.profile.gpu_tasks_per_s for g in groups)
    orch = sum(g.count * g.profile.orchestration_tasks_per_s for g in groups if g.profile.gpus)
    serving_cap = sum(g.count * g.profile.serving_tasks_per_s for g in groups)
    has_llm = any(isinstance(s, GpuStage) for c in workload.classes for s in c.stages)
    cap_by_sku: dict[str, float] = defaultdict(float)
    compute_by_sku: dict[str, float] = defaultdict(float)
    gpus_by_sku: dict[str, float] = defaultdict(float)
    replicas_by_sku: dict[str, int] = defaultdict(int)
    for g in groups:
        if g.profile.gpu is not None:
            cap_by_sku[g.profile.serving_key] += g.count * g.profile.serving_tasks_per_s
            compute_by_sku[g.profile.serving_key] += g.count * g.profile.gpu_tasks_per_s
            gpus_by_sku[g.profile.serving_key] += g.count * g.profile.gpus
            replicas_by_sku[g.profile.serving_key] += g.count * g.profile.replicas
    route = {k: (v / serving_cap if serving_cap > 0 else 1.0 / len(cap_by_sku)) for k, v in cap_by_sku.items()}
    # equal keys <=> equal rate functions: lets the queueing solvers reuse a solved station (GpuServing hashes)
    rate_key = ("gpu_rate", tuple(sorted((sku, s, cap_by_sku[sku], compute_by_sku[sku], route[sku], gpus_by_sku[sku])
                                         for sku, s in servings.items())))
    return _GpuPool(servings, workload.served_model, has_llm, gpu_compute, orch, serving_cap, cap_by_sku,
                    compute_by_sku, gpus_by_sku, replicas_by_sku, route, rate_key)


def _gpu_warnings(gpu: _GpuPool, groups: list[_Group], workload: Workload, warnings: list[str]) -> None:
    """Warnings on GPUs hosting no replica and engines below their host-core floor (appended to `warnings`)."""
    if not gpu.has_llm:
        return
    servings, gpus_by_sku, replicas_by_sku = gpu.servings, gpu.gpus_by_sku, gpu.replicas_by_sku
    for sku, s in servings.items():
        idle = int(gpus_by_sku[sku]) - replicas_by_sku[sku] * s.replica_gpus
        if not s.fits:
            warnings.append(f"{sku}: hosts no replica, its {int(gpus_by_sku[sku])} GPUs serve nothing: {s.reason}")
        elif idle > 0:
            warnings.append(f"{sku}: {idle} of {int(gpus_by_sku[sku])} GPUs host no replica (replicas of "
                            f"{s.replica_gpus} GPUs: TP {s.tp_degree} x PP {s.pp_degree}) and add no capacity")
    for g in groups:
        pr = g.profile
        if pr.gpu is not None and pr.replicas and pr.orchestration_cores < pr.engine_min_cores - 1e-9:
            warnings.append(
                f"servers[{g.index}]: {pr.orchestration_cores:g} host cores reserved for the serving engine, "
                f"below its floor of {pr.engine_min_cores:g} ({pr.replicas} replica(s) x "
                f"{servings[pr.serving_key].engine_cores_per_replica:g} cores: "
                f"{workload.served_model.engine_host_cores_per_replica:g} + "
                f"{workload.served_model.engine_host_cores_per_gpu:g} per GPU)")
    if gpu.serving_cap <= 0 and gpus_by_sku and all(not s.fits for s in servings.values()):
        warnings.append(f"no GPU in the configuration can host a replica of {workload.served_model.name}: "
                        "the configuration serves nothing")


def _queue_pools(groups: list[_Group], queues: list[Queue]) -> _QueuePools:
    """Per tool queue: cores, capacity, sandbox memory, disk and I/O bandwidth the server groups give it."""
    qcores: dict[str, float] = defaultdict(float)
    qcap: dict[str, float] = defaultdict(float)
    qmem: dict[str, float] = defaultdict(float)
    qdisk: dict[str, float] = defaultdict(float)
    qio: dict[str, float] = defaultdict(float)
    for g in groups:
        for qn, c in g.queue_cores.items():
            qcores[qn] += g.count * c
            qcap[qn] += g.count * c * g.profile.per_core_perf
            qmem[qn] += g.count * c * g.profile.memory_per_core_gb
            qdisk[qn] += g.count * c * g.profile.disk_per_core_gb
            qio[qn] += g.count * c * g.profile.io_mbps_per_core
    qperf = {q.name: (qcap[q.name] / qcores[q.name] if qcores[q.name] > 0 else 1.0) for q in queues}
    return _QueuePools(qcores, qcap, qmem, qdisk, qio, qperf)


def _demands(workload: Workload, class_queue: dict[str, str], gpu: _GpuPool, pools: _QueuePools,
             stream: float) -> _Demands:
    """Per class the unloaded task time; per queue the tool, sandbox and I/O demands of one task of the mix."""
    stage_latency, qperf = gpu.stage_latency, pools.perf
    unloaded: dict[str, float] = {}
    cpu_work: dict[str, float] = defaultdict(float)
    cpu_calls: dict[str, float] = defaultdict(float)
    cpu_call_time: dict[str, float] = defaultdict(float)
    cpu_hold: dict[str, float] = defaultdict(float)
    cpu_call_m2: dict[str, float] = defaultdict(float)
    mem_demand: dict[str, float] = defaultdict(float)
    disk_demand: dict[str, float] = defaultdict(float)
    io_mb: dict[str, float] = defaultdict(float)
    io_calls: dict[str, float] = defaultdict(float)
    io_time: dict[str, float] = defaultdict(float)
    io_m2: dict[str, float] = defaultdict(float)
    for c in workload.classes:
        qn = class_queue.get(c.name)
        t = 0.0
        for s in c.stages:
            if isinstance(s, GpuStage):
                t += s.count * stage_latency(s)
            elif isinstance(s, CpuStage):
                call = cpu_call_seconds(s, qperf[qn])
                t += s.count * call
                cpu_work[qn] += c.share * s.count * s.core_seconds
                cpu_calls[qn] += c.share * s.count
                cpu_call_time[qn] += c.share * s.count * call
                cpu_hold[qn] += c.share * s.count * call * s.parallelism
                cpu_call_m2[qn] += c.share * s.count * call * call * (1.0 + s.cv * s.cv)
            elif isinstance(s, IoStage):
                call = s.io_mb / stream
                t += s.count * call
                io_mb[qn] += c.share * s.count * s.io_mb
                io_calls[qn] += c.share * s.count
                io_time[qn] += c.share * s.count * call
                io_m2[qn] += c.share * s.count * call * call * (1.0 + s.cv * s.cv)
            else:
                t += s.count * s.seconds
        unloaded[c.name] = t
        if qn is not None:
            mem_demand[qn] += c.share * t * c.sandbox_memory_gb
            disk_demand[qn] += c.share * t * c.sandbox_disk_gb
    return _Demands(unloaded, cpu_work, cpu_calls, cpu_call_time, cpu_hold, cpu_call_m2, mem_demand, disk_demand,
                    io_mb, io_calls, io_time, io_m2)


def _capacity_bounds(gpu: _GpuPool, pools: _QueuePools, dem: _Demands,
                     queues: list[Queue]) -> tuple[list[Bound], str | None]:
    """The GPU, orchestration and per-queue cpu, memory, disk and io bounds, and the name standing for serving."""
    bounds: list[Bound] = []
    serving_name = None
    if gpu.has_llm:
        serving_cap, gpu_compute, orch = gpu.serving_cap, gpu.gpu_compute, gpu.orch
        compute_by_sku, replicas_by_sku = gpu.compute_by_sku, gpu.replicas_by_sku
        if serving_cap >= gpu_compute * (1 - LABEL_TOLERANCE):
            serving_name = "gpu"
        elif serving_cap >= orch * (1 - LABEL_TOLERANCE):
            serving_name = "orchestration"
        else:
            serving_name = "gpu+orchestration"
        bounds.append(Bound(
            name="gpu", kind="gpu", tasks_per_hour=gpu_compute * HOUR_S,
            detail=(f"{int(sum(gpu.gpus_by_sku.values()))} GPUs, {sum(replicas_by_sku.values())} replicas; " +
                    ", ".join(
                f"{k}: {replicas_by_sku[k]} x {gpu.servings[k].replica_gpus} GPUs, {compute_by_sku[k] * HOUR_S:,.0f} "
                "tasks/h" for k in compute_by_sku))
            if compute_by_sku else "no GPUs in the configuration",
        ))
        bounds.append(Bound(
            name="orchestration", kind="orchestration", tasks_per_hour=orch * HOUR_S,
            detail="host cores reserved for inference orchestration on the GPU servers",
        ))
        if serving_name == "gpu+orchestration":
            bounds.append(Bound(
                name=serving_name, kind="gpu", tasks_per_hour=serving_cap * HOUR_S,
                detail="per server the smaller of GPU and orchestration capacity, summed",
            ))
    qcores, qcap, qmem, qdisk, qio, qperf = pools.cores, pools.cap, pools.mem, pools.disk, pools.io, pools.perf
    cpu_work, mem_demand, disk_demand, io_mb = dem.cpu_work, dem.mem, dem.disk, dem.io_mb
    for q in queues:
        if cpu_work[q.name] > 0:
            bounds.append(Bound(
                name=f"cpu:{q.name}", kind="cpu", tasks_per_hour=qcap[q.name] / cpu_work[q.name] * HOUR_S,
                detail=f"{round(qcores[q.name], 1):,g} cores x perf {qperf[q.name]:.2f} / {cpu_work[q.name]:.1f} "
                "reference core-s per task",
            ))
        if mem_demand[q.name] > 0:
            bounds.append(Bound(
                name=f"memory:{q.name}", kind="memory", tasks_per_hour=qmem[q.name] / mem_demand[q.name] * HOUR_S,
                detail=f"{qmem[q.name]:,.0f} GB for sandboxes / {mem_demand[q.name]:,.0f} GB-s per task "
                "(live tasks at unloaded task time)",
            ))
        if disk_demand[q.name] > 0:
            bounds.append(Bound(
                name=f"disk:{q.name}", kind="disk", tasks_per_hour=qdisk[q.name] / disk_demand[q.name] * HOUR_S,
                detail=f"{qdisk[q.name]:,.0f} GB of local NVMe for sandboxes / {disk_demand[q.name]:,.0f} GB-s per "
                "task (live tasks at unloaded task time)",
            ))
        if io_mb[q.name] > 0:
            bounds.append(Bound(
                name=f"io:{q.name}", kind="io", tasks_per_hour=qio[q.name] / io_mb[q.name] * HOUR_S,
                detail=f"{qio[q.name]:,.0f} MB/s of local NVMe bandwidth / {io_mb[q.name]:,.0f} MB of sandbox I/O "
                "per task",
            ))
    return bounds, serving_name


def _tool_slots(queues: list[Queue], pools: _QueuePools, dem: _Demands, workload: Workload, a: ModelAssumptions,
                bounds: list[Bound], warnings: list[str]) -> _Slots:
    """Tool slots, mean call times and variability scales per queue (appending the tail-wait bounds and the
    call-time spread warnings), and the I/O streams of each queue."""
    qcores, qio = pools.cores, pools.io
    cpu_calls, cpu_hold, cpu_call_time, cpu_call_m2 = dem.cpu_calls, dem.cpu_hold, dem.cpu_call_time, dem.cpu_call_m2
    qservers: dict[str, int] = {}
    qmean_call: dict[str, float] = {}
    qwait_scale: dict[str, float] = {}
    for q in queues:
        if cpu_calls[q.name] == 0:
            continue
        pbar = cpu_hold[q.name] / cpu_call_time[q.name]
        qservers[q.name] = int(math.floor(qcores[q.name] / pbar + 1e-9))
        qmean_call[q.name] = cpu_call_time[q.name] / cpu_calls[q.name]
        scv = max(0.0, (cpu_call_m2[q.name] / cpu_calls[q.name]) / qmean_call[q.name] ** 2 - 1.0)
        # Allen-Cunneen: a G/G/c wait is about the M/M/c wait times (Ca^2 + Cs^2) / 2, with Poisson arrivals Ca^2 = 1.
        qwait_scale[q.name] = (1.0 + scv) / 2.0
        if scv > a.tool_call_scv_warning:
            warnings.append(f"cpu:{q.name}: tool-call times vary widely (squared CV {scv:.1f}); its waits carry "
                            "an approximate correction for that spread (Allen-Cunneen in the open model, a fitted "
                            "heavy-traffic scaling in the closed loop), good to about 10% in simulation (see "
                            "docs/validation.md)")
        target = workload.tool_wait_target(q.classes)
        if target is not None:
            lam = max_arrival_for_wait(qservers[q.name], qmean_call[q.name], target / qwait_scale[q.name],
                                       a.tail_quantile)
            bounds.append(Bound(
                name=f"slo:{q.name}", kind="slo", tasks_per_hour=lam / cpu_calls[q.name] * HOUR_S,
                detail=f"{qservers[q.name]} tool slots with {qmean_call[q.name]:.2f} s calls (M/M/c waits x "
                f"{qwait_scale[q.name]:.2f} for call-time variability) keep p{a.tail_quantile * 100:g} wait <= "
                f"{target:g} s up to {lam:,.1f} calls/s",
            ))
    # I/O station: streams of io_stream_mbps each, M/M/c waits scaled for call-time variability like a tool queue.
    stream = a.io_stream_mbps
    io_calls, io_time, io_m2 = dem.io_calls, dem.io_time, dem.io_m2
    io_streams: dict[str, int] = {}
    io_mean_call: dict[str, float] = {}
    io_wait_scale: dict[str, float] = {}
    for q in queues:
        if io_calls[q.name] == 0:
            continue
        io_streams[q.name] = int(math.floor(qio[q.name] / stream + 1e-9))
        io_mean_call[q.name] = io_time[q.name] / io_calls[q.name]
        scv = max(0.0, (io_m2[q.name] / io_calls[q.name]) / io_mean_call[q.name] ** 2 - 1.0)
        io_wait_scale[q.name] = (1.0 + scv) / 2.0
    return _Slots(qservers, qmean_call, qwait_scale, io_streams, io_mean_call, io_wait_scale)


def _bottleneck(bounds: list[Bound], serving_name: str | None, workload: Workload, class_queue: dict[str, str],
                gpu: _GpuPool, pools: _QueuePools, stream: float) -> _Bottleneck:
    """The sustainable throughput (smallest effective bound), the next bound, the relief gain and the stage that
    loads the bottleneck most."""
    # gpu and orchestration combine per server; the pair's binding one stands for the serving pool.
    effective = [b for b in bounds if b.kind in ("cpu", "memory", "disk", "io", "slo") or b.name == serving_name]
    if not effective:
        raise InputError("the workload has no LLM or tool stages; nothing bounds its throughput")
    binding = min(effective, key=lambda b: b.tasks_per_hour)
    x_star = binding.tasks_per_hour / HOUR_S
    rest = sorted((b for b in effective if b is not binding), key=lambda b: b.tasks_per_hour)
    next_b = rest[0] if rest else None
    relief = (next_b.tasks_per_hour / binding.tasks_per_hour - 1.0) if next_b and binding.tasks_per_hour > 0 else None
    stage_latency, qperf = gpu.stage_latency, pools.perf
    stage_load: dict[str, float] = {}
    for c in workload.classes:
        for st in c.stages:
            key = f"{c.name}/{st.name}"
            if binding.kind in ("gpu", "orchestration") and isinstance(st, GpuStage):
                stage_load[key] = c.share * st.count * stage_latency(st)
            elif binding.kind in ("cpu", "slo") and isinstance(st, CpuStage) and \
                    class_queue.get(c.name) == binding.name.split(":", 1)[1]:
                stage_load[key] = c.share * st.count * st.core_seconds
            elif binding.kind in ("memory", "disk") and class_queue.get(c.name) == binding.name.split(":", 1)[1]:
                held = c.sandbox_memory_gb if binding.kind == "memory" else c.sandbox_disk_gb
                stage_load[key] = c.share * held * st.count * (
                    stage_latency(st) if isinstance(st, GpuStage) else
                    cpu_call_seconds(st, qperf[class_queue[c.name]]) if isinstance(st, CpuStage) else
                    st.io_mb / stream if isinstance(st, IoStage) else st.seconds)
            elif binding.kind == "io" and isinstance(st, IoStage) and \
                    class_queue.get(c.name) == binding.name.split(":", 1)[1]:
                stage_load[key] = c.share * st.count * st.io_mb
    bottleneck_stage = max(stage_load, key=stage_load.get) if stage_load else None
    return _Bottleneck(binding, x_star, next_b, relief, bottleneck_stage)


def _gpu_idle(workload: Workload, class_queue: dict[str, str], gpu: _GpuPool, pools: _QueuePools, stream: float,
              x_star: float) -> _Idle:
    """GPU idle at sustainable throughput, attributed by the non-GPU part of the unloaded task."""
    stage_latency, qperf = gpu.stage_latency, pools.perf
    mix_time = {"gpu": 0.0, "cpu": 0.0, "io": 0.0, "delay": 0.0}
    for c in workload.classes:
        for s in c.stages:
            if isinstance(s, GpuStage):
                mix_time["gpu"] += c.share * s.count * stage_latency(s)
            elif isinstance(s, CpuStage):
                mix_time["cpu"] += c.share * s.count * cpu_call_seconds(s, qperf[class_queue[c.name]])
            elif isinstance(s, IoStage):
                mix_time["io"] += c.share * s.count * s.io_mb / stream
            else:
                mix_time["delay"] += c.share * s.count * s.seconds
    has_llm, serving_cap = gpu.has_llm, gpu.serving_cap
    gpu_idle = max(0.0, 1.0 - x_star / serving_cap) if serving_cap > 0 and has_llm else (1.0 if has_llm else 0.0)
    non_gpu = mix_time["cpu"] + mix_time["io"] + mix_time["delay"]
    gpu_idle_cpu = gpu_idle * (mix_time["cpu"] / non_gpu) if non_gpu > 0 else 0.0
    return _Idle(mix_time, gpu_idle, gpu_idle_cpu)


def _gpu_calls(workload: Workload, gpu: _GpuPool) -> _GpuCalls:
    """LLM calls per task of the mix and their mean unloaded latency L0."""
    stage_latency = gpu.stage_latency
    calls_per_task = sum(c.share * s.count for c in workload.classes for s in c.stages if isinstance(s, GpuStage))
    mean_l0 = (sum(c.share * s.count * stage_latency(s) for c in workload.classes for s in c.stages
                   if isinstance(s, GpuStage)) / calls_per_task) if calls_per_task else 0.0
    return _GpuCalls(calls_per_task, mean_l0)


SANDBOX_POPULATION_SOLVES = 8
"""Most closed-loop solves spent finding the live population the sandboxes hold (false position on a bracket, each
step one solve with queue lengths); the bracket's low end, a population known to fit, is the answer."""
SANDBOX_POPULATION_RTOL = 0.005
"""The live-population search stops when its bracket is this narrow relative to its high end (or one agent wide):
half a percent of the population moves the loop's throughput by less than that."""


def _sandbox_population(workload: Workload, queues: list[Queue], class_queue: dict[str, str], pools: _QueuePools,
                        times: dict[str, float]) -> tuple[float, str | None, str]:
    """How many live tasks of the mix the sandboxes hold when a class-c task lives times[c] seconds: class c's part
    of the live tasks is share_c T_c / T_mix (Little's law), so queue q's memory M_q holds
    M_q T_mix / sum_{c in q} share_c T_c mem_c of them (disk alike). Returns the smallest over the queues, the
    queue that fills first and whether memory or disk fills it (inf, None when no class holds a sandbox)."""
    t_mix = sum(c.share * times[c.name] for c in workload.classes)
    best: tuple[float, str | None, str] = (math.inf, None, "memory")
    for q in queues:
        members = [c for c in workload.classes if class_queue.get(c.name) == q.name]
        for held, cap, need in (
                ("memory", pools.mem[q.name], sum(c.share * times[c.name] * c.sandbox_memory_gb for c in members)),
                ("disk", pools.disk[q.name], sum(c.share * times[c.name] * c.sandbox_disk_gb for c in members))):
            if need > 0 and cap * t_mix / need < best[0]:
                best = (cap * t_mix / need, q.name, held)
    return best


def _waiting_split(workload: Workload, queues: list[Queue], class_queue: dict[str, str], pools: _QueuePools,
                   dem: _Demands, slots: _Slots, plan: list, waits: _Waits, x_live: float, agents: int, tight: str,
                   max_agents: int) -> dict[str, tuple[float, float | None]]:
    """How the agents beyond the live ones share out their wait among the queues whose sandboxes limit them: per
    queue, its share of the waiting time and the variance (s^2) a task's time there takes from the state it finds
    (None: the gamma wait of completions at a steady rate).

    With one limited queue, all of it is that queue's (the queue that fills first). With two or more, classes as
    they are: each tool queue q with its classes (share sigma_q of the mix) is a flow-equivalent station (Chandy,
    Herzog & Woo 1975) whose completion rate with n of its tasks live, mu_q(n), is the closed network of those tasks
    alone: its tool and I/O stations (as in the live loop) and a delay for its model calls (at the live loop's GPU
    stretch) and other stages. Its sandboxes hold L_q of its tasks, so with more present it completes at
    mu_q(L_q) and the others wait. The agents cycle through these stations (queue q with probability sigma_q; classes
    without a queue are a delay): a product-form network, solved exactly for all the agents. Queue q's part is its
    residence there beyond the live loop's time for its tasks: a queue whose tool cores bind piles up its own tasks
    (and fills its sandboxes) under load even when another queue's sandboxes fill first at the mix's mean task
    times, which the single live loop of the mix cannot show. Such a loop mixes slowly (how many tasks of each queue
    are live drifts over thousands of seconds), so the state a task starts in sets its time: finding j of its
    queue's tasks (the arrival theorem's marginal) it spends about (j + 1) / mu_q(j + 1) at the station, waiting
    included; the variance of that over j is added to its task time's (with the per-task gamma spread alone the
    p95 of these loops came out 13-14% below the simulator's, with this 4-8%)."""
    means = dict(zip((c.name for c in workload.classes), _plan_means(plan, waits)))
    members = {q.name: [(c, t) for c, t in zip(workload.classes, plan) if class_queue.get(c.name) == q.name]
               for q in queues}
    # per queue, the task-seconds its classes put on the loop per task of the mix (the live loop's times)
    demand = {q.name: sum(c.share * means[c.name] for c, _ in members[q.name]) for q in queues}
    limits: dict[str, float] = {}
    for q in queues:
        mem, d = members[q.name], demand[q.name]
        held = [cap * d / need for cap, need in (
            (pools.mem[q.name], sum(c.share * means[c.name] * c.sandbox_memory_gb for c, _ in mem)),
            (pools.disk[q.name], sum(c.share * means[c.name] * c.sandbox_disk_gb for c, _ in mem))) if need > 0]
        if held and d > 0:
            limits[q.name] = max(1.0, min(held))
    if len(limits) < 2 or agents > max_agents:
        return {tight: (1.0, None)}
    stations: list[Station] = []
    rates: dict[str, np.ndarray] = {}
    think = sum(c.share * means[c.name] for c in workload.classes if class_queue.get(c.name) is None)
    for q in queues:
        mem = members[q.name]
        sigma = sum(c.share for c, _ in mem)
        if sigma <= 0:
            continue
        sub: list[Station] = []
        cpu_d, io_d = dem.cpu_call_time[q.name] / sigma, dem.io_time[q.name] / sigma
        if cpu_d > 0 and slots.servers.get(q.name, 0) > 0:
            sub.append(variability_station("cpu", cpu_d, float(slots.servers[q.name]),
                                           closed_loop_scale(slots.wait_scale[q.name]), x_live * sigma))
        if io_d > 0 and slots.io_streams.get(q.name, 0) > 0:
            sub.append(variability_station("io", io_d, float(slots.io_streams[q.name]),
                                           closed_loop_scale(slots.io_wait_scale[q.name]), x_live * sigma))
        own = sum(c.share * (lat * waits.gpu_stretch + rest) for c, (lat, rest, _, _, _) in mem) / sigma
        # rates up to the tasks its sandboxes hold; beyond, the full-sandbox rate
        top = int(min(agents, math.floor(limits[q.name]))) if q.name in limits else agents
        mu = np.empty(agents + 1)
        mu[:top + 1] = closed_network_rates(sub, max(0.0, own - cpu_d - io_d), top)
        mu[top:] = mu[top]
        if mu[1] <= 0:
            return {tight: (1.0, None)}
        rates[q.name] = mu
        stations.append(Station(f"queue:{q.name}", sigma / mu[1],
                                lambda n, r=mu / mu[1]: r[np.minimum(np.asarray(n, dtype=int), len(r) - 1)]))
    res = exact_mva(stations, think, agents)
    found = arrival_queue_pmf(stations, think, agents, res.throughput)
    extra: dict[str, float] = {}
    spread: dict[str, float] = {}
    for st, r, pmf in zip(stations, res.residence_s, found):
        qn = st.name.split(":", 1)[1]
        extra[qn] = max(0.0, float(r) - demand[qn])
        if qn in limits and pmf is not None:
            mu = rates[qn]
            j = np.arange(len(pmf))
            t = (j + 1) / mu[np.minimum(j + 1, len(mu) - 1)]  # a task's time there, finding j of its queue's
            m = float(np.sum(pmf * t))
            spread[qn] = max(0.0, float(np.sum(pmf * t * t)) - m * m)
    total = sum(extra.values())
    if total <= 0:
        return {tight: (1.0, None)}
    return {q: (e / total, spread.get(q)) for q, e in extra.items() if e > 0}


@dataclass(frozen=True)
class _SandboxLimit:
    """The closed loop of as many live tasks as the sandboxes hold at that loop's task times."""

    closed: ClosedLoop
    waits: _Waits
    queue: str
    """The queue whose sandboxes fill first."""
    held: str
    """memory or disk."""


def _live_population(workload: Workload, queues: list[Queue], class_queue: dict[str, str], gpu: _GpuPool,
                     pools: _QueuePools, a: ModelAssumptions, hi: int,
                     solve: Callable[[int, bool], tuple[ClosedLoop | None, _Waits]],
                     enough: float | None = None) -> _SandboxLimit | None:
    """The largest population n <= hi whose loop the sandboxes hold: g(n) >= n, g(n) the live tasks they hold at
    the class task times of the loop of n (`_sandbox_population`); `hi` is the population they hold at unloaded
    task times. g falls as n grows (tasks live longer in a fuller loop), so g(n) >= g(hi) for every n <= hi: g(hi)
    is held, and the answer is the crossing of g(n) - n in [g(hi), hi], found by false position (Illinois).
    `enough` (tasks/h): stop and return None once a held population's loop reaches it (the answer's loop, no
    smaller, can only be faster). None also when a loop completes nothing."""

    plan = _mean_plan(workload, class_queue, gpu, pools, a)

    def probe(n: int) -> tuple[int, _SandboxLimit] | None:
        closed, waits = solve(n, True)
        if closed is None:
            return None
        n_mem, tight, held = _sandbox_population(workload, queues, class_queue, pools,
                                                 {c.name: t for c, t in zip(workload.classes,
                                                                            _plan_means(plan, waits))})
        return (int(n_mem) if math.isfinite(n_mem) else hi) - n, _SandboxLimit(closed, waits, tight, held)

    top = probe(hi)
    if top is None or top[0] >= 0:
        return None if top is None else top[1]
    lo = max(1, hi + top[0])
    low = probe(lo)
    if low is None or (enough is not None and low[1].closed.throughput_tasks_per_hour >= enough):
        return None
    (h_lo, best), h_hi = low, top[0]
    h_lo = max(h_lo, 0)  # held, as shown above
    side = 0
    for _ in range(SANDBOX_POPULATION_SOLVES - 2):
        if hi - lo <= max(1, SANDBOX_POPULATION_RTOL * hi):
            break
        n = lo + round((hi - lo) * h_lo / (h_lo - h_hi)) if h_lo > h_hi else (lo + hi) // 2
        n = min(max(n, lo + 1), hi - 1)
        got = probe(n)
        if got is None:
            return None
        if got[0] >= 0:
            if enough is not None and got[1].closed.throughput_tasks_per_hour >= enough:
                return None
            lo, h_lo, best = n, got[0], got[1]
            h_hi = h_hi / 2 if side == 1 else h_hi  # Illinois: halve the end that stayed twice
            side = 1
        else:
            hi, h_hi = n, got[0]
            h_lo = h_lo / 2 if side == -1 else h_lo
            side = -1
    return best


def _sandbox_bound(sandbox: _SandboxLimit | None, bn: _Bottleneck, a: ModelAssumptions) -> Bound | None:
    """The `sandboxes:<queue>` bound when the sandbox-limited throughput lies more than
    `sandbox_limit_tolerance` below the capacity bounds (a closed loop only approaches them: within the tolerance
    the capacity figure stands)."""
    if sandbox is None or sandbox.closed.capped:
        return None
    x = sandbox.closed.throughput_tasks_per_hour
    if x >= bn.binding.tasks_per_hour * (1 - a.sandbox_limit_tolerance):
        return None
    return Bound(
        name=f"sandboxes:{sandbox.queue}", kind=sandbox.held, tasks_per_hour=x,
        detail=f"sandbox {sandbox.held} of queue {sandbox.queue!r} holds {sandbox.closed.agents:,} live tasks at "
        f"their loaded task times ({sandbox.closed.mean_task_seconds:,.0f} s for a task of the mix); the closed loop "
        f"of those completes {x:,.0f} tasks/h, {1 - x / bn.binding.tasks_per_hour:.1%} below the "
        f"{bn.binding.name} bound",
    )


def _closed_loop(op: OperatingPoint, workload: Workload, queues: list[Queue], class_queue: dict[str, str],
                 a: ModelAssumptions, gpu: _GpuPool, pools: _QueuePools, dem: _Demands, slots: _Slots, idle: _Idle,
                 calls: _GpuCalls, x_cap: float, warnings: list[str]
                 ) -> tuple[ClosedLoop | None, _Waits, _SandboxLimit | None]:
    """The closed loop of N agents (given, else the population sandbox memory and disk allow) and, with agents
    given, the waits and GPU stretch it implies.

    With more agents than the sandboxes hold, only the live ones are in the network. Their number is a fixed point:
    the population whose class task times (from the network's waits at that population) fill the queue that fills
    first. The others queue FIFO for a sandbox of that queue, which a task of its classes frees at rate
    X x (their share); the wait is part of their task time."""
    cpu_calls, cpu_call_time, io_calls, io_time = dem.cpu_calls, dem.cpu_call_time, dem.io_calls, dem.io_time
    qservers, qwait_scale, io_streams, io_wait_scale = slots.servers, slots.wait_scale, slots.io_streams, \
        slots.io_wait_scale
    has_llm, serving_cap = gpu.has_llm, gpu.serving_cap
    calls_per_task, mean_l0 = calls.calls_per_task, calls.mean_l0
    gpu_rate = gpu.rate
    gpu_rate_key = gpu.rate_key
    mix_time = idle.mix_time
    stable = True
    # Closed loop: agents given, else the population sandbox memory allows.
    n_mem, tight, held = _sandbox_population(workload, queues, class_queue, pools, dem.unloaded)
    n_agents = op.agents if op.agents is not None else (int(n_mem) if math.isfinite(n_mem) else None)
    limited = op.agents is not None and math.isfinite(n_mem) and op.agents > n_mem
    if limited:
        n_agents = max(1, int(n_mem))
    # A stage some tasks need that has no capacity ends up holding every agent: the loop completes nothing. (Left
    # out of the network, it would be skipped, and the loop would run as if that stage took no time.)
    starved = (["GPU serving (GPUs and orchestration cores)"] if has_llm and serving_cap <= 0 else []) + [
        f"tool queue {q.name!r} (no cores)" for q in queues if cpu_calls[q.name] > 0 and qservers.get(q.name, 0) <= 0
    ] + [f"the I/O of queue {q.name!r} (no I/O stream of local NVMe bandwidth)" for q in queues
         if io_calls[q.name] > 0 and io_streams.get(q.name, 0) <= 0]
    if n_agents is not None and n_agents >= 1 and starved:
        if limited:
            warnings.append(f"sandbox {held} holds {int(n_mem):,} live tasks; the other {op.agents - int(n_mem):,} "
                            f"agents wait for {held} and the closed loop is solved for the live ones")
        closed = ClosedLoop(agents=min(n_agents, a.max_closed_loop_agents), capped=n_agents > a.max_closed_loop_agents,
                            throughput_tasks_per_hour=0.0, mean_task_seconds=None)
        warnings.append(f"the closed loop completes no tasks: {' and '.join(starved)} "
                        f"{'have' if len(starved) > 1 else 'has'} no capacity")
        return closed, _Waits(1.0, {}, {}, {}, {}, False), None
    if n_agents is None or n_agents < 1:
        return None, _Waits(1.0, {}, {}, {}, {}, stable), None
    # Tool and I/O stations: multi-server, exponential, with the queue scaled for call-time variability at the
    # throughput x_hat (`variability_rate`); solved as a fixed point in x_hat (`closed_loop_fixed_point`).
    multi: list[tuple[str, float, float, float]] = []  # (name, demand, servers, Allen-Cunneen scale)
    for q in queues:
        if cpu_calls[q.name] > 0 and qservers.get(q.name, 0) > 0:
            multi.append((f"cpu:{q.name}", cpu_call_time[q.name], float(qservers[q.name]),
                          closed_loop_scale(qwait_scale[q.name])))
        if io_calls[q.name] > 0 and io_streams.get(q.name, 0) > 0:
            multi.append((f"io:{q.name}", io_time[q.name], float(io_streams[q.name]),
                          closed_loop_scale(io_wait_scale[q.name])))

    def network(x_hat: float | None) -> list[Station]:
        out = [Station("gpu", calls_per_task * mean_l0, lambda n: gpu_rate(n) * mean_l0,
                       rate_key=(gpu_rate_key, mean_l0))] if has_llm and serving_cap > 0 else []
        for name, demand, servers, scale in multi:
            out.append(variability_station(name, demand, servers, scale, x_hat))
        return out

    # what determines network(x_hat) entirely (the GPU station's rate is identified by its rate key, as for the
    # solved-network cache)
    network_key = (("gpu", calls_per_task * mean_l0, gpu_rate_key, mean_l0) if has_llm and serving_cap > 0 else None,
                   tuple(multi))

    def solve(n: int, with_waits: bool) -> tuple[ClosedLoop | None, _Waits]:
        """The loop of n agents; `with_waits`: also the waits (their spread only when agents are given)."""
        gpu_stretch = 1.0
        qwait: dict[str, float] = {}
        qwait2: dict[str, float] = {}
        iowait: dict[str, float] = {}
        iowait2: dict[str, float] = {}
        capped = n > a.max_closed_loop_agents
        n_run = min(n, a.max_closed_loop_agents)
        if not multi and not (has_llm and serving_cap > 0):  # an empty network (as network(None) would be)
            return None, _Waits(gpu_stretch, qwait, qwait2, iowait, iowait2, stable)
        # queue lengths only where the waits are read (agents given, the sandboxes' population search); for the
        # open-arrival loop only its throughput is read, and the marginals of a 100-rack row's population underflow
        fp = closed_loop_fixed_point(exact_mva, network, mix_time["delay"], n_run, queue_lengths=with_waits,
                                     key=network_key)
        stations = network(fp.x_hat)
        res = fp.result
        x_n = res.throughput
        closed = ClosedLoop(agents=n_run, capped=capped, throughput_tasks_per_hour=x_n * HOUR_S,
                            mean_task_seconds=n_run / x_n)
        if with_waits:
            # The wait's spread from the number of tasks an arriving call finds (arrival theorem); its mean
            # stays the one Little's law gives from the residence times, so the mean task time is N / X(N).
            found = arrival_queue_pmf(stations, mix_time["delay"], n_run, x_n) if op.agents is not None else \
                [None] * len(stations)
            for i, st in enumerate(stations):
                r_i = float(res.residence_s[i])
                if st.name == "gpu":
                    gpu_stretch = r_i / st.demand_s
                    continue
                qn = st.name.split(":", 1)[1]
                if st.name.startswith("io:"):
                    calls_v, servers = io_calls[qn], float(io_streams[qn])
                else:
                    calls_v, servers = cpu_calls[qn], float(qservers[qn])
                w = max(0.0, (r_i - st.demand_s) / calls_v)
                w2 = 2 * w * w  # exponential, if the marginal underflows
                if found[i] is not None:
                    m1, m2 = multiserver_wait_moments(found[i], servers, st.demand_s / calls_v)
                    if m1 > 0 and abs(w - m1) <= WAIT_AGREEMENT * max(w, m1):
                        w2 = m2 * (w / m1) ** 2
                    else:  # a wait that is cancellation noise in (R - D) / v: the arrival theorem's moment
                        w2 = m2
                if st.name.startswith("io:"):
                    iowait[qn], iowait2[qn] = w, w2
                else:
                    qwait[qn], qwait2[qn] = w, w2
        return closed, _Waits(gpu_stretch, qwait, qwait2, iowait, iowait2, stable)

    # The loop of as many live tasks as the sandboxes hold at its task times: the sustainable throughput when it
    # lies below the capacity bounds (`_sandbox_bound`), and the live agents when more are given.
    sandbox = None
    if network(None) and math.isfinite(n_mem) and int(n_mem) <= a.max_closed_loop_agents:
        sandbox = _live_population(workload, queues, class_queue, gpu, pools, a, max(1, int(n_mem)), solve,
                                   None if limited else (1 - a.sandbox_limit_tolerance) * x_cap)
    if limited and sandbox is not None:
        closed, waits, tight, held = sandbox.closed, sandbox.waits, sandbox.queue, sandbox.held
        n_agents = closed.agents
        waiting = op.agents - closed.agents
        x_n = closed.throughput_tasks_per_hour / HOUR_S
        if waiting > 0 and x_n > 0:
            # The waiting agents' time, N / X less the live loop's task times (Little), is shared among the
            # limited queues (`_waiting_split`); with one, a task of its classes waits for that many completions of
            # its own classes, which come at rate X x their share from many independent tasks (Poisson): a gamma
            # wait. With more, the spread is the flow-equivalent network's over the states a task may find.
            split = _waiting_split(workload, queues, class_queue, pools, dem, slots,
                                   _mean_plan(workload, class_queue, gpu, pools, a), waits, x_n, op.agents, tight,
                                   a.max_closed_loop_agents)
            wait: dict[str, float] = {}
            var: dict[str, float] = {}
            by_queue: dict[str, float] = {}
            for qn, (part, spread) in split.items():
                rate = x_n * sum(c.share for c in workload.classes if class_queue.get(c.name) == qn)
                w = waiting * part / rate
                for c in workload.classes:
                    if class_queue.get(c.name) == qn:
                        wait[c.name], var[c.name] = w, (w / rate if spread is None else spread)
                by_queue[qn] = w
            waits = replace(waits, sandbox_wait=wait, sandbox_wait_var=var)
            closed = closed.model_copy(update={"mean_task_seconds": op.agents / x_n,
                                               "sandbox_wait_seconds": waiting / x_n})
            told = "; ".join(f"{w:,.0f} s on average for a task of queue {qn!r}" for qn, w in by_queue.items())
            warnings.append(f"sandbox {held} of queue {tight!r} holds {closed.agents:,} live tasks of the mix; the "
                            f"other {waiting:,} agents wait for {held} ({told}, part of its task time) and the "
                            "closed loop is solved for the live ones")
    else:
        if op.agents is None and sandbox is not None:  # open arrivals: the waits are the operating point's
            closed, waits = sandbox.closed, _Waits(1.0, {}, {}, {}, {}, stable)
        else:
            closed, waits = solve(n_agents, op.agents is not None)
        if limited:
            warnings.append(f"sandbox {held} holds {int(n_mem):,} live tasks; the other {op.agents - int(n_mem):,} "
                            f"agents wait for {held} and the closed loop is solved for the live ones")
    if closed is not None and closed.capped:
        warnings.append(f"closed loop capped at {closed.agents} agents (memory allows {n_agents})")
    return closed, waits, sandbox


def _operating_point(op: OperatingPoint, workload: Workload, queues: list[Queue], a: ModelAssumptions, gpu: _GpuPool,
                     dem: _Demands, slots: _Slots, bn: _Bottleneck, calls: _GpuCalls, closed: ClosedLoop | None,
                     waits: _Waits, warnings: list[str]) -> _Operating:
    """The arrival rate at the operating point and, for open arrivals, the GPU stretch (birth-death station) and
    the M/M/c tool and I/O waits there."""
    if op.agents is not None and closed is not None:
        lam = closed.throughput_tasks_per_hour / HOUR_S
        op_label = f"closed loop of {closed.agents} agents" if not closed.sandbox_wait_seconds else \
            f"closed loop of {op.agents} agents ({closed.agents} live, the others waiting for a sandbox)"
        return _Operating(lam, op_label, closed, waits)
    x_star = bn.x_star
    stable, gpu_stretch = waits.stable, waits.gpu_stretch
    qwait, qwait2, iowait, iowait2 = waits.qwait, waits.qwait2, waits.iowait, waits.iowait2
    if op.arrival_rate_per_hour is not None:
        lam = op.arrival_rate_per_hour / HOUR_S
        op_label = f"open arrivals at {op.arrival_rate_per_hour:,.0f} tasks/h"
    else:
        frac = op.load_fraction or workload.planned_load(a.operating_load_fraction)
        lam = frac * x_star
        op_label = f"open arrivals at {frac:.0%} of sustainable throughput"
    if lam >= x_star * (1 + 1e-12) and lam > 0:
        stable = False
        warnings.append("operating point is at or above sustainable throughput: queues grow without bound")
    calls_per_task, mean_l0 = calls.calls_per_task, calls.mean_l0
    if gpu.has_llm and lam > 0 and stable and mean_l0 > 0:
        nbar = birth_death_mean_number(lam * calls_per_task, gpu.rate, a.gpu_birth_death_states, gpu.rate_key)
        gpu_stretch = (nbar / (lam * calls_per_task)) / mean_l0 if math.isfinite(nbar) else math.inf
    cpu_calls, io_calls = dem.cpu_calls, dem.io_calls
    qservers, qmean_call, qwait_scale = slots.servers, slots.mean_call, slots.wait_scale
    io_streams, io_mean_call, io_wait_scale = slots.io_streams, slots.io_mean_call, slots.io_wait_scale
    for q in queues:
        if cpu_calls[q.name] > 0:
            lam_c = lam * cpu_calls[q.name]
            f = qwait_scale[q.name]
            qwait[q.name] = f * mmc_mean_wait(qservers[q.name], lam_c, qmean_call[q.name]) if lam > 0 else 0.0
            qwait2[q.name] = f * f * mmc_wait_second_moment(qservers[q.name], lam_c, qmean_call[q.name]) \
                if lam > 0 else 0.0
        if io_calls[q.name] > 0:
            lam_c = lam * io_calls[q.name]
            f = io_wait_scale[q.name]
            iowait[q.name] = f * mmc_mean_wait(io_streams[q.name], lam_c, io_mean_call[q.name]) \
                if lam > 0 else 0.0
            iowait2[q.name] = f * f * mmc_wait_second_moment(io_streams[q.name], lam_c, io_mean_call[q.name]) \
                if lam > 0 else 0.0
    return _Operating(lam, op_label, closed, _Waits(gpu_stretch, qwait, qwait2, iowait, iowait2, stable))


def _check_stable(opp: _Operating, warnings: list[str]) -> _Operating:
    """The operating point marked unstable (with a warning, once) when a GPU stretch or a wait is not finite."""
    w = opp.waits
    if not math.isfinite(w.gpu_stretch) or any(not math.isfinite(x) for x in [*w.qwait.values(), *w.iowait.values()]):
        if not any("unstable" in m for m in warnings):
            warnings.append("a pool is unstable at the operating point (whole-server rounding of a tool queue can "
                            "leave it below the fluid bound): latencies are not finite")
        return replace(opp, waits=replace(w, stable=False))
    return opp


def _memory_binding_warning(bounds: list[Bound], binding: Bound, opp: _Operating, op: OperatingPoint,
                            warnings: list[str]) -> None:
    """Warning whenever sandbox memory or disk binds or nearly binds (appended to `warnings`): always said, whatever
    the load, with the figure the sandboxes sustain at loaded task times."""
    if binding.name.startswith("sandboxes:"):
        held = "memory" if binding.kind == "memory" else "disk"
        warnings.append(f"{binding.name} binds at {binding.tasks_per_hour:,.0f} tasks/h: {binding.detail}. More "
                        f"sandbox {held} on that queue, or smaller sandboxes, raises it (docs/model.md 5.3)")
        return
    mem = [b for b in bounds if b.kind in ("memory", "disk")]
    near = [b for b in mem if b.tasks_per_hour <= binding.tasks_per_hour * (1 + MEMORY_NEAR_BINDING)]
    if not near:
        return
    mem_b = min(near, key=lambda b: b.tasks_per_hour)
    closed = opp.closed
    extra = ""
    if closed is not None and op.agents is None and closed.throughput_tasks_per_hour > 0:
        extra = (f"; the closed loop of the {closed.agents:,} tasks whose sandboxes fit completes "
                 f"{closed.throughput_tasks_per_hour:,.0f} tasks/h")
    within = f" (within {MEMORY_NEAR_BINDING:.0%})" if mem_b is not binding else ""
    warnings.append(f"{mem_b.name} binds{within} at {mem_b.tasks_per_hour:,.0f} tasks/h: sandboxes are counted for "
                    f"the unloaded task time, and at load tasks hold them longer{extra} (docs/model.md 5.3)")


def _mean_plan(workload: Workload, class_queue: dict[str, str], gpu: _GpuPool, pools: _QueuePools,
               a: ModelAssumptions) -> list[tuple[float, float, str | None, float, float]]:
    """Per class, what its mean task time (`_class_moments`) is made of apart from the waits: (model-call latency
    summed over its calls, tool service, I/O and delays summed, its queue, its tool calls, its I/O calls). The
    mean is linear in the GPU stretch and the queue's waits, so the sandboxes' population search, which reads the
    means alone at several populations, works them out once (`_plan_means`)."""
    stage_latency, qperf, stream = gpu.stage_latency, pools.perf, a.io_stream_mbps
    out = []
    for c in workload.classes:
        qn = class_queue.get(c.name)
        lat = rest = n_cpu = n_io = 0.0
        for s in c.stages:
            if isinstance(s, GpuStage):
                lat += s.count * stage_latency(s)
            elif isinstance(s, CpuStage):
                rest += s.count * cpu_call_seconds(s, qperf[qn])
                n_cpu += s.count
            elif isinstance(s, IoStage):
                rest += s.count * (s.io_mb / stream)
                n_io += s.count
            else:
                rest += s.count * s.seconds
        out.append((lat, rest, qn, n_cpu, n_io))
    return out


def _plan_means(plan: list[tuple[float, float, str | None, float, float]], waits: _Waits) -> list[float]:
    """Per class, the mean task time at these waits (as `_class_moments`, up to rounding)."""
    if not waits.stable:
        return [lat + rest for lat, rest, _, _, _ in plan]
    stretch, qwait, iowait = waits.gpu_stretch, waits.qwait, waits.iowait
    return [lat * stretch + rest + n_cpu * qwait.get(qn, 0.0) + n_io * iowait.get(qn, 0.0)
            for lat, rest, qn, n_cpu, n_io in plan]


def _class_moments(workload: Workload, class_queue: dict[str, str], gpu: _GpuPool, pools: _QueuePools,
                   a: ModelAssumptions, waits: _Waits, rows: list[StageTime] | None = None
                   ) -> tuple[list[float], list[float]]:
    """Per class, the task time's mean and variance at the waits given; each stage's service and wait are appended
    to `rows` when one is passed (share left 0). The sandboxes' population search reads the means alone."""
    stage_latency, qperf, stream = gpu.stage_latency, pools.perf, a.io_stream_mbps
    gpu_stretch, stable = waits.gpu_stretch, waits.stable
    qwait, qwait2, iowait, iowait2 = waits.qwait, waits.qwait2, waits.iowait, waits.iowait2
    means, variances = [], []
    for c in workload.classes:
        qn = class_queue.get(c.name)
        m_tot = v_tot = 0.0
        for s in c.stages:
            if isinstance(s, GpuStage):
                per = stage_latency(s) * (gpu_stretch if stable else 1.0)
                wait, var_occ = 0.0, (s.cv * per) ** 2
            elif isinstance(s, CpuStage):
                per_service = cpu_call_seconds(s, qperf[qn])
                wait = qwait.get(qn, 0.0) if stable else 0.0
                w2 = qwait2.get(qn, 0.0) if stable else 0.0
                per = per_service + wait
                var_occ = (s.cv * per_service) ** 2 + max(0.0, w2 - wait * wait)
            elif isinstance(s, IoStage):
                per_service = s.io_mb / stream
                wait = iowait.get(qn, 0.0) if stable else 0.0
                w2 = iowait2.get(qn, 0.0) if stable else 0.0
                per = per_service + wait
                var_occ = (s.cv * per_service) ** 2 + max(0.0, w2 - wait * wait)
            else:
                per, wait, var_occ = s.seconds, 0.0, (s.cv * s.seconds) ** 2
            m_tot += s.count * per
            v_tot += s.count * var_occ + (s.count_cv * s.count) ** 2 * per * per
            if rows is not None:
                rows.append(StageTime(task_class=c.name, stage=s.name, resource=s.resource,
                                      service_s=s.count * (per - wait), wait_s=s.count * wait, share=0.0))
        means.append(m_tot)
        variances.append(v_tot)
    return means, variances


def _task_times(workload: Workload, class_queue: dict[str, str], gpu: _GpuPool, pools: _QueuePools, dem: _Demands,
                a: ModelAssumptions, waits: _Waits) -> _TaskTimes:
    """Stage times and shares, resource shares and the task-time distribution's quantiles at the operating point."""
    stable = waits.stable
    stage_times: list[StageTime] = []
    means, variances = _class_moments(workload, class_queue, gpu, pools, a, waits, stage_times)
    shares = [c.share for c in workload.classes]
    mix_mean = sum(w * m for w, m in zip(shares, means))
    by_class = {c.name: c.share for c in workload.classes}
    stage_times = [st.model_copy(update={"share": by_class[st.task_class] * (st.service_s + st.wait_s) / mix_mean})
                   for st in stage_times] if mix_mean > 0 else stage_times
    stage_shares: dict[str, float] = {}
    resource_shares: dict[str, float] = {"gpu": 0.0, "cpu": 0.0, "cpu_wait": 0.0, "delay": 0.0}
    if any(dem.io_calls.values()):
        resource_shares.update(io=0.0, io_wait=0.0)
    for st in stage_times:
        key = f"{st.task_class}/{st.stage}"
        stage_shares[key] = stage_shares.get(key, 0.0) + st.share
        w = by_class[st.task_class] / mix_mean if mix_mean > 0 else 0.0
        if st.resource in ("cpu", "io"):
            resource_shares[st.resource] += w * st.service_s
            resource_shares[f"{st.resource}_wait"] += w * st.wait_s
        else:
            resource_shares[st.resource] += w * st.service_s
    # a closed loop with more agents than sandboxes: the tasks of the queue that fills first wait for one
    sb = [waits.sandbox_wait.get(c.name, 0.0) for c in workload.classes]
    sb_var = [waits.sandbox_wait_var.get(c.name, 0.0) for c in workload.classes]
    if stable and mix_mean > 0:
        p50, p95, p99 = (float(t) for t in lognormal_mixture_quantiles(
            shares, [m + w for m, w in zip(means, sb)], [v + w for v, w in zip(variances, sb_var)],
            [0.5, a.tail_quantile, 0.99]))
    else:
        p50 = p95 = p99 = None
    slo_met = None
    slo = workload.slo
    if slo and slo.p95_task_seconds:
        slo_met = p95 is not None and p95 <= slo.p95_task_seconds
    return _TaskTimes(stage_times, means, mix_mean, stage_shares, resource_shares, p50, p95, p99, slo_met,
                      mix_mean + sum(w * x for w, x in zip(shares, sb)))


def _utilization(queues: list[Queue], workload: Workload, class_queue: dict[str, str], gpu: _GpuPool,
                 pools: _QueuePools, dem: _Demands, tt: _TaskTimes, opp: _Operating,
                 warnings: list[str]) -> dict[str, float]:
    """Utilization per pool at the operating point, with warnings where live sandboxes would not fit."""
    lam, stable, means, unloaded = opp.lam, opp.waits.stable, tt.means, dem.unloaded
    qcap, qmem, qdisk, qio = pools.cap, pools.mem, pools.disk, pools.io
    cpu_work, mem_demand, disk_demand, io_mb = dem.cpu_work, dem.mem, dem.disk, dem.io_mb
    util: dict[str, float] = {}
    if gpu.has_llm:
        serving_cap = gpu.serving_cap
        util["gpu"] = lam / serving_cap if serving_cap > 0 else (math.inf if lam > 0 else 0.0)
    for q in queues:
        if cpu_work[q.name] > 0:
            util[f"cpu:{q.name}"] = lam * cpu_work[q.name] / qcap[q.name] if qcap[q.name] > 0 else \
                (math.inf if lam > 0 else 0.0)
        if mem_demand[q.name] > 0:
            # Live sandboxes at the operating point last the *loaded* task time (queueing and batching included),
            # longer than the unloaded time the memory bound uses; flag when they would not fit.
            loaded = sum(c.share * c.sandbox_memory_gb * (m if stable else unloaded[c.name])
                         for c, m in zip(workload.classes, means) if class_queue.get(c.name) == q.name)
            u_mem = lam * loaded / qmem[q.name] if qmem[q.name] > 0 else (math.inf if lam > 0 else 0.0)
            util[f"memory:{q.name}"] = u_mem
            if u_mem > 1.0:
                warnings.append(
                    f"memory:{q.name}: at the operating point live sandboxes need {lam * loaded:,.0f} GB but "
                    f"{qmem[q.name]:,.0f} GB are available; with task times stretched by load, sandbox memory "
                    "limits throughput below the figure shown (see docs/validation.md)")
        if disk_demand[q.name] > 0:
            loaded = sum(c.share * c.sandbox_disk_gb * (m if stable else unloaded[c.name])
                         for c, m in zip(workload.classes, means) if class_queue.get(c.name) == q.name)
            u_disk = lam * loaded / qdisk[q.name] if qdisk[q.name] > 0 else (math.inf if lam > 0 else 0.0)
            util[f"disk:{q.name}"] = u_disk
            if u_disk > 1.0:
                warnings.append(
                    f"disk:{q.name}: at the operating point live sandboxes need {lam * loaded:,.0f} GB of local disk "
                    f"but {qdisk[q.name]:,.0f} GB are available; with task times stretched by load, sandbox disk "
                    "limits throughput below the figure shown")
        if io_mb[q.name] > 0:
            util[f"io:{q.name}"] = lam * io_mb[q.name] / qio[q.name] if qio[q.name] > 0 else \
                (math.inf if lam > 0 else 0.0)
    return util


def _queue_figures(queues: list[Queue], pools: _QueuePools, dem: _Demands, slots: _Slots, util: dict[str, float],
                   waits: _Waits) -> list[QueueFigures]:
    """Per tool queue: cores, slots, call times, utilization and waits at the operating point."""
    qcores, qperf, qmem, qdisk, qio = pools.cores, pools.perf, pools.mem, pools.disk, pools.io
    cpu_hold, cpu_call_time = dem.cpu_hold, dem.cpu_call_time
    qwait, iowait, stable = waits.qwait, waits.iowait, waits.stable
    return [QueueFigures(
        name=q.name, classes=list(q.classes), cores=qcores[q.name], per_core_perf=qperf[q.name],
        servers=slots.servers.get(q.name, 0), mean_call_s=slots.mean_call.get(q.name, 0.0),
        mean_parallelism=(cpu_hold[q.name] / cpu_call_time[q.name]) if cpu_call_time[q.name] > 0 else 1.0,
        wait_scale=slots.wait_scale.get(q.name, 1.0),
        utilization=util.get(f"cpu:{q.name}", 0.0),
        wait_mean_s=(qwait.get(q.name, 0.0) if stable else None), sandbox_memory_gb=qmem[q.name],
        sandbox_disk_gb=qdisk[q.name], io_mbps=qio[q.name], io_streams=slots.io_streams.get(q.name, 0),
        io_mean_call_s=slots.io_mean_call.get(q.name, 0.0), io_utilization=util.get(f"io:{q.name}", 0.0),
        io_wait_mean_s=(iowait.get(q.name, 0.0) if stable else None),
    ) for q in queues]


def _rack_budgets(groups: list[_Group], rack: Rack, n_racks: int, catalog: Catalog,
                  warnings: list[str]) -> list[RackUsage]:
    """Power, heat, space and weight per rack against its budgets, with the exceeded budgets and PSU warnings."""
    racks = rack_usage(groups, rack, n_racks, rack_switch(rack, catalog))
    for ru in racks:
        for e in ru.exceeded:
            warnings.append(f"rack {ru.rack} exceeds {e}")
    for g in groups:
        psu = psu_warning(g.profile.chassis, g.profile.power_w, rack)
        if psu and psu not in warnings:
            warnings.append(psu)
    return racks


def _serving_pools(gpu: _GpuPool, workload: Workload) -> list[ServingPool]:
    """One entry per replica pool: replica shape, whole replicas, GPUs used and idle, HBM, KV cache and batch."""
    replicas_by_sku, gpus_by_sku = gpu.replicas_by_sku, gpu.gpus_by_sku
    return [
        ServingPool(
            key=sku, gpu=s.gpu_id, domain_gpus=s.domain_gpus, replicas=replicas_by_sku[sku], tp_degree=s.tp_degree,
            pp_degree=s.pp_degree, gpus_used=replicas_by_sku[sku] * s.replica_gpus,
            gpus_idle=int(gpus_by_sku[sku]) - replicas_by_sku[sku] * s.replica_gpus,
            hbm_gb_per_replica=s.hbm_gb_per_replica, weights_gb=s.weights_gb, kv_gb_per_replica=s.kv_gb_per_replica,
            kv_gb_per_call=s.kv_gb_per_call, min_batch=workload.served_model.min_batch_per_replica,
            max_batch=s.batch_limit if s.fits else 0, engine_cores_per_replica=s.engine_cores_per_replica,
            call_latency_s=s.call_latency_s, call_replica_s=s.call_replica_s,
            prefill_tokens_per_s=s.rates.prefill_tokens_per_s, decode_tokens_per_s=s.rates.decode_tokens_per_s,
            precision=workload.served_model.precision, calibrated=s.rates.calibrated, basis=s.rates.basis,
            reason=s.reason)
        for sku, s in sorted(gpu.servings.items())
    ]


def rack_usage(groups: list[_Group], rack: Rack, n_racks: int, switch) -> list[RackUsage]:
    """Budgets used per rack: servers plus the top-of-rack switches their NIC ports need plus the reserved gear."""
    out: list[RackUsage] = []
    by_rack: dict[int, list[_Group]] = {}
    for g in groups:  # one pass: a row of a thousand racks has groups by the thousand
        by_rack.setdefault(g.rack, []).append(g)
    seen: dict[tuple, RackUsage] = {}
    for r in range(n_racks):
        gs = by_rack.get(r, [])
        content = tuple(sorted((id(g.profile), g.count) for g in gs))
        if content in seen:  # racks with the same servers use the same budgets (a row repeats its racks)
            out.append(seen[content].model_copy(update={"rack": r}))
            continue
        ports = sum(g.count * g.profile.chassis.network_ports for g in gs)
        k = switches_needed(ports, rack, switch)
        sw_w = k * switch.power_w if switch else 0.0
        pw = sum(g.count * g.profile.power_w for g in gs) + rack.reserved_power_w + sw_w
        air = sum(g.count * g.profile.air_heat_w for g in gs) + rack.reserved_power_w + sw_w
        liq = sum(g.count * g.profile.liquid_heat_w for g in gs)
        u = sum(g.count * g.profile.space_u for g in gs) + rack.reserved_u + (k * switch.height_u if switch else 0)
        kg = (sum(g.count * g.profile.chassis.weight_kg for g in gs) + rack.reserved_weight_kg
              + (k * switch.weight_kg if switch else 0.0))
        feeds = feed_loads(rack, pw)
        checks = [("power", pw, rack.power_kw * 1000, "W"), ("cooling_air", air, rack.air_cooling_kw * 1000, "W"),
                  ("cooling_liquid", liq, rack.liquid_cooling_kw * 1000, "W"), ("space", u, rack.height_u, "U")]
        if rack.feed_budget_w is not None:
            checks.append(("power_feed", pw, rack.feed_budget_w, "W"))
        if rack.max_weight_kg is not None:
            checks.append(("weight", kg, rack.max_weight_kg, "kg"))
        ex = []
        for label, used, cap, unit in checks:
            if used > cap + 1e-9 * max(1.0, cap):
                what = (f" ({rack.redundancy}: {rack.surviving_feeds} of {rack.feeds} feeds x "
                        f"{rack.feed_rating_w:,.0f} W x {rack.continuous_load_factor:g})") if label == "power_feed" else ""
                ex.append(f"{label}: {used:,.0f} {unit} used of {cap:,.0f} {unit}{what} (over by {used - cap:,.0f} {unit})")
        out.append(RackUsage(rack=r, power_w=pw, air_heat_w=air, liquid_heat_w=liq, space_u=u,
                             power_budget_w=rack.power_kw * 1000, air_cooling_w=rack.air_cooling_kw * 1000,
                             liquid_cooling_w=rack.liquid_cooling_kw * 1000, space_budget_u=rack.height_u,
                             exceeded=ex, feed_budget_w=rack.feed_budget_w, feeds=feeds, weight_kg=kg,
                             weight_budget_kg=rack.max_weight_kg, switches=k, switch_power_w=sw_w,
                             network_ports=ports,
                             network_ports_available=k * (switch.ports - rack.uplinks_per_switch) if switch else 0))
        seen[content] = out[-1]
    return out


def queue_work_per_task(workload: Workload, queues: list[Queue]) -> dict[str, float]:
    """Reference-core seconds of tool work per task of the mix, per queue."""
    cls = {c.name: c for c in workload.classes}
    return {q.name: sum(cls[n].share * st.count * st.core_seconds for n in q.classes for st in cls[n].stages
                        if isinstance(st, CpuStage)) for q in queues}


def configuration_tco(groups: list[_Group], queues: list[Queue], workload: Workload, rack: Rack, racks: int,
                      operating_tasks_per_hour: float, a: ModelAssumptions, switch_power_w: float = 0.0) -> Tco:
    """`switch_power_w`: top-of-rack switches of the whole row, drawn with the reserved gear."""
    uses = [ServerUse(count=g.count, chassis=g.profile.chassis, cpu=g.profile.cpu, gpu=g.profile.gpu,
                      gpus=g.profile.gpus, serving_tasks_per_s=g.profile.serving_tasks_per_s,
                      gpu_tasks_per_s=g.profile.gpu_tasks_per_s, queue_cores=g.queue_cores) for g in groups]
    has_llm = any(isinstance(s, GpuStage) for c in workload.classes for s in c.stages)
    return tco(uses, operating_tasks_per_hour, queue_work_per_task(workload, queues),
               call_mix(workload).orchestration_core_s_per_task, has_llm, racks,
               rack.reserved_power_w + switch_power_w / racks, a.costs)
