"""Agentic workloads: the served LLM, task classes made of ordered stages, and service targets."""

from collections.abc import Iterable
from typing import Annotated, Literal

from pydantic import Field, model_validator

from models.base import Input, Sourced

SHARE_TOLERANCE = 1e-6
"""Class shares must sum to 1 within this tolerance (floating-point slack only)."""


class GpuCalibration(Input):
    """Measured serving throughput of the model on one GPU SKU, at full batch."""

    gpu: str
    """GPU SKU id."""
    prefill_tokens_per_s: float = Field(gt=0)
    """Input tokens processed per second per GPU at full batch."""
    decode_tokens_per_s: float = Field(gt=0)
    """Output tokens generated per second per GPU at full batch."""
    precision: Literal["fp4", "fp8", "bf16"]
    """Weight precision of the measured run (e.g. `fp4` for NVFP4/MXFP4 MLPerf rows). A calibration is used only when
    it matches the served model's `precision`, so an FP4 run never stands in for an FP8 deployment."""
    source: str
    """Benchmark the figure comes from (MLPerf round, vendor result) and any derivation."""


class ServedModel(Sourced):
    """The LLM the agents call, with what it costs a GPU to serve it."""

    name: str
    """Model name."""
    total_params_b: float = Field(gt=0)
    """Total parameters in billions (all experts for MoE)."""
    active_params_b: float = Field(gt=0)
    """Parameters active per token in billions (equal to total for dense models)."""
    bytes_per_param: float = Field(gt=0)
    """Bytes per weight as served (1 for FP8, 2 for BF16)."""
    kv_bytes_per_token: float = Field(gt=0)
    """KV-cache bytes held per token of context."""
    precision: Literal["fp8", "bf16"] = "fp8"
    """Precision the model is served at: calibrations measured at another precision are not used, and the roofline
    fallback reads this precision's dense TFLOPS."""
    calibrations: list[GpuCalibration] = Field(default_factory=list)
    """Measured per-GPU throughput; GPUs without one at the served precision use the roofline fallback."""
    prefill_mfu: float = Field(gt=0, le=1)
    """Roofline fallback: fraction of dense peak FLOPS reached in prefill."""
    decode_mfu: float = Field(gt=0, le=1)
    """Roofline fallback: fraction of dense peak FLOPS reached in decode at full batch."""
    bandwidth_efficiency: float = Field(gt=0, le=1)
    """Fraction of peak memory bandwidth reached when decoding one sequence alone (sets per-token latency)."""
    cached_token_cost_fraction: float = Field(ge=0, le=1)
    """Cost of a prefix-cache-hit input token relative to a new input token."""
    memory_usable_fraction: float = Field(gt=0, le=1)
    """Fraction of GPU memory the serving engine may use for weights and KV cache."""
    max_batch_per_replica: int = Field(gt=0)
    """Engine cap on concurrent sequences per model replica."""
    min_batch_per_replica: int = Field(default=1, gt=0)
    """Smallest batch a replica must be able to hold: a tensor/pipeline-parallel group of GPUs counts as a replica
    only if its usable HBM holds the weights plus the KV cache of this many calls of the workload's mean context.
    Default 1 (the weights and one call); the built-in entries give their basis."""
    max_pipeline_parallel: int = Field(default=1, gt=0)
    """Most pipeline-parallel stages one replica may use (inside one scale-up domain); 1 = tensor parallel only."""
    engine_host_cores_per_replica: float = Field(default=2.0, ge=0)
    """Floor on host physical cores the serving engine needs per replica besides one per GPU. Default 2: vLLM's
    "the minimum is 2 + N physical cores (1 for the API server, 1 for the engine core, and 1 per GPU worker)"
    (vLLM docs, configuration/optimization.md, "CPU Resources for GPU Deployments")."""
    engine_host_cores_per_gpu: float = Field(default=1.0, ge=0)
    """Floor on host physical cores per GPU of a replica (the GPU worker process); default 1, same vLLM source."""
    orchestration_core_seconds_per_call: float = Field(ge=0)
    """Reference-core seconds of host CPU per LLM call (tokenize, schedule, detokenize, API)."""
    orchestration_core_seconds_per_1k_output_tokens: float = Field(ge=0)
    """Reference-core seconds of host CPU per 1,000 generated tokens (per-step scheduling and sampling)."""

    @model_validator(mode="after")
    def _sane(self) -> "ServedModel":
        if self.active_params_b > self.total_params_b:
            raise ValueError("active_params_b cannot exceed total_params_b")
        keys = [(c.gpu, c.precision) for c in self.calibrations]
        if len(keys) != len(set(keys)):
            raise ValueError("one calibration per GPU SKU and precision")
        if self.min_batch_per_replica > self.max_batch_per_replica:
            raise ValueError(f"min_batch_per_replica ({self.min_batch_per_replica}) exceeds max_batch_per_replica "
                             f"({self.max_batch_per_replica})")
        return self


class _Stage(Input):
    name: str = Field(min_length=1)
    """Stage name, e.g. `generate`, `run_tests`."""
    count: float = Field(gt=0)
    """Mean occurrences per task (e.g. turns or tool calls)."""
    count_cv: float = Field(default=0.0, ge=0)
    """Coefficient of variation of the occurrence count across tasks."""
    cv: float = Field(default=1.0, ge=0)
    """Coefficient of variation of one occurrence's service time."""


class GpuStage(_Stage):
    """An LLM call served on the GPU pool."""

    resource: Literal["gpu"] = "gpu"
    """Resource the stage runs on."""
    new_input_tokens: float = Field(ge=0)
    """Input tokens per call that miss the prefix cache."""
    cached_input_tokens: float = Field(default=0.0, ge=0)
    """Input tokens per call served from the prefix cache."""
    output_tokens: float = Field(gt=0)
    """Generated tokens per call."""


class CpuStage(_Stage):
    """A tool call on host or tool-node CPU cores."""

    resource: Literal["cpu"] = "cpu"
    """Resource the stage runs on."""
    core_seconds: float = Field(gt=0)
    """Work per call in reference-core seconds."""
    parallelism: float = Field(default=1.0, ge=1)
    """Cores one call holds at once (work is spread evenly over them)."""


class DelayStage(_Stage):
    """A wait that holds no core or GPU (network, external API, human)."""

    resource: Literal["delay"] = "delay"
    """Resource the stage runs on."""
    seconds: float = Field(gt=0)
    """Mean duration per occurrence in seconds."""


class IoStage(_Stage):
    """Sandbox disk I/O of a tool call (image layers, repository checkout, build and test files) on the local NVMe
    drives of the servers whose cores run the class's tool queue; holds no core. Its time comes out of the model:
    the I/O at one stream's bandwidth plus the wait for a stream (docs/model.md, storage)."""

    resource: Literal["io"] = "io"
    """Resource the stage runs on."""
    read_mb: float = Field(ge=0)
    """MB read from local disk per occurrence."""
    write_mb: float = Field(ge=0)
    """MB written to local disk per occurrence."""

    @model_validator(mode="after")
    def _some(self) -> "IoStage":
        if self.read_mb + self.write_mb <= 0:
            raise ValueError("an io stage reads or writes something: read_mb + write_mb must be > 0")
        return self

    @property
    def io_mb(self) -> float:
        """MB moved per occurrence (reads and writes count alike against the drives' mixed bandwidth)."""
        return self.read_mb + self.write_mb


Stage = Annotated[GpuStage | CpuStage | DelayStage | IoStage, Field(discriminator="resource")]


class TaskClass(Input):
    """One kind of agent task and its share of the mix."""

    name: str = Field(min_length=1)
    """Class name, e.g. `swe-fix`."""
    share: float = Field(gt=0, le=1)
    """Fraction of tasks that are of this class."""
    sandbox_memory_gb: float = Field(default=0.0, ge=0)
    """Host memory a live task holds for its whole life (sandbox, repo, dependencies)."""
    sandbox_disk_gb: float = Field(default=0.0, ge=0)
    """Local disk a live task holds for its whole life (image layers, repository, caches) in GB."""
    stages: list[Stage] = Field(min_length=1)
    """Stages in the order a task runs them (one turn's worth, repeated by each stage's count)."""
    tool_wait_p95_seconds: float | None = Field(default=None, gt=0)
    """This class's target for the 95th-percentile wait for a tool core, in seconds; overrides the workload's
    `slo.tool_wait_p95_seconds` for this class. A tool queue serves its calls first come, first served, so every call
    in it waits alike: a queue is held to the tightest target of the classes it serves (`Workload.tool_wait_target`).
    An interactive class sharing a queue with a batch class holds the batch calls to its target; on its own queue it
    does not."""


class Slo(Input):
    """Service targets."""

    p95_task_seconds: float | None = Field(default=None, gt=0)
    """Target 95th-percentile task completion time in seconds (checked at the operating point)."""
    tool_wait_p95_seconds: float | None = Field(default=None, gt=0)
    """Target 95th-percentile wait for a core in any tool queue, in seconds (limits queue load)."""
    target_utilization: float | None = Field(default=None, gt=0, lt=1)
    """Planned load as a fraction of the sustainable throughput: the operating point the headline tasks/h, the
    latencies and the alert thresholds are quoted at. Omitted: the model assumption `operating_load_fraction`
    (0.8)."""


class Workload(Sourced):
    """A mix of agent task classes calling one served model."""

    name: str
    """Human name."""
    served_model: ServedModel
    """The LLM the agents call."""
    classes: list[TaskClass] = Field(min_length=1)
    """Task classes; shares sum to 1."""
    slo: Slo | None = None
    """Optional service targets."""

    @model_validator(mode="after")
    def _shares(self) -> "Workload":
        total = sum(c.share for c in self.classes)
        if abs(total - 1.0) > SHARE_TOLERANCE:
            raise ValueError(f"class shares sum to {total:.6g}, not 1")
        names = [c.name for c in self.classes]
        if len(names) != len(set(names)):
            raise ValueError("class names must be unique")
        return self

    def planned_load(self, default: float) -> float:
        """The planned load fraction: `slo.target_utilization`, else `default` (the model assumption)."""
        return self.slo.target_utilization if self.slo and self.slo.target_utilization else default

    def class_tool_wait_target(self, c: TaskClass) -> float | None:
        """Class `c`'s tool-wait target: its own, else the workload's, else None."""
        if c.tool_wait_p95_seconds is not None:
            return c.tool_wait_p95_seconds
        return self.slo.tool_wait_p95_seconds if self.slo and self.slo.tool_wait_p95_seconds else None

    def tool_wait_target(self, classes: Iterable[str]) -> float | None:
        """The tool-wait target of a queue serving `classes`: the tightest target among them (first come, first
        served, every call waits alike), None when none of them has one."""
        wanted = set(classes)
        targets = [t for c in self.classes if c.name in wanted and (t := self.class_tool_wait_target(c)) is not None]
        return min(targets) if targets else None

    @property
    def has_tool_wait_target(self) -> bool:
        """Whether any class is held to a tool-wait target (its own or the workload's)."""
        return any(self.class_tool_wait_target(c) is not None for c in self.classes)

    def class_named(self, name: str) -> TaskClass:
        for c in self.classes:
            if c.name == name:
                return c
        raise KeyError(name)
