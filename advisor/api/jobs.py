"""The work behind the API's solve endpoints, as plain functions of (catalog, request, limits).

Module-level so that a solve worker process (advisor/api/workers.py) can run them as well as a thread of the server:
the request objects and answers pickle; the catalog is the worker's own copy. Every function raises InputError
for input the user can fix (422) and lets anything else through (500)."""

from __future__ import annotations

from advisor.catalog import load_rack, load_workload
from advisor.optimizer.compare import ChipVsRack, LayoutComparison, chip_vs_rack, compare_layouts
from advisor.errors import InputError
from advisor.export import Artifact, export
from advisor.optimizer.optimize import OptimizeResult, optimize
from advisor.report.html import ReportRequest, render_report
from advisor.requests import ChipVsRackRequest, CompareRequest, EvaluateRequest, ExportRequest, OptimizeRequest
from advisor.service import evaluate_configuration, resolve_inputs
from advisor.optimizer.settings import OptimizerSettings
from models.assumptions import ModelAssumptions
from models.catalog import Catalog, UnknownId
from models.hardware import Rack
from models.pipeline import Evaluation
from models.workload import Workload

def solve_inputs(cat: Catalog, req) -> tuple[Workload, Rack, OptimizerSettings]:
    for field, ids, table in (("gpu_ids", req.gpu_ids, cat.gpus), ("cpu_ids", req.cpu_ids, cat.cpus)):
        for n, i in enumerate(ids or []):
            try:
                table[i]
            except UnknownId as e:  # 422 naming the list entry, with suggestions
                raise InputError(str(e), loc=("body", field, n), suggestions=e.suggestions) from None
    s = OptimizerSettings(assumptions=req.assumptions) if req.assumptions else OptimizerSettings()
    return load_workload(req.workload, cat), load_rack(req.rack, cat), s


def evaluate_job(cat: Catalog, req: EvaluateRequest) -> Evaluation:
    return evaluate_configuration(req.configuration, req.workload, req.rack, cat, req.assumptions)


def optimize_job(cat: Catalog, req: OptimizeRequest, time_limit_s: float) -> OptimizeResult:
    w, r, s = solve_inputs(cat, req)
    try:
        return optimize(w, r, cat, layout=req.layout, racks=req.racks, backend=req.solver, time_limit_s=time_limit_s,
                        objective=req.objective, required_tasks_per_hour=req.required_tasks_per_hour,
                        capital_budget_usd=req.capital_budget_usd, gpu_ids=req.gpu_ids, cpu_ids=req.cpu_ids,
                        settings=s, explain=req.explain, spares=req.spares)
    except ValueError as e:
        raise InputError(str(e)) from None


def compare_job(cat: Catalog, req: CompareRequest, time_limit_s: float) -> LayoutComparison:
    w, r, s = solve_inputs(cat, req)
    try:
        return compare_layouts(w, r, cat, racks=req.racks, backend=req.solver, time_limit_s=time_limit_s,
                               gpu_ids=req.gpu_ids, cpu_ids=req.cpu_ids, settings=s, explain=req.explain,
                               spares=req.spares)
    except ValueError as e:
        raise InputError(str(e)) from None


def export_job(cat: Catalog, req: ExportRequest, time_limit_s: float) -> Artifact:
    a = req.assumptions or ModelAssumptions()
    if req.configuration is not None:
        w, r = resolve_inputs(req.configuration, req.workload, req.rack, cat)
        source = req.configuration
    else:
        if req.workload is None or req.rack is None:
            raise InputError("give a configuration, or workload and rack to optimize",
                             loc=("body", "workload" if req.workload is None else "rack"))
        w, r = load_workload(req.workload, cat), load_rack(req.rack, cat)
        source = optimize(w, r, cat, layout=req.layout, racks=req.racks, backend=req.solver,
                          time_limit_s=time_limit_s, settings=OptimizerSettings(assumptions=a), explain=False)
    try:
        return export(req.format, source, w, cat, rack=r, assumptions=a, alert_headroom=req.alert_headroom,
                      settings=req.settings)
    except ValueError as e:
        raise InputError(str(e)) from None


def chip_vs_rack_job(cat: Catalog, req: ChipVsRackRequest, time_limit_s: float) -> ChipVsRack:
    table = cat.gpus if req.kind == "gpu" else cat.cpus
    for field in ("a", "b"):
        try:
            table[getattr(req, field)]
        except UnknownId as e:
            raise InputError(str(e), loc=("body", field), suggestions=e.suggestions) from None
    if req.a == req.b:
        raise InputError("a and b are the same SKU: give two different ones", loc=("body", "b"))
    s = OptimizerSettings(assumptions=req.assumptions) if req.assumptions else OptimizerSettings()
    w, r = load_workload(req.workload, cat), load_rack(req.rack, cat)
    try:
        return chip_vs_rack(req.kind, req.a, req.b, w, r, cat, layout=req.layout, racks=req.racks,
                            backend=req.solver, time_limit_s=time_limit_s, settings=s)
    except ValueError as e:
        raise InputError(str(e)) from None


def report_job(cat: Catalog, req: ReportRequest) -> tuple[str, dict]:
    """The report's HTML and data (the server stores them: the database is the server's, not the worker's)."""
    return render_report(req, cat)
