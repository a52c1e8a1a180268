"""CLI commands of the validation side: `advisor simulate`, `advisor fit`, `advisor gen-traces`."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import typer

from advisor.cli.common import CATALOG_OPT, cli_catalog
from rich.console import Console
from rich.table import Table

from advisor.errors import InputError

out = Console()
err = Console(stderr=True)


def _fail(message: str, code: int = 2) -> None:
    err.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _pm(ci: dict | None, fmt: str = ",.1f", pct: bool = False) -> str:
    if not ci or ci.get("mean") is None:
        return "n/a"
    m, h = ci["mean"], ci["half_width"]
    if pct:
        return f"{m:.1%} ± {h:.1%}" if math.isfinite(h) else f"{m:.1%}"
    return f"{m:{fmt}} ± {h:{fmt}}" if math.isfinite(h) else f"{m:{fmt}}"


def _num(x, fmt=",.1f") -> str:
    return "n/a" if x is None else format(x, fmt)


def simulate_cmd(
    config: Path = typer.Argument(..., help="Configuration YAML."),
    workload: str | None = typer.Option(None, "--workload", "-w", help="Workload preset id or YAML file."),
    rack: str | None = typer.Option(None, "--rack", "-r", help="Rack profile id or YAML file."),
    agents: int | None = typer.Option(None, "--agents", min=1, help="Closed loop of N agents."),
    arrival_rate: float | None = typer.Option(None, "--arrival-rate", help="Open arrivals, tasks per hour."),
    seed: int = typer.Option(0, "--seed"),
    duration: float | None = typer.Option(None, "--duration", help="Measurement window, simulated seconds "
                                             "(default: ~2,000 tasks, at least 20 mean task times)."),
    warmup: float | None = typer.Option(None, "--warmup", help="Discarded warm-up, simulated seconds."),
    replications: int = typer.Option(5, "--replications", min=1),
    wall_clock: float = typer.Option(300.0, "--wall-clock", help="Wall-clock guard per replication, seconds."),
    workers: int | None = typer.Option(None, "--workers", min=1, help="Processes to run the replications in "
                                       "(default: one per replication, at most one per CPU core); the figures do "
                                       "not depend on it."),
    no_memory: bool = typer.Option(False, "--no-memory-limit", help="Do not limit live tasks by sandbox memory.", metavar=""),
    engine: str = typer.Option("compiled", "--engine", help="compiled (default: the run loop compiled with numba, "
                               "compiled once per machine) or python (the same loop on SimPy's calendar); the "
                               "figures do not depend on it."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON.", metavar=""),
    catalog_dir: Path | None = CATALOG_OPT,
) -> None:
    """Simulate a configuration (discrete-event) and set it beside the closed form at the same operating point."""
    from advisor.catalog import load_configuration
    from advisor.service import resolve_inputs
    from advisor.simulation.des import SimSettings, auto_duration, build_model, closed_form_at, simulate_model

    if agents is not None and arrival_rate is not None:
        _fail("give at most one of --agents and --arrival-rate")
    if arrival_rate is not None and arrival_rate <= 0:
        _fail("--arrival-rate must be > 0")
    try:
        cat = cli_catalog(catalog_dir)
        cfg = load_configuration(config)
        w, r = resolve_inputs(cfg, workload, rack, cat)
        if agents is None and arrival_rate is None:
            op = cfg.operating_point
            agents, arrival_rate = op.agents, op.arrival_rate_per_hour
            if agents is None and arrival_rate is None:
                arrival_rate = closed_form_at(cfg, w, r, cat).arrival_rate_tasks_per_hour
        ev = closed_form_at(cfg, w, r, cat, agents=agents, arrival_rate_per_hour=arrival_rate)
        model = build_model(cfg, w, cat)
    except InputError as e:
        _fail(str(e))
    rate = ev.arrival_rate_tasks_per_hour
    mean_t = ev.mean_task_seconds or ev.unloaded_task_seconds
    dur = duration if duration is not None else auto_duration(rate, mean_t)
    st = SimSettings(agents=agents, arrival_rate_per_hour=None if agents else arrival_rate, duration_s=dur,
                     warmup_s=warmup, replications=replications, seed=seed, wall_clock_s=wall_clock,
                     memory_limit=not no_memory, engine=engine,
                     workers=workers if workers is not None else max(1, min(replications, os.cpu_count() or 1)))
    try:
        res = simulate_model(model, st)
    except InputError as e:
        _fail(str(e))
    cf = {
        "throughput_tasks_per_hour": ev.closed_loop.throughput_tasks_per_hour if (agents and ev.closed_loop)
        else ev.arrival_rate_tasks_per_hour,
        "sustainable_tasks_per_hour": ev.throughput_tasks_per_hour, "bottleneck": ev.bottleneck,
        "mean_task_seconds": ev.closed_loop.mean_task_seconds if (agents and ev.closed_loop) else ev.mean_task_seconds,
        "p50_task_seconds": ev.p50_task_seconds, "p95_task_seconds": ev.p95_task_seconds,
        "p99_task_seconds": ev.p99_task_seconds, "utilization": ev.utilization,
        "gpu_idle_fraction": 1.0 - ev.utilization["gpu"] if "gpu" in ev.utilization else None,
        "stage_shares": ev.stage_shares, "operating_point": ev.operating_point, "warnings": ev.warnings,
    }
    if as_json:
        print(json.dumps({"configuration": cfg.name, "workload": w.id, "closed_form": cf, "simulation": res},
                         indent=2, default=float))
        return
    out.print(f"[bold]{cfg.name}[/bold]  workload [cyan]{w.id}[/cyan]  {ev.operating_point}; "
              f"{replications} replications x {dur:,.0f} s simulated (warm-up {res['per_replication'][0]['warmup_s']:,.0f} s), "
              f"{res['tasks_measured']:,} tasks measured, {res['elapsed_s']:.1f} s wall "
              f"({res['wall_s']:.1f} s of replications in {st.workers} process{'es' if st.workers > 1 else ''})")
    t = Table(title="Simulation (mean ± 95% CI) vs closed form")
    for c in ("figure", "simulation", "closed form"):
        t.add_column(c)
    t.add_row("throughput tasks/h", _pm(res.get("throughput_tasks_per_hour"), ",.0f"),
              _num(cf["throughput_tasks_per_hour"], ",.0f"))
    t.add_row("sustainable tasks/h (bound)", "-", f"{ev.throughput_tasks_per_hour:,.0f} ({ev.bottleneck})")
    for k in ("mean", "p50", "p95", "p99"):
        t.add_row(f"{k} task s", _pm(res.get(f"{k}_task_seconds")), _num(cf[f"{k}_task_seconds"]))
    t.add_row("GPU idle fraction", _pm(res.get("gpu_idle_fraction"), pct=True),
              _num(cf["gpu_idle_fraction"], ".1%"))
    for k, v in res.get("utilization", {}).items():
        t.add_row(f"utilization {k}", _pm(v, pct=True), _num(ev.utilization.get(k), ".1%"))
    out.print(t)
    t = Table(title="Stage shares of task time")
    for c in ("class/stage", "simulation", "closed form"):
        t.add_column(c)
    for k, v in res.get("stage_shares", {}).items():
        t.add_row(k, _pm(v, pct=True), _num(ev.stage_shares.get(k), ".1%"))
    out.print(t)
    if res["truncated"]:
        out.print(f"[yellow]warning:[/yellow] {res['truncated']} replication(s) hit the simulated-time bound or the "
                  "wall-clock guard; their figures cover less than the requested window")
    for wmsg in ev.warnings:
        out.print(f"[yellow]closed form warning:[/yellow] {wmsg}")


def fit_cmd(
    traces: Path = typer.Argument(..., help="Trace file: JSONL, CSV or OpenTelemetry JSON export."),
    output: Path = typer.Option(..., "-o", "--output", help="Workload YAML to write."),
    served_model: str | None = typer.Option(None, "--served-model", help="Served model id (default: the "
                                               "catalog's first)."),
    cpu: str = typer.Option("xeon-8480c", "--cpu", help="CPU SKU the traces were measured on (per-core speed)."),
    workload_id: str | None = typer.Option(None, "--id", help="Workload id (default: the output file's stem)."),
    seed: int = typer.Option(0, "--seed", help="Bootstrap seed."),
    as_json: bool = typer.Option(False, "--json", help="Print stage shares and bad rows as JSON.", metavar=""),
    catalog_dir: Path | None = CATALOG_OPT,
) -> None:
    """Fit a workload profile from traces; prints each stage's share of task time with 95% CIs first."""
    import yaml

    from advisor.catalog import load_workload
    from advisor.simulation.fit import fit_workload, read_traces, stage_shares

    cat = cli_catalog(catalog_dir)
    try:
        sku = cat.cpus[cpu]
        sm = served_model or next(iter(cat.served_models)).id
        cat.served_models[sm]
        read = read_traces(traces)
    except InputError as e:
        _fail(str(e))
    shares = stage_shares(read, seed=seed)
    if as_json:
        print(json.dumps({"stage_shares": shares, "bad_rows": [{"at": a, "reason": b} for a, b in read.bad]},
                         indent=2))
    else:
        t = Table(title=f"Stage shares of task time ({len(read.spans):,} spans; 95% bootstrap CI over tasks)")
        for c in ("class/stage", "share", "95% CI"):
            t.add_column(c)
        for k, v in sorted(shares.items(), key=lambda kv: -kv[1]["share"]):
            t.add_row(k, f"{v['share']:.1%}", f"{v['lo']:.1%} - {v['hi']:.1%}")
        out.print(t)
    if read.bad:
        err.print(f"[yellow]{len(read.bad)} bad row(s) excluded from the fit:[/yellow]")
        for at, why in read.bad[:20]:
            err.print(f"  {read.unit} {at}: {why}", highlight=False)
        if len(read.bad) > 20:
            err.print(f"  ... and {len(read.bad) - 20} more")
    if read.skipped_non_agent:
        err.print(f"{read.skipped_non_agent} span(s) without agent.task_id skipped (not agent spans)")
    try:
        data = fit_workload(read, sku.per_core_perf, sm, workload_id or output.stem,
                            source=f"fitted from {traces.name} by `advisor fit` (measured on {sku.id})")
        load_workload(data, cat)
    except InputError as e:
        _fail(f"the fitted profile does not validate: {e}")
    output.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    load_workload(str(output) if str(output).endswith((".yaml", ".yml", ".json")) else str(output.resolve()), cat)
    if not as_json:
        out.print(f"wrote {output} ({len(data['classes'])} classes)")


def gen_traces_cmd(
    workload: str = typer.Option(..., "--workload", "-w", help="Workload preset id or YAML file."),
    tasks: int = typer.Option(..., "-n", "--tasks", min=1, help="Tasks to generate."),
    output: Path = typer.Option(..., "-o", "--output", help="Output file (.csv for CSV, else JSONL)."),
    seed: int = typer.Option(0, "--seed"),
    gpu: str | None = typer.Option(None, "--gpu", help="GPU SKU timing the LLM calls (default: the served "
                                      "model's first calibrated GPU)."),
    cpu: str = typer.Option("xeon-8480c", "--cpu", help="CPU SKU the tools run on."),
    catalog_dir: Path | None = CATALOG_OPT,
) -> None:
    """Write seeded synthetic traces (one span per stage occurrence) drawn from a workload profile."""
    from advisor.catalog import load_workload
    from advisor.simulation.traces import generate_spans, write_spans

    cat = cli_catalog(catalog_dir)
    try:
        w = load_workload(workload, cat)
        g = cat.gpus[gpu or (w.served_model.calibrations[0].gpu if w.served_model.calibrations else "h100-sxm")]
        c = cat.cpus[cpu]
    except InputError as e:
        _fail(str(e))
    spans = generate_spans(w, tasks, seed, g, c)
    write_spans(spans, output)
    out.print(f"wrote {len(spans):,} spans of {tasks:,} tasks to {output}")


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate_cmd)
    app.command("fit")(fit_cmd)
    app.command("gen-traces")(gen_traces_cmd)
