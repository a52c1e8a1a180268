"""CLI commands `advisor serve` (the HTTP API) and `advisor report` (a self-contained HTML report)."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path

import typer

from advisor.cli.common import QUIET_OPT, err, fail, out, progress, user_errors


class _Layout(str, Enum):
    a = "a"
    b = "b"
    hybrid = "hybrid"


class _Solver(str, Enum):
    cbc = "cbc"
    ortools = "ortools"
    highs = "highs"


def register(app: typer.Typer) -> None:
    @app.command("serve")
    def serve(
        host: str | None = typer.Option(None, "--host", help="Address to listen on (default ADVISOR_HOST or 127.0.0.1)."),
        port: int | None = typer.Option(None, "--port", help="TCP port (default ADVISOR_PORT or 8000)."),
        log_level: str = typer.Option("info", "--log-level"),
        catalog_dir: Path | None = typer.Option(None, "--catalog", help="Catalog folder to serve (default "
                                                   "ADVISOR_CATALOG or the built-in one)."),
    ) -> None:
        """Run the HTTP API (OpenAPI docs at /docs). Settings come from ADVISOR_* environment variables."""
        import os

        import uvicorn

        if catalog_dir is not None:
            if not catalog_dir.is_dir():
                fail(f"--catalog {catalog_dir}: no such folder")
            os.environ["ADVISOR_CATALOG"] = str(catalog_dir.resolve())  # read by the app's settings

        from pydantic import ValidationError

        from advisor.api.settings import ApiSettings
        from advisor.errors import describe_validation

        try:
            s = ApiSettings()
        except ValidationError as e:  # e.g. ADVISOR_API_KEY set but empty: refuse to start rather than lock all
            fail(describe_validation(e, "settings (ADVISOR_* environment variables)"))
        h, p = host or s.host, port if port is not None else s.port
        err.print(f"rack-advisor API on http://{h}:{p} (docs /docs), reports in {s.database}, "
                  f"{s.workers} solve {'processes' if s.solve_in == 'process' else 'threads'}"
                  + (", API key required" if s.api_key else ""), highlight=False, soft_wrap=True)
        uvicorn.run("advisor.api.app:app", host=h, port=p, log_level=log_level, workers=1,
                    limit_concurrency=None, timeout_graceful_shutdown=5)

    @app.command("report")
    def report(
        workload: str = typer.Option(..., "--workload", "-w", help="Workload preset id or YAML file."),
        rack: str = typer.Option(..., "--rack", "-r", help="Rack profile id or YAML file."),
        racks: int = typer.Option(1, "--racks", min=1, help="Racks in the row."),
        layout: _Layout | None = typer.Option(None, "--layout", help="Recommend this layout (default: the best)."),
        compare: bool = typer.Option(False, "--compare", help="Recommend the best of A, B and hybrid (default).", metavar=""),
        solver: _Solver = typer.Option(_Solver.cbc, "--solver"),
        time_limit: float = typer.Option(30.0, "--time-limit", min=1, help="Seconds for the whole report (comparison, sweeps, chip-vs-rack)."),
        no_sensitivity: bool = typer.Option(False, "--no-sensitivity", help="Skip the sensitivity sweeps (faster).", metavar=""),
        spares: int = typer.Option(0, "--spares", min=0, help="Spare servers per pool in every rack."),
        catalog_dir: Path | None = typer.Option(None, "--catalog", help="Catalog folder instead of the built-in one."),
        output: Path = typer.Option(Path("report.html"), "--output", "-o", help="HTML file to write."),
        json_out: Path | None = typer.Option(None, "--json", help="Also write the report's figures as JSON."),
        quiet: bool = QUIET_OPT,
        existing: Path | None = typer.Option(None, "--existing", help="Configuration YAML of the servers you own: "
                                             "every layout keeps them; the report adds the migration plan."),
        allow_removal: bool = typer.Option(False, "--allow-removal", help="With --existing: owned servers may be "
                                           "removed."),
        keep_hardware: bool = typer.Option(False, "--keep-hardware", help="With --existing: buy, remove and swap "
                                           "nothing; only the host cores' split and the queues are optimized."),
    ) -> None:
        """Write a self-contained HTML recommendation report (open it in any browser; prints on A4/Letter)."""
        from advisor.deadline import Deadline

        clock = Deadline(time_limit)  # the whole command, imports included
        from advisor import service
        from advisor.catalog import builtin_catalog, load_catalog, load_configuration
        from advisor.requests import ReportRequest

        if layout and compare:
            fail("give --layout or --compare, not both")
        with user_errors("report request"):
            owned = load_configuration(existing) if existing is not None else None
            req = ReportRequest(workload=workload, rack=rack, racks=racks, layout=layout.value if layout else None,
                                compare=compare, solver=solver.value, time_limit_s=time_limit,
                                sensitivity=not no_sensitivity, existing=owned, allow_removal=allow_removal,
                                keep_hardware=keep_hardware, spares=spares)
            cat = load_catalog(catalog_dir) if catalog_dir else builtin_catalog()
            what = "rendering the report" + ("" if no_sensitivity else " (optimizing, then the sensitivity sweeps)")
            with progress(what, quiet):
                html, data = service.report(req, cat, deadline=clock)
        try:
            output.write_text(html, encoding="utf-8")
            if json_out:
                json_out.write_text(json.dumps(data, indent=2), encoding="utf-8")
        except OSError as e:
            fail(f"cannot write the report: {e.strerror or e} ({e.filename})")
        skipped = [p for sw in (data.get("sensitivity") or {}).values() for p in sw.get("skipped", [])]
        if skipped:  # the report says so too; a user who only reads the terminal must not miss it
            budget = max(sw.get("budget_s", 0.0) for sw in data["sensitivity"].values())
            err.print(f"warning: {len(skipped)} sensitivity sweep point(s) not computed within the sweep time "
                      f"budget ({', '.join(skipped)}); the sweeps had {budget:.1f} s, what --time-limit left after "
                      "the comparison (at most the request's sweep_budget_s)", highlight=False, soft_wrap=True)
        g = data["glance"]
        ratio = f", {g['ratio_vs_a']:.2f}x layout A" if g.get("ratio_vs_a") else ""
        out.print(f"layout {g['layout']}: {g['tasks_per_hour']:,.0f} tasks/h{ratio}; "
                  f"wrote {output} in {data['timing']['total_s']:.1f} s", highlight=False)
