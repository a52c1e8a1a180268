"""Typed requests of the service layer: what the CLI, the HTTP API and batch ask for, defined once.

Strict (`0` is not `false`), bounded numbers (models.base.BoundedNumbers), no extra fields; every front end parses
its input into one of these and hands it to the service."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field

from advisor.export import ExportSettings
from advisor.optimizer.optimize import Objective
from advisor.optimizer.options import Layout
from advisor.report.html import MAX_RACKS
from models.assumptions import ModelAssumptions
from models.base import BoundedNumbers
from models.config import Configuration


MAX_SPARES = 100
"""Upper bound of `spares` (every request number is bounded); spares are capped at the servers of each kind anyway."""


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
    solver: Literal["cbc", "ortools"] = "cbc"
    time_limit_s: float | None = Field(default=None, gt=0)
    """Solver time limit in seconds (capped by the server's time_limit_cap_s; omitted: the cap)."""
    gpu_ids: list[str] | None = None
    """Only these GPU SKUs."""
    cpu_ids: list[str] | None = None
    """Only these CPU SKUs."""
    assumptions: ModelAssumptions | None = None
    """Model assumptions to override."""
    spares: int = Field(default=0, ge=0, le=MAX_SPARES)
    """Servers of each kind in the answer held back as spares: the answer states the throughput of the others, and
    the throughput with one GPU server, one CPU node and one power feed lost (`failures`)."""


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
    solver: Literal["cbc", "ortools"] = "cbc"
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
    solver: Literal["cbc", "ortools"] = "cbc"
    time_limit_s: float | None = Field(default=None, gt=0)
    """Solver time limit (capped by the server's time_limit_cap_s)."""
    alert_headroom: float = Field(default=0.5, gt=0, lt=1)
    """Alert thresholds sit this far from the model's value towards the metric's limit (as in reports)."""
    assumptions: ModelAssumptions | None = None
    settings: ExportSettings | None = None
    """Export choices (name prefix, label domain, reserved cores, GPU device table, Prometheus windows)."""
