"""Candidate servers: every (chassis, CPU, GPU, GPUs per server, orchestration cores per GPU) a layout may use."""

from __future__ import annotations

from dataclasses import dataclass

from advisor.layouts import Layout  # noqa: F401 - re-exported for the optimizer modules
from models.catalog import Catalog
from models.hardware import Rack, Switch
from models.performance import GpuServing, gpu_serving, replica_domain, serving_key
from models.rack_physics import check_server_ports, planning_power_fraction, rack_switch, switches_needed
from models.server import ServerProfile, server_profile
from models.tco import CostAssumptions, cpu_joules_per_reference_core_s, gpu_joules_per_task, idle_draw_w
from models.workload import Workload
from models.errors import InputError



@dataclass(frozen=True)
class ServerOption:
    key: str
    profile: ServerProfile
    flexible_orchestration: bool = False
    """True: the optimizer decides how many host cores serve the GPUs (profile built with none reserved).
    False: the profile's reservation is fixed (the GPU-first rule, or CPU-only nodes)."""
    weight_kg: float = 0.0
    """The server's weight where the rack limits weight (0 otherwise: then it ranks no option above another)."""
    network_ports: int = 0
    """Its NIC ports where the rack has a top-of-rack switch (0 otherwise)."""

    @property
    def role(self) -> str:
        return "gpu" if self.profile.gpus else "cpu"

    @property
    def gpu_id(self) -> str | None:
        return self.profile.gpu.id if self.profile.gpu else None

    @property
    def serving_key(self) -> str | None:
        return self.profile.serving_key

    @property
    def cpu_id(self) -> str:
        return self.profile.cpu.id


def empty_rack_needs(p: ServerProfile, rack: Rack, switch: Switch | None) -> dict[str, tuple[float, float]]:
    """Per budget group: (what one server of this profile and the switches its NIC ports need take, what an empty
    rack offers)."""
    k = switches_needed(p.chassis.network_ports, rack, switch)
    sw_w = k * switch.power_w if switch else 0.0
    out = {"power": (p.power_w + sw_w, rack.usable_power_w),
           "cooling_air": (p.air_heat_w + sw_w, rack.air_cooling_kw * 1000 - rack.reserved_power_w),
           "cooling_liquid": (p.liquid_heat_w, rack.liquid_cooling_kw * 1000),
           "space": (p.space_u + (k * switch.height_u if switch else 0), rack.usable_u)}
    if rack.usable_feed_w is not None:
        out["power_feed"] = (p.power_w + sw_w, rack.usable_feed_w)
    if rack.usable_weight_kg is not None:
        out["weight"] = (p.chassis.weight_kg + (k * switch.weight_kg if switch else 0.0), rack.usable_weight_kg)
    return out


def _fits_empty_rack(p: ServerProfile, rack: Rack, switch: Switch | None = None) -> bool:
    return all(need <= have for need, have in empty_rack_needs(p, rack, switch).values())


def _dominates(a: ServerOption, b: ServerOption) -> bool:
    """a is at least as good as b in every benefit and no worse in every cost (same GPU and CPU SKU)."""
    pa, pb = a.profile, b.profile
    if a.serving_key != b.serving_key or a.cpu_id != b.cpu_id:
        return False
    price_ok = (pa.price_usd or 0.0) <= (pb.price_usd or 0.0) and (pa.price_usd is None) == (pb.price_usd is None)
    if a.flexible_orchestration != b.flexible_orchestration:
        return False
    if a.flexible_orchestration:
        serving_ok = (pa.gpu_tasks_per_s >= pb.gpu_tasks_per_s
                      and pa.orchestration_tasks_per_core_s >= pb.orchestration_tasks_per_core_s
                      and pa.engine_min_cores <= pb.engine_min_cores)
    else:  # GPU-first ranks raw GPU capacity first, so keep what it would pick
        serving_ok = pa.serving_tasks_per_s >= pb.serving_tasks_per_s and pa.gpu_tasks_per_s >= pb.gpu_tasks_per_s
    return (
        serving_ok
        and a.weight_kg <= b.weight_kg
        and a.network_ports <= b.network_ports
        and pa.tool_cores >= pb.tool_cores
        and pa.memory_per_core_gb >= pb.memory_per_core_gb
        and pa.power_w <= pb.power_w
        and pa.air_heat_w <= pb.air_heat_w
        and pa.liquid_heat_w <= pb.liquid_heat_w
        and pa.space_u <= pb.space_u
        and price_ok
    )


def _dominates_capacity(a: ServerOption, b: ServerOption) -> bool:
    """Without sandbox memory the SKU itself does not matter, only what a server adds: GPU serving capacity and
    core capacity (cores x per-core speed; orchestration and tools both scale with it) against power, heat and
    space. Price is left to the cost tie-break, which then ranks only the options kept here."""
    pa, pb = a.profile, b.profile
    if a.flexible_orchestration != b.flexible_orchestration:
        return False
    if a.flexible_orchestration:
        benefit = (pa.gpu_tasks_per_s >= pb.gpu_tasks_per_s
                   and pa.cores * pa.per_core_perf >= pb.cores * pb.per_core_perf
                   and (pa.cores - pa.engine_min_cores) * pa.per_core_perf
                   >= (pb.cores - pb.engine_min_cores) * pb.per_core_perf
                   and (pa.gpus == 0) == (pb.gpus == 0))
    else:
        benefit = (pa.serving_tasks_per_s >= pb.serving_tasks_per_s and pa.gpu_tasks_per_s >= pb.gpu_tasks_per_s
                   and pa.tool_cores * pa.per_core_perf >= pb.tool_cores * pb.per_core_perf)
    return (benefit and pa.power_w <= pb.power_w and pa.air_heat_w <= pb.air_heat_w
            and pa.liquid_heat_w <= pb.liquid_heat_w and pa.space_u <= pb.space_u
            and a.weight_kg <= b.weight_kg and a.network_ports <= b.network_ports)


def _dominates_cost(a: ServerOption, b: ServerOption, costs: CostAssumptions) -> bool:
    """Capacity dominance that also holds for cost objectives: a costs no more to buy or to keep idle, and its work
    takes no more energy (per task on its GPUs, per reference-core second on its cores)."""
    pa, pb = a.profile, b.profile
    if not _dominates_capacity(a, b) or pa.price_usd is None or pb.price_usd is None or pa.price_usd > pb.price_usd:
        return False
    if (pa.gpus == 0) != (pb.gpus == 0):
        return False
    if idle_draw_w(pa.chassis, pa.cpu, pa.gpu, pa.gpus, costs) > idle_draw_w(pb.chassis, pb.cpu, pb.gpu, pb.gpus, costs):
        return False
    if cpu_joules_per_reference_core_s(pa.chassis, pa.cpu, costs) > cpu_joules_per_reference_core_s(pb.chassis, pb.cpu,
                                                                                                    costs):
        return False
    return not pa.gpus or gpu_joules_per_task(pa.gpu, pa.gpus, pa.gpu_tasks_per_s, costs) <= \
        gpu_joules_per_task(pb.gpu, pb.gpus, pb.gpu_tasks_per_s, costs)


def prune_dominated(options: list[ServerOption], capacity_only: bool = False,
                    costs: CostAssumptions | None = None) -> list[ServerOption]:
    """Drop options another option dominates; among identical ones keep the first (a stable, canonical choice).
    `costs` (with capacity_only) keeps what a cost objective could prefer."""
    if capacity_only and costs is not None:
        def dom(a: ServerOption, b: ServerOption) -> bool:
            return _dominates_cost(a, b, costs)
    else:
        dom = _dominates_capacity if capacity_only else _dominates
    keep: list[ServerOption] = []
    for i, o in enumerate(options):
        dominated = False
        for j, other in enumerate(options):
            if i == j or not dom(other, o):
                continue
            if dom(o, other) and i < j:  # identical figures: keep the earlier one
                continue
            dominated = True
            break
        if not dominated:
            keep.append(o)
    return keep


def system_misfits(catalog: Catalog, workload: Workload, rack: Rack, gpu_ids: list[str] | None = None,
                   cpu_ids: list[str] | None = None) -> list[str]:
    """Rack-scale systems (within the GPU and CPU filters) that an empty rack of this profile cannot hold, each with
    what the rack lacks (its fields and the numbers), at the system's lowest-power GPU and CPU."""
    out = []
    for ch in sorted(catalog.chassis, key=lambda c: c.id):
        if not ch.rack_scale_system:
            continue
        gpus = [g for g in catalog.gpus if ch.accepts_gpu(g) and (gpu_ids is None or g.id in gpu_ids)]
        cpus = [c for c in catalog.cpus if ch.accepts_cpu(c) and (cpu_ids is None or c.id in cpu_ids)]
        if not gpus or not cpus:
            continue
        gpu, cpu = min(gpus, key=lambda g: g.tdp_w), min(cpus, key=lambda c: c.tdp_w)
        p = server_profile(ch, cpu, gpu, min(ch.gpu_counts), 0.0, workload, None, 0.0)
        short = rack.shortfalls(p.power_w, p.air_heat_w, p.liquid_heat_w, p.space_u, ch.weight_kg)
        if short:
            out.append(f"rack-scale system {ch.id} is placed whole, and rack profile {rack.id} cannot hold one: "
                       + "; ".join(short))
    return out


def enumerate_options(
    catalog: Catalog,
    workload: Workload,
    rack: Rack,
    layout: Layout,
    layout_a_orchestration: float,
    os_reserved_memory_gb: float,
    tp_domain_gpus: int = 8,
    gpu_ids: list[str] | None = None,
    cpu_ids: list[str] | None = None,
    prune: bool = True,
    costs: CostAssumptions | None = None,
    fit: bool = True,
) -> tuple[list[ServerOption], dict[str, GpuServing]]:
    """`fit=False` keeps the servers that do not fit an empty rack (to say why none does)."""
    servings: dict[str, GpuServing] = {}
    options: list[ServerOption] = []
    switch = rack_switch(rack, catalog)
    port_errors: list[str] = []
    for ch in sorted(catalog.chassis, key=lambda c: c.id):
        if ch.part_of_system is not None:  # a compute tray is bought only inside its whole rack-scale system
            continue
        if ch.role == "cpu" and layout != "hybrid":
            continue
        if layout == "a":
            if ch.role != "gpu" or ch.default_cpu is None:
                continue
            cpus = [catalog.cpus[ch.default_cpu]]
        else:
            cpus = [c for c in sorted(catalog.cpus, key=lambda c: c.id) if ch.accepts_cpu(c)]
        if cpu_ids is not None:
            cpus = [c for c in cpus if c.id in cpu_ids]
        gpus = [g for g in sorted(catalog.gpus, key=lambda g: g.id) if ch.accepts_gpu(g)] if ch.role == "gpu" else [None]
        if gpu_ids is not None and ch.role == "gpu":
            gpus = [g for g in gpus if g.id in gpu_ids]
        if cpus and gpus:
            try:
                check_server_ports(ch, rack, switch)
            except InputError as e:
                port_errors.append(str(e))
                continue
        for cpu in cpus:
            for gpu in gpus:
                counts = ch.gpu_counts if gpu is not None else [0]
                for n in counts:
                    skey = None
                    serving = None
                    if gpu is not None:
                        domain = replica_domain(n, ch.scale_up_domain_gpus)
                        skey = serving_key(gpu.id, domain)
                        if skey not in servings:
                            servings[skey] = gpu_serving(workload, gpu, domain, tp_domain_gpus)
                        serving = servings[skey]
                        if not serving.fits:
                            continue
                    fixed = gpu is not None and layout == "a"
                    # layout A's fixed reservation, never below the serving engine's floor for the replicas
                    oc = max(layout_a_orchestration, serving.engine_cores(n) / n) if fixed else 0.0
                    if oc * n > ch.cpu_sockets * cpu.cores:
                        continue
                    if serving is not None and serving.engine_cores(n) > ch.cpu_sockets * cpu.cores:
                        continue  # its cores cannot hold the serving engines' floor
                    p = server_profile(ch, cpu, gpu, n, oc, workload, serving, os_reserved_memory_gb, skey, costs,
                                       planning_power_fraction(ch, rack))
                    if fit and not _fits_empty_rack(p, rack, switch):
                        continue
                    key = f"{ch.id}|{cpu.id}|{gpu.id if gpu else '-'}|{n}"
                    options.append(ServerOption(
                        key, p, flexible_orchestration=gpu is not None and not fixed,
                        weight_kg=ch.weight_kg if rack.max_weight_kg is not None else 0.0,
                        network_ports=ch.network_ports if switch is not None else 0))
    if not options and port_errors:
        raise InputError(f"rack {rack.id}: no candidate server fits its top-of-rack switch: {port_errors[0]}")
    if prune:
        options = prune_dominated(options)
    return options, servings
