"""The work behind the API's solve endpoints: the service layer's functions, as module-level callables of
(catalog, request, time limit) that a solve worker process (advisor/api/workers.py) can run as well as a thread of
the server. The request objects and answers pickle; the catalog is the worker's own copy."""

from __future__ import annotations

from advisor import service
from advisor.export import Artifact
from advisor.optimizer.compare import ChipVsRack, LayoutComparison
from advisor.optimizer.optimize import OptimizeResult
from advisor.requests import (
    ChipVsRackRequest,
    CompareRequest,
    EvaluateRequest,
    ExportRequest,
    OptimizeRequest,
    ReportRequest,
)
from models.catalog import Catalog
from models.pipeline import Evaluation


def evaluate_job(cat: Catalog, req: EvaluateRequest) -> Evaluation:
    return service.evaluate(req, cat)


def optimize_job(cat: Catalog, req: OptimizeRequest, time_limit_s: float) -> OptimizeResult:
    return service.optimize(req, cat, time_limit_s)


def compare_job(cat: Catalog, req: CompareRequest, time_limit_s: float) -> LayoutComparison:
    return service.compare(req, cat, time_limit_s)


def export_job(cat: Catalog, req: ExportRequest, time_limit_s: float) -> Artifact:
    return service.export(req, cat, time_limit_s)[0]


def chip_vs_rack_job(cat: Catalog, req: ChipVsRackRequest, time_limit_s: float) -> ChipVsRack:
    return service.chip_vs_rack_ratio(req, cat, time_limit_s)


def report_job(cat: Catalog, req: ReportRequest) -> tuple[str, dict]:
    """The report's HTML and data (the server stores them: the database is the server's, not the worker's)."""
    return service.report(req, cat)
