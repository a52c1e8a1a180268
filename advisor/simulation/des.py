"""Discrete-event simulation (SimPy) of agent tasks on a configured rack, to check the closed form (models/pipeline.py).

What is simulated, and how each choice relates to the closed form:

Tasks
    Closed loop of N agents (each starts a new task when its task ends, no think time) or open Poisson arrivals.
    A task picks its class by share and runs the class's stages in order. Each stage occurs a random number of times
    per task, drawn independently per stage (as the closed form's variance formula assumes): X ~ gamma with mean
    `count` and cv `count_cv` (X = `count` when count_cv = 0), then stochastic rounding floor(X) + Bernoulli(X -
    floor(X)), which keeps the mean exactly `count` (fractional counts such as 16.7 included); the rounding adds at
    most 0.25 to the count variance. With `count_coupling="comonotone"` all stages of a task use the same uniform
    quantile (a task with many turns has many of every looped stage), a sensitivity check on the independence
    assumption. Order: consecutive stages that repeat (count != 1 or count_cv > 0) form a turn loop and are
    interleaved turn by turn (generate, tool, dispatch, generate, ...); a stage whose count is exactly 1 runs once
    in place. Order does not enter the closed form; it only makes traces realistic.

GPU pool
    Whole replicas per SKU, as the closed form counts them (`ServerProfile.replicas`). A replica holding b calls serves each at rate 1 / (L0 + (b - 1) d) units of
    work per second (processor sharing), so it completes b / (L0 + (b - 1) d) unit calls per second, as
    `GpuServing.replica_rate`. At most `batch_limit` calls per replica; beyond that calls wait in one FIFO for the
    pool. A call joins the replica where it would progress fastest now, (L0 + b d) / speed, i.e. the least-loaded
    replica for identical replicas (join-the-shortest-queue). A call of stage s has work
    (stage_gpu_latency_s(s) / mean call latency of the mix on that SKU) x G, G ~ gamma(mean 1, cv = stage cv), so
    the mix's mean call is one unit of work, exactly what the closed form's pool rate assumes.
    Orchestration cores: when a SKU's orchestration capacity is below its GPU capacity, the closed form scales that
    SKU's pool rate by theta = serving capacity / GPU capacity (models/pipeline.py `gpu_rate`); the simulator
    multiplies every replica's speed of that SKU by the same theta (orchestration is not queued separately).
    GPUs hosting no replica are not simulated (the closed form gives them no capacity).

Tool queues
    Each queue is floor(cores / mean parallelism) call slots served FIFO (mean parallelism weighted by core-time,
    as the closed form's `servers`), cores and per-core speed summed over the server groups exactly as the closed
    form does (`resolve_groups`). A tool call holds one slot for core_seconds / (parallelism x queue per-core perf)
    x G, G ~ gamma(mean 1, cv = stage cv) (exponential when cv = 1, constant when cv = 0).

I/O stations
    Each queue's sandbox disk I/O is io_streams FIFO slots (the queue's share of its servers' NVMe bandwidth /
    `io_stream_mbps`, rounded down, as the closed form); an I/O stage occurrence holds one slot for
    (read_mb + write_mb) / io_stream_mbps x G, G ~ gamma(mean 1, cv = stage cv). No core is held.

Delays
    Gamma with the stage's mean and cv; they hold nothing.

Sandbox memory (optional, on by default)
    A task holds its class's sandbox_memory_gb in its queue's memory (cores' share of server memory, as the closed
    form) from start to end; a task that does not fit waits FIFO before it starts (the wait counts in its time).
    Sandbox disk (sandbox_disk_gb against the queue's share of local NVMe) is held the same way.

Measurement
    A warm-up is discarded. Throughput counts completions in the window [warm-up, warm-up + duration); task times,
    stage times and waits are those of tasks that *arrive* in the window, followed to completion (the run continues
    past the window until they finish, up to the simulated-time bound), so long tasks are not censored.
    Utilization: GPU = work delivered / what the pool could deliver at full batch (comparable to the closed form's
    arrival rate / serving capacity); CPU = core-time held / (cores x window). Replications use independent seeds;
    each figure is reported as a mean with a 95% t-interval over replications. Every run stops at a simulated-time
    bound and at a wall-clock guard (the result is then flagged `truncated`).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
import time
from dataclasses import dataclass, field
from collections.abc import Callable

import numpy as np
import simpy
from scipy import stats
from scipy.special import gammaincinv

from advisor import cancel
from models.assumptions import ModelAssumptions
from models.catalog import Catalog
from models.config import Configuration
from models.performance import cpu_call_seconds, stage_gpu_latency_s
from models.pipeline import _queues, resolve_groups
from models.workload import CpuStage, DelayStage, GpuStage, IoStage, Workload
from models.errors import InputError

HOUR_S = 3600.0
GPU, CPU, DELAY, IO = 0, 1, 2, 3
KIND_NAME = {GPU: "gpu", CPU: "cpu", DELAY: "delay", IO: "io"}


GUARD_EVERY_STAGES = 256
"""The wall-clock limit and cancellation are also checked every this many simulated stages: a guard in simulated
time alone can be hours of wall clock apart when the window is long (checking costs about a microsecond)."""


class WallClockExceeded(Exception):
    pass


# ----------------------------------------------------------------------------------------------- model description
@dataclass
class StageSpec:
    key: str
    name: str
    kind: int
    count: float
    count_cv: float
    cv: float
    mean_s: float = 0.0
    """CPU: service seconds per call on its queue; delay: seconds."""
    parallelism: float = 1.0
    queue: str | None = None
    rel: list[float] = field(default_factory=list)
    """GPU: work per call relative to the SKU's mean call, by SKU index."""
    stage: object = None


@dataclass
class ClassSpec:
    name: str
    share: float
    memory_gb: float
    queue: str | None
    stages: list[StageSpec]
    blocks: list[list[int]]
    disk_gb: float = 0.0


@dataclass
class SkuSpec:
    sku: str
    replicas: int
    l0: float
    d: float
    batch_limit: int
    speed: float
    theta: float
    tp_degree: int
    gpus: float


@dataclass
class QueueSpec:
    name: str
    cores: float
    per_core_perf: float
    slots: int
    mean_parallelism: float
    memory_gb: float
    disk_gb: float = 0.0
    io_streams: int = 0


@dataclass
class SimModel:
    """What the simulator runs: derived from a configuration and workload the same way the closed form is."""

    classes: list[ClassSpec]
    skus: list[SkuSpec]
    queues: dict[str, QueueSpec]
    workload: str
    configuration: str

    def describe(self) -> dict:
        return {
            "gpu": [{"sku": s.sku, "replicas": s.replicas, "tp_degree": s.tp_degree, "L0_s": s.l0, "d_s": s.d,
                     "batch_limit": s.batch_limit, "speed": s.speed, "orchestration_theta": s.theta} for s in self.skus],
            "queues": [{"name": q.name, "cores": q.cores, "per_core_perf": q.per_core_perf, "slots": q.slots,
                        "mean_parallelism": q.mean_parallelism, "memory_gb": q.memory_gb, "disk_gb": q.disk_gb,
                        "io_streams": q.io_streams} for q in self.queues.values()],
        }


def stage_blocks(stages) -> list[list[int]]:
    """Group stage indices into runs: consecutive repeating stages form one loop (a turn), one-off stages stand
    alone. Shared with the trace generator so traces follow the same order."""
    out: list[list[int]] = []
    loop: list[int] = []
    for i, s in enumerate(stages):
        repeats = not (s.count == 1 and s.count_cv == 0)
        if repeats:
            loop.append(i)
            continue
        if loop:
            out.append(loop)
            loop = []
        out.append([i])
    if loop:
        out.append(loop)
    return out


def build_model(config: Configuration, workload: Workload, catalog: Catalog,
                assumptions: ModelAssumptions | None = None) -> SimModel:
    """Resolve pools, queues and per-stage costs exactly as models.pipeline.evaluate does."""
    a = assumptions or ModelAssumptions()
    queues = _queues(config, workload)
    groups, servings = resolve_groups(config, workload, catalog, a)
    class_queue = {c: q.name for q in queues for c in q.classes}
    sm = workload.served_model

    cap: dict[str, float] = {}
    comp: dict[str, float] = {}
    gpus: dict[str, float] = {}
    reps: dict[str, int] = {}
    for g in groups:
        if g.profile.gpu is not None:
            # The closed form keys GPU servings by SKU and scale-up domain (one replica shape per key).
            k = g.profile.serving_key or g.profile.gpu.id
            cap[k] = cap.get(k, 0.0) + g.count * g.profile.serving_tasks_per_s
            comp[k] = comp.get(k, 0.0) + g.count * g.profile.gpu_tasks_per_s
            gpus[k] = gpus.get(k, 0.0) + g.count * g.profile.gpus
            reps[k] = reps.get(k, 0) + g.count * g.profile.replicas
    sku_ids = [k for k in cap if reps[k] > 0]  # GPUs hosting no replica serve nothing (as in the closed form)
    gpu_stages = [(c, s) for c in workload.classes for s in c.stages if isinstance(s, GpuStage)]
    calls = sum(c.share * s.count for c, s in gpu_stages)
    skus: list[SkuSpec] = []
    mean_lat: list[float] = []
    for k in sku_ids:
        sv = servings[k]
        theta = cap[k] / comp[k] if comp[k] > 0 else 0.0
        n = reps[k]
        skus.append(SkuSpec(k, n, sv.call_latency_s, sv.call_replica_s, sv.batch_limit, theta, theta,
                            sv.replica_gpus, gpus[k]))
        mean_lat.append(sum(c.share * s.count * stage_gpu_latency_s(s, sm, sv) for c, s in gpu_stages) / calls
                        if calls else 1.0)

    qcores: dict[str, float] = {q.name: 0.0 for q in queues}
    qcap: dict[str, float] = {q.name: 0.0 for q in queues}
    qmem: dict[str, float] = {q.name: 0.0 for q in queues}
    qdisk: dict[str, float] = {q.name: 0.0 for q in queues}
    qio: dict[str, float] = {q.name: 0.0 for q in queues}
    for g in groups:
        for qn, c in g.queue_cores.items():
            qcores[qn] += g.count * c
            qcap[qn] += g.count * c * g.profile.per_core_perf
            qmem[qn] += g.count * c * g.profile.memory_per_core_gb
            qdisk[qn] += g.count * c * g.profile.disk_per_core_gb
            qio[qn] += g.count * c * g.profile.io_mbps_per_core
    qperf = {q: (qcap[q] / qcores[q] if qcores[q] > 0 else 1.0) for q in qcores}
    hold: dict[str, float] = {q: 0.0 for q in qcores}
    ctime: dict[str, float] = {q: 0.0 for q in qcores}
    for c in workload.classes:
        for s in c.stages:
            if isinstance(s, CpuStage):
                qn = class_queue[c.name]
                t = cpu_call_seconds(s, qperf[qn])
                ctime[qn] += c.share * s.count * t
                hold[qn] += c.share * s.count * t * s.parallelism
    qspecs = {}
    for q in queues:
        pbar = hold[q.name] / ctime[q.name] if ctime[q.name] > 0 else 1.0
        slots = int(math.floor(qcores[q.name] / pbar + 1e-9))
        qspecs[q.name] = QueueSpec(q.name, qcores[q.name], qperf[q.name], slots, pbar, qmem[q.name], qdisk[q.name],
                                   int(math.floor(qio[q.name] / a.io_stream_mbps + 1e-9)))

    classes = []
    for c in workload.classes:
        qn = class_queue.get(c.name)
        specs = []
        for s in c.stages:
            key = f"{c.name}/{s.name}"
            if isinstance(s, GpuStage):
                if not skus:
                    raise InputError(f"class {c.name!r} has LLM stages but the configuration has no GPUs")
                rel = [stage_gpu_latency_s(s, sm, servings[k]) / m for k, m in zip(sku_ids, mean_lat)]
                specs.append(StageSpec(key, s.name, GPU, s.count, s.count_cv, s.cv, rel=rel, stage=s))
            elif isinstance(s, CpuStage):
                if qspecs[qn].slots < 1:
                    raise InputError(f"queue {qn!r} has {qspecs[qn].cores:g} cores: no room for one tool call")
                specs.append(StageSpec(key, s.name, CPU, s.count, s.count_cv, s.cv,
                                       mean_s=cpu_call_seconds(s, qperf[qn]), parallelism=s.parallelism, queue=qn,
                                       stage=s))
            elif isinstance(s, IoStage):
                if qspecs[qn].io_streams < 1:
                    raise InputError(f"queue {qn!r} has {qio[qn]:,.0f} MB/s of local NVMe bandwidth: no room for one "
                                     f"I/O stream of {a.io_stream_mbps:,.0f} MB/s")
                specs.append(StageSpec(key, s.name, IO, s.count, s.count_cv, s.cv, mean_s=s.io_mb / a.io_stream_mbps,
                                       queue=qn, stage=s))
            else:
                assert isinstance(s, DelayStage)
                specs.append(StageSpec(key, s.name, DELAY, s.count, s.count_cv, s.cv, mean_s=s.seconds, stage=s))
        classes.append(ClassSpec(c.name, c.share, c.sandbox_memory_gb, qn, specs, stage_blocks(specs),
                                 c.sandbox_disk_gb))
    return SimModel(classes, skus, qspecs, workload.id, config.name)


# ----------------------------------------------------------------------------------------------------- resources
class _Replica:
    __slots__ = ("env", "pool", "sku", "l0", "d", "cap", "speed", "n", "v", "last", "heap", "version", "seq",
                 "area_n", "area_work", "area_empty", "max_rate")

    def __init__(self, env, pool, sku: int, spec: SkuSpec):
        self.env, self.pool, self.sku = env, pool, sku
        self.l0, self.d, self.cap, self.speed = spec.l0, spec.d, spec.batch_limit, spec.speed
        self.n = 0
        self.v = 0.0
        self.last = 0.0
        self.heap: list = []
        self.version = 0
        self.seq = 0
        self.area_n = self.area_work = self.area_empty = 0.0
        self.max_rate = self.speed * self.cap / (self.l0 + (self.cap - 1) * self.d)

    def rate(self) -> float:
        return self.speed / (self.l0 + (self.n - 1) * self.d)

    def advance(self) -> None:
        now = self.env.now
        dt = now - self.last
        if dt > 0:
            if self.n:
                r = self.rate()
                self.v += dt * r
                self.area_n += dt * self.n
                self.area_work += dt * self.n * r
            else:
                self.area_empty += dt
            self.last = now

    def add(self, work: float, ev) -> None:
        self.advance()
        self.n += 1
        self.seq += 1
        heapq.heappush(self.heap, (self.v + work, self.seq, ev))
        self._reschedule()

    def _reschedule(self) -> None:
        self.version += 1
        if self.heap:
            dt = max(0.0, (self.heap[0][0] - self.v) / self.rate())
            t = self.env.timeout(dt)
            t.callbacks.append(_Fire(self, self.version))

    def fire(self, version: int) -> None:
        if version != self.version:
            return
        self.advance()
        tol = 1e-9 * (1.0 + abs(self.v))
        done = []
        while self.heap and self.heap[0][0] <= self.v + tol:
            done.append(heapq.heappop(self.heap)[2])
            self.n -= 1
        for ev in done:
            ev.succeed()
        self.pool.refill(self)
        self._reschedule()


class _Fire:
    __slots__ = ("rep", "version")

    def __init__(self, rep, version):
        self.rep, self.version = rep, version

    def __call__(self, _event):
        self.rep.fire(self.version)


class _GpuPool:
    def __init__(self, env, skus: list[SkuSpec]):
        self.env = env
        self.replicas = [_Replica(env, self, i, s) for i, s in enumerate(skus) for _ in range(s.replicas)]
        self.wait: list = []  # FIFO (deque semantics via index)
        self.head = 0
        self.max_rate = sum(r.max_rate for r in self.replicas)

    def submit(self, rel: list[float], g: float, ev) -> None:
        best, best_t = None, math.inf
        for r in self.replicas:
            if r.n < r.cap:
                t = (r.l0 + r.n * r.d) / r.speed
                if t < best_t:
                    best, best_t = r, t
        if best is None:
            self.wait.append((rel, g, ev))
        else:
            best.add(rel[best.sku] * g, ev)

    def refill(self, rep: _Replica) -> None:
        while rep.n < rep.cap and self.head < len(self.wait):
            rel, g, ev = self.wait[self.head]
            self.wait[self.head] = None
            self.head += 1
            rep.add(rel[rep.sku] * g, ev)
        if self.head > 4096 and self.head * 2 > len(self.wait):
            del self.wait[: self.head]
            self.head = 0

    def snapshot(self) -> tuple[float, float, float]:
        for r in self.replicas:
            r.advance()
        return (sum(r.area_n for r in self.replicas), sum(r.area_work for r in self.replicas),
                sum(r.area_empty for r in self.replicas))


class _CpuQueue:
    """FIFO pool of call slots with time integrals of busy slots and busy cores."""

    def __init__(self, env, spec: QueueSpec):
        self.env = env
        self.spec = spec
        self.slots = max(1, spec.slots)
        self.waiting: deque = deque()
        self.busy_cores = 0.0
        self.busy_slots = 0
        self.last = 0.0
        self.area_cores = 0.0
        self.area_slots = 0.0

    def _upd(self) -> None:
        now = self.env.now
        dt = now - self.last
        if dt > 0:
            self.area_cores += dt * self.busy_cores
            self.area_slots += dt * self.busy_slots
            self.last = now

    def try_acquire(self, par: float):
        """Take a slot now (returns None) or get an event that fires when this call is given one."""
        if self.busy_slots < self.slots:
            self._upd()
            self.busy_slots += 1
            self.busy_cores += par
            return None
        ev = self.env.event()
        self.waiting.append((ev, par))
        return ev

    def release(self, par: float) -> None:
        self._upd()
        self.busy_cores -= par
        if self.waiting:
            ev, p2 = self.waiting.popleft()
            self.busy_cores += p2
            ev.succeed()
        else:
            self.busy_slots -= 1

    def snapshot(self) -> tuple[float, float]:
        self._upd()
        return self.area_cores, self.area_slots


class _Gamma:
    """Buffered standard-gamma draws per shape (numpy's vectorized draws are much cheaper than scalar calls)."""

    def __init__(self, rng: np.random.Generator, block: int = 2048):
        self.rng, self.block = rng, block
        self.buf: dict[float, list] = {}

    def __call__(self, mean: float, cv: float) -> float:
        if cv <= 0:
            return mean
        k = 1.0 / (cv * cv)
        b = self.buf.get(k)
        if not b:
            b = self.rng.standard_gamma(k, self.block).tolist()
            self.buf[k] = b
        return b.pop() * mean / k


TOOL_WAIT_QUANTILE = 0.95
"""Quantile of the per-call wait for a core reported as `tool_wait_p95_s` (the workload's tool_wait_p95_seconds)."""


# ------------------------------------------------------------------------------------------------------ settings
@dataclass
class SimSettings:
    agents: int | None = None
    """Closed loop of this many agents (exclusive with arrival_rate_per_hour)."""
    arrival_rate_per_hour: float | None = None
    """Open Poisson arrivals."""
    duration_s: float = 3600.0
    """Measurement window in simulated seconds."""
    warmup_s: float | None = None
    """Discarded start; default: max(3 x the mix's unloaded mean task time, 2 x the slowest class's), at most the
    window."""
    replications: int = 5
    seed: int = 0
    drain: bool = True
    """Follow tasks that arrived in the window to completion (off for saturation runs)."""
    max_sim_s: float | None = None
    """Simulated-time bound; default warm-up + 4 x window."""
    wall_clock_s: float = 300.0
    """Wall-clock guard per replication."""
    memory_limit: bool = True
    count_coupling: str = "independent"
    """`independent` or `comonotone` (see module docstring)."""
    keep_task_times: bool = False


def unloaded_times(model: SimModel) -> dict[str, float]:
    out = {}
    for c in model.classes:
        t = 0.0
        for s in c.stages:
            if s.kind == GPU:
                sk = model.skus[0]
                t += s.count * s.rel[0] * sk.l0 / max(sk.speed, 1e-12)
            else:
                t += s.count * s.mean_s
        out[c.name] = t
    return out


# --------------------------------------------------------------------------------------------------- one replication
class _Run:
    def __init__(self, model: SimModel, st: SimSettings, seed, recorder: Callable | None = None):
        self.m = model
        self.st = st
        self.rng = np.random.default_rng(seed)
        self._gamma = _Gamma(self.rng)
        self.env = simpy.Environment()
        self.gpu = _GpuPool(self.env, model.skus) if model.skus else None
        self.queues = {n: _CpuQueue(self.env, q) for n, q in model.queues.items()}
        self.io = {n: _CpuQueue(self.env, QueueSpec(n, q.io_streams, 1.0, q.io_streams, 1.0, 0.0))
                   for n, q in model.queues.items() if q.io_streams > 0}
        self.mem = {}
        self.disk = {}
        if st.memory_limit:
            for n, q in model.queues.items():
                need = max((c.memory_gb for c in model.classes if c.queue == n), default=0.0)
                if need > 0:
                    if q.memory_gb < need:
                        raise InputError(f"queue {n!r} has {q.memory_gb:g} GB of sandbox memory, less than one task needs")
                    self.mem[n] = simpy.Container(self.env, capacity=q.memory_gb, init=q.memory_gb)
                need = max((c.disk_gb for c in model.classes if c.queue == n), default=0.0)
                if need > 0:
                    if q.disk_gb < need:
                        raise InputError(f"queue {n!r} has {q.disk_gb:g} GB of sandbox disk, less than one task needs")
                    self.disk[n] = simpy.Container(self.env, capacity=q.disk_gb, init=q.disk_gb)
        ut = unloaded_times(model)
        mix = sum(c.share * ut[c.name] for c in model.classes)
        self.warm = st.warmup_s if st.warmup_s is not None else min(st.duration_s, max(3 * mix, 2 * max(ut.values())))
        self.w0, self.w1 = self.warm, self.warm + st.duration_s
        self.tmax = st.max_sim_s if st.max_sim_s is not None else self.w1 + 4 * st.duration_s
        self.cum = np.cumsum([c.share for c in model.classes])
        self.cum[-1] = 1.0
        self.recorder = recorder
        self.task_seq = 0
        # statistics
        ncls = len(model.classes)
        self.completions = 0
        self.class_completions = [0] * ncls
        self.outstanding = 0
        self.task_times: list[float] = []
        self.task_class: list[int] = []
        self.stage_time = [[0.0] * len(c.stages) for c in model.classes]
        self.stage_wait = [[0.0] * len(c.stages) for c in model.classes]
        self.measured_by_class = [0] * ncls
        self.calls_by_queue = {n: 0 for n in model.queues}
        self.wait_by_queue = {n: 0.0 for n in model.queues}
        self.waits_by_queue: dict[str, list[float]] = {n: [] for n in model.queues}
        """Each measured tool call's wait for a core, for the wait quantile (the tool-wait target is a p95)."""
        self.io_calls_by_queue = {n: 0 for n in model.queues}
        self.io_wait_by_queue = {n: 0.0 for n in model.queues}
        self.gpu_calls = 0
        self.gpu_call_time = 0.0
        self.snap0 = self.snap1 = None
        self.truncated = False
        self._stages = 0
        self.deadline = math.inf

    # draws

    def _count(self, s: StageSpec, u: float | None) -> int:
        if s.count_cv <= 0:
            x = s.count
        else:
            k = 1.0 / (s.count_cv * s.count_cv)
            x = (gammaincinv(k, u) if u is not None else self.rng.gamma(k)) * s.count / k
        n = int(x)
        if self.rng.random() < x - n:
            n += 1
        return n

    def _task(self, ci: int, t_arr: float):
        env, rng = self.env, self.rng
        cls = self.m.classes[ci]
        measured = self.w0 <= t_arr < self.w1
        if measured:
            self.outstanding += 1
        cont = self.mem.get(cls.queue) if cls.memory_gb > 0 else None
        if cont is not None:
            yield cont.get(cls.memory_gb)
        dcont = self.disk.get(cls.queue) if cls.disk_gb > 0 else None
        if dcont is not None:
            yield dcont.get(cls.disk_gb)
        u = rng.random() if self.st.count_coupling == "comonotone" else None
        counts = [self._count(s, u) for s in cls.stages]
        times = self.stage_time[ci] if measured else None
        waits = self.stage_wait[ci] if measured else None
        rec = self.recorder
        tid = None
        if rec is not None:
            self.task_seq += 1
            tid = self.task_seq
        for block in cls.blocks:
            nmax = max(counts[i] for i in block)
            for t in range(nmax):
                for i in block:
                    if counts[i] <= t:
                        continue
                    s = cls.stages[i]
                    t0 = env.now
                    if s.kind == DELAY:
                        yield env.timeout(self._gamma(s.mean_s, s.cv))
                        ts = t0
                    elif s.kind == CPU:
                        q = self.queues[s.queue]
                        ev = q.try_acquire(s.parallelism)
                        if ev is not None:
                            yield ev
                        ts = env.now
                        yield env.timeout(self._gamma(s.mean_s, s.cv))
                        q.release(s.parallelism)
                        if measured:
                            waits[i] += ts - t0
                            self.calls_by_queue[s.queue] += 1
                            self.wait_by_queue[s.queue] += ts - t0
                            self.waits_by_queue[s.queue].append(ts - t0)
                    elif s.kind == IO:
                        q = self.io[s.queue]
                        ev = q.try_acquire(1.0)
                        if ev is not None:
                            yield ev
                        ts = env.now
                        yield env.timeout(self._gamma(s.mean_s, s.cv))
                        q.release(1.0)
                        if measured:
                            waits[i] += ts - t0
                            self.io_calls_by_queue[s.queue] += 1
                            self.io_wait_by_queue[s.queue] += ts - t0
                    else:
                        ev = env.event()
                        g = self._gamma(1.0, s.cv)
                        self.gpu.submit(s.rel, g, ev)
                        yield ev
                        ts = t0
                        if measured:
                            self.gpu_calls += 1
                            self.gpu_call_time += env.now - t0
                    if measured:
                        times[i] += env.now - t0
                    if rec is not None:
                        rec(tid, cls, s, ts, env.now, g if s.kind == GPU else None)
                    self._stages += 1
                    if self._stages % GUARD_EVERY_STAGES == 0:
                        self._check_limits()
        if cont is not None:
            yield cont.put(cls.memory_gb)
        if dcont is not None:
            yield dcont.put(cls.disk_gb)
        now = env.now
        if self.w0 <= now < self.w1:
            self.completions += 1
            self.class_completions[ci] += 1
        if measured:
            self.outstanding -= 1
            self.task_times.append(now - t_arr)
            self.task_class.append(ci)
            self.measured_by_class[ci] += 1

    def _pick(self) -> int:
        return int(np.searchsorted(self.cum, self.rng.random(), side="right"))

    def _agent(self):
        while True:
            yield from self._task(self._pick(), self.env.now)

    def _arrivals(self, rate_s: float):
        env = self.env
        while True:
            yield env.timeout(self.rng.exponential(1.0 / rate_s))
            env.process(self._task(self._pick(), env.now))

    def _snap(self):
        yield self.env.timeout(self.w0)
        self.snap0 = self._take()

    def _take(self):
        return (self.gpu.snapshot() if self.gpu else None, {n: q.snapshot() for n, q in self.queues.items()},
                {n: q.snapshot() for n, q in self.io.items()})

    def _check_limits(self) -> None:
        if time.monotonic() > self.deadline:
            raise WallClockExceeded()
        cancel.check()

    def _guard(self, dt: float):
        while True:
            yield self.env.timeout(dt)
            self._check_limits()

    def run(self) -> dict:
        st, env = self.st, self.env
        if st.agents:
            for _ in range(st.agents):
                env.process(self._agent())
        elif st.arrival_rate_per_hour:
            env.process(self._arrivals(st.arrival_rate_per_hour / HOUR_S))
        else:
            raise InputError("give agents or an arrival rate")
        env.process(self._snap())
        start = time.monotonic()
        self.deadline = start + st.wall_clock_s
        env.process(self._guard(max(self.w1 / 400.0, 1e-3)))
        try:
            env.run(until=min(self.w1, self.tmax))
            if env.now >= self.w1 and self.snap0 is not None:
                self.snap1 = self._take()
            if st.drain:
                step = max(st.duration_s / 20.0, 1.0)
                while self.outstanding > 0 and env.now < self.tmax:
                    env.run(until=min(env.now + step, self.tmax))
        except WallClockExceeded:
            self.truncated = True
        if self.outstanding > 0 and st.drain:
            self.truncated = True
        return self._result(time.monotonic() - start)

    def _result(self, wall: float) -> dict:
        m, st = self.m, self.st
        D = st.duration_s
        r: dict = {"wall_s": wall, "truncated": self.truncated, "warmup_s": self.w0, "sim_end_s": self.env.now}
        if self.snap1 is None:  # stopped inside the window
            r["truncated"] = True
            return r
        r["throughput_tasks_per_hour"] = self.completions / D * HOUR_S
        r["class_throughput_tasks_per_hour"] = {c.name: self.class_completions[i] / D * HOUR_S
                                                for i, c in enumerate(m.classes)}
        r["throughput_mix_tasks_per_hour"] = min(self.class_completions[i] / (c.share * D) * HOUR_S
                                                 for i, c in enumerate(m.classes))
        util: dict[str, float] = {}
        g0, q0, io0 = self.snap0
        g1, q1, io1 = self.snap1
        if self.gpu:
            util["gpu"] = (g1[1] - g0[1]) / (self.gpu.max_rate * D)
            r["gpu_mean_calls_in_service"] = (g1[0] - g0[0]) / D
            r["gpu_replica_empty_fraction"] = (g1[2] - g0[2]) / (len(self.gpu.replicas) * D)
            r["gpu_idle_fraction"] = 1.0 - util["gpu"]
            r["gpu_mean_call_s"] = self.gpu_call_time / self.gpu_calls if self.gpu_calls else 0.0
        for n, q in self.queues.items():
            if q.spec.slots > 0 and any(s.queue == n for c in m.classes for s in c.stages):
                util[f"cpu:{n}"] = (q1[n][0] - q0[n][0]) / (q.spec.cores * D) if q.spec.cores else 0.0
                util[f"cpu_slots:{n}"] = (q1[n][1] - q0[n][1]) / (q.spec.slots * D)
                calls = self.calls_by_queue[n]
                r.setdefault("tool_wait_mean_s", {})[n] = self.wait_by_queue[n] / calls if calls else 0.0
                r.setdefault("tool_wait_p95_s", {})[n] = float(np.quantile(self.waits_by_queue[n], TOOL_WAIT_QUANTILE)) \
                    if calls else 0.0
        for n, q in self.io.items():
            util[f"io:{n}"] = (io1[n][1] - io0[n][1]) / (q.spec.slots * D)
            calls = self.io_calls_by_queue[n]
            r.setdefault("io_wait_mean_s", {})[n] = self.io_wait_by_queue[n] / calls if calls else 0.0
        r["utilization"] = util
        tt = np.asarray(self.task_times)
        r["tasks_measured"] = int(tt.size)
        if tt.size:
            r["mean_task_seconds"] = float(tt.mean())
            r["p50_task_seconds"], r["p95_task_seconds"], r["p99_task_seconds"] = (
                float(x) for x in np.percentile(tt, [50, 95, 99]))
            total = float(tt.sum())
            shares = {}
            for ci, c in enumerate(m.classes):
                for i, s in enumerate(c.stages):
                    shares[s.key] = shares.get(s.key, 0.0) + self.stage_time[ci][i] / total
            r["stage_shares"] = shares
            kinds = ("gpu", "cpu", "delay") + (("io",) if self.io else ())
            r["resource_shares"] = {
                k: sum(self.stage_time[ci][i] - (self.stage_wait[ci][i] if k in ("cpu", "io") else 0.0)
                       for ci, c in enumerate(m.classes) for i, s in enumerate(c.stages) if KIND_NAME[s.kind] == k) / total
                for k in kinds}
            for k in ("cpu", "io")[:len(kinds) - 2]:
                r["resource_shares"][f"{k}_wait"] = sum(
                    self.stage_wait[ci][i] for ci, c in enumerate(m.classes) for i, s in enumerate(c.stages)
                    if KIND_NAME[s.kind] == k) / total
            if st.keep_task_times:
                r["task_times"] = tt.tolist()
        return r


# ----------------------------------------------------------------------------------------------------- summaries
def _ci(values: list[float]) -> dict:
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=float)
    if v.size == 0:
        return {"mean": None, "half_width": None, "n": 0}
    mean = float(v.mean())
    if v.size < 2:
        return {"mean": mean, "half_width": math.inf, "n": 1}
    hw = float(stats.t.ppf(0.975, v.size - 1) * v.std(ddof=1) / math.sqrt(v.size))
    return {"mean": mean, "half_width": hw, "n": int(v.size)}


SCALARS = ("throughput_tasks_per_hour", "throughput_mix_tasks_per_hour", "mean_task_seconds", "p50_task_seconds",
           "p95_task_seconds", "p99_task_seconds", "gpu_idle_fraction", "gpu_replica_empty_fraction",
           "gpu_mean_calls_in_service", "gpu_mean_call_s")


def summarize(reps: list[dict]) -> dict:
    ok = [r for r in reps if "throughput_tasks_per_hour" in r]
    out: dict = {"replications": len(reps), "truncated": sum(1 for r in reps if r.get("truncated")),
                 "wall_s": sum(r["wall_s"] for r in reps)}
    for k in SCALARS:
        if any(k in r for r in ok):
            out[k] = _ci([r.get(k) for r in ok])
    for group in ("utilization", "stage_shares", "resource_shares", "tool_wait_mean_s", "tool_wait_p95_s", "io_wait_mean_s",
                  "class_throughput_tasks_per_hour"):
        keys = sorted({k for r in ok for k in r.get(group, {})})
        if keys:
            out[group] = {k: _ci([r.get(group, {}).get(k) for r in ok]) for k in keys}
    out["tasks_measured"] = sum(r.get("tasks_measured", 0) for r in ok)
    return out


def simulate_model(model: SimModel, settings: SimSettings, recorder: Callable | None = None) -> dict:
    """Run `settings.replications` independent replications and summarize them with 95% t-intervals."""
    if settings.replications < 1:
        raise InputError("replications must be >= 1")
    if (settings.agents is None) == (settings.arrival_rate_per_hour is None):
        raise InputError("give exactly one of agents or arrival_rate_per_hour")
    seeds = np.random.SeedSequence(settings.seed).spawn(settings.replications)
    reps = [_Run(model, settings, s, recorder).run() for s in seeds]
    out = summarize(reps)
    out["settings"] = {k: getattr(settings, k) for k in settings.__dataclass_fields__}
    out["model"] = model.describe()
    out["per_replication"] = [{k: v for k, v in r.items() if k != "task_times"} for r in reps]
    return out


def closed_form_at(config: Configuration, workload: Workload, rack, catalog: Catalog, agents: int | None = None,
                   arrival_rate_per_hour: float | None = None, load_fraction: float | None = None,
                   assumptions: ModelAssumptions | None = None):
    """The closed form (models.pipeline.evaluate) at the given operating point (else the configuration's own)."""
    from models.config import OperatingPoint
    from models.pipeline import evaluate

    if agents is not None or arrival_rate_per_hour is not None or load_fraction is not None:
        op = OperatingPoint(agents=agents, arrival_rate_per_hour=arrival_rate_per_hour, load_fraction=load_fraction)
        config = config.model_copy(update={"operating_point": op})
    return evaluate(config, workload, rack, catalog, assumptions)


def auto_duration(rate_per_hour: float, mean_task_s: float, target_tasks: int = 2000) -> float:
    """A window long enough for about `target_tasks` measured tasks and 20 mean task times, within [600 s, 7 d]."""
    d = max(target_tasks / max(rate_per_hour, 1e-9) * HOUR_S, 20.0 * mean_task_s, 600.0)
    return min(d, 7 * 24 * HOUR_S)
