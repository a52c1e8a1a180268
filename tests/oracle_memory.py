"""Enumeration oracle for instances where sandbox memory binds and GPU (and CPU) SKUs mix.

Scope: one shared tool queue (layout B, or hybrid with one task class), no tool-wait SLO. For every integer count
vector within the rack budgets, and for each flexible GPU option's orchestration cores on a grid (fractions
ORCH_GRID of the cores that drive its GPUs fully, never below the serving engines' host-core floor; every other
core goes to the queue), the sustainable throughput
is computed here from the model's definition (docs/model.md sections 2-4), independently of the MILP and of
models/pipeline.py:

    X = min( serving capacity,  tool capacity / tool work,  sandbox memory / memory demand )

with calls routed over serving setups in proportion to capacity and tool calls run at the queue's
capacity-weighted core speed, so that the memory demand per task is
    sum_c share_c mem_c (sum_GPU stages count sum_g route_g latency_g + sum_tool stages count core_s / (par perf_q)
                         + delays).

The grid makes this a lower bound on the optimum (a finer split may do better), so the tests check:
- the optimizer's proven bound is at least every enumerated throughput (the bound is valid);
- an answer labelled `optimal` is at least every enumerated throughput (within the gap).
Only ServerProfile figures, GPU serving setups and per-call latencies are taken from the package.
"""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass

from oracle import Instance, _revalidate, candidate_options, rack_switch_of, rack_vectors, random_instance

from advisor.optimizer.settings import OptimizerSettings
from models.catalog import Catalog
from models.hardware import Rack
from models.performance import stage_gpu_latency_s
from models.workload import CpuStage, DelayStage, GpuStage, Workload

HOUR_S = 3600.0
ORCH_GRID = (0.25, 0.5, 0.75, 0.9, 1.0)


def _servings(catalog: Catalog, workload: Workload, rack: Rack, layout: str):
    from advisor.optimizer.options import enumerate_options

    s = OptimizerSettings()
    _, servings = enumerate_options(catalog, workload, rack, layout, s.layout_a_orchestration_cores_per_gpu,
                                    s.assumptions.host_os_reserved_memory_gb,
                                    s.assumptions.tensor_parallel_domain_gpus, prune=False)
    return servings


def throughput(options, counts, orch_frac, workload: Workload, servings, memory_only: bool = False) -> float:
    """Sustainable tasks/s of one configuration (one shared queue, every non-orchestration core in it);
    `memory_only`: the sandbox-memory bound alone."""
    cap: dict[str, float] = {}
    qcores = qcap = qmem = 0.0
    for o, n, f in zip(options, counts, orch_frac):
        if n == 0:
            continue
        pr = o.profile
        if o.flexible_orchestration and pr.gpus:
            k = pr.orchestration_tasks_per_core_s
            g = pr.gpu_tasks_per_s * n
            if math.isfinite(k) and k > 0:
                # never below the serving engines' host-core floor (the MILP's engine_cores group)
                u = max(min(pr.cores * n, g / k) * f, pr.engine_min_cores * n if pr.replicas else 0.0)
                s = min(g, k * u)
            else:
                u, s = (pr.engine_min_cores * n if pr.replicas else 0.0), g
            tool = pr.cores * n - u
        else:
            s = pr.serving_tasks_per_s * n
            tool = pr.tool_cores * n
        if pr.gpus:
            cap[pr.serving_key] = cap.get(pr.serving_key, 0.0) + s
        qcores += tool
        qcap += tool * pr.per_core_perf
        qmem += tool * pr.memory_per_core_gb
    total = sum(cap.values())
    llm = any(isinstance(st, GpuStage) for c in workload.classes for st in c.stages)
    bounds = []
    if llm:
        bounds.append(total)
        if total <= 0:
            return 0.0
    work = sum(c.share * st.count * st.core_seconds for c in workload.classes for st in c.stages
               if isinstance(st, CpuStage))
    if work > 0:
        bounds.append(qcap / work)
    perf = qcap / qcores if qcores > 0 else 1.0
    demand = 0.0
    for c in workload.classes:
        t = 0.0
        for st in c.stages:
            if isinstance(st, GpuStage):
                t += st.count * sum(cap[k] / total * stage_gpu_latency_s(st, workload.served_model, servings[k])
                                    for k in cap)
            elif isinstance(st, CpuStage):
                t += st.count * st.core_seconds / (st.parallelism * perf)
            elif isinstance(st, DelayStage):
                t += st.count * st.seconds
        demand += c.share * c.sandbox_memory_gb * t
    if memory_only:
        return qmem / demand if demand > 0 else math.inf
    if demand > 0:
        bounds.append(qmem / demand)
    return max(0.0, min(bounds))


@dataclass
class MemoryOracle:
    tasks_per_hour: float
    counts: dict[str, int]
    vectors: int


def oracle(inst: Instance, layout: str) -> MemoryOracle:
    options = candidate_options(inst.catalog, inst.workload, inst.rack, layout)
    servings = _servings(inst.catalog, inst.workload, inst.rack, layout)
    vecs = rack_vectors(options, inst.rack, rack_switch_of(inst.catalog, inst.rack))  # with the switches' share
    best, arg = 0.0, None
    for v in vecs:
        flex = [i for i, (o, n) in enumerate(zip(options, v)) if n and o.flexible_orchestration and o.profile.gpus]
        for fr in itertools.product(ORCH_GRID, repeat=len(flex)):
            f = [1.0] * len(options)
            for i, x in zip(flex, fr):
                f[i] = x
            x = throughput(options, v, f, inst.workload, servings)
            if x > best:
                best, arg = x, v
    counts = {o.key: n for o, n in zip(options, arg or ()) if n}
    return MemoryOracle(best * HOUR_S, counts, len(vecs))


def memory_instance(seed: int, max_vectors: int = 400) -> tuple[Instance, str] | None:
    """A random small instance with two GPU SKUs (or serving setups) and sandboxes big enough that memory binds
    well below the memory-free optimum. Returns None when the seed gives no such instance."""
    rng = random.Random(10_000 + seed)
    try:
        inst = random_instance(seed, max_options=6, max_vectors=max_vectors)
    except RuntimeError:
        return None
    wl = inst.workload
    if not any(isinstance(st, GpuStage) for c in wl.classes for st in c.stages):
        return None
    layout = "hybrid" if len(wl.classes) == 1 else "b"
    options = candidate_options(inst.catalog, wl, inst.rack, layout)
    if len({o.serving_key for o in options if o.profile.gpus}) < 2:
        return None
    # Scale sandboxes so that memory binds at a random fraction of the memory-free optimum.
    classes = [c.model_copy(update={"sandbox_memory_gb": 1.0}) for c in wl.classes]
    wl1 = _revalidate(wl, classes=[c.model_dump() for c in classes])
    servings = _servings(inst.catalog, wl1, inst.rack, layout)
    free = _revalidate(wl, classes=[{**c.model_dump(), "sandbox_memory_gb": 0.0} for c in wl.classes])
    x_free, arg = 0.0, None
    for v in rack_vectors(options, inst.rack, rack_switch_of(inst.catalog, inst.rack)):
        x = throughput(options, v, [1.0] * len(options), free, servings)
        if x > x_free:
            x_free, arg = x, v
    if x_free <= 0:
        return None
    mem1 = throughput(options, arg, [1.0] * len(options), wl1, servings, memory_only=True)
    if not math.isfinite(mem1):
        return None
    # memory bound of the memory-free optimum at a random fraction of its throughput
    gb = min(512.0, max(0.01, mem1 / (rng.uniform(0.3, 0.85) * x_free)))
    wl2 = _revalidate(wl, classes=[{**c.model_dump(), "sandbox_memory_gb": gb * rng.uniform(0.6, 1.4)}
                                   for c in wl.classes])
    cat = Catalog.build(cpus=list(inst.catalog.cpus), gpus=list(inst.catalog.gpus),
                        chassis=list(inst.catalog.chassis), racks=[inst.rack],
                        switches=list(inst.catalog.switches), systems=list(inst.catalog.systems),
                        served_models=[wl2.served_model], workloads=[wl2])
    return Instance(seed, cat, wl2, inst.rack, 1, {**inst.notes, "sandbox_gb": gb}), layout
