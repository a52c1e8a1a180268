"""The rack-filling MILP as plain functions that add named constraint groups.

Variables (X in tasks per hour):
  n[r,o]   integer  servers of option o in rack r
  X        cont.    end-to-end tasks per hour of the whole mix
  y[o,q]   cont.    cores of option o (all racks) given to tool queue q
  xg[g], xs[q,s] cont. throughput routed through GPU SKU g / through CPU SKU s in queue q (only when a
                 sandbox-memory limit makes the SKU matter; the routing is kept within utilization bands)
  k[r]     integer  top-of-rack switches in rack r (only when the rack names a tor_switch)
Groups: power, power_feed, cooling_air, cooling_liquid, space, weight, network_ports (per rack), gpu_serving,
gpu_compute, orchestration, engine_cores (the serving engine's host-core floor), tool_cores:<q>, slo:<q> (tail-wait
capacity curve), sandbox_memory:<q>, sandbox_disk:<q>, io_bandwidth:<q>, core_split, sku_routing, capital,
required_throughput, gpu_first, fixed_servers (brownfield: servers the user owns) (registered in advisor/optimizer/groups.py). docs/model.md states each in math. A
rack-scale system is one option (one chassis made by RackSystem.as_chassis), so n[r,o] counts whole systems.
GPU serving capacity per server counts whole model replicas (models.performance.GpuServing.replicas): each option
carries its replica shape, so the integer server counts n make the replica counts integer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from advisor.optimizer.groups import group_of
from advisor.optimizer.options import ServerOption
from advisor.optimizer.settings import OptimizerSettings
from advisor.optimizer.slo_curve import QueueCalls, Segment, curve, max_servers_bound, queue_calls
from advisor.solver.linear import LinearModel, safe_name
from models.hardware import Rack, Switch
from models.rack_physics import downlinks
from models.performance import GpuServing, cpu_call_seconds, stage_gpu_latency_s
from models.workload import CpuStage, DelayStage, GpuStage, IoStage, Workload
from models.errors import InputError

HOUR_S = 3600.0


@dataclass(frozen=True)
class FixedServers:
    """Servers a user owns (brownfield, `--existing`): counts per (rack, option key), as a lower bound on n[r,o]."""

    counts: dict[tuple[int, str], int]
    """Owned servers per (rack index, option key `chassis|cpu|gpu|gpus`)."""
    allow_removal: bool = False
    """The optimizer may remove owned servers, each giving back `salvage_fraction` of its price to the capital
    budget (rem[r,o] variables); otherwise every owned server stays."""
    salvage_fraction: float = 0.0
    """Share of an owned server's catalog price a removal returns (models.tco.CostAssumptions.salvage_fraction)."""
    exact: bool = False
    """Exactly these servers and no others (a migration step's hardware: only the software split is optimized)."""


@dataclass
class Problem:
    """Everything a formulation needs, already resolved."""

    workload: Workload
    rack: Rack
    racks: int
    options: list[ServerOption]
    servings: dict[str, GpuServing]
    partition: list[list[str]]
    """Tool queues as lists of class names (every class with tool stages or sandboxes is in exactly one)."""
    capital_budget_usd: float | None = None
    required_tasks_per_hour: float | None = None
    queue_names: list[str] = field(default_factory=list)
    settings: OptimizerSettings = field(default_factory=OptimizerSettings)
    """Tail-wait curve settings (`slo_curve_*`) and the model assumptions (tail quantile)."""
    slo_curves: bool = False
    """Add the tail-wait capacity curves (slo:<q>); off for the first solve, which is a relaxation of the model
    with them (the optimizer adds them only when the evaluator finds a tail-wait bound below the answer)."""
    operating_tasks_per_hour: float | None = None
    """Tasks/h the configuration is to serve (a TCO objective's demand); None: the default operating point."""
    switch: Switch | None = None
    """The rack's top-of-rack switch (`models.rack_physics.rack_switch`); None: the rack names none."""
    fixed: FixedServers | None = None
    """Servers the user owns (brownfield); None: a greenfield rack."""
    slo_relaxed: bool = False
    """Tail-wait curves at the fastest candidate core speed for every core (a relaxation, for a proven bound where
    the curves at the slowest speed of a mix are conservative)."""
    x_cap: float | None = None
    """X's upper bound in the model: a proven bound on X from a relaxation of this problem (the partition's solve
    without memory and tail-wait curves), so it cuts off no answer. It tightens the tail-wait curves' weak LP
    relaxation (the multiple-choice segments relax to far above the curves): on the built-in batch grid a hybrid
    curve solve that CBC left open after 24 s closed in under 1 s with it. `_solve_coupled` removes it from the
    model and problem it returns, since the what-if re-solves raise budgets beyond it."""
    x_floor: float | None = None
    """X's lower bound in the model: the answer in hand from another solve, less the tolerances within which the
    model's X may fall short of what the evaluator gives the same servers (the tie-break window, and the tail-wait
    secants' `slo_curve_tolerance`), so that the solve looks only for answers that could beat it. An infeasible solve
    proves the model's optimum below the floor (`optimize._x_bound`). It cuts the tail-wait curves' segments that
    cannot reach it: with the cap, the chord the segments relax to spans only the servers the answers may have; on
    the built-in batch grid's hybrid at tool share 0.9 a two-queue curve solve CBC proved in 26 s took 2.4 s.
    `_solve_coupled` removes it from the model and problem it returns, as the cap."""
    bands: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Utilization bands of the memory-coupled routing (`sku_routing`): "gpu" for the GPU pool, "q<i>" for tool
    queue i; missing keys are (0, 1). The spatial branch and bound of advisor/optimizer/optimize.py
    (`_solve_coupled`) narrows them."""

    def __post_init__(self) -> None:
        if not self.queue_names:
            self.queue_names = ["shared"] if len(self.partition) == 1 else [
                "+".join(p) if len(p) > 1 else p[0] for p in self.partition]


@dataclass
class Built:
    model: LinearModel
    n: dict[tuple[int, int], str]
    y: dict[tuple[int, int], str]
    x: str
    has_sku_choice: bool
    x_upper: float
    u: dict[int, str] = field(default_factory=dict)
    """Orchestration cores (all servers of an option) where the optimizer chooses them."""
    k: dict[int, str] = field(default_factory=dict)
    """Top-of-rack switches per rack (integer), where the rack names a switch and a server has NIC ports."""
    rem: dict[tuple[int, int], str] = field(default_factory=dict)
    """Owned servers removed per (rack, option) (integer), where the problem allows removal."""


def _queue_coeffs(p: Problem, held: str = "sandbox_memory_gb"):
    """Per queue: reference core-seconds per task, and sandbox GB-seconds per task split by GPU SKU, CPU SKU, delay
    (delays and I/O stages, whose unloaded time is the same on every server); `held` names the class field
    (sandbox memory or sandbox disk) whose GB a live task holds."""
    w = p.workload
    stream = p.settings.assumptions.io_stream_mbps
    cls = {c.name: c for c in w.classes}
    cpu_skus = {o.profile.cpu.id: o.profile.cpu for o in p.options}
    work, mem_g, mem_s, mem_d = [], [], [], []
    for q in p.partition:
        wk = 0.0
        mg = {g: 0.0 for g in p.servings}
        ms = {s: 0.0 for s in cpu_skus}
        md = 0.0
        for name in q:
            c = cls[name]
            for st in c.stages:
                if isinstance(st, CpuStage):
                    wk += c.share * st.count * st.core_seconds
            if getattr(c, held) == 0:
                continue
            for st in c.stages:
                f = c.share * getattr(c, held) * st.count
                if isinstance(st, GpuStage):
                    for g, sv in p.servings.items():
                        mg[g] += f * stage_gpu_latency_s(st, w.served_model, sv)
                elif isinstance(st, CpuStage):
                    for s, sku in cpu_skus.items():
                        ms[s] += f * cpu_call_seconds(st, sku.per_core_perf)
                elif isinstance(st, DelayStage):
                    md += f * st.seconds
                elif isinstance(st, IoStage):
                    md += f * st.io_mb / stream
        work.append(wk)
        mem_g.append(mg)
        mem_s.append(ms)
        mem_d.append(md)
    return work, mem_g, mem_s, mem_d


def queue_io_mb(p: Problem) -> list[float]:
    """Per queue: MB of sandbox I/O per task of the mix."""
    cls = {c.name: c for c in p.workload.classes}
    return [sum(cls[n].share * st.count * st.io_mb for n in q for st in cls[n].stages if isinstance(st, IoStage))
            for q in p.partition]


def per_rack_count_bound(o: ServerOption, rack: Rack) -> int:
    p = o.profile
    bounds = [rack.usable_power_w // p.power_w, rack.usable_u // p.space_u]
    if p.air_heat_w > 0:
        bounds.append((rack.air_cooling_kw * 1000 - rack.reserved_power_w) // p.air_heat_w)
    if p.liquid_heat_w > 0:
        bounds.append((rack.liquid_cooling_kw * 1000) // p.liquid_heat_w)
    if rack.usable_feed_w is not None:
        bounds.append(rack.usable_feed_w // p.power_w)
    if rack.usable_weight_kg is not None:
        bounds.append(rack.usable_weight_kg // p.chassis.weight_kg)
    return int(max(0, min(bounds)))


def switch_count_bound(p: Problem) -> int:
    """Most top-of-rack switches one rack can hold (space alone; a valid bound)."""
    return 0 if p.switch is None else p.rack.usable_u // p.switch.height_u


def add_server_vars(m: LinearModel, p: Problem) -> dict[tuple[int, int], str]:
    n = {}
    for r in range(p.racks):
        for i, o in enumerate(p.options):
            ub = per_rack_count_bound(o, p.rack)
            if ub > 0:
                n[r, i] = m.var(f"n_r{r}_o{i}", 0, ub, integer=True)
    return n


def add_switch_vars(m: LinearModel, p: Problem, n) -> dict[int, str]:
    """k[r]: top-of-rack switches in rack r, where the rack names a switch and some server has NIC ports."""
    if p.switch is None or not any(p.options[i].profile.chassis.network_ports for (_, i) in n):
        return {}
    return {r: m.var(f"k_r{r}", 0, switch_count_bound(p), integer=True) for r in range(p.racks)}


def add_rack_budgets(m: LinearModel, p: Problem, n, k: dict[int, str] | None = None) -> None:
    """power, power_feed, cooling_air, cooling_liquid, space, weight, network_ports: one constraint per rack each
    (power_feed, weight and network_ports where the rack has a feed model, a weight limit, a switch)."""
    rk = p.rack
    k = k or {}
    sw = p.switch
    for r in range(p.racks):
        idx = [i for (rr, i) in n if rr == r]
        ks = {k[r]: 1.0} if r in k else {}
        power = {n[r, i]: p.options[i].profile.power_w for i in idx} | {v: sw.power_w for v in ks}
        m.add(f"power_r{r}", "power", power, "<=", rk.usable_power_w)
        if rk.usable_feed_w is not None:
            m.add(f"power_feed_r{r}", "power_feed", dict(power), "<=", rk.usable_feed_w)
        m.add(f"cooling_air_r{r}", "cooling_air", {n[r, i]: p.options[i].profile.air_heat_w for i in idx}
              | {v: sw.power_w for v in ks}, "<=", rk.air_cooling_kw * 1000 - rk.reserved_power_w)
        liquid = {n[r, i]: p.options[i].profile.liquid_heat_w for i in idx if p.options[i].profile.liquid_heat_w > 0}
        if liquid:
            m.add(f"cooling_liquid_r{r}", "cooling_liquid", liquid, "<=", rk.liquid_cooling_kw * 1000)
        m.add(f"space_r{r}", "space", {n[r, i]: p.options[i].profile.space_u for i in idx}
              | {v: float(sw.height_u) for v in ks}, "<=", rk.usable_u)
        if rk.usable_weight_kg is not None:
            m.add(f"weight_r{r}", "weight", {n[r, i]: p.options[i].profile.chassis.weight_kg for i in idx}
                  | {v: sw.weight_kg for v in ks}, "<=", rk.usable_weight_kg)
        if ks:
            ports = {n[r, i]: float(p.options[i].profile.chassis.network_ports) for i in idx
                     if p.options[i].profile.chassis.network_ports}
            m.add(f"network_ports_r{r}", "network_ports", ports | {k[r]: -float(downlinks(rk, sw))}, "<=", 0.0)


def define_fixed_servers(m: LinearModel, p: Problem, n) -> dict[tuple[int, int], str]:
    """fixed_servers: the servers the user owns stay (n[r,o] >= E[r,o]); where removal is allowed, rem[r,o] owned
    servers may go (n[r,o] + rem[r,o] >= E[r,o]); a migration step's hardware is exact (n[r,o] = E[r,o] for every
    option, zero where none is owned). Under a capital budget an owned server without a catalog price cannot be
    bought again (n[r,o] <= E[r,o]). Returns the rem variables."""
    f = p.fixed
    if f is None:
        return {}
    rem: dict[tuple[int, int], str] = {}
    for (r, i), v in sorted(n.items()):
        o = p.options[i]
        own = f.counts.get((r, o.key), 0)
        if f.exact:
            m.add(f"fixed_r{r}_o{i}", "fixed_servers", {v: 1.0}, "==", float(own))
            continue
        if own <= 0:
            continue
        terms = {v: 1.0}
        if f.allow_removal:
            rem[r, i] = m.var(f"rem_r{r}_o{i}", 0, own, integer=True)
            terms[rem[r, i]] = 1.0
        m.add(f"fixed_r{r}_o{i}", "fixed_servers", terms, ">=", float(own))
        if p.capital_budget_usd is not None and o.profile.price_usd is None:
            m.add(f"fixed_unpriced_r{r}_o{i}", "fixed_servers", {v: 1.0}, "<=", float(own))
    return rem


def add_capital(m: LinearModel, p: Problem, n, rem: dict[tuple[int, int], str] | None = None) -> None:
    """capital: the price of the servers, or in a brownfield rack of the servers bought (owned ones are paid for;
    a removed one returns its salvage value): sum price (n - E) + (1 - salvage) price rem <= budget."""
    if p.capital_budget_usd is None:
        return
    owned = p.fixed.counts if p.fixed is not None else {}
    missing = sorted({p.options[i].key for (r, i) in n if p.options[i].profile.price_usd is None
                      and (r, p.options[i].key) not in owned})
    if missing:
        raise InputError(f"a capital budget needs prices; no price for {', '.join(missing[:3])}")
    terms = {v: p.options[i].profile.price_usd or 0.0 for (_, i), v in n.items()}
    paid = 0.0
    for (r, i), v in n.items():
        price = p.options[i].profile.price_usd or 0.0
        paid += price * owned.get((r, p.options[i].key), 0)
        if (r, i) in (rem or {}):
            terms[rem[r, i]] = (1.0 - p.fixed.salvage_fraction) * price
    m.add("capital", "capital", terms, "<=", p.capital_budget_usd + paid)


def _knapsack_bound(p: Problem, benefit) -> float:
    """Largest total benefit one rack can hold, relaxed to a fractional knapsack on power and on space alone
    (each is a valid bound; their minimum is too)."""
    opts = [o for o in p.options if benefit(o) > 0]
    if not opts:
        return 0.0
    by_power = p.rack.usable_power_w * max(benefit(o) / o.profile.power_w for o in opts)
    by_space = p.rack.usable_u * max(benefit(o) / o.profile.space_u for o in opts)
    return min(by_power, by_space)


def throughput_upper_bound(p: Problem) -> float:
    """A valid upper bound on X (tasks/h) for big-M constants: the rack's GPU (or tool) capacity if servers could be
    bought in fractions, times the racks."""
    has_llm = any(isinstance(s, GpuStage) for c in p.workload.classes for s in c.stages)
    work, *_ = _queue_coeffs(p)
    # every queue's tool work comes out of the cores there are: X x sum_q W_q <= all cores x speed (racks x knapsack)
    tool = _knapsack_bound(p, lambda o: o.profile.tool_cores * o.profile.per_core_perf)
    by_tools = tool * p.racks / sum(work) * HOUR_S * 1.01 if sum(work) > 0 else math.inf
    if has_llm:
        per_rack = _knapsack_bound(p, lambda o: o.profile.gpu_tasks_per_s if o.flexible_orchestration
                                   else o.profile.serving_tasks_per_s)
        return max(1.0, min(per_rack * p.racks * HOUR_S * 1.01, by_tools))
    return max(1.0, by_tools)


def build(p: Problem, memory: bool = True) -> Built:
    """The MILP; `memory=False` leaves out sandbox memory (and the SKU choices it needs) for a first, easier solve."""
    m = LinearModel("rack_advisor", check_group=group_of)
    n = add_server_vars(m, p)
    k = add_switch_vars(m, p, n)
    x = m.var("X", p.x_floor or 0.0, p.x_cap)
    x_ub = throughput_upper_bound(p)
    add_rack_budgets(m, p, n, k)
    rem = define_fixed_servers(m, p, n)
    add_capital(m, p, n, rem)
    count = {}  # option -> {n var: 1} across racks
    for (_r, i), v in n.items():
        count.setdefault(i, {})[v] = 1.0

    has_llm = any(isinstance(s, GpuStage) for c in p.workload.classes for s in c.stages)
    u: dict[int, str] = {}
    if has_llm:
        terms = {x: 1.0}
        for (_, i), v in n.items():
            o = p.options[i]
            if not o.flexible_orchestration and o.profile.serving_tasks_per_s > 0:
                terms[v] = -o.profile.serving_tasks_per_s * HOUR_S
        for i, o in enumerate(p.options):
            if not (o.flexible_orchestration and i in count and o.profile.gpu_tasks_per_s > 0):
                continue
            serve = m.var(f"s_o{i}", 0, None)
            terms[serve] = -1.0
            m.add(f"gpu_compute_o{i}", "gpu_compute",
                  {serve: 1.0, **{v: -o.profile.gpu_tasks_per_s * HOUR_S for v in count[i]}}, "<=", 0.0)
            if math.isfinite(o.profile.orchestration_tasks_per_core_s) or o.profile.engine_min_cores > 0:
                u[i] = m.var(f"u_o{i}", 0, None)
            if math.isfinite(o.profile.orchestration_tasks_per_core_s):
                m.add(f"orchestration_o{i}", "orchestration",
                      {serve: 1.0, u[i]: -o.profile.orchestration_tasks_per_core_s * HOUR_S}, "<=", 0.0)
            if o.profile.engine_min_cores > 0:
                # the serving engines' host-core floor per server (replicas x (2 + GPUs per replica) for vLLM)
                m.add(f"engine_cores_o{i}", "engine_cores",
                      {u[i]: -1.0, **{v: o.profile.engine_min_cores for v in count[i]}}, "<=", 0.0)
        m.add("gpu_serving", "gpu_serving", terms, "<=", 0.0)

    work, mem_g, mem_s, mem_d = _queue_coeffs(p)
    _, disk_g, disk_s, disk_d = _queue_coeffs(p, "sandbox_disk_gb")
    io_mb = queue_io_mb(p)

    def holds(qi: int) -> bool:  # the queue's live tasks hold memory or disk
        return bool(mem_d[qi] > 0 or any(mem_g[qi].values()) or any(mem_s[qi].values())
                    or disk_d[qi] > 0 or any(disk_g[qi].values()) or any(disk_s[qi].values()))
    needs_choice = memory and any(holds(qi) for qi in range(len(p.partition)))
    y: dict[tuple[int, int], str] = {}
    for qi, _q in enumerate(p.partition):
        for i, o in enumerate(p.options):
            if o.profile.tool_cores > 0 and i in count:
                y[i, qi] = m.var(f"y_o{i}_q{qi}", 0, None)
    for i, o in enumerate(p.options):
        terms = {y[i, qi]: 1.0 for qi in range(len(p.partition)) if (i, qi) in y}
        if i in u:
            terms[u[i]] = 1.0
        if terms:
            for v in count[i]:
                terms[v] = -o.profile.tool_cores
            m.add(f"core_split_o{i}", "core_split", terms, "<=", 0.0)
    for qi, qname in enumerate(p.queue_names):
        if work[qi] > 0:
            terms = {y[i, q2]: -p.options[i].profile.per_core_perf for (i, q2) in y if q2 == qi}
            terms[x] = work[qi] / HOUR_S
            m.add(safe_name(f"tool_cores_{qname}"), f"tool_cores:{qname}", terms, "<=", 0.0)
        if io_mb[qi] > 0:
            terms = {y[i, q2]: -p.options[i].profile.io_mbps_per_core for (i, q2) in y if q2 == qi}
            terms[x] = io_mb[qi] / HOUR_S
            m.add(safe_name(f"io_bandwidth_{qname}"), f"io_bandwidth:{qname}", terms, "<=", 0.0)
    if len(p.partition) > 1:
        _add_queue_floors(m, p, y, x, x_ub, work, io_mb)
    if p.slo_curves:
        add_slo_curves(m, p, y, x, count)

    if needs_choice:
        add_sku_routing(m, p, n, y, u, x, count, has_llm, work,
                        [("memory", "memory_per_core_gb", mem_g, mem_s, mem_d),
                         ("disk", "disk_per_core_gb", disk_g, disk_s, disk_d)])

    if p.required_tasks_per_hour is not None:
        m.add("required_throughput", "required_throughput", {x: 1.0}, ">=", p.required_tasks_per_hour)
    m.objective = {x: 1.0}
    m.maximize = True
    return Built(m, n, y, x, needs_choice, x_ub, u, k, rem)


def routing_dims(p: Problem) -> list[str]:
    """The utilization bands that matter: "gpu" when GPU servers of more than one serving setup are candidates,
    "q<i>" when tool queue i holds sandbox memory or disk and has candidate cores of more than one CPU SKU. With one
    SKU the routing is forced (everything goes through it) and the band adds nothing."""
    _, mem_g, mem_s, _ = _queue_coeffs(p)
    _, disk_g, disk_s, _ = _queue_coeffs(p, "sandbox_disk_gb")
    dims = []
    keys = {o.serving_key for o in p.options if o.profile.gpus and o.serving_key in p.servings}
    if len(keys) > 1 and any(any(mg.values()) for mg in mem_g + disk_g):
        dims.append("gpu")
    cpus = {o.profile.cpu.id for o in p.options if o.profile.tool_cores > 0}
    for qi in range(len(p.partition)):
        if len(cpus) > 1 and (any(mem_s[qi].values()) or any(disk_s[qi].values())):
            dims.append(f"q{qi}")
    return dims


def floor_drives_gpus(o) -> bool:
    """Whether the serving engines' host-core floor of a server (group `engine_cores`) is at least the orchestration
    cores its GPUs can use: then every allowed split serves at the GPUs' capacity."""
    pr = o.profile
    k = pr.orchestration_tasks_per_core_s
    return pr.engine_min_cores > 0 and math.isfinite(k) and pr.engine_min_cores * k >= pr.gpu_tasks_per_s


def add_sku_routing(m: LinearModel, p: Problem, n, y, u, x: str, count, has_llm: bool, work,
                    held: list[tuple]) -> None:
    """sku_routing, sandbox_memory:<q> and sandbox_disk:<q> (docs/model.md section 9.3). `held`: per resource a
    live task holds, (name, per-core field of the profile, GB-s per task by GPU setup, by CPU SKU, fixed).

    The evaluator routes calls over GPU serving setups (and tool calls over a queue's CPU SKUs) in proportion to
    their capacity: every setup runs at the pool's utilization rho. The sandbox memory a task holds depends on that
    routing (a faster setup's calls are shorter), so the exact constraint is bilinear (flow_g = rho cap_g). Here the
    flows are free within a band: lo cap_g <= flow_g <= hi cap_g with the band (lo, hi) from `p.bands` (default
    (0, 1)). Every real configuration whose utilization lies in the band is feasible with its own proportional
    flows, so the model is a relaxation of the evaluator on that band (mixed SKUs included); as the band narrows
    the flows are forced to the proportional ones. advisor/optimizer/optimize.py (`_solve_coupled`) branches on
    the bands until the relaxation's bound meets an evaluated answer.

    For the bound to be reachable, a flexible GPU server's serving capacity is its actual one: s_o equals the
    orchestration cores' capacity (fewer orchestration cores than the GPUs use are allowed, more are pointless: a
    split with more is dominated by the one with just enough, so leaving it out keeps the bound) or, without an
    orchestration limit or where the serving engines' host-core floor alone already drives the GPUs fully
    (`floor_drives_gpus`), the GPUs' capacity."""
    gpu_ids = sorted(p.servings)
    xg: dict[str, str] = {}
    if has_llm and gpu_ids:
        lo, hi = p.bands.get("gpu", (0.0, 1.0))
        cap: dict[str, dict[str, float]] = {g: {} for g in gpu_ids}
        for (_, i), v in n.items():
            o = p.options[i]
            if o.profile.gpus and not o.flexible_orchestration and o.serving_key in cap \
                    and o.profile.serving_tasks_per_s > 0:
                cap[o.serving_key][v] = o.profile.serving_tasks_per_s * HOUR_S
        for i, o in enumerate(p.options):
            sv = f"s_o{i}"
            if sv not in m.vars or o.serving_key not in cap:
                continue
            cap[o.serving_key][sv] = 1.0
            if i in u and math.isfinite(o.profile.orchestration_tasks_per_core_s) and not floor_drives_gpus(o):
                m.add(f"serving_exact_o{i}", "sku_routing",
                      {sv: 1.0, u[i]: -o.profile.orchestration_tasks_per_core_s * HOUR_S}, "==", 0.0)
            else:
                m.add(f"serving_exact_o{i}", "sku_routing",
                      {sv: 1.0, **{v: -o.profile.gpu_tasks_per_s * HOUR_S for v in count[i]}}, "==", 0.0)
        xg = {g: m.var(safe_name(f"xg_{g}"), 0, None) for g in gpu_ids}
        m.add("gpu_flow", "sku_routing", {**{v: 1.0 for v in xg.values()}, x: -1.0}, "==", 0.0)
        for g in gpu_ids:
            m.add(safe_name(f"gpu_route_hi_{g}"), "sku_routing",
                  {xg[g]: 1.0, **{k: -hi * a for k, a in cap[g].items()}}, "<=", 0.0)
            if lo > 0:
                m.add(safe_name(f"gpu_route_lo_{g}"), "sku_routing",
                      {xg[g]: 1.0, **{k: -lo * a for k, a in cap[g].items()}}, ">=", 0.0)
    cpu_ids = sorted({o.profile.cpu.id for o in p.options})
    for qi, qname in enumerate(p.queue_names):
        per_sku = any(any(cs[qi].values()) for _, _, _, cs, _ in held)
        xs: dict[str, str] = {}
        if per_sku and work[qi] > 0:
            lo, hi = p.bands.get(f"q{qi}", (0.0, 1.0))
            xs = {s_: m.var(safe_name(f"xs_q{qi}_{s_}"), 0, None) for s_ in cpu_ids}
            m.add(f"cpu_flow_q{qi}", "sku_routing", {**{v: 1.0 for v in xs.values()}, x: -1.0}, "==", 0.0)
            for s_ in cpu_ids:
                qcap = {y[i, q2]: p.options[i].profile.per_core_perf for (i, q2) in y
                        if q2 == qi and p.options[i].profile.cpu.id == s_}
                m.add(safe_name(f"cpu_route_hi_q{qi}_{s_}"), "sku_routing",
                      {xs[s_]: work[qi] / HOUR_S, **{k: -hi * a for k, a in qcap.items()}}, "<=", 0.0)
                if lo > 0:
                    m.add(safe_name(f"cpu_route_lo_q{qi}_{s_}"), "sku_routing",
                          {xs[s_]: work[qi] / HOUR_S, **{k: -lo * a for k, a in qcap.items()}}, ">=", 0.0)
        for kind, per_core, cg, cs, cd in held:
            if not (cd[qi] > 0 or any(cg[qi].values()) or any(cs[qi].values())):
                continue
            terms: dict[str, float] = {y[i, q2]: -getattr(p.options[i].profile, per_core) for (i, q2) in y
                                       if q2 == qi}
            for g, coef in cg[qi].items():
                if coef and g in xg:
                    terms[xg[g]] = coef / HOUR_S
            for s_, coef in cs[qi].items():
                if coef and s_ in xs:
                    terms[xs[s_]] = coef / HOUR_S
            if cd[qi]:
                terms[x] = terms.get(x, 0.0) + cd[qi] / HOUR_S
            m.add(safe_name(f"sandbox_{kind}_{qname}"), f"sandbox_{kind}:{qname}", terms, "<=", 0.0)


def _add_queue_floors(m: LinearModel, p: Problem, y, x: str, x_ub: float, work: list[float],
                      io_mb: list[float]) -> None:
    """queue_floor:<q>, with more than one queue: a queue that serves anything has at least one call slot (its mean
    parallelism in cores) and one I/O stream (`io_stream_mbps` of local NVMe bandwidth). The fluid core and
    bandwidth rows let a small isolated queue take a fraction of one; the evaluator rounds its slots and streams
    down, so such a queue completes nothing. Binary z_q: X <= x_ub z_q, cores and bandwidth >= one slot, stream."""
    stream = p.settings.assumptions.io_stream_mbps
    for qi, qname in enumerate(p.queue_names):
        qc = queue_calls(p.workload, p.partition[qi], 1.0)
        need_cores = work[qi] > 0 and qc is not None
        if not (need_cores or io_mb[qi] > 0):
            continue
        tag = safe_name(qname)
        z = m.var(f"queue_on_{tag}", 0, 1, integer=True)
        m.add(f"queue_on_{tag}", f"queue_floor:{qname}", {x: 1.0, z: -x_ub}, "<=", 0.0)
        if need_cores:
            m.add(f"queue_slot_{tag}", f"queue_floor:{qname}",
                  {**{y[i, q2]: -1.0 for (i, q2) in y if q2 == qi}, z: qc.mean_parallelism}, "<=", 0.0)
        if io_mb[qi] > 0:
            m.add(f"queue_stream_{tag}", f"queue_floor:{qname}",
                  {**{y[i, q2]: -p.options[i].profile.io_mbps_per_core for (i, q2) in y if q2 == qi}, z: stream},
                  "<=", 0.0)


SECANT_PREFIX = "slo_segc_"
"""Name prefix of a tail-wait curve's secant-segment variables (a segment of more than one server count)."""


def slo_queues(p: Problem) -> list[tuple[int, str, list[float], list[QueueCalls], float]]:
    """Queues with a tail-wait target: (index, name, the distinct core speeds of the servers that can give the queue
    cores, ascending, the queue's call figures at each speed, and its target: the tightest of its classes')."""
    if not p.workload.has_tool_wait_target:
        return []
    speeds = sorted({o.profile.per_core_perf for o in p.options if o.profile.tool_cores > 0})
    out = []
    for qi, qname in enumerate(p.queue_names):
        target = p.workload.tool_wait_target(p.partition[qi])
        if target is None:
            continue
        qcs = [queue_calls(p.workload, p.partition[qi], v) for v in speeds]
        if speeds and all(qc is not None for qc in qcs):
            out.append((qi, qname, speeds, qcs, target))
    return out


def add_slo_curves(m: LinearModel, p: Problem, y, x: str, count) -> None:
    """slo:<q>: the queue's call rate under its piecewise-linear capacity curve in its integer server count
    (advisor/optimizer/slo_curve.py; docs/model.md section 9.4). The curve is chosen together with a core-speed level: at level
    l the queue takes cores only from servers at least that fast, and the curve assumes speed l (conservative for a
    mix, exact for one speed). One binary per (level, segment); exactly one is set.

    Relaxed (`p.slo_relaxed`, for a proven bound): at level l the queue takes cores only from servers at most that
    fast and the curve assumes speed l, the fastest core present; faster cores only shorten calls and waits, so the
    curve is an upper bound on the mix's capacity (exact for one speed)."""
    s = p.settings
    for qi, qname, speeds, qcs, target in slo_queues(p):
        opts = [i for (i, q2) in y if q2 == qi]
        if not opts:
            continue
        # most cores the queue can get: every rack filled with tool cores, fractionally (a valid bound)
        most = min(sum(p.options[i].profile.tool_cores * sum(m.vars[v].ub for v in count[i]) for i in opts),
                   p.racks * _knapsack_bound(p, lambda o: o.profile.tool_cores))
        tag = safe_name(qname)
        pbar = qcs[0].mean_parallelism
        top = max_servers_bound(most, qcs[0])
        c = m.var(f"slo_servers_{tag}", 0, top, integer=True)
        m.add(f"slo_cores_{tag}", f"slo:{qname}", {c: pbar, **{y[i, qi]: -1.0 for i in opts}}, "<=", 0.0)
        pick: dict[str, float] = {}
        link: dict[str, float] = {c: 1.0}
        rate: dict[str, float] = {x: qcs[0].calls_per_task / HOUR_S}
        level_on: list[dict[str, float]] = []
        rate_of = qcs[0].calls_per_task / HOUR_S
        lo = rate_of * p.x_floor if p.x_floor else None
        hi = rate_of * p.x_cap if p.x_cap is not None else None
        for li, qc in enumerate(qcs):
            segs = _within_needs(curve(qc, target, s.assumptions.tail_quantile, top,
                                       s.slo_curve_exact_servers, s.slo_curve_tolerance), lo, hi)
            on: dict[str, float] = {}
            for k, sg in segs:
                h = m.var(f"slo_seg_{tag}_l{li}_{k}", 0, 1, integer=True)
                pick[h] = on[h] = 1.0
                if sg.end == sg.start:
                    link[h] = -float(sg.start)
                    rate[h] = -sg.value
                    continue
                ck = m.var(f"{SECANT_PREFIX}{tag}_l{li}_{k}", 0, sg.end)
                m.add(f"slo_seg_lo_{tag}_l{li}_{k}", f"slo:{qname}", {ck: -1.0, h: float(sg.start)}, "<=", 0.0)
                m.add(f"slo_seg_hi_{tag}_l{li}_{k}", f"slo:{qname}", {ck: 1.0, h: -float(sg.end)}, "<=", 0.0)
                link[ck] = -1.0
                rate[ck] = -sg.slope
                rate[h] = -(sg.value - sg.slope * sg.start)
            level_on.append(on)
        m.add(f"slo_segment_{tag}", f"slo:{qname}", pick, "==", 1.0)
        m.add(f"slo_link_{tag}", f"slo:{qname}", link, "==", 0.0)
        m.add(f"slo_{tag}", f"slo:{qname}", rate, "<=", 0.0)
        for i in opts:  # cores only from servers at least (relaxed: at most) as fast as the level
            perf = p.options[i].profile.per_core_perf
            allowed = {h: 1.0 for li, on in enumerate(level_on)
                       if (speeds[li] >= perf if p.slo_relaxed else speeds[li] <= perf) for h in on}
            if len(allowed) < len(pick):
                big = p.options[i].profile.tool_cores * sum(m.vars[v].ub for v in count[i])
                m.add(f"slo_speed_{tag}_o{i}", f"slo:{qname}",
                      {y[i, qi]: 1.0, **{h: -big for h in allowed}}, "<=", 0.0)


def _within_needs(segs: list, lo: float | None, hi: float | None) -> list[tuple[int, Segment]]:
    """(index, segment) of the curve's segments an answer with X between its floor and cap can use: a segment
    whose lower secant stays below `lo` (the call rate at the floor) cannot carry it, and beyond the first that
    reaches `hi` (the rate at the cap) an answer on a later segment has the same servers and X on that one at its
    last integer (fewer of the queue's cores taken up, which the cores constraint allows), so no answer is lost.
    The end segments are cut to the integers that matter (the secant is linear; the indices, which name the
    variables, are the full curve's). The multiple-choice segments relax to the chord between the first and the
    last: on the built-in batch grid's hybrid at tool share 0.9, with the cap alone about 1,200 servers, not the
    6,716 every core of the rack could give."""
    out: list[tuple[int, Segment]] = []
    for k, sg in enumerate(segs):
        top = sg.value + sg.slope * (sg.end - sg.start)
        if lo is not None and top < lo:
            continue
        if lo is not None and sg.end > sg.start and sg.slope > 0 and sg.value < lo:
            start = min(sg.end, sg.start + math.ceil((lo - sg.value) / sg.slope - 1e-9))
            sg = Segment(start, sg.end, sg.value + sg.slope * (start - sg.start), sg.slope if sg.end > start else 0.0)
        if hi is not None and top >= hi:
            if sg.end > sg.start and sg.slope > 0:
                end = max(sg.start + 1, min(sg.end, sg.start + math.ceil((hi - sg.value) / sg.slope - 1e-9)))
                sg = replace(sg, end=min(end, sg.end))
            out.append((k, sg))
            return out
        out.append((k, sg))
    return out


def power_terms(b: Built, p: Problem) -> dict[str, float]:
    """Power of the servers and of the top-of-rack switches."""
    terms = {v: p.options[i].profile.power_w for (_, i), v in b.n.items()}
    if p.switch is not None:
        terms.update({v: p.switch.power_w for v in b.k.values()})
    return terms


def cost_terms(b: Built, p: Problem) -> dict[str, float]:
    """Price of the servers; with owned servers up to a constant (what they cost), so that removing one saves
    its salvage value only: price n + (1 - salvage) price rem."""
    terms = {v: (p.options[i].profile.price_usd or 0.0) for (_, i), v in b.n.items()}
    for (_, i), v in b.rem.items():
        terms[v] = (1.0 - p.fixed.salvage_fraction) * (p.options[i].profile.price_usd or 0.0)
    return terms


def gpu_capacity_terms(b: Built, p: Problem) -> dict[str, float]:
    """GPU-only serving capacity (tasks/h), ignoring host CPUs: what a GPU-first plan maximizes first."""
    return {v: p.options[i].profile.gpu_tasks_per_s * HOUR_S for (_, i), v in b.n.items()
            if p.options[i].profile.gpus and math.isfinite(p.options[i].profile.gpu_tasks_per_s)}
