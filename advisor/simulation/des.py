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

Engine
    A task runs its stages from one station arrival to the next: delays add up without an event, a tool or I/O
    call is placed on arrival (a FIFO pool of identical slots: the call starts when the earliest slot frees,
    Kiefer-Wolfowitz, so it needs no event of its own), and the GPU pool keeps the time of its earliest
    completion. That leaves three events per agent turn (the model call's completion, the tool call's end, the next
    model call's arrival): each is an arrival at a queueing station and must be taken in time order (the order
    also decides which task takes which buffered random draw), so the cost is Python's work per event. The run loop
    (`_Run._run_to`) is written for that: it takes the next of three sources in SimPy's order (time, priority,
    event id), runs the task's stages inline (the GPU pool's submit included) and calls no SimPy code per event.
    The sources: the tasks' own calendar, a heap of float wake times with the tasks in a dict (a float heap's
    pop + push costs 0.40 us against 1.16 us for SimPy's (time, priority, id, event) tuples at the hybrid example's
    ~3,000 pending wakes, about 1.6 million times per replication; a wake carries an event id drawn from SimPy's
    counter, so ties keep SimPy's order); the GPU pool's next completion (no timer events); and SimPy's environment
    itself, which stays the calendar of everything else (open arrivals, `env.timeout` callbacks) and keeps `now`.
    For a given seed the figures are those of the previous run loop (SimPy's `env.run` over one calendar), bit for
    bit (tests/test_simulation.py pins a model with same-time events). The previous engine (a process per task, an
    event per call) is kept in bench/reference_sim.py to measure this one against (`python bench/bench_sim.py`).
    By default the run loop runs compiled (`SimSettings.engine`, `_CompiledRun`: advisor/simulation/kernel.py
    holds the same loop in numba, advisor/simulation/compiled.py its state in arrays): the same events, draws and
    arithmetic, so the same figures for a seed (tests/test_sim_kernel.py checks it), without Python's work per
    event, which was what was left. `_Run` stays the engine for runs with a trace recorder or comonotone
    counts, where numba cannot be imported, and the oracle of the compiled loop.
    Replications are independent, each with its own seed, and run in worker processes when `SimSettings.workers`
    > 1 (the figures do not change).

Start
    Open arrivals start from an empty rack. A closed loop starts near its steady state: an agent's first task is of
    class c with probability share_c T_c / sum share T (T: unloaded task times, the time-weighted mix of a steady
    loop without sandbox waits) and starts at a uniform time within one T_c. Where two queues' sandboxes are both
    near their limits the loop can be metastable (long runs started differently settle at different class mixes,
    docs/validation.md); there the start still matters after long windows.

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

import bisect
import heapq
import math
import time
from collections import deque
from concurrent.futures import ProcessPoolExecutor
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


GUARD_EVERY_EVENTS = 256
"""The wall-clock limit and cancellation are checked every this many events of the run loop (`_Run._run_to`): a
guard in simulated time alone can be hours of wall clock apart when the window is long (checking costs about a
microsecond)."""
GUARD_EVERY_STAGES = 256
"""The same every this many simulated stages, in the previous engine (bench/reference_sim.py)."""


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
# The engine schedules few, light events and runs them in its own loop (`_Run._run_to`) rather than SimPy's
# env.run: a task is a state machine filed by its wake time on the run's float-keyed task calendar (no generator
# process, no SimPy event), a FIFO slot station computes each call's start and end when the call arrives (no event
# of its own), a delay only moves the time the next station sees the task, and the GPU pool holds the time of its
# next completion, which the loop compares with the calendars' heads (a change moves it only when the next
# completion comes earlier; an early one completes nothing and moves on). Events left per task: one per arrival at
# a station whose time is not now, one per GPU completion (plus an early one after an arrival slows a replica) and
# one at the task's end. SimPy's environment keeps the rest (arrivals, timeouts) and the current time.

class _Replica:
    """Processor sharing with a load-dependent rate: b calls each progress at speed / (L0 + (b - 1) d) work/s.
    Work is tracked in virtual time v (work each present call has received); a call leaves when v reaches its
    finish tag. (Its arithmetic is inlined where the pool changes it: the submit in `_Run._go` and `_GpuPool.fire`.)"""

    __slots__ = ("idx", "pos", "sku", "l0", "d", "cap", "speed", "n", "v", "last", "heap", "seq", "area_n", "area_work",
                 "area_empty", "max_rate")

    def __init__(self, idx: int, sku: int, spec: SkuSpec):
        self.idx, self.sku = idx, sku
        self.pos = 0
        """Its place among its SKU's replicas."""
        self.l0, self.d, self.cap, self.speed = spec.l0, spec.d, spec.batch_limit, spec.speed
        self.n = 0
        self.v = 0.0
        self.last = 0.0
        self.heap: list = []
        self.seq = 0
        self.area_n = self.area_work = self.area_empty = 0.0
        self.max_rate = self.speed * self.cap / (self.l0 + (self.cap - 1) * self.d)

    def advance(self, now: float) -> None:
        dt = now - self.last
        if dt > 0:
            n = self.n
            if n:
                r = self.speed / (self.l0 + (n - 1) * self.d)
                self.v += dt * r
                self.area_n += dt * n
                self.area_work += dt * n * r
            else:
                self.area_empty += dt
            self.last = now


class _GpuPool:
    """The replicas of every SKU and the time of the pool's next completion (`armed`). That time is not an entry
    on SimPy's calendar: the run loop (`_Run._run_to`) compares it with the calendar's head and calls `fire` when
    it comes first. `armed_eid` is an event id drawn from SimPy's counter when it is set, so that a completion and
    a calendar event at the very same time are taken in the order SimPy would take them.

    The replicas of a SKU are identical, so the fastest place for a call within a SKU is its least-loaded replica
    (the first of them): per SKU, a list of call counts answers with C-level `min` and `index` instead of a Python
    scan of every replica. The same for the pool's earliest completion over `nt`."""

    def __init__(self, env, skus: list[SkuSpec]):
        self.env = env
        self.replicas = [_Replica(0, i, s) for i, s in enumerate(skus) for _ in range(s.replicas)]
        for j, r in enumerate(self.replicas):
            r.idx = j
        self.by_sku = [[r for r in self.replicas if r.sku == i] for i in range(len(skus))]
        for reps in self.by_sku:
            for p, r in enumerate(reps):
                r.pos = p
        self.single = len(skus) == 1
        self.loads = [[0] * len(reps) for reps in self.by_sku]
        """Calls held by each replica of each SKU (mirrors `_Replica.n`)."""
        self.nt = [math.inf] * len(self.replicas)
        """Each replica's next completion time at its present load."""
        self.armed = math.inf
        """The pool's next completion: at or before every replica's (it can be early after an arrival slowed the
        earliest replica; `fire` then completes nothing and moves it)."""
        self.armed_eid = 0
        self.wait: deque = deque()
        self.max_rate = sum(r.max_rate for r in self.replicas)

    def fire(self, now: float) -> list:
        """Complete the calls due at `now` (the armed time), give freed room to waiting calls, set the next
        completion; the tasks whose calls completed, in order."""
        self.armed = math.inf
        nt = self.nt
        due = now + 1e-9 * (1.0 + now)
        first = min(nt)
        if first > due:  # early (an arrival slowed the replica it was set for): nothing completes
            self.armed = first if first > now else now
            self.armed_eid = next(self.env._eid)
            return []
        j = nt.index(first)
        nt[j] = math.inf
        rest = min(nt)
        if rest <= due:  # more than one replica due: in index order, as they take waiting calls
            due_js = [j]
            while rest <= due:
                j = nt.index(rest)
                nt[j] = math.inf
                due_js.append(j)
                rest = min(nt)
            due_js.sort()
        else:
            due_js = (j,)
        done = []
        wait = self.wait
        for j in due_js:
            rep = self.replicas[j]
            n = rep.n
            dt = now - rep.last  # `_Replica.advance`, inlined (once per GPU completion: the hot path)
            if dt > 0:
                if n:
                    r = rep.speed / (rep.l0 + (n - 1) * rep.d)
                    rep.v += dt * r
                    rep.area_n += dt * n
                    rep.area_work += dt * n * r
                else:
                    rep.area_empty += dt
                rep.last = now
            v = rep.v
            lim = v + 1e-9 * (1.0 + abs(v))
            heap = rep.heap
            while heap and heap[0][0] <= lim:
                done.append(heapq.heappop(heap)[2])
                n -= 1
            if wait and n < rep.cap:
                cap = rep.cap
                while wait and n < cap:
                    rel, g, task = wait.popleft()
                    n += 1
                    rep.seq += 1
                    heapq.heappush(heap, (v + rel[rep.sku] * g, rep.seq, task))
            rep.n = n
            self.loads[rep.sku][rep.pos] = n
            if heap:
                dt = (heap[0][0] - v) * (rep.l0 + (n - 1) * rep.d) / rep.speed
                t = now + (dt if dt > 0.0 else 0.0)
            else:
                t = math.inf
            nt[j] = t
            if t < rest:
                rest = t
        if rest < math.inf:
            self.armed = rest if rest > now else now
            self.armed_eid = next(self.env._eid)
        return done

    def snapshot(self, now: float) -> tuple[float, float, float]:
        for r in self.replicas:
            r.advance(now)
        return (sum(r.area_n for r in self.replicas), sum(r.area_work for r in self.replicas),
                sum(r.area_empty for r in self.replicas))


class _NoGpu:
    """The run loop's stand-in for the GPU pool of a model without one."""

    armed = math.inf
    armed_eid = 0
    single = False
    nt: list = []

    def fire(self, now: float) -> list:
        return []


_NO_GPU = _NoGpu()


class _Slots:
    """A FIFO pool of identical call slots. Calls are offered in time order, so each call's start is known when it
    arrives (Kiefer-Wolfowitz: the earliest time a slot frees, or now): no event of its own. Busy slot-time and
    core-time are integrated over the measurement window as the calls are placed; measured calls' waits are kept.
    The placement itself is inlined in `_Run._go`."""

    __slots__ = ("spec", "slots", "free", "area_cores", "area_slots", "w0", "w1", "wait_sum", "waits")

    def __init__(self, spec: QueueSpec, w0: float, w1: float):
        self.spec = spec
        self.slots = max(1, spec.slots)
        self.free = [0.0] * self.slots  # a heap of the times each slot frees
        self.area_cores = self.area_slots = 0.0
        self.w0, self.w1 = w0, w1
        self.wait_sum = 0.0
        self.waits: list[float] = []


class _Store:
    """Sandbox memory or disk of a queue: a task takes its amount before it starts and gives it back at its end;
    tasks that do not fit wait FIFO (the head blocks the ones behind it)."""

    __slots__ = ("level", "waiting")

    def __init__(self, capacity: float):
        self.level = capacity
        self.waiting: deque = deque()

    def take(self, amount: float, task) -> bool:
        if not self.waiting and self.level >= amount - 1e-9:
            self.level -= amount
            return True
        self.waiting.append((amount, task))
        return False

    def give(self, amount: float) -> list:
        """Return the amount; the waiting tasks that now fit, in order (their amounts taken)."""
        self.level += amount
        out = []
        w = self.waiting
        while w and self.level >= w[0][0] - 1e-9:
            a, task = w.popleft()
            self.level -= a
            out.append(task)
        return out


class _Draws:
    """Buffered random draws (numpy's vectorized draws are much cheaper than scalar calls): standard gamma per
    shape, uniforms and unit exponentials."""

    def __init__(self, rng: np.random.Generator, block: int = 4096):
        self.rng, self.block = rng, block
        self.buf: dict[float, list] = {}
        self.u: list = []
        self.e: list = []

    def gamma(self, mean: float, cv: float) -> float:
        if cv <= 0:
            return mean
        k = 1.0 / (cv * cv)
        b = self.buf.get(k)
        if not b:
            b = self.rng.standard_gamma(k, self.block).tolist()
            self.buf[k] = b
        return b.pop() * mean / k

    def uniform(self) -> float:
        if not self.u:
            self.u = self.rng.random(self.block).tolist()
        return self.u.pop()

    def exponential(self, mean: float) -> float:
        if not self.e:
            self.e = self.rng.standard_exponential(self.block).tolist()
        return self.e.pop() * mean

    def block_of(self, mean: float, cv: float) -> list[float]:
        """A block of gamma draws with this mean and cv, already scaled (a stage's own buffer: one list pop per
        occurrence)."""
        if cv <= 0:
            return [mean] * self.block
        k = 1.0 / (cv * cv)
        return (self.rng.standard_gamma(k, self.block) * (mean / k)).tolist()


class _Task:
    """One task: its class, arrival, the stages it runs in order (turns interleaved; each an op tuple of `_Run.ops`)
    and where it is. It is filed on the run's task calendar by its next wake time (at most one pending at a time)."""

    __slots__ = ("ci", "cls", "t_arr", "measured", "phase", "seq", "pos", "t_gpu", "g", "tid", "eid")

    def __init__(self, ci: int, cls: ClassSpec, t_arr: float, measured: bool):
        self.ci, self.cls, self.t_arr, self.measured = ci, cls, t_arr, measured
        self.phase = 0
        self.seq: list[int] = []
        self.pos = 0
        self.t_gpu = self.g = 0.0
        self.tid = None
        self.eid = 0
        """The SimPy event id drawn when it was last filed on the run's task calendar."""


class _Chain(deque):
    """Tasks that wake at the very same time, in the order they were filed."""


class _Arrivals:
    """The open-arrival stream as one recurring calendar event."""

    __slots__ = ("callbacks",)
    _ok = True
    _value = None

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
    window. A closed loop's agents start their first tasks within one unloaded task time of their class (`run`),
    so a warm-up shorter than that also discards part of the ramp-up."""
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
    engine: str = "compiled"
    """`compiled` (advisor/simulation/kernel.py) or `python` (`_Run`): the same events and draws, so the same
    figures for a seed; the Python engine also serves runs with a trace recorder or comonotone counts."""
    workers: int = 1
    """Processes the replications run in (at most one per replication). Results do not depend on it: each
    replication has its own seed from `seed`, so a parallel run gives the same figures as a serial one. Runs with a
    trace recorder, or under a cancellation token (whose cancel a child process would not see), stay in this
    process."""


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
def _cumulative(weights: list[float]) -> list[float]:
    """Cumulative shares of positive weights, the last exactly 1 (for picking an index with one uniform draw)."""
    total = sum(weights)
    cum = np.cumsum([w / total for w in weights]).tolist()
    cum[-1] = 1.0
    return cum


class _Run:
    def __init__(self, model: SimModel, st: SimSettings, seed, recorder: Callable | None = None):
        self.m = model
        self.st = st
        self.rng = np.random.default_rng(seed)
        self.draw = _Draws(self.rng)
        self.env = simpy.Environment()
        ut = unloaded_times(model)
        mix = sum(c.share * ut[c.name] for c in model.classes)
        self.warm = st.warmup_s if st.warmup_s is not None else min(st.duration_s, max(3 * mix, 2 * max(ut.values())))
        self.w0, self.w1 = self.warm, self.warm + st.duration_s
        self.tmax = st.max_sim_s if st.max_sim_s is not None else self.w1 + 4 * st.duration_s
        self.gpu = _GpuPool(self.env, model.skus) if model.skus else None
        self.queues = {n: _Slots(q, self.w0, self.w1) for n, q in model.queues.items()}
        self.io = {n: _Slots(QueueSpec(n, q.io_streams, 1.0, q.io_streams, 1.0, 0.0), self.w0, self.w1)
                   for n, q in model.queues.items() if q.io_streams > 0}
        self.mem: dict[str, _Store] = {}
        self.disk: dict[str, _Store] = {}
        if st.memory_limit:
            for n, q in model.queues.items():
                need = max((c.memory_gb for c in model.classes if c.queue == n), default=0.0)
                if need > 0:
                    if q.memory_gb < need:
                        raise InputError(f"queue {n!r} has {q.memory_gb:g} GB of sandbox memory, less than one task needs")
                    self.mem[n] = _Store(q.memory_gb)
                need = max((c.disk_gb for c in model.classes if c.queue == n), default=0.0)
                if need > 0:
                    if q.disk_gb < need:
                        raise InputError(f"queue {n!r} has {q.disk_gb:g} GB of sandbox disk, less than one task needs")
                    self.disk[n] = _Store(q.disk_gb)
        self.cum = _cumulative([c.share for c in model.classes])
        self.recorder = recorder
        self.task_seq = 0
        self.tq: list[float] = [math.inf]
        """The tasks' calendar: a heap of wake times (floats: cheaper to order than SimPy's entries), the task to
        wake at each in `tw`; inf stays at the bottom so that it is never empty."""
        self.tw: dict[float, _Task | _Chain] = {}
        self.rate_s = 0.0
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
        # Per class and stage: (kind, station (a GPU stage's work per call by SKU), parallelism), its draws' (gamma
        # mean, cv) and its buffer of draws (a GPU call's draw is its work factor G, mean 1).
        self.draw_par = [[(1.0 if s.kind == GPU else s.mean_s, s.cv) for s in c.stages] for c in model.classes]
        self.bufs = [[[] for _ in c.stages] for c in model.classes]
        self.ops = [[(s.kind, s.rel if s.kind == GPU else self._station(s), s.parallelism if s.kind == CPU else 1.0,
                      self.bufs[ci][i], i) for i, s in enumerate(c.stages)] for ci, c in enumerate(model.classes)]
        self.ctx = [(self.stage_time[ci], self.stage_wait[ci]) for ci in range(len(model.classes))]
        self.gpu_calls = 0
        self.gpu_call_time = 0.0
        self.snap0 = self.snap1 = None
        self.truncated = False
        self.deadline = math.inf

    def _station(self, s: StageSpec) -> _Slots | None:
        if s.kind == CPU:
            return self.queues[s.queue]
        if s.kind == IO:
            return self.io[s.queue]
        return None

    def _refill(self, ci: int, i: int) -> float:
        b = self.bufs[ci][i]
        b.extend(self.draw.block_of(*self.draw_par[ci][i]))
        return b.pop()

    # draws

    def _count(self, s: StageSpec, u: float | None) -> int:
        if s.count_cv <= 0:
            x = s.count
        elif u is not None:
            k = 1.0 / (s.count_cv * s.count_cv)
            x = gammaincinv(k, u) * s.count / k
        else:
            x = self.draw.gamma(s.count, s.count_cv)
        n = int(x)
        if self.draw.uniform() < x - n:
            n += 1
        return n

    def _pick(self) -> int:
        return bisect.bisect_right(self.cum, self.draw.uniform())

    # a task's life

    def _arrive(self, ci: int) -> None:
        now = self.env.now
        measured = self.w0 <= now < self.w1
        if measured:
            self.outstanding += 1
        self._admit(_Task(ci, self.m.classes[ci], now, measured))

    def _admit(self, task: _Task) -> None:
        """Take the task's sandbox memory, then its disk (waiting FIFO for each), then start it."""
        cls = task.cls
        if task.phase == 0:
            task.phase = 1
            store = self.mem.get(cls.queue) if cls.memory_gb > 0 else None
            if store is not None and not store.take(cls.memory_gb, task):
                return
        if task.phase == 1:
            task.phase = 2
            store = self.disk.get(cls.queue) if cls.disk_gb > 0 else None
            if store is not None and not store.take(cls.disk_gb, task):
                return
        u = self.draw.uniform() if self.st.count_coupling == "comonotone" else None
        counts = [self._count(s, u) for s in cls.stages]
        ops = self.ops[task.ci]
        seq: list[tuple] = []
        for block in cls.blocks:
            if len(block) == 1:
                seq.extend([ops[block[0]]] * counts[block[0]])
            else:  # turns interleaved: whole turns while every stage of the block still runs, then the rest
                cs = [counts[i] for i in block]
                nmin, nmax = min(cs), max(cs)
                if nmin:
                    seq.extend([ops[i] for i in block] * nmin)
                seq.extend(ops[i] for t in range(nmin, nmax) for i in block if counts[i] > t)
        task.seq = seq
        if self.recorder is not None:
            self.task_seq += 1
            task.tid = self.task_seq
        self._go(task)

    def _chain(self, t: float, first, task: _Task) -> None:
        """A second task wakes at the very same time as one already filed: keep them in a chain, in order."""
        if first.__class__ is _Chain:
            first.append(task)
        else:
            self.tw[t] = _Chain((first, task))

    def _unchain(self, t: float, chain: _Chain) -> _Task:
        task = chain.popleft()
        if chain:
            self.tw[t] = chain
        return task

    def _first(self, t: float) -> int:
        """Which of the wake (0), the GPU completion (1) and SimPy's head event (2) at the same time `t` comes
        first: the one filed first, by SimPy's event ids (all at SimPy's normal priority but SimPy's own)."""
        keys = []
        if self.tq[0] == t:
            w = self.tw[t]
            keys.append((1, (w[0] if w.__class__ is _Chain else w).eid, 0))
        if self.gpu is not None and self.gpu.armed == t:
            keys.append((1, self.gpu.armed_eid, 1))
        q = self.env._queue
        if q and q[0][0] == t:
            keys.append((q[0][1], q[0][2], 2))
        return min(keys)[2]

    def _go(self, task: _Task) -> None:
        """Run a task that starts now (after its admission) up to its first wait: the run loop's own code for one
        task (`_run_to`)."""
        self._run_to(math.inf, task)

    def _finish(self, task: _Task) -> None:
        now = self.env.now
        cls, ci = task.cls, task.ci
        admitted = []
        if cls.memory_gb > 0 and cls.queue in self.mem:
            admitted += self.mem[cls.queue].give(cls.memory_gb)
        if cls.disk_gb > 0 and cls.queue in self.disk:
            admitted += self.disk[cls.queue].give(cls.disk_gb)
        if self.w0 <= now < self.w1:
            self.completions += 1
            self.class_completions[ci] += 1
        if task.measured:
            self.outstanding -= 1
            self.task_times.append(now - task.t_arr)
            self.task_class.append(ci)
            self.measured_by_class[ci] += 1
        for waiting in admitted:
            self._admit(waiting)
        if self.st.agents:  # closed loop: the agent starts its next task (behind any that waited for room)
            self._arrive(self._pick())

    def _on_arrival(self, ev: _Arrivals) -> None:
        self._arrive(self._pick())
        ev.callbacks = self._arrival_cbs
        self.env.schedule(ev, 1, self.draw.exponential(1.0 / self.rate_s))

    # running

    def _take(self):
        return (self.gpu.snapshot(self.env.now) if self.gpu else None,
                {n: (q.area_cores, q.area_slots) for n, q in self.queues.items()},
                {n: (q.area_cores, q.area_slots) for n, q in self.io.items()})

    def _check_limits(self) -> None:
        if time.monotonic() > self.deadline:
            raise WallClockExceeded()
        cancel.check()

    def _run_to(self, until: float, start: _Task | None = None) -> None:
        """SimPy's `env.run(until=until)`, done here: take the next of the tasks' calendar (`tq`), the GPU pool's
        next completion and SimPy's calendar, in SimPy's order (time, priority, event id), and run each task's
        stages inline. With `start`, run only that task's stages at the current time (a task that starts, `_go`)
        and return.

        A task runs from where it is, at the current time: delays add up, a slot station places the call at once;
        the task goes back on the calendar when its next station arrival (or its end) is later than now, and waits
        in the GPU pool for a model call. (The hot loop of the engine: locals, no calls in the common path; the GPU
        pool's submit is inline. SimPy's `now` is set only before code that reads it: callbacks, a task's end, the
        guard, and at the end.)"""
        env = self.env
        now = env._now
        if start is None:
            if until <= now:
                return
            stop = now + (until - now)  # the time SimPy's own `until` event would be filed under
        q = env._queue
        tq, tw = self.tq, self.tw
        setd = tw.setdefault
        inf = math.inf
        pool = self.gpu if self.gpu is not None else _NO_GPU
        fire = pool.fire
        single = pool.single
        if single:
            loads0, reps0 = pool.loads[0], pool.by_sku[0]
            cap0 = reps0[0].cap
        nt = pool.nt
        ctx = self.ctx
        rec = self.recorder
        w0, w1 = self.w0, self.w1  # every slot station integrates over the run's window
        eids = env._eid
        push, pop, replace = heapq.heappush, heapq.heappop, heapq.heapreplace
        done: list = []
        di = dn = 0
        guard = GUARD_EVERY_EVENTS
        task = start
        completed = False
        top = False  # the woken task's time is still at the top of `tq` (popped, or replaced when it is filed again)
        while True:
            if task is not None:  # `start`
                pass
            elif di < dn:  # a task whose model call completed at this `now`
                task = done[di]
                di += 1
                completed = True
            else:
                guard -= 1
                if not guard:
                    guard = GUARD_EVERY_EVENTS
                    env._now = now
                    self._check_limits()
                # the next of: a task's wake (tq), the GPU pool's completion, an event on SimPy's calendar
                tt = tq[0]
                armed = pool.armed
                st = q[0][0] if q else inf
                if tt < armed and tt < st:
                    t, which = tt, 0
                elif armed < tt and armed < st:
                    t, which = armed, 1
                elif st < tt and st < armed:
                    t, which = st, 2
                else:  # a tie (or nothing left)
                    t = min(tt, armed, st)
                    which = self._first(t) if t < stop else 0
                if t >= stop:
                    break
                now = t
                if which == 1:
                    done = fire(now)
                    di, dn = 0, len(done)
                    continue
                if which == 2:
                    env._now = now
                    ev = pop(q)[3]
                    cbs = ev.callbacks
                    ev.callbacks = None
                    for cb in cbs:
                        cb(ev)
                    continue
                task = tw.pop(t)
                if task.__class__ is not _Task:
                    task = self._unchain(t, task)
                top = True
            # ---- the task's stages from where it is, at `now`
            seq, pos = task.seq, task.pos
            times, waits = ctx[task.ci]
            measured = task.measured
            if completed:  # the model call at `pos` completes now
                completed = False
                i = seq[pos][4]
                if measured:
                    times[i] += now - task.t_gpu
                    self.gpu_calls += 1
                    self.gpu_call_time += now - task.t_gpu
                if rec is not None:
                    rec(task.tid, task.cls, task.cls.stages[i], task.t_gpu, now, task.g)
                pos += 1
            t = now
            end = len(seq)
            while pos < end:
                kind, station, par, b, i = seq[pos]
                if kind != DELAY and t > now:
                    break
                x = b.pop() if b else self._refill(task.ci, i)
                if kind == DELAY:
                    if measured:
                        times[i] += x
                    if rec is not None:
                        rec(task.tid, task.cls, task.cls.stages[i], t, t + x, None)
                    t += x
                elif kind == GPU:
                    task.pos = pos
                    task.t_gpu = now
                    task.g = x
                    # the GPU pool's submit: the least-loaded replica of the SKU where the call would progress
                    # fastest now, or the pool's FIFO when every replica is at its batch limit
                    if single:
                        m = min(loads0)
                        if m >= cap0:
                            pool.wait.append((station, x, task))
                            break
                        loads = loads0
                        rep = reps0[loads0.index(m)]
                    else:
                        best_k, best_t = -1, inf
                        for k, loads in enumerate(pool.loads):
                            m = min(loads)
                            r = pool.by_sku[k][0]
                            if m < r.cap:
                                tk = (r.l0 + m * r.d) / r.speed
                                if tk < best_t:
                                    best_k, best_t = k, tk
                        if best_k < 0:
                            pool.wait.append((station, x, task))
                            break
                        loads = pool.loads[best_k]
                        rep = pool.by_sku[best_k][loads.index(min(loads))]
                    n = rep.n
                    dt = now - rep.last  # `_Replica.advance`, inlined (once per model call: the hot path)
                    if dt > 0:
                        if n:
                            r = rep.speed / (rep.l0 + (n - 1) * rep.d)
                            rep.v += dt * r
                            rep.area_n += dt * n
                            rep.area_work += dt * n * r
                        else:
                            rep.area_empty += dt
                        rep.last = now
                    rep.n = n = n + 1
                    loads[rep.pos] = n
                    rep.seq += 1
                    heap = rep.heap
                    v = rep.v
                    push(heap, (v + station[rep.sku] * x, rep.seq, task))
                    dt = (heap[0][0] - v) * (rep.l0 + (n - 1) * rep.d) / rep.speed
                    tk = now + (dt if dt > 0.0 else 0.0)
                    nt[rep.idx] = tk
                    if tk < pool.armed:
                        pool.armed = tk
                        pool.armed_eid = next(eids)
                    break
                else:
                    # placed on arrival (Kiefer-Wolfowitz): the call starts when the earliest slot frees, or now
                    free = station.free
                    st = free[0]
                    if st < now:
                        st = now
                    t = st + x
                    replace(free, t)
                    if t > w0 and st < w1:  # busy time, clipped to the window
                        held = (t if t < w1 else w1) - (st if st > w0 else w0)
                        station.area_slots += held
                        station.area_cores += held * par
                    if measured:
                        w = st - now
                        waits[i] += w
                        times[i] += t - now
                        station.wait_sum += w
                        station.waits.append(w)
                    if rec is not None:
                        rec(task.tid, task.cls, task.cls.stages[i], st, t, None)
                pos += 1
            if t > now:  # on the calendar at its next station arrival (or its end)
                task.pos = pos
                task.eid = next(eids)
                o = setd(t, task)
                if o is not task:
                    self._chain(t, o, task)
                if top:
                    replace(tq, t)
                    top = False
                else:
                    push(tq, t)
            else:
                if top:
                    pop(tq)
                    top = False
                if pos == end:  # its end (else it is in the GPU pool)
                    task.pos = pos
                    env._now = now
                    self._finish(task)
            if start is not None:
                return
            task = None
        env._now = stop

    def run(self) -> dict:
        st, env = self.st, self.env
        start = time.monotonic()
        self.deadline = start + st.wall_clock_s
        try:
            if st.agents:
                # Start near the steady state, so that the warm-up is not spent undoing the start. An agent's first
                # task is of class c with probability share_c T_c / sum share T (T: unloaded task times), the share
                # of agents busy with class c in a steady closed loop (not share_c: with classes of very different
                # lengths that overloads the short classes' queues for several long-task times), and starts at a
                # uniform time within one T_c, as if the agents were at random points of their tasks (all starting
                # at 0, tasks of a low-variance class run in step and their load comes in waves for many cycles).
                ut = unloaded_times(self.m)
                weights = [c.share * ut[c.name] for c in self.m.classes]
                self._start_closed(_cumulative(weights) if sum(weights) > 0 else self.cum,
                                   [ut[c.name] for c in self.m.classes])
            elif st.arrival_rate_per_hour:
                self.rate_s = st.arrival_rate_per_hour / HOUR_S
                self._start_open()
            else:
                raise InputError("give agents or an arrival rate")
            self._run_to(min(self.w0, self.tmax))
            if env.now >= self.w0 or self.w0 <= 0:
                self.snap0 = self._take()
            self._run_to(min(self.w1, self.tmax))
            if env.now >= self.w1 and self.snap0 is not None:
                self.snap1 = self._take()
            if st.drain:
                step = max(st.duration_s / 20.0, 1.0)
                while self._pending() > 0 and env.now < self.tmax:
                    self._run_to(min(env.now + step, self.tmax))
        except WallClockExceeded:
            self.truncated = True
        if self._pending() > 0 and st.drain:
            self.truncated = True
        return self._result(time.monotonic() - start)

    def _pending(self) -> int:
        """Measured tasks not yet finished."""
        return self.outstanding

    def _start_closed(self, cum: list[float], ut: list[float]) -> None:
        """The agents' first tasks: class by `cum`, start uniform within the class's unloaded time `ut` (`run`)."""
        for _ in range(self.st.agents):
            ci = bisect.bisect_right(cum, self.draw.uniform())
            delay = self.draw.uniform() * ut[ci]
            if delay > 0:
                self.env.timeout(delay).callbacks.append(lambda _ev, ci=ci: self._arrive(ci))
            else:
                self._arrive(ci)

    def _start_open(self) -> None:
        ev = _Arrivals()
        self._arrival_cbs = ev.callbacks = [self._on_arrival]
        self.env.schedule(ev, 1, self.draw.exponential(1.0 / self.rate_s))

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
        g0 = self.snap0[0]
        g1, q1, io1 = self.snap1
        if self.gpu:
            util["gpu"] = (g1[1] - g0[1]) / (self.gpu.max_rate * D)
            r["gpu_mean_calls_in_service"] = (g1[0] - g0[0]) / D
            r["gpu_replica_empty_fraction"] = (g1[2] - g0[2]) / (len(self.gpu.replicas) * D)
            r["gpu_idle_fraction"] = 1.0 - util["gpu"]
            r["gpu_mean_call_s"] = self.gpu_call_time / self.gpu_calls if self.gpu_calls else 0.0
        # Slot stations integrate their busy time over the window itself (each call clipped to it when placed).
        for n, q in self.queues.items():
            if q.spec.slots > 0 and any(s.queue == n for c in m.classes for s in c.stages):
                util[f"cpu:{n}"] = q1[n][0] / (q.spec.cores * D) if q.spec.cores else 0.0
                util[f"cpu_slots:{n}"] = q1[n][1] / (q.spec.slots * D)
                r.setdefault("tool_wait_mean_s", {})[n] = q.wait_sum / len(q.waits) if q.waits else 0.0
                r.setdefault("tool_wait_p95_s", {})[n] = float(np.quantile(q.waits, TOOL_WAIT_QUANTILE)) \
                    if q.waits else 0.0
        for n, q in self.io.items():
            util[f"io:{n}"] = io1[n][1] / (q.spec.slots * D)
            r.setdefault("io_wait_mean_s", {})[n] = q.wait_sum / len(q.waits) if q.waits else 0.0
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


class _CompiledRun(_Run):
    """A replication whose events run on the compiled loop (advisor/simulation/kernel.py, its state built and read
    back by advisor/simulation/compiled.py): this class's setup, start, measurement and result, the same figures
    for a seed."""

    def __init__(self, model: SimModel, st: SimSettings, seed):
        from advisor.simulation.compiled import KernelState

        super().__init__(model, st, seed, None)
        self.kernel = KernelState(self)

    def _pending(self) -> int:
        return self.kernel.pending()

    def _start_closed(self, cum: list[float], ut: list[float]) -> None:
        self.kernel.start_closed(cum, ut)

    def _start_open(self) -> None:
        self.kernel.start_open(self.rate_s)

    def _run_to(self, until: float, start: _Task | None = None) -> None:
        self.kernel.run_to(until, self.env, self._check_limits)

    def _take(self):
        return self.kernel.take()

    def _result(self, wall: float) -> dict:
        self.kernel.collect()
        return super()._result(wall)


def _make_run(model: SimModel, settings: SimSettings, seed, recorder: Callable | None = None) -> _Run:
    """The compiled run loop (advisor/simulation/kernel.py: the same engine, the same figures for a seed) unless the
    run records traces, couples stage counts (`comonotone`: an inverse gamma the kernel does not carry), asks for
    the Python engine, or numba cannot be imported."""
    if recorder is None and settings.count_coupling == "independent" and settings.engine == "compiled":
        try:
            return _CompiledRun(model, settings, seed)
        except ImportError:  # numba missing or broken: the Python engine gives the same figures, slower
            return _Run(model, settings, seed, recorder)
    return _Run(model, settings, seed, recorder)


def _replication(model: SimModel, settings: SimSettings, seed) -> dict:
    """One replication in a worker process (module level, so that it pickles)."""
    return _make_run(model, settings, seed).run()


def simulate_model(model: SimModel, settings: SimSettings, recorder: Callable | None = None) -> dict:
    """Run `settings.replications` independent replications and summarize them with 95% t-intervals."""
    if settings.replications < 1:
        raise InputError("replications must be >= 1")
    if (settings.agents is None) == (settings.arrival_rate_per_hour is None):
        raise InputError("give exactly one of agents or arrival_rate_per_hour")
    if settings.workers < 1:
        raise InputError("workers must be >= 1")
    if settings.engine not in ("compiled", "python"):
        raise InputError(f"engine must be 'compiled' or 'python', not {settings.engine!r}")
    started = time.monotonic()
    seeds = np.random.SeedSequence(settings.seed).spawn(settings.replications)
    workers = min(settings.workers, settings.replications)
    if workers > 1 and recorder is None and cancel.current() is None:
        with ProcessPoolExecutor(max_workers=workers) as ex:
            reps = list(ex.map(_replication, [model] * len(seeds), [settings] * len(seeds), seeds))
    else:
        reps = [_make_run(model, settings, s, recorder).run() for s in seeds]
    out = summarize(reps)
    out["elapsed_s"] = time.monotonic() - started  # wall clock of the whole run; `wall_s` sums the replications'
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
