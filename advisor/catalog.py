"""Load the catalogs shipped with the package (or a user's folder) and user files (workloads, racks, configs)."""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from advisor.errors import InputError, describe_validation
from models.catalog import Catalog, UnknownId
from models.config import Configuration
from models.hardware import Chassis, CpuSku, GpuSku, Rack
from models.workload import ServedModel, Workload

TABLES = {"cpus": CpuSku, "gpus": GpuSku, "chassis": Chassis, "racks": Rack, "served_models": ServedModel}
MAX_FILE_BYTES = 2_000_000
"""Largest catalog or input file read (a guard against runaway inputs; real catalogs are tens of KB)."""


def builtin_dir() -> Path:
    return Path(str(resources.files("catalogs")))


def read_yaml(path: Path) -> Any:
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise InputError(f"{path}: file is larger than {MAX_FILE_BYTES:,} bytes")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: cannot read ({e})") from None
    return parse_yaml(text, str(path))


def parse_yaml(text: str, where: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise InputError(f"{where}: not valid YAML ({e})") from None


def _entries(path: Path, model) -> list:
    data = read_yaml(path)
    if not isinstance(data, dict) or not isinstance(data.get("entries"), list):
        raise InputError(f"{path}: expected a mapping with a list under 'entries'")
    out = []
    first_index: dict[str, int] = {}
    for i, e in enumerate(data["entries"]):
        label = f"entries[{i}]" + (f" (id {e.get('id')!r})" if isinstance(e, dict) and e.get("id") else "")
        if isinstance(e, dict) and isinstance(e.get("id"), str):
            if e["id"] in first_index:
                raise InputError(f"{path}: {label}: id: duplicate of entries[{first_index[e['id']]}]")
            first_index[e["id"]] = i
        try:
            out.append(model.model_validate(e))
        except ValidationError as err:
            raise InputError(describe_validation(err, f"{path}: {label}")) from None
    return out


def workload_from_data(data: Any, where: str, served_models) -> Workload:
    if not isinstance(data, dict):
        raise InputError(f"{where}: expected a mapping describing a workload")
    data = dict(data)
    sm = data.get("served_model")
    if isinstance(sm, str):
        try:
            data["served_model"] = served_models[sm]
        except UnknownId as e:
            raise InputError(f"{where}: served_model: {e}") from None
    try:
        return Workload.model_validate(data)
    except ValidationError as err:
        raise InputError(describe_validation(err, where)) from None


def load_catalog(folder: Path | None = None) -> Catalog:
    folder = folder or builtin_dir()
    tables = {name: _entries(folder / f"{name}.yaml", model) for name, model in TABLES.items()}
    try:
        partial = Catalog.build(**tables)
    except ValueError as e:
        raise InputError(f"{folder}: {e}") from None
    workloads = [
        workload_from_data(read_yaml(p), str(p), partial.served_models)
        for p in sorted((folder / "workloads").glob("*.yaml"))
    ]
    cat = Catalog.build(**tables, workloads=workloads)
    check_references(cat, folder)
    return cat


def check_references(cat: Catalog, folder: Path) -> None:
    """Cross-entry checks: ids that entries name must exist."""
    for ch in cat.chassis:
        if ch.default_cpu is not None and ch.default_cpu not in cat.cpus:
            raise InputError(f"{folder}/chassis.yaml: entry {ch.id!r}: default_cpu: {UnknownId('cpu', ch.default_cpu, list(cat.cpus.entries))}")
    for sm in cat.served_models:
        for i, c in enumerate(sm.calibrations):
            if c.gpu not in cat.gpus:
                raise InputError(
                    f"{folder}/served_models.yaml: entry {sm.id!r}: calibrations[{i}].gpu: "
                    f"{UnknownId('gpu', c.gpu, list(cat.gpus.entries))}"
                )


@functools.lru_cache(maxsize=1)
def builtin_catalog() -> Catalog:
    return load_catalog()


def _is_file_ref(ref: str) -> bool:
    return ref.endswith((".yaml", ".yml", ".json")) or "/" in ref


def load_workload(ref: str | dict, catalog: Catalog) -> Workload:
    if isinstance(ref, dict):
        return workload_from_data(ref, "workload", catalog.served_models)
    if _is_file_ref(ref):
        return workload_from_data(read_yaml(Path(ref)), ref, catalog.served_models)
    try:
        return catalog.workloads[ref]
    except UnknownId as e:
        raise InputError(str(e)) from None


def load_rack(ref: str | dict, catalog: Catalog) -> Rack:
    if isinstance(ref, dict) or _is_file_ref(ref):
        data = ref if isinstance(ref, dict) else read_yaml(Path(ref))
        where = "rack" if isinstance(ref, dict) else ref
        try:
            return Rack.model_validate(data)
        except ValidationError as err:
            raise InputError(describe_validation(err, where)) from None
    try:
        return catalog.racks[ref]
    except UnknownId as e:
        raise InputError(str(e)) from None


def load_configuration(path_or_data: str | Path | dict, where: str | None = None) -> Configuration:
    if isinstance(path_or_data, dict):
        data, where = path_or_data, where or "configuration"
    else:
        data, where = read_yaml(Path(path_or_data)), str(path_or_data)
    try:
        return Configuration.model_validate(data)
    except ValidationError as err:
        raise InputError(describe_validation(err, where)) from None
