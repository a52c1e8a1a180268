"""A concrete rack configuration: which servers, how their cores are split, which queue serves which class."""

from typing import Any

from pydantic import Field, model_validator

from models.base import Input

MAX_ROW_RACKS = 1024
"""Most racks a configuration's row may hold (a row, not a data centre; the optimizer's own limit is lower)."""
SHARED_QUEUE = "shared"
"""Name of the single tool queue used when a configuration does not partition queues."""


class ServerGroup(Input):
    """Identical servers in one rack."""

    chassis: str
    """Chassis id."""
    cpu: str
    """CPU SKU id (every socket of the server holds it)."""
    gpu: str | None = None
    """GPU SKU id; none for CPU-only tool nodes."""
    gpus_per_server: int = Field(default=0, ge=0)
    """GPUs in each server."""
    count: int = Field(gt=0)
    """Servers in this group."""
    rack: int = Field(default=0, ge=0)
    """Rack index in the row (0-based)."""
    orchestration_cores_per_gpu: float = Field(default=0.0, ge=0)
    """Host cores per GPU reserved for inference orchestration (tokenize, schedule, detokenize)."""
    queue_cores: dict[str, float] | None = None
    """Cores per server given to each tool queue; omitted: every core not reserved goes to the first queue."""

    @model_validator(mode="after")
    def _sane(self) -> "ServerGroup":
        if (self.gpu is None) != (self.gpus_per_server == 0):
            raise ValueError("set gpu and gpus_per_server together (both or neither)")
        if self.gpu is None and self.orchestration_cores_per_gpu:
            raise ValueError("a CPU-only server reserves no orchestration cores")
        if self.queue_cores and any(v < 0 for v in self.queue_cores.values()):
            raise ValueError("queue_cores must be >= 0")
        return self


class Queue(Input):
    """An isolated tool queue: a pool of cores serving the tool calls of some task classes."""

    name: str = Field(min_length=1)
    """Queue name."""
    classes: list[str] = Field(min_length=1)
    """Task classes whose tool calls (and sandboxes) this queue serves."""


class OperatingPoint(Input):
    """Where to read latencies: a closed loop of agents or an open arrival rate."""

    agents: int | None = Field(default=None, gt=0)
    """Concurrent agents in a closed loop (each starts a new task when one ends)."""
    arrival_rate_per_hour: float | None = Field(default=None, gt=0)
    """Open arrivals in tasks per hour."""
    load_fraction: float | None = Field(default=None, gt=0, lt=1)
    """Open arrivals at this fraction of the configuration's sustainable throughput."""

    @model_validator(mode="after")
    def _one(self) -> "OperatingPoint":
        given = [v is not None for v in (self.agents, self.arrival_rate_per_hour, self.load_fraction)]
        if sum(given) > 1:
            raise ValueError("give at most one of agents, arrival_rate_per_hour, load_fraction")
        return self


class Configuration(Input):
    """What is in the rack(s) and how it is scheduled."""

    name: str = "configuration"
    """Label for reports."""
    workload: str | dict[str, Any] | None = None
    """Workload preset id, file (relative to the configuration file's folder) or inline object this configuration
    is meant for (the CLI flag overrides it)."""
    rack: str | dict[str, Any] | None = None
    """Rack profile id, file (relative to the configuration file's folder) or inline object (the CLI flag
    overrides it)."""
    racks: int = Field(default=1, gt=0, le=MAX_ROW_RACKS)
    """Racks in the row; server groups name their rack index."""
    servers: list[ServerGroup] = Field(min_length=1)
    """Server groups."""
    queues: list[Queue] | None = None
    """Tool queues; omitted: one shared queue for every class."""
    operating_point: OperatingPoint = OperatingPoint()
    """Where latency figures are read."""

    @model_validator(mode="after")
    def _sane(self) -> "Configuration":
        for i, g in enumerate(self.servers):
            if g.rack >= self.racks:
                raise ValueError(f"servers[{i}].rack is {g.rack} but the row has {self.racks} rack(s)")
        if self.queues is not None:
            names = [q.name for q in self.queues]
            if len(names) != len(set(names)):
                raise ValueError("queue names must be unique")
            seen: set[str] = set()
            for q in self.queues:
                dup = seen.intersection(q.classes)
                if dup:
                    raise ValueError(f"class {sorted(dup)[0]!r} is in more than one queue")
                seen.update(q.classes)
            for i, g in enumerate(self.servers):
                for qn in (g.queue_cores or {}):
                    if qn not in names:
                        raise ValueError(f"servers[{i}].queue_cores names unknown queue {qn!r}")
        return self
