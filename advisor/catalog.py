"""Load the catalogs shipped with the package (or a user's folder) and user files (workloads, racks, configs)."""

from __future__ import annotations

import contextvars
import functools
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from advisor.errors import InputError, describe_validation
from models.catalog import Catalog, UnknownId
from models.config import Configuration
from models.hardware import Chassis, CpuSku, GpuSku, Rack, RackSystem, Switch
from models.workload import ServedModel, Workload

TABLES = {"cpus": CpuSku, "gpus": GpuSku, "chassis": Chassis, "racks": Rack, "served_models": ServedModel}
OPTIONAL_TABLES = {"systems": RackSystem, "switches": Switch}
"""Tables a catalog folder may leave out (empty then): a folder without systems.yaml has no rack-scale systems, one
without switches.yaml has racks without a top-of-rack switch."""
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


MAX_YAML_DEPTH = 64
"""Deepest nesting of lists and mappings accepted in a YAML document (real inputs nest fewer than 10 levels)."""
MAX_YAML_NODES = 200_000
"""Most values a YAML document may hold once its aliases are expanded (a guard against "billion laughs" alias
bombs, which are tiny as text and expand exponentially; the built-in catalog holds about 2,300 in all its files)."""


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader (plain data only, no Python objects) with limits on nesting depth and on the size of the
    document after alias expansion, both checked on the node graph before any object is built."""

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent, index):
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise yaml.composer.ComposerError(None, None, f"nested deeper than {MAX_YAML_DEPTH} levels",
                                                  self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def compose_document(self):
        node = super().compose_document()
        _check_expanded_size(node)
        return node


def _check_expanded_size(root: yaml.Node) -> None:
    """Count the values of the document as constructed data would hold them (an alias counts its whole target
    each time it appears), memoized per node so that the count itself stays linear in the text."""
    memo: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: yaml.Node) -> int:
        if id(node) in memo:
            return memo[id(node)]
        if id(node) in open_nodes:
            raise yaml.composer.ComposerError(None, None, "recursive alias (a value that contains itself)",
                                              node.start_mark)
        open_nodes.add(id(node))
        n = 1
        if isinstance(node, yaml.SequenceNode):
            n += sum(size(c) for c in node.value)
        elif isinstance(node, yaml.MappingNode):
            n += sum(size(k) + size(v) for k, v in node.value)
        if n > MAX_YAML_NODES:
            raise yaml.composer.ComposerError(None, None, f"more than {MAX_YAML_NODES:,} values once aliases are "
                                              "expanded (an alias bomb?)", node.start_mark)
        open_nodes.discard(id(node))
        memo[id(node)] = n
        return n

    if root is not None:
        size(root)


def parse_yaml(text: str, where: str) -> Any:
    """Plain data from YAML text (safe loader, bounded depth and expanded size); errors name `where`."""
    try:
        return yaml.load(text, Loader=_BoundedLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        raise InputError(f"{where}: not valid YAML ({e})") from None
    except RecursionError:  # a guard behind MAX_YAML_DEPTH
        raise InputError(f"{where}: not valid YAML (nested too deeply)") from None


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
    for name, model in OPTIONAL_TABLES.items():
        if (folder / f"{name}.yaml").exists():
            tables[name] = _entries(folder / f"{name}.yaml", model)
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
    for g in cat.gpus:
        if g.previous_generation is not None and g.previous_generation not in cat.gpus:
            raise InputError(f"{folder}/gpus.yaml: entry {g.id!r}: previous_generation: "
                             f"{UnknownId('gpu', g.previous_generation, list(cat.gpus.entries))}")
    for ch in cat.chassis:
        if ch.part_of_system is not None and ch.part_of_system not in cat.systems:
            raise InputError(f"{folder}/chassis.yaml: entry {ch.id!r}: part_of_system: "
                             f"{UnknownId('system', ch.part_of_system, list(cat.systems.entries))}")
    for rk in cat.racks:
        try:
            check_rack_switch(rk, cat)
        except ValueError as e:
            raise InputError(f"{folder}/racks.yaml: entry {rk.id!r}: {e}") from None
    for sm in cat.served_models:
        for i, c in enumerate(sm.calibrations):
            if c.gpu not in cat.gpus:
                raise InputError(
                    f"{folder}/served_models.yaml: entry {sm.id!r}: calibrations[{i}].gpu: "
                    f"{UnknownId('gpu', c.gpu, list(cat.gpus.entries))}"
                )


def check_rack_switch(rack: Rack, cat: Catalog) -> None:
    """The rack's top-of-rack switch exists and leaves ports for servers after its uplinks."""
    from models.rack_physics import rack_switch

    rack_switch(rack, cat)


def check_sku_ids(cat: Catalog, gpu_ids: list[str] | None, cpu_ids: list[str] | None) -> None:
    """SKU subsets of a request exist in the catalog: an unknown id is an InputError naming the list entry
    (`("body", "gpu_ids", n)`), with close matches to suggest."""
    for field, ids, table in (("gpu_ids", gpu_ids, cat.gpus), ("cpu_ids", cpu_ids, cat.cpus)):
        for n, i in enumerate(ids or []):
            try:
                table[i]
            except UnknownId as e:
                raise InputError(str(e), loc=("body", field, n), suggestions=e.suggestions) from None


@functools.lru_cache(maxsize=1)
def builtin_catalog() -> Catalog:
    return load_catalog()


def _is_file_ref(ref: str) -> bool:
    return ref.endswith((".yaml", ".yml", ".json")) or "/" in ref or "\\" in ref


_FILE_REFS_ALLOWED = contextvars.ContextVar("advisor_file_refs_allowed", default=True)


@contextmanager
def catalog_refs_only():
    """Within this block a workload or rack given as a string must be a catalog id: a string that looks like a file
    path is rejected instead of read. The HTTP API runs every request under it, so that no request can make the
    server read a file (the CLI reads the files its user names)."""
    token = _FILE_REFS_ALLOWED.set(False)
    try:
        yield
    finally:
        _FILE_REFS_ALLOWED.reset(token)


def _file_ref(ref: str, field: str) -> bool:
    """True when `ref` names a file to read; raises when file references are not allowed here."""
    if not _is_file_ref(ref):
        return False
    if not _FILE_REFS_ALLOWED.get():
        raise InputError(f"{field}: {ref[:200]!r} looks like a file path; give a catalog id or an inline object "
                         "(this service does not read files named in requests)")
    return True


def load_workload(ref: str | dict, catalog: Catalog) -> Workload:
    if isinstance(ref, dict):
        return workload_from_data(ref, "workload", catalog.served_models)
    if _file_ref(ref, "workload"):
        return workload_from_data(read_yaml(Path(ref)), ref, catalog.served_models)
    try:
        return catalog.workloads[ref]
    except UnknownId as e:
        raise InputError(str(e), suggestions=e.suggestions) from None


def load_rack(ref: str | dict, catalog: Catalog) -> Rack:
    if isinstance(ref, dict) or _file_ref(ref, "rack"):
        data = ref if isinstance(ref, dict) else read_yaml(Path(ref))
        where = "rack" if isinstance(ref, dict) else ref
        try:
            rack = Rack.model_validate(data)
        except ValidationError as err:
            raise InputError(describe_validation(err, where)) from None
        try:
            check_rack_switch(rack, catalog)
        except ValueError as e:
            raise InputError(f"{where}: {e}") from None
        return rack
    try:
        return catalog.racks[ref]
    except UnknownId as e:
        raise InputError(str(e), suggestions=e.suggestions) from None


def configuration_data(data: Any, where: str, layout: str | None = None) -> Any:
    """The configuration inside what the user gave: a configuration as it is; an optimize answer (its
    `configuration`); a compare answer (the configuration of `layout`, default its best layout) or one layout of
    it. Only the configuration is validated (and bounded), never the figures the optimizer computed around it."""
    if not isinstance(data, dict):
        return data
    if isinstance(data.get("results"), list) and "best_layout" in data:  # a compare answer
        pick = layout or data.get("best_layout")
        for r in data["results"]:
            if isinstance(r, dict) and r.get("layout") == pick:
                return configuration_data(r, f"{where}: layout {pick}")
        have = ", ".join(str(r.get("layout")) for r in data["results"] if isinstance(r, dict))
        raise InputError(f"{where}: this compare answer has no layout {pick!r} (it has {have})")
    if layout is not None and data.get("layout") != layout:
        raise InputError(f"{where}: --layout {layout} picks a layout of a compare answer; this file is not one"
                         + (f" (it is layout {data['layout']})" if isinstance(data.get("layout"), str) else ""))
    if "configuration" in data and "status" in data:  # an optimize answer, or one layout of a compare answer
        cfg = data["configuration"]
        if not isinstance(cfg, dict):
            raise InputError(f"{where}: this answer has no configuration (status {data.get('status')!r}: "
                             f"{str(data.get('message') or '')[:200]})")
        return cfg
    return data


def _relative_refs(cfg: Configuration, base_dir: Path) -> Configuration:
    """Workload and rack files named in a configuration file are relative to that file's folder."""
    update = {}
    for k in ("workload", "rack"):
        ref = getattr(cfg, k)
        if isinstance(ref, str) and _is_file_ref(ref) and not Path(ref).is_absolute():
            update[k] = str((base_dir / ref).resolve())
    return cfg.model_copy(update=update) if update else cfg


def load_configuration(path_or_data: str | Path | dict, where: str | None = None,
                       layout: str | None = None) -> Configuration:
    base_dir = None
    if isinstance(path_or_data, dict):
        data, where = path_or_data, where or "configuration"
    else:
        if not _FILE_REFS_ALLOWED.get():
            raise InputError("configuration: give an inline object (this service does not read files named in "
                             "requests)")
        data, where = read_yaml(Path(path_or_data)), str(path_or_data)
        base_dir = Path(path_or_data).resolve().parent
    data = configuration_data(data, where, layout)
    try:
        cfg = Configuration.model_validate(data)
    except ValidationError as err:
        raise InputError(describe_validation(err, where)) from None
    return _relative_refs(cfg, base_dir) if base_dir is not None else cfg
