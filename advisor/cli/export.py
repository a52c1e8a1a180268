"""CLI command `advisor export --format k8s|slurm|prometheus`: a saved configuration or a fresh solve, to text."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer

from advisor.cli.common import CATALOG_OPT, err, fail, user_errors


class _Format(str, Enum):
    k8s = "k8s"
    slurm = "slurm"
    prometheus = "prometheus"


class _Solver(str, Enum):
    cbc = "cbc"
    ortools = "ortools"
    highs = "highs"


class _Layout(str, Enum):
    a = "a"
    b = "b"
    hybrid = "hybrid"


def register(app: typer.Typer) -> None:
    @app.command("export")
    def export_cmd(
        config: Path | None = typer.Argument(None, help="Configuration YAML (as `advisor optimize --save-config` "
                                                           "writes); omitted: optimize first."),
        fmt: _Format = typer.Option(..., "--format", "-f", help="k8s, slurm or prometheus."),
        workload: str | None = typer.Option(None, "--workload", "-w", help="Workload preset id or YAML file."),
        rack: str | None = typer.Option(None, "--rack", "-r", help="Rack profile id or YAML file."),
        racks: int = typer.Option(1, "--racks", min=1, help="Racks in the row (when optimizing)."),
        layout: _Layout = typer.Option(_Layout.hybrid, "--layout", help="Layout to optimize (when optimizing)."),
        time_limit: float = typer.Option(60.0, "--time-limit", min=1, help="Solver seconds (when optimizing)."),
        solver: _Solver = typer.Option(_Solver.cbc, "--solver", help="Solver backend (when optimizing)."),
        assumptions_file: Path | None = typer.Option(None, "--assumptions", help="YAML of model assumptions "
                                                        "(models.assumptions.ModelAssumptions) to override."),
        catalog_dir: Path | None = CATALOG_OPT,
        settings_file: Path | None = typer.Option(None, "--settings", help="YAML of export settings "
                                                     "(advisor.export.ExportSettings) to override."),
        headroom: float = typer.Option(0.5, "--alert-headroom", min=0.01, max=0.99,
                                       help="Alerts sit this far from the expected value towards the limit."),
        output: Path | None = typer.Option(None, "--output", "-o", help="File to write (default: stdout)."),
    ) -> None:
        """Kubernetes manifests, a Slurm configuration bundle or Prometheus alerting rules for a configuration."""
        from advisor import service
        from advisor.catalog import builtin_catalog, load_catalog, load_configuration, read_yaml
        from advisor.export import ExportSettings
        from advisor.requests import ExportRequest
        from models.assumptions import ModelAssumptions

        if config is None and (not workload or not rack):
            fail("give a configuration file, or --workload and --rack to optimize first")
        with user_errors("export request"):
            cat = load_catalog(catalog_dir) if catalog_dir else builtin_catalog()
        with user_errors(f"--settings {settings_file}"):
            settings = ExportSettings.model_validate(read_yaml(settings_file) or {}) if settings_file else None
        with user_errors(f"--assumptions {assumptions_file}"):
            assumptions = ModelAssumptions.model_validate(read_yaml(assumptions_file) or {}) if assumptions_file else None
        with user_errors("export request"):
            req = ExportRequest(format=fmt.value, configuration=load_configuration(config) if config else None,
                                workload=workload, rack=rack, layout=layout.value, racks=racks, solver=solver.value,
                                time_limit_s=time_limit, alert_headroom=headroom, assumptions=assumptions,
                                settings=settings)
            art, solved = service.export(req, cat)
        if solved is not None:
            err.print(f"optimized layout {layout.value}: {solved.status}, "
                      f"{solved.throughput_tasks_per_hour:,.0f} tasks/h", highlight=False)
        if output:
            try:
                output.write_text(art.text, encoding="utf-8")
            except OSError as e:
                fail(f"--output {output}: cannot write ({e.strerror or e})")
            err.print(f"wrote {output} ({art.media_type})", highlight=False)
        else:
            typer.echo(art.text, nl=False)
