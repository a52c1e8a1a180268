"""Commands `advisor batch`, `sweep`, `crossover`, `pareto` and `robustness` (registered by advisor.cli.main)."""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

out = Console()
err = Console(stderr=True)


class Against(str, Enum):
    cost = "cost"
    power = "power"


def _fail(message: str, code: int = 2) -> None:
    err.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _table(head: list[str], body: list[list[str]], title: str | None = None) -> Table:
    t = Table(title=title)
    for i, h in enumerate(head):
        t.add_column(h, justify="left" if i == 0 or h in ("best", "layout", "servers") else "right")
    for row in body:
        t.add_row(*row)
    return t


WORKLOAD = typer.Option(..., "--workload", "-w", help="Workload preset id or YAML file.")
RACK = typer.Option(..., "--rack", "-r", help="Rack profile id or YAML file.")
RACKS = typer.Option(1, "--racks", min=1, help="Racks in the row.")
CATALOG = typer.Option(None, "--catalog", help="Catalog folder (default: the built-in catalog).")
GPUS = typer.Option(None, "--gpu", help="Only these GPU SKUs (repeat).")
CPUS = typer.Option(None, "--cpu", help="Only these CPU SKUs (repeat).")
LAYOUTS = typer.Option(None, "--layout", help="Layouts to compare (repeat; default a, b and hybrid).")
SOLVER = typer.Option("cbc", "--solver", help="cbc or ortools.")
TIME_LIMIT = typer.Option(60.0, "--time-limit", min=1, help="Seconds per solve.")
REF_GPU = typer.Option(None, "--reference-gpu", help="GPU whose unloaded latency defines workload.tool_share.")
SET = typer.Option(None, "--set", help="Fixed override PATH=VALUE (repeat), e.g. rack.air_cooling_kw=60.")
WORKERS = typer.Option(None, "--workers", "-j", min=0, help="Local worker processes (default: CPU count; 0 = "
                                                              "in this process).")
SCHEDULER = typer.Option(None, "--scheduler", help="Dask scheduler address, e.g. tcp://host:8786.")
QUIET = typer.Option(False, "--quiet", "-q", help="No progress bar.", metavar="")


def _base(workload, rack, racks, catalog, gpus, cpus, layouts, solver, time_limit, ref_gpu, sets):
    from advisor.studies.scenarios import base_scenario
    from advisor.studies.whatif import parse_set

    return base_scenario(workload, rack, racks=racks, catalog=str(catalog) if catalog else None, gpus=gpus,
                         cpus=cpus, layouts=layouts, solver=solver, time_limit_s=time_limit, reference_gpu=ref_gpu,
                         overrides=parse_set(sets))


def _with_catalog(path: Path, catalog: Path | None) -> list:
    """The scenarios of a file, those that name no catalog on `catalog` (the --catalog option)."""
    from advisor.studies.scenarios import load_scenarios

    scen = load_scenarios(path)
    if catalog is None:
        return scen
    if not catalog.is_dir():
        _fail(f"--catalog {catalog}: no such folder")
    return [s if s.catalog else s.model_copy(update={"catalog": str(catalog.resolve())}) for s in scen]


def _check_base(base) -> None:
    from advisor.studies.scenarios import resolve

    resolve(base)  # fail now, with the message, rather than as error rows


def register(app: typer.Typer) -> None:
    @app.command("batch")
    def batch_cmd(
        scenarios: Path = typer.Argument(..., help="SCENARIOS.yaml or .csv."),
        out_dir: Path = typer.Option(..., "--out", "-o", help="Output folder (results.sqlite, CSV, JSON, HTML)."),
        workers: int | None = WORKERS,
        scheduler: str | None = SCHEDULER,
        retry_errors: bool = typer.Option(False, "--retry-errors", help="Solve again scenarios recorded as errors.", metavar=""),
        catalog: Path | None = typer.Option(None, "--catalog", help="Catalog folder for scenarios that name "
                                               "none (default: the built-in catalog)."),
        strict: bool = typer.Option(False, "--strict", help="Exit 3 also when a row is solved but not optimal "
                                                            "(infeasible, time limit).", metavar=""),
        quiet: bool = QUIET,
    ) -> None:
        """Solve every scenario x layout of a scenario file; reruns skip what is done.

        Exit codes: 0 every row solved; 3 some row failed (status error; each is listed with its reason) or, with
        --strict, is not optimal; 2 bad input (unreadable scenario file, output folder not writable or in use by
        another run); 130 interrupted."""
        from advisor.studies.batch import run_batch
        from advisor.errors import InputError

        try:
            summary = run_batch(_with_catalog(scenarios, catalog), out_dir, workers=workers, scheduler=scheduler,
                                progress=not quiet, retry_errors=retry_errors)
        except InputError as e:
            _fail(str(e))
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

    @app.command("sweep")
    def sweep_cmd(
        workload: str = WORKLOAD, rack: str = RACK,
        vary: list[str] = typer.Option(..., "--vary", help="PATH=a:b:step or PATH=v1,v2 (once or twice)."),
        out_dir: Path | None = typer.Option(None, "--out", "-o", help="Folder for sweep.csv, sweep.svg/png and "
                                                                          "the results cache."),
        racks: int = RACKS, catalog: Path | None = CATALOG, gpus: list[str] | None = GPUS,
        cpus: list[str] | None = CPUS, layouts: list[str] | None = LAYOUTS, solver: str = SOLVER,
        time_limit: float = TIME_LIMIT, reference_gpu: str | None = REF_GPU, sets: list[str] | None = SET,
        workers: int | None = WORKERS, scheduler: str | None = SCHEDULER, quiet: bool = QUIET,
    ) -> None:
        """Throughput, power per task and capital per task/h of each layout over one or two parameters."""
        from advisor.studies.batch import Runner
        from advisor.errors import InputError
        from advisor.studies.whatif import parse_vary, sweep

        try:
            base = _base(workload, rack, racks, catalog, gpus, cpus, layouts, solver, time_limit, reference_gpu,
                         sets)
            _check_base(base)
            varies = [parse_vary(v) for v in vary]
            with Runner(out_dir, workers=workers, scheduler=scheduler, progress=not quiet) as runner:
                res = sweep(base, varies, runner)
        except InputError as e:
            _fail(str(e))
        out.print(_table(*res.table(), title="sweep"))
        if out_dir:
            files = [res.write_csv(out_dir / "sweep.csv"), *res.write_chart(out_dir)]
            out.print("wrote " + ", ".join(str(f) for f in files), highlight=False)

    @app.command("crossover")
    def crossover_cmd(
        workload: str = WORKLOAD, rack: str = RACK,
        vary: str = typer.Option(..., "--vary", help="PATH=a:b, e.g. workload.tool_share=0:0.9."),
        tol: float = typer.Option(0.01, "--tol", help="Report the crossover to within this."),
        scan: int = typer.Option(4, "--scan", min=1, help="Intervals of the first scan (finds several crossovers)."),
        out_dir: Path | None = typer.Option(None, "--out", "-o", help="Results cache folder."),
        racks: int = RACKS, catalog: Path | None = CATALOG, gpus: list[str] | None = GPUS,
        cpus: list[str] | None = CPUS, layouts: list[str] | None = LAYOUTS, solver: str = SOLVER,
        time_limit: float = TIME_LIMIT, reference_gpu: str | None = REF_GPU, sets: list[str] | None = SET,
        workers: int | None = WORKERS, scheduler: str | None = SCHEDULER, quiet: bool = QUIET,
    ) -> None:
        """The value of one parameter where the best layout changes (bisection)."""
        from advisor.studies.batch import Runner
        from advisor.errors import InputError
        from advisor.studies.whatif import crossover, parse_vary

        try:
            base = _base(workload, rack, racks, catalog, gpus, cpus, layouts, solver, time_limit, reference_gpu,
                         sets)
            _check_base(base)
            path, rng = parse_vary(vary, need_step=False)
            if len(rng) != 2:
                raise InputError("--vary for crossover is PATH=a:b")
            with Runner(out_dir, workers=workers, scheduler=scheduler, progress=not quiet) as runner:
                res = crossover(base, path, float(rng[0]), float(rng[1]), runner, tol=tol, scan=scan)
        except InputError as e:
            _fail(str(e))
        head = [path] + [f"{lay} tasks/h" for lay in base.layouts] + ["best"]
        body = [[f"{x:.6g}"] + [("-" if t.get(lay) is None else f"{t[lay]:,.0f}") for lay in base.layouts]
                + [w or "-"] for x, w, t in res.evaluated]
        out.print(_table(head, body, title="values solved"))
        for s in res.sentences():
            out.print(s, highlight=False)

    @app.command("pareto")
    def pareto_cmd(
        workload: str = WORKLOAD, rack: str = RACK,
        against: Against = typer.Option(Against.cost, "--against", help="cost (capital USD) or power."),
        points: int = typer.Option(10, "--points", min=1, help="Throughput targets in the ladder."),
        out_dir: Path | None = typer.Option(None, "--out", "-o", help="Folder for pareto.csv, pareto.svg/png."),
        racks: int = RACKS, catalog: Path | None = CATALOG, gpus: list[str] | None = GPUS,
        cpus: list[str] | None = CPUS, layouts: list[str] | None = LAYOUTS, solver: str = SOLVER,
        time_limit: float = TIME_LIMIT, sets: list[str] | None = SET,
        workers: int | None = WORKERS, scheduler: str | None = SCHEDULER, quiet: bool = QUIET,
    ) -> None:
        """Throughput against capital cost or power: the least cost for each throughput target (Pareto front)."""
        from advisor.studies.batch import Runner
        from advisor.errors import InputError
        from advisor.studies.whatif import pareto

        try:
            base = _base(workload, rack, racks, catalog, gpus, cpus, layouts, solver, time_limit, None, sets)
            _check_base(base)
            with Runner(out_dir, workers=workers, scheduler=scheduler, progress=not quiet) as runner:
                res = pareto(base, runner, against=against.value, points=points)
        except InputError as e:
            _fail(str(e))
        out.print(_table(*res.table(), title=f"Pareto front: throughput against {against.value}"))
        if res.failed:
            err.print(f"{len(res.failed)} solve(s) gave no point, e.g. {res.failed[0][0]}: {res.failed[0][1]}",
                      highlight=False)
        if out_dir:
            files = [res.write_csv(out_dir / "pareto.csv"), *res.write_chart(out_dir)]
            out.print("wrote " + ", ".join(str(f) for f in files), highlight=False)

    @app.command("robustness")
    def robustness_cmd(
        scenarios: Path = typer.Argument(..., help="Scenario file with `samples:`."),
        out_dir: Path | None = typer.Option(None, "--out", "-o", help="Folder for the results cache, "
                                                                          "robustness.csv and robustness.svg/png."),
        catalog: Path | None = typer.Option(None, "--catalog", help="Catalog folder for scenarios that name "
                                               "none (default: the built-in catalog)."),
        workers: int | None = WORKERS, scheduler: str | None = SCHEDULER, quiet: bool = QUIET,
    ) -> None:
        """Monte Carlo: how often each layout wins over sampled inputs, and the regret of choosing each."""
        import csv

        from advisor.studies.batch import Runner
        from advisor.studies.batch_report import svg_of
        from advisor.errors import InputError
        from advisor.studies.whatif import robustness, robustness_figure

        try:
            scen = _with_catalog(scenarios, catalog)
            if not any(s.sample is not None for s in scen):
                err.print("note: the file has no `samples:`; every scenario counts as one draw", highlight=False)
            with Runner(out_dir, workers=workers, scheduler=scheduler, progress=not quiet) as runner:
                res = robustness(scen, runner)
        except InputError as e:
            _fail(str(e))
        for r in res:
            body = [[x.layout, str(x.wins), f"{x.win_share:.0%}", f"{x.top_share:.0%}", f"{x.mean_regret:.2%}", f"{x.p95_regret:.2%}",
                     f"{x.max_regret:.2%}", f"{x.mean_throughput:,.0f}"] for x in r.layouts]
            out.print(_table(["layout", "wins", "win share", "best or tied", "mean regret", "p95 regret", "max regret",
                              "mean tasks/h"], body, title=f"{r.group}: {r.draws} draws"
                             + (f" ({r.skipped} left out: a layout failed)" if r.skipped else "")))
            out.print(r.sentence(), highlight=False)
        if out_dir and res:
            with (out_dir / "robustness.csv").open("w", newline="") as f:
                w = csv.writer(f)
                w.writerow(["group", "draws", "layout", "wins", "win_share", "top_share", "mean_regret", "p95_regret",
                            "max_regret", "mean_throughput"])
                for r in res:
                    for x in r.layouts:
                        w.writerow([r.group, r.draws, x.layout, x.wins, x.win_share, x.top_share, x.mean_regret, x.p95_regret,
                                    x.max_regret, x.mean_throughput])
            fig = robustness_figure(res)
            (out_dir / "robustness.svg").write_text(svg_of(fig), encoding="utf-8")
            fig.savefig(out_dir / "robustness.png", dpi=110, bbox_inches="tight")
            out.print(f"wrote {out_dir / 'robustness.csv'}, {out_dir / 'robustness.svg'}", highlight=False)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use the `advisor` command")
