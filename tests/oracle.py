"""Exhaustive-enumeration oracle for the rack-filling optimizer, independent of the MILP code.

Scope: instances with ONE shared tool queue and NO sandbox memory or disk (every class has sandbox_memory_gb and
sandbox_disk_gb 0), no io stages, and no tool-wait SLO. Catalogs may hold a rack-scale system (`systems=True`): it is
one candidate option whose count is whole systems. For such an instance the optimum is

    max over integer server counts N (per rack, within that rack's power / air / liquid / space budgets)
        of  best continuous throughput for the totals N.

For fixed totals N_o the continuous part is, in tasks/s (W = reference core-seconds of tool work per task):

    max X  s.t.  X <= S_fixed + sum_o s_o                         (serving)
                 s_o <= G_o N_o,  s_o <= k_o u_o,  0 <= u_o <= C_o N_o   (flexible GPU options)
                 X W <= T_fixed + sum_o (C_o N_o - u_o) perf_o     (tool cores)

with G_o the GPU tasks/s per server, k_o orchestration tasks/s per core, C_o cores per server, and fixed options
(CPU-only nodes, layout A's GPU servers) contributing their serving_tasks_per_s and tool_cores x per_core_perf.
Each unit of serving from option o costs perf_o / k_o units of tool capacity, so it is a fractional knapsack:
buy serving from the cheapest options first until the tool constraint meets the serving one
(`continuous_optimum`, exact). `continuous_optimum_lp` solves the same LP with scipy's HiGHS as a cross-check.

Flexible options also reserve the serving engine's host-core floor F_o N_o (u_o >= F_o N_o): those cores leave
the tools whatever is served and give min(G, k F) serving for free. Replica counts enter through G_o (whole
replicas per server, the option's replica shape), so enumerating integer server counts enumerates integer replicas.

Per rack the budgets are power, air, liquid, space and, where the rack has them, the feeds' surviving derated
capacity and the weight limit; where the rack names a top-of-rack switch, a rack holding server vector n also holds
ceil(sum ports_o n_o / (switch ports - uplinks)) switches, whose power, air heat, U and weight count too (computed
here from the catalog figures, not by the package).

Only ServerProfile figures and `enumerate_options(..., prune=False)` (the candidate list) are taken from the
package; budgets, enumeration and the continuous optimum are computed here.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from advisor.catalog import load_catalog
from advisor.optimizer.options import ServerOption, enumerate_options
from advisor.optimizer.settings import OptimizerSettings
from models.catalog import Catalog
from models.hardware import Rack, RackSystem, Switch
from models.workload import CpuStage, GpuStage, Workload

HOUR_S = 3600.0
MINI = Path(__file__).parent / "data" / "mini"
BUDGET_REL_TOL = 1e-9


# ----------------------------------------------------------------------------------------------- continuous part


def tool_work_per_task(workload: Workload) -> float:
    """Reference core-seconds of tool work per task of the mix (one shared queue)."""
    return sum(c.share * s.count * s.core_seconds for c in workload.classes for s in c.stages
               if isinstance(s, CpuStage))


def has_llm(workload: Workload) -> bool:
    return any(isinstance(s, GpuStage) for c in workload.classes for s in c.stages)


def _split(options: list[ServerOption], counts: tuple[int, ...] | list[int]):
    """(fixed serving tasks/s, fixed tool capacity, flexible [(gpu cap tasks/s, orch tasks/s/core, cores, perf,
    engine floor cores)])."""
    s_fixed = 0.0
    t_fixed = 0.0
    flex = []
    for o, n in zip(options, counts):
        if n == 0:
            continue
        p = o.profile
        if o.flexible_orchestration:
            flex.append((p.gpu_tasks_per_s * n, p.orchestration_tasks_per_core_s, p.cores * n, p.per_core_perf,
                         p.engine_min_cores * n))
        else:
            s_fixed += p.serving_tasks_per_s * n
            t_fixed += p.tool_cores * n * p.per_core_perf
    return s_fixed, t_fixed, flex


def continuous_optimum(options: list[ServerOption], counts, workload: Workload) -> float:
    """Best tasks/s for fixed server totals (exact fractional-knapsack greedy)."""
    w = tool_work_per_task(workload)
    llm = has_llm(workload)
    s_fixed, t_fixed, flex = _split(options, counts)
    if not llm:
        tools_all = t_fixed + sum(c * perf for _, _, c, perf, _ in flex)  # every flexible core on tools
        return tools_all / w if w > 0 else 0.0
    # the engine's floor cores F are reserved whatever is served: they leave the tools, and serve min(G, k F) free
    tools_all = t_fixed + sum((c - (f if g > 0 else 0.0)) * perf for g, _, c, perf, f in flex)
    # serving bought beyond that from option o: up to min(G, k C); each task/s of it costs perf / k tool capacity
    items = []
    for g, k, c, perf, f in flex:
        if g <= 0:
            continue
        if math.isinf(k):
            items.append((0.0, g))
            continue
        free = min(g, k * f)
        items.append((0.0, free))
        items.append((perf / k, min(g, k * c) - free))
    if w == 0:
        return s_fixed + sum(cap for _, cap in items)
    if tools_all / w <= s_fixed:
        return tools_all / w
    x, t_left = s_fixed, tools_all
    for cost, cap in sorted(items):
        # raise X by d: tools left fall by d cost, tool need rises by d w; keep t_left - d cost >= (x + d) w
        d = min(cap, (t_left - x * w) / (cost + w))
        d = max(0.0, d)
        x += d
        t_left -= d * cost
        if d < cap:
            break
    return x


def continuous_optimum_lp(options: list[ServerOption], counts, workload: Workload) -> float:
    """Same LP solved by scipy.optimize.linprog (HiGHS); a check on `continuous_optimum`."""
    import numpy as np
    from scipy.optimize import linprog

    w = tool_work_per_task(workload)
    llm = has_llm(workload)
    s_fixed, t_fixed, flex = _split(options, counts)
    nf = len(flex)
    # variables: X, s_1..s_nf, u_1..u_nf
    nv = 1 + 2 * nf
    cobj = np.zeros(nv)
    cobj[0] = -1.0
    a_ub, b_ub = [], []
    bounds = [(0, None)] + [(0, None)] * nf + [(f if g > 0 and llm else 0.0, c) for g, _, c, _, f in flex]
    if llm:
        row = np.zeros(nv)
        row[0] = 1.0
        row[1:1 + nf] = -1.0
        a_ub.append(row)
        b_ub.append(s_fixed)
        for j, (g, k, _c, perf, _f) in enumerate(flex):
            row = np.zeros(nv)
            row[1 + j] = 1.0
            a_ub.append(row)
            b_ub.append(g)
            if not math.isinf(k):
                row = np.zeros(nv)
                row[1 + j] = 1.0
                row[1 + nf + j] = -k
                a_ub.append(row)
                b_ub.append(0.0)
    if w > 0:
        row = np.zeros(nv)
        row[0] = w
        for j, (g, k, _c, perf, _f) in enumerate(flex):
            row[1 + nf + j] = perf if llm else 0.0
        a_ub.append(row)
        b_ub.append(t_fixed + sum(c * perf for _, _, c, perf, _f in flex))
    res = linprog(cobj, A_ub=np.array(a_ub), b_ub=np.array(b_ub), bounds=bounds, method="highs")
    assert res.status == 0, res.message
    return float(res.x[0])


# ------------------------------------------------------------------------------------------------- enumeration


def _budgets(rack: Rack) -> list[float]:
    import math as _m

    feed = _m.inf
    if rack.feed_kw is not None or rack.feed_voltage_v is not None:
        rating = rack.feed_kw * 1000.0 if rack.feed_kw is not None else (
            (_m.sqrt(3.0) if rack.feed_phases == 3 else 1.0) * rack.feed_voltage_v * rack.feed_current_a)
        alive = {"2N": rack.feeds // 2, "N+1": rack.feeds - 1, "none": rack.feeds}[rack.redundancy]
        feed = rating * rack.continuous_load_factor * alive - rack.reserved_power_w
    weight = _m.inf if rack.max_weight_kg is None else rack.max_weight_kg - rack.reserved_weight_kg
    return [rack.power_kw * 1000.0 - rack.reserved_power_w,
            rack.air_cooling_kw * 1000.0 - rack.reserved_power_w,
            rack.liquid_cooling_kw * 1000.0,
            float(rack.height_u - rack.reserved_u),
            feed, weight]


def _usage(o: ServerOption) -> list[float]:
    p = o.profile
    return [p.power_w, p.air_heat_w, p.liquid_heat_w, float(p.space_u), p.power_w, p.chassis.weight_kg]


def _switch_usage(sw: Switch) -> list[float]:
    return [sw.power_w, sw.power_w, 0.0, float(sw.height_u), sw.power_w, sw.weight_kg]


def switches_for(options: list[ServerOption], counts, rack: Rack, switch: Switch | None) -> int:
    """Top-of-rack switches a rack holding `counts` needs."""
    ports = sum(o.profile.chassis.network_ports * n for o, n in zip(options, counts))
    if switch is None or ports == 0:
        return 0
    down = switch.ports - rack.uplinks_per_switch
    return -(-ports // down)


def rack_vectors(options: list[ServerOption], rack: Rack, switch: Switch | None = None) -> list[tuple[int, ...]]:
    """Every integer count vector (one rack) within the rack's power, air, liquid, space, feed and weight budgets,
    with the switches its NIC ports need."""
    cap = _budgets(rack)
    use = [_usage(o) for o in options]
    nb = len(cap)
    tol = [BUDGET_REL_TOL * max(1.0, abs(c)) if c != float("inf") else 0.0 for c in cap]
    out: list[tuple[int, ...]] = []
    sw_use = _switch_usage(switch) if switch is not None else None

    def rec(i: int, left: list[float], cur: list[int]) -> None:
        if i == len(options):
            k = switches_for(options, cur, rack, switch)
            if k and any(left[j] - k * sw_use[j] < -tol[j] for j in range(nb)):
                return
            out.append(tuple(cur))
            return
        n = 0
        while True:
            rem = [left[j] - n * use[i][j] for j in range(nb)]
            if any(rem[j] < -tol[j] for j in range(nb)):
                break
            cur.append(n)
            rec(i + 1, rem, cur)
            cur.pop()
            if all(u == 0 for u in use[i]):  # cannot happen for real servers (space >= 1 U); guard anyway
                break
            n += 1

    if any(c < -t for c, t in zip(cap, tol)):
        return [tuple(0 for _ in options)]
    rec(0, cap, [])
    return out


def total_vectors(options: list[ServerOption], rack: Rack, racks: int,
                  switch: Switch | None = None) -> set[tuple[int, ...]]:
    """Server totals reachable with `racks` identical racks (Minkowski sum of the per-rack sets)."""
    one = rack_vectors(options, rack, switch)
    acc = {tuple(0 for _ in options)}
    for _ in range(racks):
        acc = {tuple(a + b for a, b in zip(x, y)) for x in acc for y in one}
    return acc


def switches_by_total(options: list[ServerOption], rack: Rack, racks: int,
                      switch: Switch | None) -> dict[tuple[int, ...], int]:
    """Every reachable server total of `racks` racks, with the fewest top-of-rack switches any split of it over the
    racks needs (0 without a switch)."""
    one = [(v, switches_for(options, v, rack, switch)) for v in rack_vectors(options, rack, switch)]
    acc = {tuple(0 for _ in options): 0}
    for _ in range(racks):
        nxt: dict[tuple[int, ...], int] = {}
        for x, kx in acc.items():
            for y, ky in one:
                t = tuple(a + b for a, b in zip(x, y))
                if t not in nxt or kx + ky < nxt[t]:
                    nxt[t] = kx + ky
        acc = nxt
    return acc


def rack_switch_of(catalog: Catalog, rack: Rack) -> Switch | None:
    return None if rack.tor_switch is None else catalog.switches[rack.tor_switch]


@dataclass
class OracleResult:
    tasks_per_hour: float
    counts: dict[str, int]
    vectors: int
    options: list[ServerOption] = field(repr=False)


def candidate_options(catalog: Catalog, workload: Workload, rack: Rack, layout: str,
                      settings: OptimizerSettings | None = None) -> list[ServerOption]:
    s = settings or OptimizerSettings()
    opts, _ = enumerate_options(catalog, workload, rack, layout, s.layout_a_orchestration_cores_per_gpu,
                                s.assumptions.host_os_reserved_memory_gb, s.assumptions.tensor_parallel_domain_gpus,
                                prune=False)
    return opts


def check_scope(workload: Workload) -> None:
    if any(c.sandbox_memory_gb > 0 for c in workload.classes):
        raise ValueError("oracle scope: sandbox_memory_gb must be 0 in every class")
    if any(c.sandbox_disk_gb > 0 or any(s.resource == "io" for s in c.stages) for c in workload.classes):
        raise ValueError("oracle scope: no sandbox disk and no io stages")
    if workload.has_tool_wait_target:
        raise ValueError("oracle scope: no tool-wait SLO (the workload's or a class's)")


def oracle(catalog: Catalog, workload: Workload, rack: Rack, layout: str, racks: int = 1,
           max_vectors: int | None = None, owned: dict[str, int] | None = None) -> OracleResult:
    """Best tasks/h by exhaustive enumeration of server totals (layouts 'b' and 'hybrid'; one shared queue).
    `owned` (brownfield, one rack): servers per option key that every enumerated vector keeps."""
    check_scope(workload)
    if layout == "a":
        raise ValueError("layout A's GPU-first stage is not modelled by the oracle")
    options = candidate_options(catalog, workload, rack, layout)
    vecs = total_vectors(options, rack, racks, rack_switch_of(catalog, rack))
    if owned:
        if racks != 1:
            raise ValueError("oracle scope: owned servers in one rack only")
        idx = {o.key: j for j, o in enumerate(options)}
        vecs = [v for v in vecs if all(v[idx[k]] >= n for k, n in owned.items())]
    if max_vectors is not None and len(vecs) > max_vectors:
        raise ValueError(f"{len(vecs)} vectors exceed the cap {max_vectors}")
    best, arg = -1.0, None
    for v in vecs:
        x = continuous_optimum(options, v, workload)
        if x > best:
            best, arg = x, v
    counts = {o.key: n for o, n in zip(options, arg or ()) if n}
    return OracleResult(best * HOUR_S, counts, len(vecs), options)


# ---------------------------------------------------------------------------------------------- random instances


@dataclass
class Instance:
    seed: int
    catalog: Catalog
    workload: Workload
    rack: Rack
    racks: int = 1
    notes: dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"Instance(seed={self.seed}, rack={self.rack.power_kw:.2f}kW/{self.rack.height_u}U, racks={self.racks})"


def _revalidate(obj, **upd):
    return type(obj).model_validate({**obj.model_dump(), **upd})


def mini_catalog() -> Catalog:
    return load_catalog(MINI)


def _random_workload(rng: random.Random, base: Workload, llm: bool) -> Workload:
    sm = base.served_model
    cal = [c.model_dump() for c in sm.calibrations]
    for c in cal:
        c["prefill_tokens_per_s"] *= rng.uniform(0.4, 2.5)
        c["decode_tokens_per_s"] *= rng.uniform(0.4, 2.5)
    no_orch = rng.random() < 0.08
    sm2 = _revalidate(
        sm, calibrations=cal,
        orchestration_core_seconds_per_call=0.0 if no_orch else rng.uniform(0.005, 0.3),
        orchestration_core_seconds_per_1k_output_tokens=0.0 if no_orch else rng.uniform(0.0, 2.0),
        max_batch_per_replica=rng.choice([16, 64, 256]),
        min_batch_per_replica=rng.choice([1, 4, 16]),
        max_pipeline_parallel=rng.choice([1, 1, 2]),
        engine_host_cores_per_replica=rng.choice([0.0, 2.0, 6.0]),
        engine_host_cores_per_gpu=rng.choice([0.0, 1.0, 2.5]),
        decode_mfu=rng.uniform(0.05, 0.3), prefill_mfu=rng.uniform(0.3, 0.7),
    )
    k = rng.choice([1, 1, 2, 3])
    raw = [rng.uniform(0.2, 1.0) for _ in range(k)]
    shares = [r / sum(raw) for r in raw]
    shares[-1] = 1.0 - sum(shares[:-1])
    classes = []
    for i in range(k):
        stages: list[dict] = []
        if llm:
            stages.append({"name": "think", "resource": "gpu", "count": rng.uniform(1, 30),
                           "new_input_tokens": rng.uniform(200, 6000), "cached_input_tokens": rng.uniform(0, 20000),
                           "output_tokens": rng.uniform(50, 1500)})
        if not llm or rng.random() < 0.9:
            stages.append({"name": "tools", "resource": "cpu", "count": rng.uniform(1, 30),
                           "core_seconds": rng.uniform(0.5, 120), "parallelism": rng.choice([1, 1, 2, 4])})
        if rng.random() < 0.5:
            stages.append({"name": "wait", "resource": "delay", "count": rng.uniform(1, 10),
                           "seconds": rng.uniform(0.1, 5)})
        classes.append({"name": f"c{i}", "share": shares[i], "sandbox_memory_gb": 0.0, "stages": stages})
    return Workload.model_validate({"id": f"rand-{rng.random():.6f}", "name": "random", "source": "test",
                                    "served_model": sm2.model_dump(), "classes": classes, "slo": None})


def _random_system(rng: random.Random, chassis: list) -> tuple[Any, RackSystem]:
    """A rack-scale system of 2-4 one-U trays of a random GPU chassis, with a switch tray and a power shelf."""
    src = rng.choice([c for c in chassis if c.role == "gpu"])
    k = rng.choice([2, 3, 4])
    gpus = min(src.gpu_counts)
    tray = _revalidate(src, id="sys-tray", height_u=1, gpu_counts=[gpus], part_of_system="rand-sys",
                       base_power_w=src.base_power_w / 4)
    system = RackSystem(id="rand-sys", name="random system", source="test", compute_tray="sys-tray",
                        compute_trays=k, switch_trays=1, switch_tray_u=1, power_shelves=1, power_shelf_u=1,
                        height_u=k + 2, shared_power_w=rng.uniform(0.0, 800.0), weight_kg=40.0 * k,
                        scale_up_domain_gpus=k * gpus)
    return tray, system


def random_instance(seed: int, max_options: int = 5, max_vectors: int = 20000, racks: int = 1,
                    max_power_kw: float = 30.0, systems: bool = False) -> Instance:
    """A random perturbation of the mini catalog, workload and rack, small enough to enumerate. With `systems`, the
    catalog also holds a rack-scale system (whole units of a few trays; drawn from a separate random stream so that
    the other instances stay as they were), and only instances where it is a candidate are returned."""
    rng = random.Random(seed)
    base = mini_catalog()
    for _attempt in range(200):
        cpus = []
        for c in base.cpus:
            cores = rng.randint(8, 64)
            cpus.append(_revalidate(c, cores=cores, threads=2 * cores, tdp_w=rng.uniform(120, 450),
                                    per_core_perf=rng.uniform(0.5, 1.6),
                                    list_price_usd=rng.uniform(1000, 12000)))
        cpus = rng.sample(cpus, rng.choice([1, 2]))
        gpus = []
        for g in base.gpus:
            gpus.append(_revalidate(g, tdp_w=rng.uniform(300, 1000), fp8_tflops=g.fp8_tflops * rng.uniform(0.5, 2),
                                    memory_gb=rng.choice([80.0, 96.0, 141.0, 180.0]),
                                    memory_bandwidth_tbps=rng.uniform(2, 8), price_usd=rng.uniform(10000, 40000)))
        gpus = rng.sample(gpus, rng.choice([1, 2]))
        liquid_rack = rng.random() < 0.3
        chassis = []
        for ch in base.chassis:
            upd: dict[str, Any] = dict(base_power_w=ch.base_power_w * rng.uniform(0.5, 1.5),
                                       default_cpu=rng.choice(cpus).id, price_usd=rng.uniform(5000, 60000))
            if ch.role == "gpu":
                upd["max_gpu_tdp_w"] = rng.choice([700.0, 1000.0, 1200.0])
                # odd counts leave GPUs that host no replica (replicas are whole tp x pp groups in one server)
                upd["gpu_counts"] = sorted(rng.sample([1, 2, 3, 4, 6, 8], rng.choice([1, 1, 2])))
                upd["height_u"] = rng.choice([2, 4, 8])
                if liquid_rack and rng.random() < 0.6:
                    upd["cooling"] = "liquid"
                    upd["liquid_capture_fraction"] = rng.uniform(0.5, 0.9)
            else:
                upd["height_u"] = rng.choice([1, 2])
                upd["default_cpu"] = None
            chassis.append(_revalidate(ch, **upd))
        chassis = [c for c in chassis if c.role == "cpu" or rng.random() < 0.75] or chassis
        if not any(c.role == "gpu" for c in chassis):
            continue
        power_kw = rng.uniform(3.0, max_power_kw)
        if liquid_rack:
            air, liquid = power_kw * rng.uniform(0.2, 0.6), power_kw * rng.uniform(0.5, 1.0)
        else:
            air, liquid = power_kw * rng.uniform(0.7, 1.3), 0.0
        height = rng.randint(8, 42)
        rack = Rack.model_validate({"id": "rand-rack", "name": "random rack", "source": "test",
                                    "power_kw": power_kw, "air_cooling_kw": air, "liquid_cooling_kw": liquid,
                                    "height_u": height, "reserved_u": rng.randint(0, 2),
                                    "reserved_power_w": rng.choice([0.0, rng.uniform(0, 500)])})
        llm = rng.random() > 0.05
        workload = _random_workload(rng, base.workloads["agent"], llm)
        sys_list = []
        if systems:
            tray, system = _random_system(random.Random(seed * 1_000_003 + _attempt), chassis)
            chassis, sys_list = [*chassis, tray], [system]
        cat = Catalog.build(cpus=cpus, gpus=gpus, chassis=chassis, racks=[rack],
                            served_models=[workload.served_model], workloads=[workload], systems=sys_list)
        opts = candidate_options(cat, workload, rack, "hybrid")
        if not opts or len(opts) > max_options:
            continue
        if systems and not any(o.profile.chassis.rack_scale_system for o in opts):
            continue
        if not any(o.profile.gpus for o in opts):
            continue
        nvec = len(total_vectors(opts, rack, racks)) if racks > 1 else len(rack_vectors(opts, rack))
        if nvec > max_vectors:
            continue
        inst = Instance(seed, cat, workload, rack, racks, {"options": len(opts), "vectors": nvec, "llm": llm,
                                                           "switch": False, "feeds": False, "weight": False})
        return _with_rack_physics(inst, random.Random(seed * 1_000_003 + _attempt))
    raise RuntimeError(f"seed {seed}: no instance within the size limits")


def _with_rack_physics(inst: Instance, phys: random.Random) -> Instance:
    """The instance with electrical feeds, a weight limit and a top-of-rack switch drawn at random (each with
    probability 0.4), from a generator of their own: the rest of the instance is the one drawn before these
    existed. Dropped again if they leave no GPU candidate (they only remove rack vectors, never add)."""
    rack_data = inst.rack.model_dump()
    chassis = list(inst.catalog.chassis)
    switches = []
    if phys.random() < 0.4:
        red = phys.choice(["2N", "N+1", "none"])
        feeds = {"2N": phys.choice([2, 4]), "N+1": phys.choice([2, 3]), "none": phys.choice([1, 2])}[red]
        alive = {"2N": feeds // 2, "N+1": feeds - 1, "none": feeds}[red]
        rack_data.update(redundancy=red, feeds=feeds, continuous_load_factor=phys.choice([0.8, 1.0]),
                         feed_kw=inst.rack.power_kw * phys.uniform(0.5, 1.6) / alive / 0.8)
    if phys.random() < 0.4:
        rack_data.update(max_weight_kg=phys.uniform(60, 600), reserved_weight_kg=phys.choice([0.0, 20.0]))
    if phys.random() < 0.4:
        for j, ch in enumerate(chassis):
            if phys.random() < 0.5:
                chassis[j] = _revalidate(ch, weight_kg=phys.uniform(10, 150),
                                         nics=[{"model": "n", "count": phys.randint(1, 8), "speed_gbps": 400,
                                                "power_w": 0.0}])
        most = max(c.network_ports for c in chassis)
        sw = Switch.model_validate({"id": "rand-sw", "name": "random switch", "source": "test",
                                    "height_u": 1, "ports": phys.randint(max(8, most), 48),
                                    "port_speed_gbps": 400, "power_w": phys.uniform(100, 1500),
                                    "weight_kg": phys.uniform(5, 30)})
        up = phys.randint(0, min(4, sw.ports - most))
        if sw.height_u <= inst.rack.height_u - inst.rack.reserved_u:
            switches = [sw]
            rack_data.update(tor_switch=sw.id, uplinks_per_switch=up)
    if rack_data == inst.rack.model_dump() and not switches:
        return inst
    rack = Rack.model_validate(rack_data)
    cat = Catalog.build(cpus=inst.catalog.cpus, gpus=inst.catalog.gpus, chassis=chassis, racks=[rack],
                        served_models=inst.catalog.served_models, workloads=inst.catalog.workloads, switches=switches)
    opts = candidate_options(cat, inst.workload, rack, "hybrid")
    if not any(o.profile.gpus for o in opts):
        return inst
    sw = switches[0] if switches else None
    nvec = len(total_vectors(opts, rack, inst.racks, sw)) if inst.racks > 1 else len(rack_vectors(opts, rack, sw))
    notes = {**inst.notes, "options": len(opts), "vectors": nvec, "switch": bool(switches),
             "feeds": rack.feed_kw is not None, "weight": rack.max_weight_kg is not None}
    return Instance(inst.seed, cat, inst.workload, rack, inst.racks, notes)


def scaled_rack(rack: Rack, power: float = 1.0, air: float = 1.0, liquid: float = 1.0, space: int = 0) -> Rack:
    return _revalidate(rack, power_kw=rack.power_kw * power, air_cooling_kw=rack.air_cooling_kw * air,
                       liquid_cooling_kw=rack.liquid_cooling_kw * liquid, height_u=rack.height_u + space)


def abs_rel(a: float, b: float) -> float:
    """Relative difference (absolute below 1)."""
    return abs(a - b) / max(1.0, abs(a), abs(b))


def assert_buildable(ev, cfg, workload: Workload, catalog: Catalog) -> None:
    """An evaluated answer places GPUs in whole replicas (gpus_used a multiple of the replica size, every placed pool
    hosting one) and gives every GPU server's serving engines at least their host-core floor."""
    from models.performance import replica_domain, serving_key

    sm = workload.served_model
    pools = {p.key: p for p in ev.serving}
    for p in pools.values():
        k = p.tp_degree * p.pp_degree
        assert p.gpus_used == p.replicas * k and p.gpus_used % k == 0, p
        if has_llm(workload):
            assert p.replicas >= 1, f"{p.key} is placed but hosts no replica"
    for g in cfg.servers:
        if g.gpu is None or not has_llm(workload):
            continue
        ch = catalog.chassis[g.chassis]
        p = pools[serving_key(g.gpu, replica_domain(g.gpus_per_server, ch.scale_up_domain_gpus))]
        k = p.tp_degree * p.pp_degree
        floor = (g.gpus_per_server // k) * (sm.engine_host_cores_per_replica + sm.engine_host_cores_per_gpu * k)
        assert g.orchestration_cores_per_gpu * g.gpus_per_server >= floor - 1e-6, (g, floor)
