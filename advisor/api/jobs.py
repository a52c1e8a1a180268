"""The work behind the API's solve endpoints: the service layer's functions, as module-level callables of
(catalog, request, time limit) that a solve worker process (advisor/api/workers.py) can run as well as a thread of
the server. The request objects and answers pickle; the catalog is the worker's own copy."""

from __future__ import annotations

import time

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


def _left(time_limit_s: float, end_unix: float | None) -> float:
    """The request's time left when the job starts: the HTTP cap covers the whole request, time queued for a worker
    included (`end_unix`: when the request must be answered, on the machine's clock)."""
    if end_unix is None:
        return time_limit_s
    return max(MIN_JOB_S, min(time_limit_s, end_unix - time.time()))


MIN_JOB_S = 0.1
"""A job that starts with its request's time already spent still runs one short search (every solve takes at
least a second: advisor/deadline.py) rather than none, so the answer says `time_limit` instead of failing."""


def optimize_job(cat: Catalog, req: OptimizeRequest, time_limit_s: float,
                 end_unix: float | None = None) -> OptimizeResult:
    return service.optimize(req, cat, _left(time_limit_s, end_unix))


def compare_job(cat: Catalog, req: CompareRequest, time_limit_s: float,
                end_unix: float | None = None) -> LayoutComparison:
    return service.compare(req, cat, _left(time_limit_s, end_unix))


def export_job(cat: Catalog, req: ExportRequest, time_limit_s: float) -> Artifact:
    return service.export(req, cat, time_limit_s)[0]


def chip_vs_rack_job(cat: Catalog, req: ChipVsRackRequest, time_limit_s: float) -> ChipVsRack:
    return service.chip_vs_rack_ratio(req, cat, time_limit_s)


def report_job(cat: Catalog, req: ReportRequest, end_unix: float | None = None) -> tuple[str, dict]:
    """The report's HTML and data (the server stores them: the database is the server's, not the worker's)."""
    if end_unix is not None:
        req = req.model_copy(update={"time_limit_s": _left(req.time_limit_s, end_unix)})
    return service.report(req, cat)
