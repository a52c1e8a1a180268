"""Hardware in the catalog: CPU and GPU SKUs, server chassis, network switches, rack profiles."""

import math
from typing import Literal

from pydantic import Field, field_validator, model_validator

from models.base import Input, Sourced

FormFactor = Literal["sxm", "oam", "pcie", "superchip"]
Cooling = Literal["air", "liquid"]
ChassisRole = Literal["gpu", "cpu"]
Redundancy = Literal["2N", "N+1", "none"]
PowerBasis = Literal["nameplate", "measured_peak"]
NEC_CONTINUOUS_LOAD_FACTOR = 0.8
"""Share of a branch circuit's rating that continuous load may use: NEC 210.20(A) sizes the overcurrent device at
>= 125% of the continuous load (1 / 1.25 = 0.8, the "80% rule"; Schneider Electric, "NEC information of note").
Assemblies listed for 100% operation may plan at 1.0."""


class CpuSku(Sourced):
    """One CPU socket SKU."""

    vendor: str
    """Manufacturer, e.g. AMD, Intel, NVIDIA, Ampere."""
    name: str
    """Marketing name, e.g. `EPYC 9965`."""
    platform: str
    """Socket or platform family a chassis must accept, e.g. `SP5`, `LGA7529`, `grace`."""
    cores: int = Field(gt=0)
    """Physical cores per socket."""
    threads: int = Field(gt=0)
    """Hardware threads per socket."""
    base_ghz: float = Field(gt=0)
    """Base clock in GHz."""
    boost_ghz: float = Field(gt=0)
    """Maximum boost clock in GHz."""
    tdp_w: float = Field(gt=0)
    """Thermal design power per socket in watts (the provisioned power we budget)."""
    memory_channels: int = Field(gt=0)
    """Memory channels per socket."""
    memory_type: str
    """Memory technology and speed, e.g. `DDR5-6400`."""
    memory_bandwidth_gbps: float = Field(gt=0)
    """Peak memory bandwidth per socket in GB/s."""
    l3_mb: float = Field(ge=0)
    """Last-level cache per socket in MB."""
    max_sockets: int = Field(gt=0)
    """Largest socket count per server this SKU supports."""
    list_price_usd: float | None = Field(default=None, gt=0)
    """List price per socket in USD, when public."""
    per_core_perf: float = Field(gt=0)
    """Throughput of one core relative to the reference core (= 1.0) on tool work (compile, test, sandbox)."""
    perf_basis: str
    """How `per_core_perf` was derived (benchmark, normalization, or assumption)."""

    @model_validator(mode="after")
    def _sane(self) -> "CpuSku":
        if self.threads < self.cores:
            raise ValueError(f"threads ({self.threads}) must be >= cores ({self.cores})")
        if self.boost_ghz < self.base_ghz:
            raise ValueError(f"boost_ghz ({self.boost_ghz}) must be >= base_ghz ({self.base_ghz})")
        return self


class GpuSku(Sourced):
    """One accelerator SKU."""

    vendor: str
    """Manufacturer."""
    name: str
    """Marketing name, e.g. `H100 SXM5`."""
    tdp_w: float = Field(gt=0)
    """Board power in watts (the provisioned power we budget)."""
    memory_gb: float = Field(gt=0)
    """On-package memory in GB."""
    memory_bandwidth_tbps: float = Field(gt=0)
    """Memory bandwidth in TB/s."""
    bf16_tflops: float = Field(gt=0)
    """Dense BF16 TFLOPS (no sparsity)."""
    fp8_tflops: float = Field(gt=0)
    """Dense FP8 TFLOPS (no sparsity)."""
    form_factor: FormFactor
    """Module form factor a chassis must accept."""
    cooling: Cooling
    """Cooling the part requires at its rated power."""
    price_usd: float | None = Field(default=None, gt=0)
    """Reported price per GPU in USD, when public."""
    previous_generation: str | None = None
    """Catalog id of the GPU this one succeeds in its vendor's line (the part a buyer upgrades from), when the catalog
    holds it; the report's chip-vs-rack comparison sets the chosen GPU against it."""


class Nic(Input):
    """Network adapters of one kind in a server (data ports only; the BMC port is on the management network)."""

    model: str
    """Adapter, e.g. `ConnectX-7` or `BlueField-3`."""
    count: int = Field(gt=0)
    """Adapters of this kind per server."""
    ports: int = Field(default=1, gt=0)
    """Data ports per adapter."""
    speed_gbps: float = Field(gt=0)
    """Line rate per port in Gb/s."""
    power_w: float = Field(ge=0)
    """Power per adapter in watts; part of the chassis' base_power_w (shown, not added again)."""


class Chassis(Sourced):
    """A server template: what it holds and what it costs in power, space and heat before CPUs and GPUs."""

    name: str
    """Human name, e.g. `8-GPU HGX H100 (air, 8U)`."""
    role: ChassisRole
    """`gpu` for accelerator servers, `cpu` for CPU-only tool nodes."""
    height_u: int = Field(gt=0)
    """Rack units occupied."""
    cpu_sockets: int = Field(gt=0)
    """CPU sockets per server."""
    cpu_platforms: list[str] = Field(min_length=1)
    """CPU platforms (see `CpuSku.platform`) the board accepts."""
    default_cpu: str | None = None
    """CPU SKU id the vendor ships (used by the GPU-first layout A)."""
    gpu_counts: list[int] = Field(default_factory=list)
    """Allowed GPUs per server (empty for CPU-only chassis)."""
    gpu_form_factors: list[FormFactor] = Field(default_factory=list)
    """Accepted accelerator form factors."""
    scale_up_domain_gpus: int | None = Field(default=None, gt=0)
    """GPUs a model replica can span over the scale-up fabric (NVLink, Infinity Fabric); default: the server's own
    GPUs. Larger for rack-scale systems (e.g. 72 for GB200 NVL72)."""
    max_gpu_tdp_w: float | None = Field(default=None, gt=0)
    """Largest accelerator board power the chassis can power and cool."""
    base_power_w: float = Field(gt=0)
    """Power of everything but CPUs and GPUs (fans, NICs, switches, DIMMs, drives) in watts."""
    memory_gb: float = Field(gt=0)
    """Host memory per server in GB."""
    cooling: Cooling
    """`air` or `liquid` (direct liquid cooling)."""
    liquid_capture_fraction: float = Field(default=0.0, ge=0.0, le=1.0)
    """Fraction of the server's heat removed by liquid; the rest goes to air."""
    price_usd: float | None = Field(default=None, gt=0)
    """Chassis price without CPUs and GPUs, when known."""
    local_nvme_gb: float = Field(default=0.0, ge=0)
    """Local NVMe capacity per server in GB that sandboxes may use (image layers, repositories, caches); 0: no
    local disk for sandboxes (its cores then hold no sandbox that needs disk)."""
    local_nvme_mbps: float = Field(default=0.0, ge=0)
    """Sustained bandwidth of the server's local NVMe drives for sandbox I/O in MB/s (reads and writes together;
    docs/model.md, storage); 0: none."""
    local_nvme_source: str | None = None
    """Where the local NVMe figures come from (drive count, model and datasheet), or `assumption: ...`."""
    part_of_system: str | None = None
    """Rack-scale system id (catalogs/systems.yaml) this chassis is a compute tray of; such a tray is placed only as
    part of its whole system, never on its own."""
    compute_trays: int = Field(default=1, gt=0)
    """Servers (compute trays) the unit is made of, each a host of its own: 1 for a server, e.g. 18 for a GB200
    NVL72 system (the CPU socket count a CPU SKU must support is per tray)."""
    rack_scale_system: bool = False
    """True for a rack-scale system seen as one unit (made by `RackSystem.as_chassis`: all its compute trays,
    switch trays and power shelves); a rack holds a whole one or none."""
    weight_kg: float = Field(gt=0)
    """Weight of the populated server in kg (counts against the rack's `max_weight_kg`)."""
    psus: int | None = Field(default=None, gt=0)
    """Power supplies per server."""
    psu_w: float | None = Field(default=None, gt=0)
    """Output rating of each power supply in watts."""
    psus_required: int | None = Field(default=None, gt=0)
    """Supplies needed for full performance (N of N+M; e.g. 4 of 6 for DGX H100, 5 of 6 for DGX B200)."""
    measured_peak_fraction: float | None = Field(default=None, gt=0, le=1)
    """Measured peak draw as a fraction of nameplate (base + CPU and GPU TDPs), from a site measurement or a
    sourced figure; used instead of nameplate when the rack's `power_basis` is `measured_peak`."""
    nics: list[Nic] = Field(default_factory=list)
    """Network adapters; their data ports need top-of-rack switch ports."""

    @property
    def network_ports(self) -> int:
        """Data ports per server that a top-of-rack switch serves."""
        return sum(n.count * n.ports for n in self.nics)

    @property
    def nic_power_w(self) -> float:
        return sum(n.count * n.power_w for n in self.nics)

    def psu_capacity_w(self, psus: int) -> float | None:
        """Output of `psus` of this chassis' supplies in watts (None when the PSUs are not in the catalog)."""
        return None if self.psu_w is None else psus * self.psu_w

    @model_validator(mode="after")
    def _sane(self) -> "Chassis":
        if self.role == "gpu" and (not self.gpu_counts or not self.gpu_form_factors):
            raise ValueError("a gpu chassis needs gpu_counts and gpu_form_factors")
        if self.role == "cpu" and self.gpu_counts:
            raise ValueError("a cpu chassis holds no GPUs (gpu_counts must be empty)")
        if any(c <= 0 for c in self.gpu_counts):
            raise ValueError("gpu_counts must be positive")
        if self.cooling == "air" and self.liquid_capture_fraction > 0:
            raise ValueError("an air-cooled chassis has liquid_capture_fraction 0")
        if (self.psus is None) != (self.psu_w is None):
            raise ValueError("give psus and psu_w together (both or neither)")
        if self.psus_required is not None and (self.psus is None or self.psus_required > self.psus):
            raise ValueError(f"psus_required ({self.psus_required}) must be at most psus ({self.psus})")
        if self.nic_power_w > self.base_power_w:
            raise ValueError(f"nics draw {self.nic_power_w:g} W, more than base_power_w ({self.base_power_w:g} W), "
                             "which includes them")
        return self

    def accepts_cpu(self, cpu: CpuSku) -> bool:
        return cpu.platform in self.cpu_platforms and cpu.max_sockets * self.compute_trays >= self.cpu_sockets

    def accepts_gpu(self, gpu: GpuSku) -> bool:
        if self.role != "gpu" or gpu.form_factor not in self.gpu_form_factors:
            return False
        if self.max_gpu_tdp_w is not None and gpu.tdp_w > self.max_gpu_tdp_w:
            return False
        return not (gpu.cooling == "liquid" and self.cooling == "air")


class Switch(Sourced):
    """A top-of-rack network switch."""

    name: str
    """Human name, e.g. `NVIDIA Spectrum-4 SN5600`."""
    height_u: int = Field(gt=0)
    """Rack units occupied."""
    ports: int = Field(gt=0)
    """Front-panel ports (uplinks and server ports together; one server NIC port takes one switch port)."""
    port_speed_gbps: float = Field(gt=0)
    """Line rate per port in Gb/s."""
    power_w: float = Field(gt=0)
    """Planning power in watts (with optics); all of it is air-side heat."""
    weight_kg: float = Field(gt=0)
    """Weight in kg."""


class Rack(Sourced):
    """A rack profile: the budgets one rack offers."""

    name: str
    """Human name."""
    power_kw: float = Field(gt=0)
    """Provisioned electrical power per rack in kW."""
    air_cooling_kw: float = Field(ge=0)
    """Heat the room air can remove per rack in kW."""
    liquid_cooling_kw: float = Field(ge=0)
    """Heat the liquid loop can remove per rack in kW (0 without liquid cooling)."""
    height_u: int = Field(gt=0)
    """Usable rack height in U."""
    reserved_u: int = Field(default=0, ge=0)
    """U taken by switches, patch panels and PDUs."""
    reserved_power_w: float = Field(default=0.0, ge=0)
    """Power taken by switches and other shared gear in watts."""
    count: int = Field(default=1, gt=0)
    """Racks in the row that share this profile."""
    redundancy: Redundancy = "none"
    """Power-feed redundancy: `2N` (feeds split into an A and a B side; either side carries the whole rack),
    `N+1` (any one feed may fail), `none` (every feed is needed)."""
    feeds: int = Field(default=1, gt=0)
    """Power feeds (branch circuits, each with its own rack PDU) into the rack; under 2N half are on each side."""
    feed_kw: float | None = Field(default=None, gt=0)
    """Rating of each feed in kW (breaker rating; give this or voltage, current and phases). None, with no voltage
    either: no feed model, the rack's budget is `power_kw` alone."""
    feed_voltage_v: float | None = Field(default=None, gt=0)
    """Feed voltage in volts (line-to-line for 3-phase)."""
    feed_current_a: float | None = Field(default=None, gt=0)
    """Breaker rating of each feed in amperes."""
    feed_phases: Literal[1, 3] = 3
    """1 or 3 phases: rating = V x A (1-phase) or sqrt(3) x V x A (3-phase), at unity power factor."""
    continuous_load_factor: float = Field(default=NEC_CONTINUOUS_LOAD_FACTOR, gt=0, le=1)
    """Share of a feed's rating planned for continuous load (0.8 by NEC 210.20(A); 1.0 only for 100%-rated
    assemblies)."""
    power_basis: PowerBasis = "nameplate"
    """Server power figure planned on: `nameplate` (base + CPU and GPU TDPs, the vendors' maximum) or
    `measured_peak` (nameplate x the chassis' `measured_peak_fraction`, where the catalog has one)."""
    max_weight_kg: float | None = Field(default=None, gt=0)
    """Static load rating of the rack (equipment it may hold) in kg; None: not limited."""
    reserved_weight_kg: float = Field(default=0.0, ge=0)
    """Weight of the shared gear counted in reserved_u (PDUs, patch panels, management switch) in kg."""
    tor_switch: str | None = None
    """Switch id (catalogs/switches.yaml) of the top-of-rack switches the servers' NIC ports connect to; as many
    as the ports need are placed, their U, power and weight counted. None: servers cable to switches outside the
    rack (e.g. leaf switches in network racks)."""
    uplinks_per_switch: int = Field(default=0, ge=0)
    """Ports of each top-of-rack switch taken by uplinks (not available to servers)."""

    @model_validator(mode="after")
    def _electrical(self) -> "Rack":
        volts = (self.feed_voltage_v, self.feed_current_a)
        if self.feed_kw is not None and any(v is not None for v in volts):
            raise ValueError("give feed_kw or feed_voltage_v with feed_current_a, not both")
        if (volts[0] is None) != (volts[1] is None):
            raise ValueError("give feed_voltage_v and feed_current_a together")
        if self.redundancy == "2N" and self.feeds % 2:
            raise ValueError(f"redundancy 2N needs an even number of feeds (A and B sides); feeds is {self.feeds}")
        if self.redundancy == "N+1" and self.feeds < 2:
            raise ValueError(f"redundancy N+1 needs at least 2 feeds; feeds is {self.feeds}")
        if self.redundancy != "none" and self.feed_rating_w is None:
            raise ValueError(f"redundancy {self.redundancy} needs a feed rating (feed_kw, or feed_voltage_v and "
                             "feed_current_a)")
        if self.tor_switch is None and self.uplinks_per_switch:
            raise ValueError("uplinks_per_switch needs a tor_switch")
        return self

    @property
    def feed_rating_w(self) -> float | None:
        """Rating of one feed in watts (before derating); None without a feed model."""
        if self.feed_kw is not None:
            return self.feed_kw * 1000.0
        if self.feed_voltage_v is None or self.feed_current_a is None:
            return None
        phase = math.sqrt(3.0) if self.feed_phases == 3 else 1.0
        return phase * self.feed_voltage_v * self.feed_current_a

    @property
    def surviving_feeds(self) -> int:
        """Feeds left carrying the rack after the failure its redundancy covers (all of them without redundancy)."""
        return {"2N": self.feeds // 2, "N+1": self.feeds - 1, "none": self.feeds}[self.redundancy]

    @property
    def feed_budget_w(self) -> float | None:
        """Total draw (servers, switches and reserved gear) the feeds carry after the loss the redundancy covers,
        at the continuous-load factor; None without a feed model."""
        r = self.feed_rating_w
        return None if r is None else r * self.continuous_load_factor * self.surviving_feeds

    @field_validator("reserved_u")
    @classmethod
    def _fits(cls, v: int, info) -> int:  # noqa: ANN001
        h = info.data.get("height_u")
        if h is not None and v >= h:
            raise ValueError(f"reserved_u ({v}) must be below height_u ({h})")
        return v

    @property
    def usable_power_w(self) -> float:
        return self.power_kw * 1000.0 - self.reserved_power_w

    @property
    def usable_feed_w(self) -> float | None:
        """What the feeds leave for servers and switches after the reserved gear; None without a feed model."""
        b = self.feed_budget_w
        return None if b is None else b - self.reserved_power_w

    @property
    def usable_weight_kg(self) -> float | None:
        return None if self.max_weight_kg is None else self.max_weight_kg - self.reserved_weight_kg

    @property
    def usable_u(self) -> int:
        return self.height_u - self.reserved_u

    def shortfalls(self, power_w: float, air_heat_w: float, liquid_heat_w: float, space_u: int,
                   weight_kg: float | None = None) -> list[str]:
        """What an empty rack of this profile lacks for one unit with these figures, naming the rack's fields and
        the numbers (empty: it fits)."""
        out = []
        if power_w > self.usable_power_w:
            out.append(f"power_kw {self.power_kw:g} less reserved_power_w {self.reserved_power_w:,.0f} leaves "
                       f"{self.usable_power_w:,.0f} W, below the {power_w:,.0f} W it needs")
        feed = self.usable_feed_w
        if feed is not None and power_w > feed:
            out.append(f"its feeds ({self.redundancy}, derated by continuous_load_factor "
                       f"{self.continuous_load_factor:g}) leave {feed:,.0f} W after the loss they cover, below the "
                       f"{power_w:,.0f} W it needs")
        room = self.usable_weight_kg
        if weight_kg is not None and room is not None and weight_kg > room:
            out.append(f"max_weight_kg {self.max_weight_kg:,.0f} less reserved_weight_kg "
                       f"{self.reserved_weight_kg:,.0f} leaves {room:,.0f} kg, below its {weight_kg:,.0f} kg")
        if air_heat_w > self.air_cooling_kw * 1000 - self.reserved_power_w:
            out.append(f"air_cooling_kw {self.air_cooling_kw:g} less reserved_power_w {self.reserved_power_w:,.0f} "
                       f"leaves {self.air_cooling_kw * 1000 - self.reserved_power_w:,.0f} W of air cooling, below its "
                       f"{air_heat_w:,.0f} W of air-side heat")
        if liquid_heat_w > self.liquid_cooling_kw * 1000:
            out.append(f"liquid_cooling_kw {self.liquid_cooling_kw:g} is below its {liquid_heat_w / 1000:,.1f} kW of "
                       "liquid-side heat")
        if space_u > self.usable_u:
            out.append(f"height_u {self.height_u} less reserved_u {self.reserved_u} leaves {self.usable_u} U, below "
                       f"the {space_u} U it takes")
        return out


class RackSystem(Sourced):
    """A rack-scale system (e.g. GB200 NVL72): compute trays, NVLink switch trays, power shelves and management
    switches sold and placed as one unit. Its GPUs form one scale-up domain; a rack holds a whole one or none."""

    name: str
    """Human name."""
    compute_tray: str
    """Chassis id of its compute tray (that chassis names this system in `part_of_system`)."""
    compute_trays: int = Field(gt=0)
    """Compute trays in one system."""
    switch_trays: int = Field(ge=0)
    """Scale-up (NVLink) switch trays."""
    switch_tray_u: int = Field(ge=0)
    """Rack units of one switch tray."""
    power_shelves: int = Field(ge=0)
    """Power shelves (rack-level PSUs feeding the busbar)."""
    power_shelf_u: int = Field(ge=0)
    """Rack units of one power shelf."""
    management_switches: int = Field(default=0, ge=0)
    """Management/out-of-band switches that ship inside the system."""
    management_switch_u: int = Field(default=0, ge=0)
    """Rack units of one management switch."""
    height_u: int = Field(gt=0)
    """Rack units the whole system takes; must equal trays, switch trays, shelves and switches added up."""
    shared_power_w: float = Field(ge=0)
    """Power of the parts outside the compute trays (switch trays, management switches, power-shelf losses) not
    already carried by the tray's `base_power_w`, in watts."""
    weight_kg: float = Field(gt=0)
    """Weight of the whole system as installed, in kg."""
    scale_up_domain_gpus: int = Field(gt=0)
    """GPUs one model replica can span over the system's switch trays (all of its GPUs for NVL72)."""
    shared_price_usd: float = Field(default=0.0, ge=0)
    """Price of the parts outside the compute trays not already carried by the tray's `price_usd`."""

    @model_validator(mode="after")
    def _sane(self) -> "RackSystem":
        parts = (self.compute_trays + self.switch_trays * self.switch_tray_u + self.power_shelves * self.power_shelf_u
                 + self.management_switches * self.management_switch_u)
        if parts > self.height_u:
            raise ValueError(f"height_u ({self.height_u}) is below the U of its parts ({parts}: trays, switch trays, "
                             "power shelves and management switches)")
        return self

    def as_chassis(self, tray: Chassis) -> Chassis:
        """The whole system as one chassis: `compute_trays` trays' sockets, GPUs, memory, disk and base power, plus
        the shared parts' power and U. Every figure the model reads scales linearly with the trays, so the
        evaluator and the optimizer see the system exactly as its trays added up."""
        if tray.id != self.compute_tray or tray.part_of_system != self.id:
            raise ValueError(f"system {self.id}: compute_tray {self.compute_tray!r} must be a chassis whose "
                             f"part_of_system is {self.id!r}")
        if tray.height_u != 1 and tray.height_u * self.compute_trays > self.height_u:
            raise ValueError(f"system {self.id}: {self.compute_trays} trays of {tray.height_u} U exceed height_u "
                             f"{self.height_u}")
        k = self.compute_trays
        return Chassis(
            id=self.id, name=self.name, role="gpu", height_u=self.height_u, cpu_sockets=k * tray.cpu_sockets,
            cpu_platforms=list(tray.cpu_platforms), default_cpu=tray.default_cpu,
            gpu_counts=[k * c for c in tray.gpu_counts], gpu_form_factors=list(tray.gpu_form_factors),
            scale_up_domain_gpus=self.scale_up_domain_gpus, max_gpu_tdp_w=tray.max_gpu_tdp_w,
            base_power_w=k * tray.base_power_w + self.shared_power_w, memory_gb=k * tray.memory_gb,
            cooling=tray.cooling, liquid_capture_fraction=tray.liquid_capture_fraction,
            price_usd=(k * tray.price_usd + self.shared_price_usd) if tray.price_usd is not None else None,
            local_nvme_gb=k * tray.local_nvme_gb, local_nvme_mbps=k * tray.local_nvme_mbps,
            local_nvme_source=f"{k} x {tray.id}: {tray.local_nvme_source}" if tray.local_nvme_source else None,
            compute_trays=k * tray.compute_trays, rack_scale_system=True, source=self.source,
            weight_kg=self.weight_kg,
            nics=[n.model_copy(update={"count": k * n.count}) for n in tray.nics],
            notes=f"{k} x {tray.id} + {self.switch_trays} switch trays + {self.power_shelves} power shelves + "
                  f"{self.management_switches} management switches, {self.height_u} U, weight {self.weight_kg:,.0f} kg "
                  f"(catalogs/systems.yaml {self.id})",
        )
