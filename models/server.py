"""Per-server figures: what one server of a group adds to power, heat, space, GPU capacity and tool cores.

The evaluator and the optimizer both read these, so a configuration the optimizer picks evaluates to exactly the
throughput it predicted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from models.hardware import Chassis, CpuSku, GpuSku
from models.performance import GpuServing, call_mix
from models.tco import CostAssumptions, server_price
from models.workload import Workload
from models.errors import InputError


@dataclass(frozen=True)
class ServerProfile:
    chassis: Chassis
    cpu: CpuSku
    gpu: GpuSku | None
    gpus: int
    orchestration_cores_per_gpu: float
    power_w: float
    """Planned power: base + sockets x CPU TDP + GPUs x GPU TDP (nameplate), times the measured-peak fraction
    where the rack plans on measured peak."""
    air_heat_w: float
    liquid_heat_w: float
    space_u: int
    cores: int
    orchestration_cores: float
    tool_cores: float
    """Cores left for tool queues."""
    per_core_perf: float
    gpu_tasks_per_s: float
    """Tasks/s this server's GPUs sustain (0 for CPU-only)."""
    orchestration_tasks_per_s: float
    """Tasks/s its reserved orchestration cores sustain (inf when the workload has no LLM calls)."""
    orchestration_tasks_per_core_s: float
    """Tasks/s one orchestration core of this CPU sustains (inf when the workload has no LLM calls)."""
    sandbox_memory_gb: float
    """Host memory available to sandboxes (memory minus the OS reservation of each of its hosts)."""
    sandbox_disk_gb: float
    """Local NVMe capacity available to sandboxes."""
    io_mbps: float
    """Local NVMe bandwidth for sandbox I/O (MB/s)."""
    price_usd: float | None
    """Capital cost: chassis + CPUs + GPUs + host memory (`models.tco.server_price`); None when a part is unpriced."""
    serving_key: str | None = None
    """Which GPU serving setup (SKU and scale-up domain) this server's GPUs run."""
    replicas: int = 0
    """Whole model replicas this server's GPUs host (0 for CPU-only servers or when none fits)."""
    engine_min_cores: float = 0.0
    """Floor on host cores the serving engines of those replicas need (per replica: the served model's
    engine_host_cores_per_replica + engine_host_cores_per_gpu x GPUs of the replica)."""

    @property
    def serving_tasks_per_s(self) -> float:
        return min(self.gpu_tasks_per_s, self.orchestration_tasks_per_s) if self.gpus else 0.0

    @property
    def disk_per_core_gb(self) -> float:
        """Sandbox disk that comes with each core a tool queue gets (shared out by cores, as memory)."""
        return self.sandbox_disk_gb / self.cores

    @property
    def io_mbps_per_core(self) -> float:
        """Disk bandwidth that comes with each core a tool queue gets (shared out by cores, as memory)."""
        return self.io_mbps / self.cores

    @property
    def memory_per_core_gb(self) -> float:
        """Sandbox memory that comes with each core a tool queue gets (memory is shared out by cores; the
        orchestration cores' part serves the inference engine)."""
        return self.sandbox_memory_gb / self.cores


def server_profile(
    chassis: Chassis,
    cpu: CpuSku,
    gpu: GpuSku | None,
    gpus: int,
    orchestration_cores_per_gpu: float,
    workload: Workload,
    serving: GpuServing | None,
    os_reserved_memory_gb: float,
    serving_key: str | None = None,
    costs: CostAssumptions | None = None,
    power_fraction: float = 1.0,
) -> ServerProfile:
    """`power_fraction`: share of nameplate planned (`models.rack_physics.planning_power_fraction`)."""
    power = (chassis.base_power_w + chassis.cpu_sockets * cpu.tdp_w + (gpus * gpu.tdp_w if gpu else 0.0)) \
        * power_fraction
    liquid = power * chassis.liquid_capture_fraction
    cores = chassis.cpu_sockets * cpu.cores
    orch = orchestration_cores_per_gpu * gpus
    if orch > cores:
        raise InputError(
            f"orchestration_cores_per_gpu {orchestration_cores_per_gpu:g} x {gpus} GPUs = {orch:g} cores, "
            f"but the server has {cores}"
        )
    gpu_tps = 0.0
    orch_tps = 0.0
    per_task = call_mix(workload).orchestration_core_s_per_task
    per_core = math.inf if per_task == 0 else cpu.per_core_perf / per_task
    replicas = 0
    engine_min = 0.0
    if gpu is not None and serving is not None:
        replicas = serving.replicas(gpus)
        engine_min = serving.engine_cores(gpus)
        gpu_tps = serving.tasks_per_s(gpus) if replicas else 0.0
        orch_tps = math.inf if per_task == 0 else orch * per_core
    price, _ = server_price(chassis, cpu, gpu, gpus, costs or CostAssumptions())
    return ServerProfile(
        chassis=chassis,
        cpu=cpu,
        gpu=gpu,
        gpus=gpus,
        orchestration_cores_per_gpu=orchestration_cores_per_gpu,
        power_w=power,
        air_heat_w=power - liquid,
        liquid_heat_w=liquid,
        space_u=chassis.height_u,
        cores=cores,
        orchestration_cores=orch,
        tool_cores=cores - orch,
        per_core_perf=cpu.per_core_perf,
        gpu_tasks_per_s=gpu_tps,
        orchestration_tasks_per_s=orch_tps,
        orchestration_tasks_per_core_s=per_core,
        sandbox_memory_gb=max(0.0, chassis.memory_gb - chassis.compute_trays * os_reserved_memory_gb),
        sandbox_disk_gb=chassis.local_nvme_gb,
        io_mbps=chassis.local_nvme_mbps,
        price_usd=price,
        serving_key=serving_key,
        replicas=replicas,
        engine_min_cores=engine_min,
    )
