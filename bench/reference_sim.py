"""The simulator's previous replication engine (advisor/simulation/des.py at bb2e1cb), kept to measure the
current one against: one SimPy process per task (a generator yielding per stage), a SimPy timeout per tool call,
I/O call and delay, and a new timer per change of a GPU replica (superseded timers still fire). It runs the same
`SimModel` and `SimSettings` and returns the same per-replication dict, so `bench/bench_sim.py` and the slow tier
can set both engines side by side. Not used by the product.
"""

from __future__ import annotations

import heapq
import math
import time
from collections import deque
from collections.abc import Callable

import numpy as np
import simpy
from scipy.special import gammaincinv

from advisor import cancel
from advisor.simulation.des import (
    CPU, DELAY, GPU, GUARD_EVERY_STAGES, HOUR_S, IO, KIND_NAME, TOOL_WAIT_QUANTILE, QueueSpec, SimModel, SimSettings,
    SkuSpec, StageSpec, WallClockExceeded, summarize, unloaded_times,
)
from models.errors import InputError


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


def simulate_reference(model: SimModel, settings: SimSettings, recorder: Callable | None = None) -> dict:
    """`des.simulate_model` on the previous engine."""
    seeds = np.random.SeedSequence(settings.seed).spawn(settings.replications)
    reps = [_Run(model, settings, s, recorder).run() for s in seeds]
    out = summarize(reps)
    out["per_replication"] = [{k: v for k, v in r.items() if k != "task_times"} for r in reps]
    return out
