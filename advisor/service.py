"""One service layer that the CLI, the HTTP API and batch runs all call."""

from __future__ import annotations

from pathlib import Path

from advisor.catalog import builtin_catalog, load_configuration, load_rack, load_workload
from advisor.errors import InputError
from models.assumptions import ModelAssumptions
from models.catalog import Catalog, UnknownId
from models.config import Configuration
from models.hardware import Rack
from models.pipeline import Evaluation, evaluate
from models.workload import Workload


def resolve_inputs(
    config: Configuration,
    workload: str | dict | Workload | None,
    rack: str | dict | Rack | None,
    catalog: Catalog,
) -> tuple[Workload, Rack]:
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
        return evaluate(config, w, r, catalog, assumptions)
    except UnknownId as e:
        raise InputError(f"configuration {config.name!r}: {e}") from None
    except ValueError as e:
        raise InputError(f"configuration {config.name!r}: {e}") from None
