"""What every exporter needs, computed once: server groups with their core and memory split, tool queues with their
allocations, and the operating thresholds (`advisor.operations`).

Cores: the optimizer's split may be fractional (orchestration_cores_per_gpu x GPUs, queue_cores). Schedulers hand
out whole cores (Slurm CoreSpecCount, Kubernetes exclusive CPUs for Guaranteed pods), so each server's split is
rounded once, here: orchestration up (the engine must not get less than the model gives it), then the remaining
whole cores shared among the queues by largest remainder (their sum is preserved, no core is lost or invented).
Both the exact figures and the whole-core plan are kept; artifacts use the whole cores and cite the exact ones.

Memory: each queue gets the per-core share of host memory the model allocates it (cores x (memory - OS
reservation) / cores of the server), the same figure the optimizer's sandbox-memory bound uses, so a quota cannot
admit fewer live sandboxes than the plan. The live-sandbox memory the evaluation predicts at the operating point
(utilization of the memory pool x allocation) is reported beside it.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, model_validator

from advisor.export.names import dns_label
from advisor.operations import OperatingThresholds, operating_thresholds
from models.assumptions import ModelAssumptions
from models.base import Frozen, Input
from models.catalog import Catalog
from models.config import Configuration
from models.pipeline import Evaluation, resolve_groups
from models.workload import CpuStage, Workload
from models.errors import InputError

MIB_PER_GIB = 1024
"""Catalog memory figures are GiB (DIMM capacities are binary); Slurm wants MiB, Kubernetes gets Mi."""
QUEUE_ID_MAX = 40
"""Longest sanitized queue id: leaves room for prefixes in a 63-character Kubernetes namespace or label name."""


class GpuDevices(Frozen):
    resource: str
    """Kubernetes extended resource the vendor's device plugin advertises."""
    device_glob: str
    """Slurm gres.conf File= pattern, `{first}`/`{last}` filled with device numbers."""
    first: int
    """Number of the first device file."""
    source: str


GPU_DEVICES: dict[str, GpuDevices] = {
    "NVIDIA": GpuDevices(resource="nvidia.com/gpu", device_glob="/dev/nvidia[{first}-{last}]", first=0,
                         source="NVIDIA k8s-device-plugin; Slurm gres.conf man page (File=/dev/nvidia[0-7])"),
    "AMD": GpuDevices(resource="amd.com/gpu", device_glob="/dev/dri/renderD[{first}-{last}]", first=128,
                      source="ROCm k8s-device-plugin; amdgpu render nodes start at renderD128"),
    "Intel": GpuDevices(resource="habana.ai/gaudi", device_glob="/dev/accel/accel[{first}-{last}]", first=0,
                        source="Intel Gaudi device plugin for Kubernetes; habanalabs accel device nodes"),
}



class ExportSettings(Input):
    """Choices the exporters make that the model does not, each with its basis. Override per export."""

    prefix: str = Field(default="ra", pattern=r"^[a-z]([-a-z0-9]{0,8}[a-z0-9])?$")
    """Prefix of every generated name (namespaces, nodes, partitions, QoS), so the objects are easy to find."""
    label_domain: str = Field(default="rack-advisor.io", pattern=r"^[a-z0-9]([-a-z0-9.]{0,60}[a-z0-9])?$")
    """DNS prefix of Kubernetes label keys and annotations (a domain you control, per the labels convention)."""
    system_reserved_cores: int = Field(default=1, ge=1)
    """Physical cores per GPU server kept for kubelet, container runtime and node agents (reservedSystemCPUs).
    Basis: the kubelet's static CPU manager policy refuses to start without a non-zero CPU reservation; one core is
    the smallest whole-core reservation. The model does not cost it: reserved CPUs stay in the shared pool where
    tool sandboxes run, they only leave exclusive allocation."""
    topology_manager_policy: Literal["restricted", "best-effort", "single-numa-node"] = "restricted"
    """GPU servers: `restricted` admits an engine pod only with the narrowest NUMA alignment of its cores and GPUs
    possible; `single-numa-node` would reject an engine whose GPUs span both sockets (8-GPU, 2-socket servers)."""
    inference_priority: int = Field(default=100_000, gt=0, le=1_000_000_000)
    """PriorityClass value of the inference engine: above every tool queue, since idle GPUs cost the most."""
    tool_queue_priority: int = Field(default=10_000, gt=0, le=1_000_000_000)
    """PriorityClass value of every tool queue: equal, because the model's queues are isolated by their own cores
    (quotas), not by preempting each other."""
    baseline_window: str = Field(default="7d", pattern=r"^[0-9]+[smhdwy]$")
    """Prometheus: window of the trailing sandbox-start p95 that stands for the pilot baseline the report names."""
    rate_window: str = Field(default="5m", pattern=r"^[0-9]+[smhdwy]$")
    """Prometheus: rate() window; 5m spans at least 4 scrapes at the common 15-60 s intervals."""
    alert_for: str = Field(default="10m", pattern=r"^[0-9]+[smhdwy]$")
    """Prometheus: how long a threshold must hold before an alert fires (two rate windows: no single-burst pages)."""
    gpu_devices: dict[str, GpuDevices] = GPU_DEVICES
    """Per GPU vendor (the catalog's `vendor`): Kubernetes resource name and device files; add a vendor here."""

    def devices(self, vendor: str | None) -> GpuDevices:
        try:
            return self.gpu_devices[vendor or ""]
        except KeyError:
            raise InputError(f"no device plugin / device files known for GPU vendor {vendor!r} (known: "
                             f"{', '.join(self.gpu_devices)}; add it to the export settings' gpu_devices)") from None

    @model_validator(mode="after")
    def _order(self) -> ExportSettings:
        if self.inference_priority <= self.tool_queue_priority:
            raise InputError("inference_priority must be above tool_queue_priority")
        return self


class GroupPlan(Frozen):
    index: int
    id: str
    """Sanitized group id, e.g. `g0-dgx-h100`."""
    role: Literal["gpu", "cpu"]
    chassis: str
    cpu: str
    gpu: str | None
    gpu_vendor: str | None
    gpus_per_server: int
    count: int
    rack: int
    sockets: int
    cores_per_socket: int
    threads_per_core: int
    cores: int
    """Physical cores per server."""
    memory_gb: float
    os_reserved_memory_gb: float
    memory_per_core_gb: float
    """Sandbox memory (memory - OS reservation) per core: how the model shares memory out."""
    orchestration_cores: float
    """Per server, the optimizer's figure."""
    orchestration_cores_whole: int
    queue_cores: dict[str, float]
    """Per server, by queue name, the optimizer's figures."""
    queue_cores_whole: dict[str, int]


class QueuePlan(Frozen):
    name: str
    """The configuration's queue name."""
    id: str
    """Sanitized (DNS-1123 label)."""
    classes: list[str]
    cores: float
    """Sum over servers of queue_cores x count (the optimizer's allocation)."""
    cores_whole: int
    memory_gb: float
    """Per-core share of host memory (the model's sandbox-memory allocation for this queue)."""
    memory_in_use_gb: float | None
    """Live-sandbox memory the evaluation predicts at the operating point (None: no sandboxes)."""
    sandbox_memory_gb_max: float
    """Largest sandbox_memory_gb of the queue's classes (one sandbox's memory limit)."""
    max_parallelism_cores: int
    """Whole cores the widest tool call of the queue holds."""
    groups: list[int]
    """Server groups that give this queue cores."""


class Plan(Frozen):
    configuration: str
    workload: str
    rack: str
    throughput_tasks_per_hour: float
    groups: list[GroupPlan]
    queues: list[QueuePlan]
    inference_cores: float
    """Sum of orchestration cores over GPU servers (the optimizer's figure)."""
    inference_cores_whole: int
    inference_memory_gb: float
    gpus: int
    thresholds: OperatingThresholds
    settings: ExportSettings

    def queue(self, name: str) -> QueuePlan:
        return next(q for q in self.queues if q.name == name)


def _apportion(values: dict[str, float], total: int) -> dict[str, int]:
    """Integers summing to `total`, each floor or ceil of its value (largest remainder; ties by name)."""
    floors = {k: math.floor(v + 1e-9) for k, v in values.items()}
    left = total - sum(floors.values())
    order = sorted(values, key=lambda k: (-(values[k] - floors[k]), k))
    for k in order[:max(0, left)]:
        floors[k] += 1
    for k in reversed(order):  # total below the floors' sum: take from the smallest remainders first
        if left >= 0:
            break
        if floors[k] > 0:
            floors[k] -= 1
            left += 1
    return floors


def build_plan(config: Configuration, ev: Evaluation, workload: Workload, catalog: Catalog,
               assumptions: ModelAssumptions, headroom: float, settings: ExportSettings | None = None) -> Plan:
    s = settings or ExportSettings()
    groups, _ = resolve_groups(config, workload, catalog, assumptions)
    gplans: list[GroupPlan] = []
    for g in groups:
        p = g.profile
        orch_whole = math.ceil(p.orchestration_cores - 1e-9)
        qc = {k: v for k, v in g.queue_cores.items()}
        # whole cores for the queues: what the optimizer gave them, rounded down in total, within the server
        whole = _apportion(qc, min(p.cores - orch_whole, math.floor(sum(qc.values()) + 1e-9))) if qc else {}
        if sum(whole.values()) + orch_whole > p.cores:
            raise InputError(f"servers[{g.index}]: whole-core plan exceeds {p.cores} cores")
        gplans.append(GroupPlan(
            index=g.index, id=dns_label(f"g{g.index}-{p.chassis.id}", QUEUE_ID_MAX),
            role="gpu" if p.gpu is not None else "cpu", chassis=p.chassis.id, cpu=p.cpu.id,
            gpu=p.gpu.id if p.gpu else None, gpu_vendor=p.gpu.vendor if p.gpu else None, gpus_per_server=p.gpus,
            count=g.count, rack=g.rack, sockets=p.chassis.cpu_sockets, cores_per_socket=p.cpu.cores,
            threads_per_core=max(1, p.cpu.threads // p.cpu.cores), cores=p.cores, memory_gb=p.chassis.memory_gb,
            os_reserved_memory_gb=p.chassis.memory_gb - p.sandbox_memory_gb, memory_per_core_gb=p.memory_per_core_gb,
            orchestration_cores=p.orchestration_cores, orchestration_cores_whole=orch_whole,
            queue_cores=qc, queue_cores_whole=whole))
    ids: set[str] = set()
    qplans = []
    classes = {c.name: c for c in workload.classes}
    for qf in ev.queues:
        qid = dns_label(qf.name, QUEUE_ID_MAX)
        if qid in ids:
            raise InputError(f"queue names {qf.name!r} and another sanitize to the same id {qid!r}")
        ids.add(qid)
        cls = [classes[c] for c in qf.classes]
        u_mem = ev.utilization.get(f"memory:{qf.name}")
        widest = max((st.parallelism for c in cls for st in c.stages if isinstance(st, CpuStage)), default=1.0)
        qplans.append(QueuePlan(
            name=qf.name, id=qid, classes=list(qf.classes),
            cores=sum(g.count * g.queue_cores.get(qf.name, 0.0) for g in gplans),
            cores_whole=sum(g.count * g.queue_cores_whole.get(qf.name, 0) for g in gplans),
            memory_gb=qf.sandbox_memory_gb,
            memory_in_use_gb=(u_mem * qf.sandbox_memory_gb) if u_mem is not None and math.isfinite(u_mem) else None,
            sandbox_memory_gb_max=max((c.sandbox_memory_gb for c in cls), default=0.0),
            max_parallelism_cores=math.ceil(widest - 1e-9),
            groups=[g.index for g in gplans if g.queue_cores_whole.get(qf.name, 0) > 0]))
    thresholds = operating_thresholds(ev, workload, assumptions, headroom)
    gpu_groups = [g for g in gplans if g.role == "gpu"]
    return Plan(
        configuration=config.name, workload=workload.id, rack=ev.rack_profile,
        throughput_tasks_per_hour=ev.throughput_tasks_per_hour, groups=gplans, queues=qplans,
        inference_cores=sum(g.count * g.orchestration_cores for g in gpu_groups),
        inference_cores_whole=sum(g.count * g.orchestration_cores_whole for g in gpu_groups),
        inference_memory_gb=sum(g.count * g.orchestration_cores * g.memory_per_core_gb for g in gpu_groups),
        gpus=sum(g.count * g.gpus_per_server for g in gpu_groups), thresholds=thresholds, settings=s)

