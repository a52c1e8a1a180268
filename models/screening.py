"""Screening: the throughput bounds, power, heat and space of many configurations at once, from numpy arrays.

A `ServerMenu` fixes the server groups (chassis, CPU, GPU, GPUs per server, orchestration cores, cores per tool
queue) and the queues; a screening call takes a (P, S) array of server counts, one row per configuration of one
rack, and returns the same bounds `models.pipeline.evaluate` computes for each row (GPU compute, orchestration,
their per-server combination, each queue's cores, sandbox memory and disk, disk bandwidth and tail-wait target), their
minimum (the evaluator's capacity figure: its sustainable throughput, or above it where the sandboxes' loaded-time
loop binds, docs/model.md 5.3, so a screen never rules out a row the evaluator would keep), the binding bound, and
the rack's power, air and liquid heat and space against its budgets. The per-server figures come from the evaluator's own code (`resolve_groups`), so a row and the
configuration it stands for evaluate to the same bounds (tests/test_fast_evaluator.py checks 1e-9 relative).

No latencies, closed loop or costs: for those, evaluate the rows that survive the screen.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from models.assumptions import ModelAssumptions
from models.catalog import Catalog
from models.config import Configuration, Queue, ServerGroup
from models.hardware import Rack
from models.performance import cpu_call_seconds, stage_gpu_latency_s
from models.pipeline import HOUR_S, LABEL_TOLERANCE, _queues, resolve_groups
from models.queueing import max_arrival_for_wait
from models.rack_physics import downlinks, rack_switch
from models.workload import CpuStage, GpuStage, IoStage, Workload


@dataclass(frozen=True)
class ServerMenu:
    """Server groups (each row of a count array says how many of each) for one workload and rack."""

    workload: Workload
    rack: Rack
    groups: tuple[ServerGroup, ...]
    """The groups; their `count` and `rack` are ignored (counts come with each screened row)."""
    queues: tuple[Queue, ...]
    queues_given: bool
    """False when the groups use the default single shared queue (the configuration lists no queues)."""
    assumptions: ModelAssumptions
    gpu_tps: np.ndarray
    """(S,) tasks/s one server's GPUs sustain."""
    orch_tps: np.ndarray
    """(S,) tasks/s one server's orchestration cores sustain (0 for CPU-only servers)."""
    serving_tps: np.ndarray
    """(S,) per server min(GPU, orchestration)."""
    serving_of: np.ndarray
    """(S,) index of the server's serving setup (GPU SKU and tensor-parallel cap), -1 for CPU-only servers."""
    qcores: np.ndarray
    """(S, Q) cores per server in each queue."""
    qcap: np.ndarray
    """(S, Q) reference-core capacity per server in each queue (cores x per-core speed)."""
    qmem: np.ndarray
    """(S, Q) sandbox memory per server that comes with its cores in each queue, GB."""
    qdisk: np.ndarray
    """(S, Q) sandbox disk (local NVMe) per server that comes with its cores in each queue, GB."""
    qio: np.ndarray
    """(S, Q) local NVMe bandwidth per server that comes with its cores in each queue, MB/s."""
    power_w: np.ndarray
    air_heat_w: np.ndarray
    liquid_heat_w: np.ndarray
    space_u: np.ndarray
    weight_kg: np.ndarray
    ports: np.ndarray
    """(S,) NIC ports per server (top-of-rack switches are sized from their sum)."""
    switch: object
    """The rack's top-of-rack switch (None when the rack takes none)."""
    gpu_latency: np.ndarray
    """(C, K) per class, seconds of LLM calls per task on serving setup k (unloaded)."""
    cpu_call_s_at_ref: np.ndarray
    """(C,) per class, wall seconds of tool calls per task on reference-speed cores."""
    delay_s: np.ndarray
    """(C,) per class, seconds of delay and I/O stages per task (I/O at one stream's bandwidth, unloaded)."""
    class_queue: np.ndarray
    """(C,) queue index of each class, -1 when no queue serves it."""
    cpu_work: np.ndarray
    """(Q,) reference core-seconds of tool work per task."""
    cpu_calls: np.ndarray
    """(Q,) tool calls per task."""
    cpu_call_time_ref: np.ndarray
    """(Q,) call-seconds per task on reference-speed cores."""
    cpu_hold_ref: np.ndarray
    """(Q,) core-seconds held per task on reference-speed cores."""
    cpu_call_m2_ref: np.ndarray
    """(Q,) share-weighted second moment of call time on reference-speed cores."""
    io_mb: np.ndarray
    """(Q,) MB of sandbox I/O per task."""
    sandbox_disk_gb: np.ndarray
    shares: np.ndarray
    sandbox_gb: np.ndarray
    has_llm: bool
    n_servings: int


def server_menu(workload: Workload, rack: Rack, catalog: Catalog, groups: list[ServerGroup],
                queues: list[Queue] | None = None, assumptions: ModelAssumptions | None = None) -> ServerMenu:
    """Per-server figures of each group, derived as `evaluate` derives them (one resolve of all groups)."""
    a = assumptions or ModelAssumptions()
    one = [g.model_copy(update={"count": 1, "rack": 0}) for g in groups]
    cfg = Configuration(name="menu", servers=one, queues=queues)
    qs = _queues(cfg, workload)
    resolved, servings = resolve_groups(cfg, workload, catalog, a)
    skeys = list(servings)
    qidx = {q.name: i for i, q in enumerate(qs)}
    n_s, n_q = len(resolved), len(qs)
    qcores = np.zeros((n_s, n_q))
    qcap = np.zeros((n_s, n_q))
    qmem = np.zeros((n_s, n_q))
    qdisk = np.zeros((n_s, n_q))
    qio = np.zeros((n_s, n_q))
    for s, g in enumerate(resolved):
        for qn, c in g.queue_cores.items():
            if qn in qidx:
                qcores[s, qidx[qn]] = c
                qcap[s, qidx[qn]] = c * g.profile.per_core_perf
                qmem[s, qidx[qn]] = c * g.profile.memory_per_core_gb
                qdisk[s, qidx[qn]] = c * g.profile.disk_per_core_gb
                qio[s, qidx[qn]] = c * g.profile.io_mbps_per_core
    prof = [g.profile for g in resolved]
    class_queue = {c: q.name for q in qs for c in q.classes}
    cls = workload.classes
    gpu_latency = np.array([[sum(st.count * stage_gpu_latency_s(st, workload.served_model, servings[k])
                                 for st in c.stages if isinstance(st, GpuStage)) for k in skeys] for c in cls])
    cpu_ref = np.array([sum(st.count * cpu_call_seconds(st, 1.0) for st in c.stages if isinstance(st, CpuStage))
                        for c in cls])
    stream = a.io_stream_mbps
    delay = np.array([sum(st.count * (st.io_mb / stream if isinstance(st, IoStage) else st.seconds)
                          for st in c.stages if not isinstance(st, (GpuStage, CpuStage))) for c in cls])
    work, calls, ctime, hold, m2, io_mb = (np.zeros(n_q) for _ in range(6))
    for c in cls:
        qn = class_queue.get(c.name)
        for st in c.stages:
            if isinstance(st, CpuStage):
                i = qidx[qn]
                call = cpu_call_seconds(st, 1.0)
                work[i] += c.share * st.count * st.core_seconds
                calls[i] += c.share * st.count
                ctime[i] += c.share * st.count * call
                hold[i] += c.share * st.count * call * st.parallelism
                m2[i] += c.share * st.count * call * call * (1.0 + st.cv * st.cv)
            elif isinstance(st, IoStage):
                io_mb[qidx[qn]] += c.share * st.count * st.io_mb
    return ServerMenu(
        workload=workload, rack=rack, groups=tuple(groups), queues=tuple(qs), queues_given=queues is not None,
        assumptions=a,
        gpu_tps=np.array([p.gpu_tasks_per_s for p in prof]),
        orch_tps=np.array([p.orchestration_tasks_per_s if p.gpus else 0.0 for p in prof]),
        serving_tps=np.array([p.serving_tasks_per_s for p in prof]),
        serving_of=np.array([skeys.index(p.serving_key) if p.gpu is not None else -1 for p in prof]),
        qcores=qcores, qcap=qcap, qmem=qmem, qdisk=qdisk, qio=qio,
        power_w=np.array([p.power_w for p in prof]), air_heat_w=np.array([p.air_heat_w for p in prof]),
        liquid_heat_w=np.array([p.liquid_heat_w for p in prof]), space_u=np.array([p.space_u for p in prof]),
        weight_kg=np.array([p.chassis.weight_kg for p in prof]),
        ports=np.array([p.chassis.network_ports for p in prof], dtype=float), switch=rack_switch(rack, catalog),
        gpu_latency=gpu_latency.reshape(len(cls), len(skeys)), cpu_call_s_at_ref=cpu_ref, delay_s=delay,
        class_queue=np.array([qidx.get(class_queue.get(c.name), -1) for c in cls]),
        cpu_work=work, cpu_calls=calls, cpu_call_time_ref=ctime, cpu_hold_ref=hold, cpu_call_m2_ref=m2, io_mb=io_mb,
        sandbox_disk_gb=np.array([c.sandbox_disk_gb for c in cls]),
        shares=np.array([c.share for c in cls]), sandbox_gb=np.array([c.sandbox_memory_gb for c in cls]),
        has_llm=any(isinstance(st, GpuStage) for c in cls for st in c.stages), n_servings=len(skeys),
    )


@dataclass(frozen=True)
class Screening:
    """Figures of P configurations (arrays of length P); bounds in tasks per hour, NaN where a bound is absent."""

    bound_names: list[str]
    """Names of the bounds, as in `Evaluation.bounds` (gpu, orchestration, gpu+orchestration, cpu:<q>, ...)."""
    bounds: np.ndarray
    """(P, B) tasks/h per bound; NaN where the evaluator would not list the bound for that row."""
    effective: np.ndarray
    """(P, B) True where the bound takes part in the minimum (as `evaluate` picks its binding bound)."""
    throughput_tasks_per_hour: np.ndarray
    bottleneck: np.ndarray
    """(P,) index into bound_names of the binding bound (-1 when nothing bounds the row)."""
    power_w: np.ndarray
    air_heat_w: np.ndarray
    liquid_heat_w: np.ndarray
    space_u: np.ndarray
    within_budgets: np.ndarray

    @property
    def size(self) -> int:
        return len(self.throughput_tasks_per_hour)

    def bottleneck_names(self) -> list[str | None]:
        return [self.bound_names[i] if i >= 0 else None for i in self.bottleneck]


@functools.lru_cache(maxsize=4096)
def _slo_arrival(servers: int, mean_call_s: float, wait_s: float, q: float) -> float:
    return max_arrival_for_wait(servers, mean_call_s, wait_s, q)


def screen(menu: ServerMenu, counts) -> Screening:
    """Bounds, throughput, bottleneck, power, heat and space of each row of `counts` ((P, S) servers per group,
    all in one rack)."""
    n = np.asarray(counts, dtype=float)
    if n.ndim != 2 or n.shape[1] != len(menu.groups):
        raise ValueError(f"counts: expected shape (P, {len(menu.groups)}), got {n.shape}")
    if np.any(n < 0):
        raise ValueError("counts must be >= 0")
    p = n.shape[0]
    a = menu.assumptions
    rack = menu.rack
    names: list[str] = []
    cols: list[np.ndarray] = []
    eff: list[np.ndarray] = []
    nan = np.full(p, np.nan)

    # GPU pool and routing by serving capacity per setup.
    gpu_compute = n @ menu.gpu_tps
    orch = n @ menu.orch_tps
    serving_cap = n @ menu.serving_tps
    k = menu.n_servings
    route = np.zeros((p, k))
    if k:
        onehot = (menu.serving_of[:, None] == np.arange(k)[None, :]).astype(float)  # (S, K)
        cap_k = n @ (menu.serving_tps[:, None] * onehot)
        present = (n @ onehot) > 0
        n_present = present.sum(axis=1, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            route = np.where(serving_cap[:, None] > 0, cap_k / serving_cap[:, None],
                             np.where(n_present > 0, present / np.maximum(n_present, 1), 0.0))
    if menu.has_llm:
        is_gpu = serving_cap >= gpu_compute * (1 - LABEL_TOLERANCE)
        is_orch = ~is_gpu & (serving_cap >= orch * (1 - LABEL_TOLERANCE))
        is_both = ~is_gpu & ~is_orch
        names += ["gpu", "orchestration", "gpu+orchestration"]
        cols += [gpu_compute * HOUR_S, orch * HOUR_S, np.where(is_both, serving_cap * HOUR_S, np.nan)]
        eff += [is_gpu, is_orch, is_both]

    # Tool queues: cores, capacity, memory; class times at the queue's capacity-weighted core speed.
    qcores = n @ menu.qcores
    qcap = n @ menu.qcap
    qmem = n @ menu.qmem
    qdisk = n @ menu.qdisk
    qio = n @ menu.qio
    with np.errstate(invalid="ignore", divide="ignore"):
        qperf = np.where(qcores > 0, qcap / np.where(qcores > 0, qcores, 1.0), 1.0)  # (P, Q)
    gpu_t = route @ menu.gpu_latency.T if k else np.zeros((p, len(menu.shares)))  # (P, C)
    cq = menu.class_queue
    perf_c = np.where(cq >= 0, qperf[:, np.maximum(cq, 0)], 1.0)  # (P, C)
    unloaded = gpu_t + menu.cpu_call_s_at_ref / perf_c + menu.delay_s  # (P, C)
    for qi, q in enumerate(menu.queues):
        in_q = (cq == qi).astype(float)
        mem_demand = unloaded @ (menu.shares * menu.sandbox_gb * in_q)
        if menu.cpu_work[qi] > 0:
            names.append(f"cpu:{q.name}")
            cols.append(qcap[:, qi] / menu.cpu_work[qi] * HOUR_S)
            eff.append(np.ones(p, dtype=bool))
        if np.any(mem_demand > 0):
            names.append(f"memory:{q.name}")
            with np.errstate(invalid="ignore", divide="ignore"):
                cols.append(np.where(mem_demand > 0, qmem[:, qi] / mem_demand * HOUR_S, np.nan))
            eff.append(mem_demand > 0)
        disk_demand = unloaded @ (menu.shares * menu.sandbox_disk_gb * in_q)
        if np.any(disk_demand > 0):
            names.append(f"disk:{q.name}")
            with np.errstate(invalid="ignore", divide="ignore"):
                cols.append(np.where(disk_demand > 0, qdisk[:, qi] / disk_demand * HOUR_S, np.nan))
            eff.append(disk_demand > 0)
        if menu.io_mb[qi] > 0:
            names.append(f"io:{q.name}")
            cols.append(qio[:, qi] / menu.io_mb[qi] * HOUR_S)
            eff.append(np.ones(p, dtype=bool))
    for qi, q in enumerate(menu.queues):
        target = menu.workload.tool_wait_target(q.classes)
        if target is not None and menu.cpu_calls[qi] > 0:
            perf = qperf[:, qi]
            call_time = menu.cpu_call_time_ref[qi] / perf
            pbar = menu.cpu_hold_ref[qi] / menu.cpu_call_time_ref[qi]
            servers = np.floor(qcores[:, qi] / pbar + 1e-9).astype(np.int64)
            mean_call = call_time / menu.cpu_calls[qi]
            scv = np.maximum(0.0, (menu.cpu_call_m2_ref[qi] / perf / perf / menu.cpu_calls[qi]) / mean_call ** 2 - 1.0)
            scale = (1.0 + scv) / 2.0
            # the tail-wait bound depends on (servers, call time) only: solve each distinct pair once
            keys = np.stack([servers.astype(float), mean_call, scale], axis=1)
            uniq, inv = np.unique(keys, axis=0, return_inverse=True)
            sol = np.array([_slo_arrival(int(s), float(m), target / float(f), a.tail_quantile)
                            for s, m, f in uniq])
            lam = sol[inv.ravel()]
            names.append(f"slo:{q.name}")
            cols.append(lam / menu.cpu_calls[qi] * HOUR_S)
            eff.append(np.ones(p, dtype=bool))

    bounds = np.stack(cols, axis=1) if cols else np.zeros((p, 0))
    effective = np.stack(eff, axis=1) if eff else np.zeros((p, 0), dtype=bool)
    masked = np.where(effective, bounds, np.inf)
    if masked.shape[1]:
        bottleneck = np.argmin(masked, axis=1)
        thr = masked[np.arange(p), bottleneck]
        none = ~np.isfinite(thr) & ~effective.any(axis=1)
        bottleneck = np.where(none, -1, bottleneck)
        thr = np.where(none, np.nan, thr)
    else:
        bottleneck = np.full(p, -1)
        thr = nan.copy()
    # as models.pipeline.rack_usage: servers, the top-of-rack switches their NIC ports need, the reserved gear
    sw = menu.switch
    ports = n @ menu.ports
    k_sw = np.where(ports > 0, np.ceil(ports / downlinks(rack, sw)), 0.0) if sw is not None else np.zeros(p)
    sw_w = k_sw * sw.power_w if sw is not None else np.zeros(p)
    power = n @ menu.power_w + rack.reserved_power_w + sw_w
    air = n @ menu.air_heat_w + rack.reserved_power_w + sw_w
    liquid = n @ menu.liquid_heat_w
    space = n @ menu.space_u + rack.reserved_u + (k_sw * sw.height_u if sw is not None else 0.0)
    weight = n @ menu.weight_kg + rack.reserved_weight_kg + (k_sw * sw.weight_kg if sw is not None else 0.0)

    def fits(used, cap):
        return used <= cap + 1e-9 * max(1.0, cap)

    within = (fits(power, rack.power_kw * 1000) & fits(air, rack.air_cooling_kw * 1000)
              & fits(liquid, rack.liquid_cooling_kw * 1000) & fits(space, rack.height_u))
    if rack.feed_budget_w is not None:
        within &= fits(power, rack.feed_budget_w)
    if rack.max_weight_kg is not None:
        within &= fits(weight, rack.max_weight_kg)
    return Screening(bound_names=names, bounds=bounds, effective=effective, throughput_tasks_per_hour=thr,
                     bottleneck=bottleneck, power_w=power, air_heat_w=air, liquid_heat_w=liquid, space_u=space,
                     within_budgets=within)


def configuration_of(menu: ServerMenu, counts_row, name: str = "screened") -> Configuration:
    """The configuration one row stands for (groups with a zero count left out), to evaluate in full."""
    servers = [g.model_copy(update={"count": int(c), "rack": 0}) for g, c in zip(menu.groups, counts_row) if c > 0]
    return Configuration(name=name, servers=servers, queues=list(menu.queues) if menu.queues_given else None)
