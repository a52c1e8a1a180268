"""Turn a recommendation into operations: Kubernetes manifests, Slurm configuration, Prometheus alerting rules.

`export(fmt, source, ...)` takes an `OptimizeResult` (its configuration and evaluation) or a `Configuration` (which
is evaluated first) and returns an `Artifact`: pure text, no I/O. The numbers come from one `Plan`
(`advisor.export.plan`) and the report's thresholds (`advisor.operations`), so every artifact and the HTML report
agree.
"""

from __future__ import annotations

from typing import Literal

from advisor.export import k8s, prometheus, slurm
from advisor.export.plan import ExportSettings, Plan, build_plan
from advisor.optimizer.optimize import OptimizeResult
from models.assumptions import ModelAssumptions
from models.base import Frozen
from models.catalog import Catalog
from models.config import Configuration
from models.hardware import Rack
from models.pipeline import evaluate
from models.workload import Workload
from models.errors import InputError

Format = Literal["k8s", "slurm", "prometheus"]
FORMATS: tuple[str, ...] = ("k8s", "slurm", "prometheus")
DEFAULT_ALERT_HEADROOM = 0.5
"""Same default as the report's alert_headroom: alerts halfway from the expected value to the limit."""


class Artifact(Frozen):
    format: str
    filename: str
    """Suggested file name (the report's download name)."""
    media_type: str
    text: str


_KINDS = {
    "k8s": ("rack-advisor-k8s.yaml", "application/yaml", k8s.render),
    "slurm": ("rack-advisor-slurm.conf", "text/plain", slurm.render),
    "prometheus": ("rack-advisor-alerts.rules.yaml", "application/yaml", prometheus.render),
}


def plan_for(source: OptimizeResult | Configuration, workload: Workload, catalog: Catalog,
             rack: Rack | None = None, assumptions: ModelAssumptions | None = None,
             alert_headroom: float = DEFAULT_ALERT_HEADROOM, settings: ExportSettings | None = None) -> Plan:
    """The plan of an optimize result (its own evaluation) or of a configuration (evaluated here; needs rack)."""
    a = assumptions or ModelAssumptions()
    if isinstance(source, OptimizeResult):
        if not source.configuration or source.evaluation is None:
            raise InputError(f"nothing to export: the optimizer found no configuration ({source.status}: "
                             f"{source.message})")
        config, ev = Configuration.model_validate(source.configuration), source.evaluation
    else:
        if rack is None:
            raise InputError("exporting a configuration needs its rack profile")
        config, ev = source, evaluate(source, workload, rack, catalog, a)
    return build_plan(config, ev, workload, catalog, a, alert_headroom, settings)


def render(fmt: str, plan: Plan) -> Artifact:
    try:
        filename, media, fn = _KINDS[fmt]
    except KeyError:
        raise InputError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}") from None
    return Artifact(format=fmt, filename=filename, media_type=media, text=fn(plan))


def export(fmt: str, source: OptimizeResult | Configuration, workload: Workload, catalog: Catalog,
           rack: Rack | None = None, assumptions: ModelAssumptions | None = None,
           alert_headroom: float = DEFAULT_ALERT_HEADROOM, settings: ExportSettings | None = None) -> Artifact:
    """One artifact for an optimize result or a configuration. Raises ValueError for input it cannot export."""
    if fmt not in _KINDS:
        raise InputError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
    return render(fmt, plan_for(source, workload, catalog, rack, assumptions, alert_headroom, settings))


__all__ = ["Artifact", "ExportSettings", "FORMATS", "Format", "Plan", "build_plan", "export", "plan_for", "render"]
