"""Total cost of ownership: capital, energy and space per hour, per 1,000 tasks and energy per task.

Pure functions over server profiles. Energy is read at an operating throughput (tasks/h): every server draws its
idle power, and the work of each pool (GPU serving, each tool queue) adds dynamic power where it runs. Within a pool
work is dispatched to the most energy-efficient capacity first, the lowest-energy way to carry that load; with one
SKU per pool every dispatch gives the same figure. The optimizer's cost objectives use the same rule, so its
predicted cost equals this evaluation of its answer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pydantic import Field

from models.base import Frozen, Input
from models.hardware import Chassis, CpuSku, GpuSku
from models.errors import InputError

HOURS_PER_YEAR = 8760.0
J_PER_KWH = 3.6e6
HOURS_PER_MONTH = HOURS_PER_YEAR / 12


class CostAssumptions(Input):
    """Money and energy assumptions for TCO. Each default says where it comes from; override per run."""

    amortization_years: float = Field(default=5.0, gt=0)
    """Years over which server capital is written off (straight line, no residual value). Assumption: the middle of
    the 4-6 year useful lives that hyperscalers report for servers and GPU clouds use for accelerators."""
    pue: float = Field(default=1.55, ge=1)
    """Power usage effectiveness: facility power over IT power. Uptime Institute global survey average 1.55-1.59
    (2020-2023); new large sites reach 1.3 or less, hyperscale 1.1-1.2."""
    electricity_usd_per_kwh: float = Field(default=0.0806, ge=0)
    """Electricity price in USD per kWh. US industrial average 0.0806 USD/kWh in 2023 (EIA Electric Power Monthly,
    table 5.6); TCO studies commonly assume 0.08-0.12."""
    space_usd_per_rack_month: float = Field(default=0.0, ge=0)
    """Space or colocation cost per rack and month in USD. Default 0: an owned facility, whose overhead is carried by
    PUE and the power price; set it for colocation."""
    memory_usd_per_gb: float = Field(default=5.0, ge=0)
    """Host DRAM price in USD per GB, added to every server (catalog chassis prices exclude memory). Assumption:
    DDR5 RDIMM street prices of roughly 3-8 USD/GB in 2024-2026 quotes; use your own quote."""
    gpu_idle_power_fraction: float = Field(default=0.1, ge=0, le=1)
    """Accelerator draw when idle, as a fraction of its TDP. Assumption: H100 SXM boards report about 70 W of
    700 W idle in nvidia-smi; the rest of the TDP is drawn in proportion to busy time."""
    cpu_idle_power_fraction: float = Field(default=0.3, ge=0, le=1)
    """CPU socket draw when idle, as a fraction of its TDP. Assumption: SPECpower_ssj2008 results of recent
    2-socket servers show active idle at roughly 20-35% of full-load power."""
    base_power_draw_fraction: float = Field(default=0.6, ge=0, le=1)
    """Draw of everything but CPUs and GPUs (fans, NICs, switches, DIMMs, drives) as a fraction of its provisioned
    `base_power_w`, at any load. Assumption: calibrated so a DGX H100 with busy GPUs and half-busy CPUs draws
    ~8.4 kW, the top of NVIDIA's stated typical 6.5-8.5 kW (10.2 kW maximum)."""
    rack_reserved_draw_fraction: float = Field(default=1.0, ge=0, le=1)
    """Draw of a rack's shared gear (`reserved_power_w`: ToR and management switches) as a fraction of its
    provisioned power. Assumption: switches run near their provisioned power at all times."""


# ------------------------------------------------------------------------------------------------------ capital

def server_price(chassis: Chassis, cpu: CpuSku, gpu: GpuSku | None, gpus: int,
                 costs: CostAssumptions) -> tuple[float | None, list[str]]:
    """Capital cost of one server: chassis + CPU sockets + GPUs + host memory. None, with the parts that have no
    price, when any part is unpriced."""
    missing = []
    if chassis.price_usd is None:
        missing.append(f"chassis {chassis.id}")
    if cpu.list_price_usd is None:
        missing.append(f"CPU {cpu.id}")
    if gpu is not None and gpu.price_usd is None:
        missing.append(f"GPU {gpu.id}")
    if missing:
        return None, missing
    total = (chassis.price_usd + chassis.cpu_sockets * cpu.list_price_usd
             + (gpus * gpu.price_usd if gpu is not None else 0.0) + chassis.memory_gb * costs.memory_usd_per_gb)
    return total, []


def capital_usd_per_hour(price_usd: float, costs: CostAssumptions) -> float:
    return price_usd / (costs.amortization_years * HOURS_PER_YEAR)


# ------------------------------------------------------------------------------------------------------- energy

def idle_draw_w(chassis: Chassis, cpu: CpuSku, gpu: GpuSku | None, gpus: int, costs: CostAssumptions) -> float:
    """What a server draws with nothing to do (its base draw included)."""
    return (chassis.base_power_w * costs.base_power_draw_fraction
            + chassis.cpu_sockets * cpu.tdp_w * costs.cpu_idle_power_fraction
            + (gpus * gpu.tdp_w * costs.gpu_idle_power_fraction if gpu is not None else 0.0))


def cpu_joules_per_reference_core_s(chassis: Chassis, cpu: CpuSku, costs: CostAssumptions) -> float:
    """Dynamic energy of one reference-core second of work on this CPU (a busy core draws its share of the socket's
    TDP above idle; a faster core finishes the work sooner)."""
    return cpu.tdp_w * (1 - costs.cpu_idle_power_fraction) / cpu.cores / cpu.per_core_perf


def gpu_joules_per_task(gpu: GpuSku, gpus: int, gpu_tasks_per_s: float, costs: CostAssumptions) -> float:
    """Dynamic GPU energy per task served on a server whose GPUs sustain `gpu_tasks_per_s` at full load."""
    if gpu_tasks_per_s <= 0:
        return math.inf
    return gpus * gpu.tdp_w * (1 - costs.gpu_idle_power_fraction) / gpu_tasks_per_s


@dataclass(frozen=True)
class Capacity:
    """Capacity of one slice of a pool and the dynamic energy of each unit of work done there."""

    units_per_s: float
    joules_per_unit: float


def efficient_first_w(load_units_per_s: float, slices: list[Capacity]) -> float:
    """Dynamic power (W) of carrying a pool's load on its most energy-efficient capacity first."""
    need, watts = load_units_per_s, 0.0
    for c in sorted(slices, key=lambda c: c.joules_per_unit):
        if need <= 0:
            break
        take = min(need, c.units_per_s)
        watts += take * c.joules_per_unit
        need -= take
    if need > 1e-9 * max(1.0, load_units_per_s):
        raise InputError(f"operating load exceeds the pool's capacity by {need:.6g} units/s")
    return watts


# --------------------------------------------------------------------------------------------------------- result

class Tco(Frozen):
    """Cost and energy at an operating throughput."""

    operating_tasks_per_hour: float
    """Tasks per hour the cost is spread over (the evaluation's operating point)."""
    capital_usd: float | None
    """Purchase price of all servers (None when a part has no catalog price)."""
    unpriced: list[str] = Field(default_factory=list)
    """Parts without a price (capital and cost figures are then None)."""
    it_power_w: float
    """Average IT draw at the operating throughput: idle draw of every server and rack gear plus dynamic draw."""
    facility_power_w: float
    """IT draw times PUE."""
    capital_usd_per_hour: float | None
    """Capital amortized straight-line over the amortization years."""
    energy_usd_per_hour: float
    space_usd_per_hour: float
    cost_usd_per_hour: float | None
    """Capital + energy + space per hour."""
    cost_usd_per_1000_tasks: float | None
    energy_wh_per_task: float | None
    """Facility energy per task in Wh (None at zero throughput)."""
    assumptions: CostAssumptions


@dataclass(frozen=True)
class ServerUse:
    """One group of identical servers as the TCO needs it."""

    count: int
    chassis: Chassis
    cpu: CpuSku
    gpu: GpuSku | None
    gpus: int
    serving_tasks_per_s: float
    """Tasks/s the group's servers each serve (GPU and orchestration limits)."""
    gpu_tasks_per_s: float
    """Tasks/s each server's GPUs sustain at full load."""
    queue_cores: dict[str, float]
    """Cores per server in each tool queue."""


def gpu_server_joules_per_task(u: ServerUse, orchestration_core_s_per_task: float, costs: CostAssumptions) -> float:
    """GPU dynamic energy plus the host's orchestration work, per task this server serves."""
    orch = orchestration_core_s_per_task * cpu_joules_per_reference_core_s(u.chassis, u.cpu, costs)
    return gpu_joules_per_task(u.gpu, u.gpus, u.gpu_tasks_per_s, costs) + orch


def tco(uses: list[ServerUse], operating_tasks_per_hour: float, queue_work_core_s_per_task: dict[str, float],
        orchestration_core_s_per_task: float, has_llm: bool, racks: int, rack_reserved_power_w: float,
        costs: CostAssumptions) -> Tco:
    """TCO of a configuration carrying `operating_tasks_per_hour`. `queue_work_core_s_per_task` is each tool queue's
    reference-core seconds per task of the mix."""
    lam = operating_tasks_per_hour / 3600.0
    idle = sum(u.count * idle_draw_w(u.chassis, u.cpu, u.gpu, u.gpus, costs) for u in uses)
    idle += racks * rack_reserved_power_w * costs.rack_reserved_draw_fraction
    dynamic = 0.0
    if has_llm and lam > 0:
        dynamic += efficient_first_w(lam, [
            Capacity(u.count * u.serving_tasks_per_s, gpu_server_joules_per_task(u, orchestration_core_s_per_task,
                                                                                  costs))
            for u in uses if u.gpu is not None and u.serving_tasks_per_s > 0])
    for q, work in queue_work_core_s_per_task.items():
        if work <= 0 or lam <= 0:
            continue
        dynamic += efficient_first_w(lam * work, [
            Capacity(u.count * u.queue_cores.get(q, 0.0) * u.cpu.per_core_perf,
                     cpu_joules_per_reference_core_s(u.chassis, u.cpu, costs))
            for u in uses if u.queue_cores.get(q, 0.0) > 0])
    it_w = idle + dynamic
    facility_w = it_w * costs.pue
    energy_h = facility_w / 1000.0 * costs.electricity_usd_per_kwh
    space_h = racks * costs.space_usd_per_rack_month / HOURS_PER_MONTH
    capital, unpriced = 0.0, []
    for u in uses:
        price, miss = server_price(u.chassis, u.cpu, u.gpu, u.gpus, costs)
        if price is None:
            unpriced += [m for m in miss if m not in unpriced]
        else:
            capital += u.count * price
    cap = None if unpriced else capital
    cap_h = None if cap is None else capital_usd_per_hour(cap, costs)
    cost_h = None if cap_h is None else cap_h + energy_h + space_h
    per_task = operating_tasks_per_hour > 0
    return Tco(
        operating_tasks_per_hour=operating_tasks_per_hour, capital_usd=cap, unpriced=sorted(unpriced),
        it_power_w=it_w, facility_power_w=facility_w, capital_usd_per_hour=cap_h, energy_usd_per_hour=energy_h,
        space_usd_per_hour=space_h, cost_usd_per_hour=cost_h,
        cost_usd_per_1000_tasks=(cost_h / operating_tasks_per_hour * 1000.0) if cost_h is not None and per_task
        else None,
        energy_wh_per_task=(facility_w / operating_tasks_per_hour) if per_task else None,
        assumptions=costs)
