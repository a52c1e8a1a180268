"""The one service layer: the only code that turns a typed request (advisor/requests.py) into results.

The CLI, the HTTP API (in its solve workers) and batch runs parse their input into a request, call a function
here and render what it returns; none of them decides anything. Every function raises InputError for input the
user can fix and lets anything else through (a bug: HTTP 500, CLI exit 70)."""

from __future__ import annotations

from pathlib import Path

from advisor.catalog import builtin_catalog, check_sku_ids, load_configuration, load_rack, load_workload
from advisor.deadline import Deadline
from advisor.errors import InputError
from advisor.export import Artifact
from advisor.export import export as export_artifact
from advisor.optimizer.compare import ChipVsRack, LayoutComparison, chip_vs_rack, compare_layouts
from advisor.optimizer.optimize import OptimizeResult
from advisor.optimizer.optimize import optimize as optimize_layout
from advisor.optimizer.settings import OptimizerSettings
from advisor.requests import (
    ChipVsRackRequest,
    CompareRequest,
    EvaluateRequest,
    ExportRequest,
    OptimizeRequest,
    ReportRequest,
)
from models.assumptions import ModelAssumptions
from models.catalog import Catalog
from models.config import Configuration
from models.hardware import Rack
from models.pipeline import Evaluation
from models.pipeline import evaluate as evaluate_model
from models.workload import Workload


def resolve_inputs(
    config: Configuration,
    workload: str | dict | Workload | None,
    rack: str | dict | Rack | None,
    catalog: Catalog,
) -> tuple[Workload, Rack]:
    """The workload and rack of an evaluation: the ones given, else the configuration's own."""
    wref = workload if workload is not None else config.workload
    rref = rack if rack is not None else config.rack
    if wref is None:
        raise InputError("no workload: give one, or set `workload:` in the configuration", loc=("body", "workload"))
    if rref is None:
        raise InputError("no rack: give one, or set `rack:` in the configuration", loc=("body", "rack"))
    w = wref if isinstance(wref, Workload) else load_workload(wref, catalog)
    r = rref if isinstance(rref, Rack) else load_rack(rref, catalog)
    return w, r


def evaluate_configuration(
    config: Configuration | str | Path | dict,
    workload: str | dict | Workload | None = None,
    rack: str | dict | Rack | None = None,
    catalog: Catalog | None = None,
    assumptions: ModelAssumptions | None = None,
) -> Evaluation:
    catalog = catalog or builtin_catalog()
    if not isinstance(config, Configuration):
        config = load_configuration(config)
    w, r = resolve_inputs(config, workload, rack, catalog)
    try:
        return evaluate_model(config, w, r, catalog, assumptions)
    except InputError as e:
        raise InputError(f"configuration {config.name!r}: {e}", loc=e.loc, suggestions=e.suggestions) from None


def optimizer_settings(req, base: OptimizerSettings | None = None) -> OptimizerSettings:
    """The optimizer settings of a request: `base` (or the defaults) with the request's assumptions and MIP gap."""
    s = base or OptimizerSettings()
    update = {}
    if getattr(req, "assumptions", None) is not None:
        update["assumptions"] = req.assumptions
    if getattr(req, "mip_gap", None) is not None:
        update["mip_gap"] = req.mip_gap
    return s.model_copy(update=update) if update else s


def solve_inputs(cat: Catalog, req, base: OptimizerSettings | None = None
                 ) -> tuple[Workload, Rack, OptimizerSettings]:
    """Workload, rack and settings of a solve request, its SKU subsets checked against the catalog."""
    check_sku_ids(cat, req.gpu_ids, req.cpu_ids)
    return load_workload(req.workload, cat), load_rack(req.rack, cat), optimizer_settings(req, base)


def evaluate(req: EvaluateRequest, cat: Catalog) -> Evaluation:
    return evaluate_configuration(req.configuration, req.workload, req.rack, cat, req.assumptions)


def optimize(req: OptimizeRequest, cat: Catalog, time_limit_s: float | None = None,
             settings: OptimizerSettings | None = None, deadline: Deadline | None = None) -> OptimizeResult:
    """One layout's answer. `time_limit_s` (a server's cap, already applied) overrides the request's own;
    `settings` are the base optimizer settings (batch scenarios carry their own); `deadline`: the request's wall
    clock when it started before this call (advisor/deadline.py)."""
    w, r, s = solve_inputs(cat, req, settings)
    return optimize_layout(w, r, cat, layout=req.layout, racks=req.racks, backend=req.solver,
                           time_limit_s=time_limit_s if time_limit_s is not None else req.time_limit_s,
                           objective=req.objective, required_tasks_per_hour=req.required_tasks_per_hour,
                           capital_budget_usd=req.capital_budget_usd, gpu_ids=req.gpu_ids, cpu_ids=req.cpu_ids,
                           settings=s, explain=req.explain, existing=req.existing, allow_removal=req.allow_removal,
                           software_only=req.keep_hardware, spares=req.spares, deadline=deadline)


def compare(req: CompareRequest, cat: Catalog, time_limit_s: float | None = None,
            deadline: Deadline | None = None) -> LayoutComparison:
    w, r, s = solve_inputs(cat, req)
    return compare_layouts(w, r, cat, racks=req.racks, backend=req.solver,
                           time_limit_s=time_limit_s if time_limit_s is not None else req.time_limit_s,
                           gpu_ids=req.gpu_ids, cpu_ids=req.cpu_ids, settings=s, explain=req.explain,
                           existing=req.existing, allow_removal=req.allow_removal,
                           software_only=req.keep_hardware, spares=req.spares,
                           deadline=deadline)


def chip_vs_rack_ratio(req: ChipVsRackRequest, cat: Catalog, time_limit_s: float | None = None) -> ChipVsRack:
    table = cat.gpus if req.kind == "gpu" else cat.cpus
    for field in ("a", "b"):
        if getattr(req, field) not in table:
            table[getattr(req, field)]  # raises UnknownId (an InputError) with close matches
    if req.a == req.b:
        raise InputError("a and b are the same SKU: give two different ones", loc=("body", "b"))
    w, r = load_workload(req.workload, cat), load_rack(req.rack, cat)
    return chip_vs_rack(req.kind, req.a, req.b, w, r, cat, layout=req.layout, racks=req.racks,
                        backend=req.solver, time_limit_s=time_limit_s if time_limit_s is not None else req.time_limit_s,
                        settings=optimizer_settings(req))


def export(req: ExportRequest, cat: Catalog, time_limit_s: float | None = None) -> tuple[Artifact, OptimizeResult | None]:
    """The artifact, and the optimizer's answer it was made from (None when a configuration was given)."""
    a = req.assumptions or ModelAssumptions()
    solved = None
    if req.configuration is not None:
        w, r = resolve_inputs(req.configuration, req.workload, req.rack, cat)
        source: Configuration | OptimizeResult = req.configuration
    else:
        if req.workload is None or req.rack is None:
            raise InputError("give a configuration, or workload and rack to optimize",
                             loc=("body", "workload" if req.workload is None else "rack"))
        w, r = load_workload(req.workload, cat), load_rack(req.rack, cat)
        solved = source = optimize_layout(
            w, r, cat, layout=req.layout, racks=req.racks, backend=req.solver,
            time_limit_s=time_limit_s if time_limit_s is not None else req.time_limit_s,
            settings=OptimizerSettings(assumptions=a), explain=False)
    art = export_artifact(req.format, source, w, cat, rack=r, assumptions=a, alert_headroom=req.alert_headroom,
                          settings=req.settings)
    return art, solved


def report(req: ReportRequest, cat: Catalog, deadline: Deadline | None = None) -> tuple[str, dict]:
    """The report's HTML and data, within `deadline` if given (the request's clock)."""
    from advisor.report.html import render_report  # start-up cost: Jinja2 and the chart code, for reports only

    return render_report(req, cat, deadline=deadline)
