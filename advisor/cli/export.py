"""CLI command `advisor export --format k8s|slurm|prometheus`: a saved configuration or a fresh solve, to text."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer

from advisor.cli.common import err, fail


class _Format(str, Enum):
    k8s = "k8s"
    slurm = "slurm"
    prometheus = "prometheus"


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
        catalog_dir: Path | None = typer.Option(None, "--catalog", help="Catalog folder instead of the built-in one."),
        settings_file: Path | None = typer.Option(None, "--settings", help="YAML of export settings "
                                                     "(advisor.export.ExportSettings) to override."),
        headroom: float = typer.Option(0.5, "--alert-headroom", min=0.01, max=0.99,
                                       help="Alerts sit this far from the expected value towards the limit."),
        output: Path | None = typer.Option(None, "--output", "-o", help="File to write (default: stdout)."),
    ) -> None:
        """Kubernetes manifests, a Slurm configuration bundle or Prometheus alerting rules for a configuration."""
        import yaml
        from pydantic import ValidationError

        from advisor.catalog import builtin_catalog, load_catalog, load_configuration, load_rack, load_workload
        from advisor.errors import InputError, describe_validation
        from advisor.export import ExportSettings, export
        from advisor.optimizer.optimize import optimize
        from advisor.service import resolve_inputs

        try:
            cat = load_catalog(catalog_dir) if catalog_dir else builtin_catalog()
            settings = ExportSettings()
            if settings_file:
                settings = ExportSettings.model_validate(yaml.safe_load(settings_file.read_text()) or {})
            if config is not None:
                cfg = load_configuration(config)
                w, r = resolve_inputs(cfg, workload, rack, cat)
                source = cfg
            else:
                if not workload or not rack:
                    fail("give a configuration file, or --workload and --rack to optimize first")
                w, r = load_workload(workload, cat), load_rack(rack, cat)
                source = optimize(w, r, cat, layout=layout.value, racks=racks, time_limit_s=time_limit, explain=False)
                err.print(f"optimized layout {layout.value}: {source.status}, "
                          f"{source.throughput_tasks_per_hour:,.0f} tasks/h", highlight=False)
            art = export(fmt.value, source, w, cat, rack=r, alert_headroom=headroom, settings=settings)
        except ValidationError as e:
            fail(describe_validation(e, "export settings"))
        except (InputError, ValueError, OSError) as e:
            fail(str(e))
        if output:
            output.write_text(art.text, encoding="utf-8")
            err.print(f"wrote {output} ({art.media_type})", highlight=False)
        else:
            typer.echo(art.text, nl=False)
