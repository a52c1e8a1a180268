"""Command line: `advisor catalog`, `advisor evaluate`, `advisor optimize`, `advisor compare`."""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path

import typer
from rich.table import Table

from advisor.catalog import check_sku_ids
from advisor.errors import InputError
from advisor.cli.common import (
    BUG_EXIT,
    CATALOG_OPT,
    QUIET_OPT,
    cli_catalog,
    err,
    fail,
    inline_file_refs,
    out,
    progress,
    user_errors,
)
from advisor.cli.render import print_evaluation
from advisor.service import evaluate_configuration

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Fill racks for the most agentic AI tasks per hour.")


class Kind(str, Enum):
    cpus = "cpus"
    gpus = "gpus"
    chassis = "chassis"
    racks = "racks"
    workloads = "workloads"
    served_models = "served_models"
    systems = "systems"
    switches = "switches"


def _catalog(path: Path | None = None):
    return cli_catalog(path)


CATALOG_COLUMNS = {
    "cpus": ("id", "vendor", "cores", "tdp_w", "per_core_perf", "platform"),
    "gpus": ("id", "vendor", "tdp_w", "memory_gb", "fp8_tflops", "form_factor", "cooling"),
    "chassis": ("id", "role", "height_u", "cpu_sockets", "gpu_counts", "base_power_w", "cooling"),
    "racks": ("id", "power_kw", "air_cooling_kw", "liquid_cooling_kw", "height_u", "reserved_u", "redundancy",
              "max_weight_kg", "tor_switch"),
    "workloads": ("id", "name", "served_model", "classes"),
    "served_models": ("id", "name", "total_params_b", "active_params_b", "precision"),
    "systems": ("id", "compute_tray", "compute_trays", "switch_trays", "power_shelves", "height_u", "weight_kg"),
    "switches": ("id", "name", "height_u", "ports", "port_speed_gbps", "power_w", "weight_kg"),
}


SOURCE_WIDTH = 60
"""Characters of `source` shown in the table (the JSON output carries it whole)."""


@app.command()
def catalog(
    kind: Kind = typer.Argument(Kind.cpus, help="Which table to list."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list of entries.", metavar=""),
    catalog_dir: Path | None = CATALOG_OPT,
) -> None:
    """List catalog entries, each with its id and source."""
    cat = _catalog(catalog_dir)
    table = getattr(cat, kind.value)
    entries = [e.model_dump(mode="json") for e in table]
    if as_json:
        print(json.dumps(entries, indent=2))
        return
    t = Table(title=f"{kind.value} ({len(entries)})")
    cols = CATALOG_COLUMNS[kind.value]
    for c in (*cols, "source"):
        t.add_column(c, overflow="fold", no_wrap=(c == "id"))
    for e in entries:
        row = []
        for c in cols:
            v = e.get(c)
            if c == "served_model":
                v = v["id"]
            elif c == "classes":
                v = ", ".join(f"{x['name']} ({x['share']:g})" for x in v)
            row.append("" if v is None else str(v))
        src = e["source"]
        t.add_row(*row, src if len(src) <= SOURCE_WIDTH else src[: SOURCE_WIDTH - 1] + "…")
    out.print(t)


class LayoutOpt(str, Enum):
    a = "a"
    b = "b"
    hybrid = "hybrid"


class SolverOpt(str, Enum):
    cbc = "cbc"
    ortools = "ortools"
    highs = "highs"


@app.command("evaluate")
def evaluate_cmd(
    config: Path = typer.Argument(..., help="Configuration YAML or JSON (servers, queues), or an optimize or compare "
                                            "answer (--json output, or a layout of one) as it is."),
    workload: str | None = typer.Option(None, "--workload", "-w", help="Workload preset id or YAML file."),
    rack: str | None = typer.Option(None, "--rack", "-r", help="Rack profile id or YAML file."),
    layout: LayoutOpt | None = typer.Option(None, "--layout", help="Of a compare answer, evaluate this layout "
                                                                      "(default: its best layout)."),
    catalog_dir: Path | None = CATALOG_OPT,
    as_json: bool = typer.Option(False, "--json", help="Print JSON.", metavar=""),
) -> None:
    """Throughput, bottleneck, GPU idle time, stage shares, latency, power and space of one configuration.

    Exit codes: 0 within the rack budgets; 1 over a budget (power, cooling or space: each named on stderr);
    2 bad input."""
    from advisor.catalog import load_configuration

    cat = _catalog(catalog_dir)
    try:
        cfg = load_configuration(config, layout=layout.value if layout else None)
        ev = evaluate_configuration(cfg, workload, rack, cat)
    except InputError as e:
        fail(str(e))
    if as_json:
        print(ev.model_dump_json(indent=2))
    else:
        print_evaluation(ev, out)
    over = [f"rack {r.rack}: {', '.join(r.exceeded)}" for r in ev.racks if r.exceeded]
    if over:
        err.print(f"over budget: {'; '.join(over)}", highlight=False, soft_wrap=True)
        raise typer.Exit(1)


class ObjectiveOpt(str, Enum):
    max_throughput = "max_throughput"
    max_operating_throughput = "max_operating_throughput"
    min_cost = "min_cost"
    min_power = "min_power"
    min_cost_per_task = "min_cost_per_task"
    min_tco_for_throughput = "min_tco_for_throughput"


SPARES_OPT = typer.Option(0, "--spares", min=0, help="Spare servers per pool in every rack (powered off; their "
                          "space, weight and price reserved); the answer states the throughput with one GPU server, "
                          "CPU node or power feed lost.")
WORKLOAD_OPT = typer.Option(..., "--workload", "-w", help="Workload preset id or YAML file.")
RACK_OPT = typer.Option(..., "--rack", "-r", help="Rack profile id or YAML file.")
EXISTING_OPT = typer.Option(None, "--existing", help="Configuration YAML of the servers you own (as --save-config "
                            "writes it): they stay; the optimizer adds within the budgets and plans the migration.")
REMOVAL_OPT = typer.Option(False, "--allow-removal", help="With --existing: owned servers may be removed, each "
                           "returning --salvage-fraction of its catalog price to the capital budget.")
KEEP_OPT = typer.Option(False, "--keep-hardware", help="With --existing: buy, remove and swap nothing; optimize only "
                        "the split of host cores between the serving engine and the tool queues, and the queues.")
SALVAGE_OPT = typer.Option(None, "--salvage-fraction", min=0, max=1, help="Share of an owned server's catalog price "
                           "a removal returns (default 0: straight-line write-off, no residual value).")


def _brownfield(existing: Path | None, salvage: float | None):
    """The owned configuration of --existing and the model assumptions carrying --salvage-fraction (None: the
    defaults)."""
    from advisor.catalog import load_configuration
    from models.assumptions import ModelAssumptions
    from models.tco import CostAssumptions

    cfg = None
    if existing is not None:
        try:
            cfg = load_configuration(existing)
        except InputError as e:
            fail(f"--existing {existing}: {e}")
    assumptions = ModelAssumptions(costs=CostAssumptions(salvage_fraction=salvage)) if salvage is not None else None
    return cfg, assumptions


@app.command("optimize")
def optimize_cmd(
    workload: str = WORKLOAD_OPT,
    rack: str = RACK_OPT,
    racks: int = typer.Option(1, "--racks", min=1, help="Racks in the row, each with the profile's budgets."),
    layout: LayoutOpt = typer.Option(LayoutOpt.hybrid, "--layout", help="a (GPU-first), b (balanced) or hybrid."),
    solver: SolverOpt = typer.Option(SolverOpt.cbc, "--solver"),
    time_limit: float = typer.Option(60.0, "--time-limit", min=1, help="Seconds for the whole optimization."),
    objective: ObjectiveOpt = typer.Option(ObjectiveOpt.max_throughput, "--objective"),
    required: float | None = typer.Option(None, "--required-tasks-per-hour", help="For min_cost / min_power: the sustainable tasks/h to reach; for min_tco_for_throughput: the tasks/h "
                                   "to serve at the operating load fraction."),
    capital: float | None = typer.Option(None, "--capital-usd", help="Capital budget in USD."),
    gpus: list[str] | None = typer.Option(None, "--gpu", help="Only these GPU SKUs (repeat)."),
    cpus: list[str] | None = typer.Option(None, "--cpu", help="Only these CPU SKUs (repeat)."),
    gap: float = typer.Option(1e-6, "--gap", min=0, max=0.5, help="Relative MIP gap at which to stop."),
    spares: int = SPARES_OPT,
    catalog_dir: Path | None = CATALOG_OPT,
    as_json: bool = typer.Option(False, "--json", metavar=""),
    quiet: bool = QUIET_OPT,
    save_config: Path | None = typer.Option(None, "--save-config", help="Write the chosen configuration as YAML "
                                               "(a workload or rack from a file is written into it, so that "
                                               "`advisor evaluate` of the saved file gives this answer anywhere)."),
    existing: Path | None = EXISTING_OPT,
    allow_removal: bool = REMOVAL_OPT,
    keep_hardware: bool = KEEP_OPT,
    salvage: float | None = SALVAGE_OPT,
) -> None:
    """Choose servers, SKUs, cores per GPU and queues for the most tasks per hour under the rack budgets.

    Exit codes: 0 a configuration was found; 1 infeasible (the diagnosis says which budget); 2 bad input."""
    from advisor import service
    from advisor.cli.render import print_migration, print_optimize
    from advisor.requests import OptimizeRequest

    cat = _catalog(catalog_dir)
    owned, assumptions = _brownfield(existing, salvage)
    with user_errors("optimize request"):
        req = OptimizeRequest(workload=workload, rack=rack, racks=racks, layout=layout.value, solver=solver.value,
                              time_limit_s=time_limit, mip_gap=gap, objective=objective.value,
                              required_tasks_per_hour=required, capital_budget_usd=capital, gpu_ids=gpus or None,
                              cpu_ids=cpus or None, existing=owned, allow_removal=allow_removal,
                              keep_hardware=keep_hardware, assumptions=assumptions, spares=spares)
        check_sku_ids(cat, req.gpu_ids, req.cpu_ids)  # bad input fails before the progress line
        with progress(f"optimizing layout {layout.value} (time limit {time_limit:g} s)", quiet or as_json):
            res = service.optimize(req, cat)
    if res.configuration:
        res = res.model_copy(update={"configuration": inline_file_refs(res.configuration, workload, rack)})
    if save_config and res.configuration:
        import yaml

        try:
            save_config.write_text(yaml.safe_dump(res.configuration, sort_keys=False))
        except OSError as e:
            fail(f"--save-config {save_config}: cannot write ({e.strerror or e})")
    if as_json:
        print(res.model_dump_json(indent=2, exclude={"evaluation"}))
    else:
        print_optimize(res, out)
        print_migration(res.migration, out)
    if res.status == "infeasible":
        raise typer.Exit(1)


@app.command("compare")
def compare_cmd(
    workload: str = WORKLOAD_OPT,
    rack: str = RACK_OPT,
    racks: int = typer.Option(1, "--racks", min=1),
    solver: SolverOpt = typer.Option(SolverOpt.cbc, "--solver"),
    time_limit: float = typer.Option(60.0, "--time-limit", min=1, help="Seconds for the whole comparison (all three layouts)."),
    gpus: list[str] | None = typer.Option(None, "--gpu", help="Only these GPU SKUs (repeat)."),
    cpus: list[str] | None = typer.Option(None, "--cpu", help="Only these CPU SKUs (repeat)."),
    spares: int = SPARES_OPT,
    catalog_dir: Path | None = CATALOG_OPT,
    as_json: bool = typer.Option(False, "--json", metavar=""),
    quiet: bool = QUIET_OPT,
    existing: Path | None = EXISTING_OPT,
    allow_removal: bool = REMOVAL_OPT,
    keep_hardware: bool = KEEP_OPT,
    salvage: float | None = SALVAGE_OPT,
) -> None:
    """Optimize layouts A (GPU-first), B (balanced) and hybrid, with ratios against A.

    Exit codes: 0 at least one layout has a configuration; 1 every layout is infeasible; 2 bad input."""
    from advisor import service
    from advisor.cli.render import print_compare, print_migration
    from advisor.requests import CompareRequest

    cat = _catalog(catalog_dir)
    owned, assumptions = _brownfield(existing, salvage)
    with user_errors("compare request"):
        req = CompareRequest(workload=workload, rack=rack, racks=racks, solver=solver.value, time_limit_s=time_limit,
                             gpu_ids=gpus or None, cpu_ids=cpus or None, existing=owned, allow_removal=allow_removal,
                             keep_hardware=keep_hardware, assumptions=assumptions, spares=spares)
        check_sku_ids(cat, req.gpu_ids, req.cpu_ids)  # bad input fails before the progress line
        with progress(f"optimizing layouts a, b and hybrid (time limit {time_limit:g} s for all three)", quiet or as_json):
            cmp = service.compare(req, cat)
    cmp = cmp.model_copy(update={"results": [
        x.model_copy(update={"configuration": inline_file_refs(x.configuration, workload, rack)})
        if x.configuration else x for x in cmp.results]})
    if as_json:
        print(cmp.model_dump_json(indent=2, exclude={"results": {"__all__": {"evaluation"}}}))
    else:
        print_compare(cmp, out)
        print_migration(next(x for x in cmp.results if x.layout == cmp.best_layout).migration, out)
    if all(x.status == "infeasible" or not x.servers for x in cmp.results):
        raise typer.Exit(1)


@app.command("chip-vs-rack")
def chip_vs_rack_cmd(
    workload: str = WORKLOAD_OPT,
    rack: str = RACK_OPT,
    gpu: list[str] | None = typer.Option(None, "--gpu", help="Two GPU SKUs to compare."),
    cpu: list[str] | None = typer.Option(None, "--cpu", help="Two CPU SKUs to compare."),
    layout: LayoutOpt = typer.Option(LayoutOpt.hybrid, "--layout"),
    racks: int = typer.Option(1, "--racks", min=1),
    solver: SolverOpt = typer.Option(SolverOpt.cbc, "--solver"),
    catalog_dir: Path | None = CATALOG_OPT,
    as_json: bool = typer.Option(False, "--json", metavar=""),
    quiet: bool = QUIET_OPT,
) -> None:
    """Per-chip ratio against rack-level throughput ratio for two CPU or two GPU SKUs under the same budgets."""
    from advisor import service
    from advisor.requests import ChipVsRackRequest

    pair, kind = (gpu, "gpu") if gpu else (cpu, "cpu")
    if not pair or len(pair) != 2 or (gpu and cpu):
        fail("give exactly two SKUs with --gpu A --gpu B, or two with --cpu A --cpu B")
    cat = _catalog(catalog_dir)
    with user_errors("chip-vs-rack request"):
        req = ChipVsRackRequest(kind=kind, a=pair[0], b=pair[1], workload=workload, rack=rack, layout=layout.value,
                                racks=racks, solver=solver.value)
        check_sku_ids(cat, gpu, cpu)  # bad input fails before the progress line
        with progress(f"optimizing layout {layout.value} with each of {pair[0]} and {pair[1]}", quiet or as_json):
            res = service.chip_vs_rack_ratio(req, cat)
    if as_json:
        print(res.model_dump_json(indent=2))
    else:
        out.print(f"{res.per_chip_metric}: {res.a.sku} {res.a.per_chip:,.1f}, {res.b.sku} {res.b.per_chip:,.1f}")
        f = res.factors
        if f is not None and res.rack_ratio is not None:
            out.print(f"rack ratio {res.rack_ratio:.2f}x = efficiency {f.efficiency:.2f}x (chip {f.chip:.2f}x x units "
                      f"{f.units:.2f}x) x scheduling {f.scheduling:.2f}x")
        out.print(res.explanation)


EXTENSIONS = ("advisor.cli.report", "advisor.cli.sim", "advisor.cli.batch", "advisor.cli.export")
"""Modules that add commands (serve, report, simulate, fit, batch, ...) through a `register(app)` function."""


def _register_extensions() -> None:
    import importlib

    for name in EXTENSIONS:
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name == name:
                continue
            raise
        mod.register(app)


_register_extensions()


def main() -> None:  # console-script entry point
    try:
        app()
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)
    except Exception:  # noqa: BLE001 - input errors exit 2 inside the commands; what reaches here is a bug
        import traceback

        traceback.print_exc()
        err.print(f"internal error: this is a bug in rack-advisor, not in your input; please report it with the "
                  f"traceback above (exit {BUG_EXIT})", highlight=False, soft_wrap=True)
        sys.exit(BUG_EXIT)
