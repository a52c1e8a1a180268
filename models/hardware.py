"""Hardware in the catalog: CPU and GPU SKUs, server chassis, rack profiles."""

from typing import Literal

from pydantic import Field, field_validator, model_validator

from models.base import Sourced

FormFactor = Literal["sxm", "oam", "pcie", "superchip"]
Cooling = Literal["air", "liquid"]
ChassisRole = Literal["gpu", "cpu"]


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
        return self

    def accepts_cpu(self, cpu: CpuSku) -> bool:
        return cpu.platform in self.cpu_platforms and cpu.max_sockets >= self.cpu_sockets

    def accepts_gpu(self, gpu: GpuSku) -> bool:
        if self.role != "gpu" or gpu.form_factor not in self.gpu_form_factors:
            return False
        if self.max_gpu_tdp_w is not None and gpu.tdp_w > self.max_gpu_tdp_w:
            return False
        return not (gpu.cooling == "liquid" and self.cooling == "air")


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
    def usable_u(self) -> int:
        return self.height_u - self.reserved_u
