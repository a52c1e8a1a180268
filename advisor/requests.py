"""Typed requests of the service layer: what the CLI, the HTTP API and batch ask for, defined once.

Strict (`0` is not `false`), bounded numbers (models.base.BoundedNumbers), no extra fields; every front end parses
its input into one of these and hands it to the service."""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationInfo, field_validator, model_validator

from advisor.export import ExportSettings
from advisor.optimizer.optimize import Objective
from advisor.optimizer.options import Layout
from models.assumptions import ModelAssumptions
from models.base import BoundedNumbers
from models.config import Configuration


MAX_SPARES = 100
"""Upper bound of `spares` (every request number is bounded); spares are capped at the servers of each kind anyway."""
MAX_RACKS = 1000
"""Largest row a solve request may ask for: a data hall of 1,000 racks (the row bench/bench_optimizer.py proves;
a row is solved as rack patterns, so its solve time is bounded by the time limit, not by this)."""
MAX_REPORT_RACKS = 64
"""Largest row a report may draw (the report draws one elevation and one bill-of-materials block per rack)."""


class _Request(BoundedNumbers):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, strict=True, allow_inf_nan=False)


class EvaluateRequest(_Request):
    """Evaluate one configuration: the pipeline model's throughput, bottleneck, latencies, power and space."""

    configuration: Configuration
    """Servers, queues and operating point (the same as a configuration YAML file)."""
    workload: str | dict[str, Any] | None = None
    """Workload preset id or inline object; omitted: the configuration's `workload`."""
    rack: str | dict[str, Any] | None = None
    """Rack profile id or inline object; omitted: the configuration's `rack`."""
    assumptions: ModelAssumptions | None = None
    """Model assumptions to override."""


class _SolveRequest(_Request):
    workload: str | dict[str, Any]
    """Workload preset id or inline object (served_model may be a catalog id)."""
    rack: str | dict[str, Any]
    """Rack profile id or inline object."""
    racks: int = Field(default=1, ge=1, le=MAX_RACKS)
    """Racks in the row, each with the profile's budgets."""
    solver: Literal["cbc", "ortools", "highs"] = "cbc"
    time_limit_s: float | None = Field(default=None, gt=0)
    """Wall-clock limit in seconds for the whole request, time queued for a worker included (capped by the
    server's time_limit_cap_s; omitted: the cap)."""
    mip_gap: float | None = Field(default=None, ge=0, le=0.5)
    """Relative MIP gap at which the solver stops (omitted: the optimizer's default, OptimizerSettings.mip_gap)."""
    gpu_ids: list[str] | None = None
    """Only these GPU SKUs."""
    cpu_ids: list[str] | None = None
    """Only these CPU SKUs."""
    assumptions: ModelAssumptions | None = None
    """Model assumptions to override."""
    existing: Configuration | None = None
    """Servers you own (a configuration as `advisor optimize --save-config` writes it): they stay in the answer, the
    optimizer chooses what to add within the budgets, and the answer carries a migration plan."""
    allow_removal: bool = False
    """With `existing`: owned servers may be removed, each returning `assumptions.costs.salvage_fraction` of its
    catalog price to the capital budget."""
    keep_hardware: bool = False
    """With `existing`: buy, remove and swap nothing; only the host cores' split (serving engine, tool queues) and the
    queue partition are optimized (the first step of a migration: recalibrate the queues on the servers you have)."""
    spares: int = Field(default=0, ge=0, le=MAX_SPARES)
    """Servers of each kind in the answer held back as spares: the answer states the throughput of the others, and
    the throughput with one GPU server, one CPU node and one power feed lost (`failures`)."""

    @field_validator("keep_hardware")
    @classmethod
    def _keep(cls, v: bool, info: ValidationInfo) -> bool:
        return _check_keep_hardware(v, info)


class OptimizeRequest(_SolveRequest):
    """Optimize one layout."""

    layout: Layout = "hybrid"
    objective: Objective = "max_throughput"
    required_tasks_per_hour: float | None = Field(default=None, gt=0)
    """For min_cost / min_power."""
    capital_budget_usd: float | None = Field(default=None, gt=0)
    explain: bool = True
    """Shadow prices and what-it-takes re-solves (slower)."""


class CompareRequest(_SolveRequest):
    """Optimize layouts A, B and hybrid under the same budgets."""

    explain: bool = False
    """Shadow prices and what-it-takes re-solves for every layout (slower)."""


class ChipVsRackRequest(_Request):
    """Per-chip ratio against the rack-level throughput ratio for two CPU or two GPU SKUs under the same budgets."""

    kind: Literal["cpu", "gpu"]
    """Compare two GPU SKUs or two CPU SKUs."""
    a: str
    """First SKU id (the ratios are b over a)."""
    b: str
    """Second SKU id."""
    workload: str | dict[str, Any]
    """Workload preset id or inline object."""
    rack: str | dict[str, Any]
    """Rack profile id or inline object."""
    layout: Layout = "hybrid"
    racks: int = Field(default=1, ge=1, le=MAX_RACKS)
    """Racks in the row, each with the profile's budgets."""
    solver: Literal["cbc", "ortools", "highs"] = "cbc"
    time_limit_s: float | None = Field(default=None, gt=0)
    """Solver time limit per side (capped by the server's time_limit_cap_s; omitted: the cap)."""
    assumptions: ModelAssumptions | None = None
    """Model assumptions to override."""


class ExportRequest(_Request):
    """An operations artifact (Kubernetes manifests, Slurm bundle, Prometheus rules) for a configuration, or for the
    optimizer's answer to the same inputs as /v1/optimize when no configuration is given."""

    format: Literal["k8s", "slurm", "prometheus"]
    configuration: Configuration | None = None
    """Export this configuration (evaluated first); omitted: optimize `layout` and export its answer."""
    workload: str | dict[str, Any] | None = None
    """Workload preset id or inline object; with a configuration, omitted: the configuration's `workload`."""
    rack: str | dict[str, Any] | None = None
    """Rack profile id or inline object; with a configuration, omitted: the configuration's `rack`."""
    layout: Layout = "hybrid"
    """Layout to optimize when no configuration is given."""
    racks: int = Field(default=1, ge=1, le=MAX_RACKS)
    solver: Literal["cbc", "ortools", "highs"] = "cbc"
    time_limit_s: float | None = Field(default=None, gt=0)
    """Wall-clock limit for the whole request, all three layouts (capped by the server's time_limit_cap_s)."""
    alert_headroom: float = Field(default=0.5, gt=0, lt=1)
    """Alert thresholds sit this far from the model's value towards the metric's limit (as in reports)."""
    assumptions: ModelAssumptions | None = None
    settings: ExportSettings | None = None
    """Export choices (name prefix, label domain, reserved cores, GPU device table, Prometheus windows)."""


class ReportRequest(_Request):
    """What to report on: a workload and rack (catalog id or inline object), one layout or the best of A/B/hybrid."""

    workload: str | dict[str, Any]
    """Workload preset id, or an inline workload object (served_model may be a catalog id)."""
    rack: str | dict[str, Any]
    """Rack profile id, or an inline rack object."""
    racks: int = Field(default=1, ge=1, le=MAX_REPORT_RACKS)
    """Racks in the row, each with the profile's budgets."""
    layout: Layout | None = None
    """Recommend this layout; omitted (or `compare: true`): the best of A, B and hybrid."""
    compare: bool = False
    """Recommend the best of A, B and hybrid (the default when no layout is given)."""
    solver: Literal["cbc", "ortools", "highs"] = "cbc"
    time_limit_s: float = Field(default=30.0, gt=0)
    """Wall-clock limit for the whole report: the layout comparison (at most 70% of it), the sweeps and
    chip-vs-rack share it (advisor/deadline.py)."""
    gpu_ids: list[str] | None = None
    """Only these GPU SKUs."""
    cpu_ids: list[str] | None = None
    """Only these CPU SKUs."""
    sensitivity: bool = True
    """Draw the sensitivity sweeps (the costly part of a report)."""
    power_factors: list[float] = Field(default=[0.5, 0.75, 1.0, 1.25, 1.5], min_length=2, max_length=9)
    """Rack power budget sweep, as multiples of the rack profile's power_kw."""
    tool_factors: list[float] = Field(default=[0.25, 0.5, 1.0, 2.0, 4.0], min_length=2, max_length=9)
    """Tool-time sweep: every CPU stage's core_seconds multiplied by these factors."""
    sweep_time_limit_s: float = Field(default=5.0, gt=0)
    """Solver time limit per sweep point and layout."""
    sweep_budget_s: float = Field(default=20.0, gt=0)
    """Wall-clock budget for both sweeps together (half each); points left when it runs out are marked skipped."""
    stage_step: float = Field(default=0.2, gt=0, le=1)
    """Relative change applied to each stage's count per task to find the stage shares the answer depends on most
    (each stage in turn; the chosen configuration re-evaluated, the most telling stage re-solved). 0.2: the relative
    half-width of the 95% confidence interval `advisor fit` gives for the largest GPU stage share from 400 traced
    swe-agent tasks (test-heavy/generate 21.5%, CI 17.7-25.4%): how far a measured share can be off."""
    alert_headroom: float = Field(default=0.5, gt=0, lt=1)
    """Alert thresholds sit this far from the model's operating-point value towards the metric's limit
    (0.5: halfway between the expected utilization and saturation)."""
    existing: Configuration | None = None
    """Servers you own (as `advisor optimize --save-config` writes them): every layout keeps them, and the report
    adds the migration plan from them to the recommendation."""
    allow_removal: bool = False
    """With `existing`: owned servers may be removed (salvage value: the default cost assumptions)."""
    keep_hardware: bool = False
    """With `existing`: buy, remove and swap nothing; only the host cores' split (serving engine, tool queues) and the
    queue partition are optimized (the first step of a migration: recalibrate the queues on the servers you have)."""
    spares: int = Field(default=0, ge=0, le=MAX_SPARES)
    """Spare servers per pool in every rack for the recommended answers (advisor/optimizer/failures.py)."""

    @field_validator("keep_hardware")
    @classmethod
    def _keep(cls, v: bool, info: ValidationInfo) -> bool:
        return _check_keep_hardware(v, info)

    @field_validator("power_factors", "tool_factors")
    @classmethod
    def _positive(cls, v: list[float]) -> list[float]:
        if any(not (f > 0 and math.isfinite(f)) for f in v):
            raise ValueError("factors must be positive numbers")
        return sorted(set(v))

    @model_validator(mode="after")
    def _one(self) -> ReportRequest:
        if self.layout is not None and self.compare:
            raise ValueError("give layout or compare, not both")
        return self


def _check_keep_hardware(keep: bool, info: ValidationInfo) -> bool:
    """keep_hardware is declared after existing and allow_removal, so both are in `info.data` (when valid)."""
    if keep and info.data.get("existing") is None:
        raise ValueError("keep_hardware needs existing: the servers to keep")
    if keep and info.data.get("allow_removal"):
        raise ValueError("give keep_hardware or allow_removal, not both: keeping the hardware removes nothing")
    return keep

