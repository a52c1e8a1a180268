"""Commands `advisor batch`, `sweep`, `crossover`, `pareto` and `robustness` (registered by advisor.cli.main).

The study commands share their scenario options, defined once below as `Annotated` types, and one way to run:
build the base scenario, check it, run the study with a Runner, render its table."""

from __future__ import annotations

import sys
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from advisor.cli.common import err, fail, out, user_errors


class Against(str, Enum):
    cost = "cost"
    power = "power"


def _table(head: list[str], body: list[list[str]], title: str | None = None) -> Table:
    t = Table(title=title)
    for i, h in enumerate(head):
        t.add_column(h, justify="left" if i == 0 or h in ("best", "layout", "servers") else "right")
    for row in body:
        t.add_row(*row)
    return t


Workload = Annotated[str, typer.Option("--workload", "-w", help="Workload preset id or YAML file.")]
RackId = Annotated[str, typer.Option("--rack", "-r", help="Rack profile id or YAML file.")]
Racks = Annotated[int, typer.Option("--racks", min=1, help="Racks in the row.")]
CatalogDir = Annotated[Path | None, typer.Option("--catalog", help="Catalog folder (default: the built-in "
                                                                    "catalog).")]
ScenarioCatalog = Annotated[Path | None, typer.Option("--catalog", help="Catalog folder for scenarios that name "
                                                                         "none (default: the built-in catalog).")]
Gpus = Annotated[list[str] | None, typer.Option("--gpu", help="Only these GPU SKUs (repeat).")]
Cpus = Annotated[list[str] | None, typer.Option("--cpu", help="Only these CPU SKUs (repeat).")]
Layouts = Annotated[list[str] | None, typer.Option("--layout", help="Layouts to compare (repeat; default a, b and "
                                                                     "hybrid).")]
Solver = Annotated[str, typer.Option("--solver", help="cbc, ortools or highs.")]
TimeLimit = Annotated[float, typer.Option("--time-limit", min=1, help="Seconds per solve.")]
RefGpu = Annotated[str | None, typer.Option("--reference-gpu", help="GPU whose unloaded latency defines "
                                                                     "workload.tool_share.")]
Sets = Annotated[list[str] | None, typer.Option("--set", help="Fixed override PATH=VALUE (repeat), e.g. "
                                                               "rack.air_cooling_kw=60.")]
Workers = Annotated[int | None, typer.Option("--workers", "-j", min=0, help="Local worker processes (default: CPU "
                                                                             "count; 0 = in this process).")]
Scheduler = Annotated[str | None, typer.Option("--scheduler", help="Dask scheduler address, e.g. "
                                                                    "tcp://host:8786.")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.", metavar="")]
OutDir = Annotated[Path | None, typer.Option("--out", "-o", help="Folder for the results cache and the study's "
                                                                  "CSV and charts.")]


def _base(workload, rack, racks, catalog, gpus, cpus, layouts, solver, time_limit, ref_gpu, sets):
    """The study's base scenario from its options, checked now (a bad input fails with its message rather than as
    error rows)."""
    from advisor.studies.scenarios import base_scenario, resolve
    from advisor.studies.whatif import parse_set

    base = base_scenario(workload, rack, racks=racks, catalog=str(catalog) if catalog else None, gpus=gpus,
                         cpus=cpus, layouts=layouts, solver=solver, time_limit_s=time_limit, reference_gpu=ref_gpu,
                         overrides=parse_set(sets))
    resolve(base)
    return base


def _run(study: Callable[[Any], Any], out_dir: Path | None, workers: int | None, scheduler: str | None,
         quiet: bool) -> Any:
    """Run one study with a Runner (results cached in out_dir, so a rerun skips finished solves)."""
    from advisor.studies.batch import Runner

    with Runner(out_dir, workers=workers, scheduler=scheduler, progress=not quiet) as runner:
        return study(runner)


def _with_catalog(path: Path, catalog: Path | None) -> list:
    """The scenarios of a file, those that name no catalog on `catalog` (the --catalog option)."""
    from advisor.studies.scenarios import load_scenarios

    scen = load_scenarios(path)
    if catalog is None:
        return scen
    if not catalog.is_dir():
        fail(f"--catalog {catalog}: no such folder")
    return [s if s.catalog else s.model_copy(update={"catalog": str(catalog.resolve())}) for s in scen]


def batch_cmd(
    scenarios: Path = typer.Argument(..., help="SCENARIOS.yaml or .csv."),
    out_dir: Path = typer.Option(..., "--out", "-o", help="Output folder (results.sqlite, CSV, JSON, HTML)."),
    workers: Workers = None,
    scheduler: Scheduler = None,
    retry_errors: bool = typer.Option(False, "--retry-errors", help="Solve again scenarios recorded as errors.", metavar=""),
    catalog: ScenarioCatalog = None,
    strict: bool = typer.Option(False, "--strict", help="Exit 3 also when a row is solved but not optimal "
                                                        "(infeasible, time limit).", metavar=""),
    quiet: Quiet = False,
) -> None:
    """Solve every scenario x layout of a scenario file; reruns skip what is done.

    Exit codes: 0 every row solved; 3 some row failed (status error; each is listed with its reason) or, with
    --strict, is not optimal; 2 bad input (unreadable scenario file, output folder not writable or in use by
    another run); 130 interrupted."""
    from advisor.studies.batch import run_batch

    with user_errors("scenario file"):
        summary = run_batch(_with_catalog(scenarios, catalog), out_dir, workers=workers, scheduler=scheduler,
                            progress=not quiet, retry_errors=retry_errors)
    out.print(summary.line, highlight=False)
    if summary.exports:
        out.print("exports: " + ", ".join(str(p) for p in summary.exports.values()), highlight=False)
    if summary.stats.interrupted:
        err.print("interrupted: finished rows are saved; run the same command again to continue")
        raise typer.Exit(130)
    for sc, lay, reason in summary.failed:
        err.print(f"failed: {sc} / {lay}: {reason}", highlight=False, markup=False, soft_wrap=True)
    if strict:
        for sc, lay, status in summary.not_optimal:
            err.print(f"not optimal: {sc} / {lay}: {status}", highlight=False, markup=False, soft_wrap=True)
    if summary.failed or (strict and summary.not_optimal):
        n = len(summary.failed) + (len(summary.not_optimal) if strict else 0)
        err.print(f"{n} of {summary.stats.rows} rows did not solve" + (" optimally" if strict else "")
                  + "; exit 3", highlight=False)
        raise typer.Exit(3)

def sweep_cmd(
    workload: Workload, rack: RackId,
    vary: Annotated[list[str], typer.Option("--vary", help="PATH=LOW:HIGH:STEP or PATH=V1,V2 (once or twice).")],
    out_dir: OutDir = None, racks: Racks = 1, catalog: CatalogDir = None, gpus: Gpus = None, cpus: Cpus = None,
    layouts: Layouts = None, solver: Solver = "cbc", time_limit: TimeLimit = 60.0, reference_gpu: RefGpu = None,
    sets: Sets = None, workers: Workers = None, scheduler: Scheduler = None, quiet: Quiet = False,
) -> None:
    """Throughput, power per task and capital per task/h of each layout over one or two parameters."""
    from advisor.studies.whatif import parse_vary, sweep

    with user_errors("sweep"):
        base = _base(workload, rack, racks, catalog, gpus, cpus, layouts, solver, time_limit, reference_gpu,
                     sets)
        varies = [parse_vary(v) for v in vary]
        res = _run(lambda runner: sweep(base, varies, runner), out_dir, workers, scheduler, quiet)
    out.print(_table(*res.table(), title="sweep"))
    if out_dir:
        files = [res.write_csv(out_dir / "sweep.csv"), *res.write_chart(out_dir)]
        out.print("wrote " + ", ".join(str(f) for f in files), highlight=False)

def crossover_cmd(
    workload: Workload, rack: RackId,
    vary: Annotated[str, typer.Option("--vary", help="PATH=LOW:HIGH, e.g. workload.tool_share=0:0.9.")],
    tol: Annotated[float, typer.Option("--tol", help="Report the crossover to within this.")] = 0.01,
    scan: Annotated[int, typer.Option("--scan", min=1, help="Intervals of the first scan (finds several "
                                                             "crossovers).")] = 4,
    out_dir: OutDir = None, racks: Racks = 1, catalog: CatalogDir = None, gpus: Gpus = None, cpus: Cpus = None,
    layouts: Layouts = None, solver: Solver = "cbc", time_limit: TimeLimit = 60.0, reference_gpu: RefGpu = None,
    sets: Sets = None, workers: Workers = None, scheduler: Scheduler = None, quiet: Quiet = False,
) -> None:
    """The value of one parameter where the best layout changes (bisection)."""
    from advisor.studies.whatif import crossover, parse_vary

    with user_errors("crossover"):
        base = _base(workload, rack, racks, catalog, gpus, cpus, layouts, solver, time_limit, reference_gpu,
                     sets)
        path, rng = parse_vary(vary, need_step=False)
        if len(rng) != 2:
            fail("--vary for crossover is PATH=a:b")
        res = _run(lambda runner: crossover(base, path, float(rng[0]), float(rng[1]), runner, tol=tol, scan=scan),
                   out_dir, workers, scheduler, quiet)
    head = [path] + [f"{lay} tasks/h" for lay in base.layouts] + ["best"]
    body = [[f"{x:.6g}"] + [("-" if t.get(lay) is None else f"{t[lay]:,.0f}") for lay in base.layouts]
            + [w or "-"] for x, w, t in res.evaluated]
    out.print(_table(head, body, title="values solved"))
    for s in res.sentences():
        out.print(s, highlight=False)

def pareto_cmd(
    workload: Workload, rack: RackId,
    against: Annotated[Against, typer.Option("--against", help="cost (capital USD) or power.")] = Against.cost,
    points: Annotated[int, typer.Option("--points", min=1, help="Throughput targets in the ladder.")] = 10,
    out_dir: OutDir = None, racks: Racks = 1, catalog: CatalogDir = None, gpus: Gpus = None, cpus: Cpus = None,
    layouts: Layouts = None, solver: Solver = "cbc", time_limit: TimeLimit = 60.0, sets: Sets = None,
    workers: Workers = None, scheduler: Scheduler = None, quiet: Quiet = False,
) -> None:
    """Throughput against capital cost or power: the least cost for each throughput target (Pareto front)."""
    from advisor.studies.whatif import pareto

    with user_errors("pareto"):
        base = _base(workload, rack, racks, catalog, gpus, cpus, layouts, solver, time_limit, None, sets)
        res = _run(lambda runner: pareto(base, runner, against=against.value, points=points), out_dir, workers,
                   scheduler, quiet)
    out.print(_table(*res.table(), title=f"Pareto front: throughput against {against.value}"))
    if res.failed:
        err.print(f"{len(res.failed)} solve(s) gave no point, e.g. {res.failed[0][0]}: {res.failed[0][1]}",
                  highlight=False)
    if out_dir:
        files = [res.write_csv(out_dir / "pareto.csv"), *res.write_chart(out_dir)]
        out.print("wrote " + ", ".join(str(f) for f in files), highlight=False)

def robustness_cmd(
    scenarios: Path = typer.Argument(..., help="Scenario file with `samples:`."),
    out_dir: OutDir = None, catalog: ScenarioCatalog = None,
    workers: Workers = None, scheduler: Scheduler = None, quiet: Quiet = False,
) -> None:
    """Monte Carlo: how often each layout wins over sampled inputs, and the regret of choosing each."""
    from advisor.studies.whatif import robustness, write_robustness

    with user_errors("scenario file"):
        scen = _with_catalog(scenarios, catalog)
        if not any(s.sample is not None for s in scen):
            err.print("note: the file has no `samples:`; every scenario counts as one draw", highlight=False)
        res = _run(lambda runner: robustness(scen, runner), out_dir, workers, scheduler, quiet)
    for r in res:
        body = [[x.layout, str(x.wins), f"{x.win_share:.0%}", f"{x.top_share:.0%}", f"{x.mean_regret:.2%}", f"{x.p95_regret:.2%}",
                 f"{x.max_regret:.2%}", f"{x.mean_throughput:,.0f}"] for x in r.layouts]
        out.print(_table(["layout", "wins", "win share", "best or tied", "mean regret", "p95 regret", "max regret",
                          "mean tasks/h"], body, title=f"{r.group}: {r.draws} draws"
                         + (f" ({r.skipped} left out: a layout failed)" if r.skipped else "")))
        out.print(r.sentence(), highlight=False)
    if out_dir and res:
        files = write_robustness(res, out_dir)
        out.print("wrote " + ", ".join(str(f) for f in files), highlight=False)

COMMANDS = (("batch", batch_cmd), ("sweep", sweep_cmd), ("crossover", crossover_cmd), ("pareto", pareto_cmd),
            ("robustness", robustness_cmd))
"""The study commands, by name (advisor.cli.main registers them)."""


def register(app: typer.Typer) -> None:
    for name, fn in COMMANDS:
        app.command(name)(fn)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use the `advisor` command")
