"""CLI commands `advisor serve` (the HTTP API) and `advisor report` (a self-contained HTML report)."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from advisor.cli.common import err, fail, out


class _Layout(str, Enum):
    a = "a"
    b = "b"
    hybrid = "hybrid"


class _Solver(str, Enum):
    cbc = "cbc"
    ortools = "ortools"


def register(app: typer.Typer) -> None:
    @app.command("serve")
    def serve(
        host: Optional[str] = typer.Option(None, "--host", help="Address to listen on (default ADVISOR_HOST or 127.0.0.1)."),
        port: Optional[int] = typer.Option(None, "--port", help="TCP port (default ADVISOR_PORT or 8000)."),
        log_level: str = typer.Option("info", "--log-level"),
    ) -> None:
        """Run the HTTP API (OpenAPI docs at /docs). Settings come from ADVISOR_* environment variables."""
        import uvicorn

        from advisor.api.settings import ApiSettings

        s = ApiSettings()
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
        layout: Optional[_Layout] = typer.Option(None, "--layout", help="Recommend this layout (default: the best)."),
        compare: bool = typer.Option(False, "--compare", help="Recommend the best of A, B and hybrid (default)."),
        solver: _Solver = typer.Option(_Solver.cbc, "--solver"),
        time_limit: float = typer.Option(30.0, "--time-limit", min=1, help="Seconds per layout."),
        no_sensitivity: bool = typer.Option(False, "--no-sensitivity", help="Skip the sensitivity sweeps (faster)."),
        catalog_dir: Optional[Path] = typer.Option(None, "--catalog", help="Catalog folder instead of the built-in one."),
        output: Path = typer.Option(Path("report.html"), "--output", "-o", help="HTML file to write."),
        json_out: Optional[Path] = typer.Option(None, "--json", help="Also write the report's figures as JSON."),
    ) -> None:
        """Write a self-contained HTML recommendation report (open it in any browser; prints on A4/Letter)."""
        from pydantic import ValidationError

        from advisor.catalog import builtin_catalog, load_catalog
        from advisor.errors import InputError, describe_validation
        from advisor.report.html import ReportRequest, render_report

        if layout and compare:
            fail("give --layout or --compare, not both")
        try:
            req = ReportRequest(workload=workload, rack=rack, racks=racks, layout=layout.value if layout else None,
                                compare=compare, solver=solver.value, time_limit_s=time_limit,
                                sensitivity=not no_sensitivity)
        except ValidationError as e:
            fail(describe_validation(e, "report request"))
        try:
            cat = load_catalog(catalog_dir) if catalog_dir else builtin_catalog()
            html, data = render_report(req, cat)
        except InputError as e:
            fail(str(e))
        output.write_text(html, encoding="utf-8")
        if json_out:
            json_out.write_text(json.dumps(data, indent=2), encoding="utf-8")
        g = data["glance"]
        ratio = f", {g['ratio_vs_a']:.2f}x layout A" if g.get("ratio_vs_a") else ""
        out.print(f"layout {g['layout']}: {g['tasks_per_hour']:,.0f} tasks/h{ratio}; "
                  f"wrote {output} in {data['timing']['total_s']:.1f} s", highlight=False)
