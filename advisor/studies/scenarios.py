"""Scenario files for batch runs and what-if studies: what to solve, resolved to exact, hashable inputs.

A scenario names (or inlines) a workload and a rack, a rack count, an optional catalog folder and GPU/CPU subset, the
layouts to solve (default all three), the solver and its time limit, and overrides of any input field by dotted path.

File formats
------------
YAML (``SCENARIOS.yaml``)::

    catalog: tests/data/mini          # optional catalog folder (relative to this file); default the built-in one
    workload: agent                   # top-level keys other than scenarios/grid/samples/defaults are defaults
    rack: r15
    layouts: [a, b, hybrid]
    scenarios:                        # optional; without it the defaults make one scenario named `base`
      - name: dense-rack
        rack.power_kw: 60             # an override written inline ...
        overrides:                    # ... or under `overrides:`
          workload.classes[0].stages[2].core_seconds: 45
          workload.classes[edit].stages[tools].count: 12   # a list index may also be an element's `name`
    grid:                             # cartesian product, applied to every scenario above
      rack.power_kw: [20, 40, 60]
      workload.tool_share: [0.2, 0.5]
    samples:                          # seeded random draws, applied to every scenario (and grid point)
      n: 100
      seed: 7
      vary:
        rack.power_kw: [20, 140]                             # uniform on [20, 140]
        workload.classes[0].stages[1].core_seconds: {low: 5, high: 80, dist: loguniform}
        racks: {low: 1, high: 4, integer: true}              # rounded to the nearest integer

CSV (``SCENARIOS.csv``): a header row and one scenario per row. Columns ``name, workload, rack, racks, catalog,
gpus, cpus, layouts, solver, time_limit_s, objective, required_tasks_per_hour, capital_budget_usd, reference_gpu``;
list cells are separated by ``;`` or spaces; every column whose name is a dotted path (``rack.power_kw``) is an
override, an empty cell meaning none. Cells are read as YAML scalars (``60`` is a number).

Scenario fields: ``name``, ``workload`` (preset id, YAML file or inline mapping), ``rack`` (same), ``racks`` (default
1), ``catalog`` (folder), ``gpus``/``cpus`` (SKU ids the optimizer may use), ``layouts``, ``solver`` (cbc|ortools|highs),
``time_limit_s`` (default 60), ``objective`` (max_throughput|min_cost|min_power), ``required_tasks_per_hour``,
``capital_budget_usd``, ``reference_gpu`` (for ``workload.tool_share``) and ``overrides``. Grid and sample paths may
also name one of these fields directly (``racks``, ``time_limit_s``). ``existing`` (a configuration file, relative to
the scenario file, or mapping: the servers owned, which stay) and ``allow_removal`` make a scenario brownfield.

Overrides
---------
A path starts at ``workload`` or ``rack``; each step is ``.field`` or ``[index]`` (a list position, negative from
the end, or the ``name`` of a list element). The object is dumped to plain data, the value set at the path, and the
result validated again as a whole, so the usual field checks apply (a path that does not exist, or a value the model
rejects, is an error that names the path). Overrides apply in the order written; ``workload.tool_share`` applies last.

``workload.tool_share`` (a knob, not a field)
---------------------------------------------
Sets the fraction f of an unloaded task's time spent in tool (CPU) stages by multiplying every CPU stage's
``core_seconds`` by one factor k. With shares s_c of the task classes, counts n of the stages:

- G = sum_c s_c * sum_{GPU stages} n * L0, where L0 is the stage's unloaded call latency
  (``models.performance.stage_gpu_latency_s``) on the reference GPU: ``reference_gpu`` if given, else the first id in
  ``gpus`` if given, else the first GPU of the catalog that can host a replica of the model in one
  ``tensor_parallel_domain_gpus`` domain, served as ``gpu_serving`` chooses;
- C = sum_c s_c * sum_{CPU stages} n * core_seconds / parallelism (reference-core speed, per_core_perf = 1);
- D = sum_c s_c * sum_{delay stages} n * seconds.

Then f = k C / (G + k C + D), so k = f (G + D) / ((1 - f) C). GPU latencies do not depend on CPU stages, so the
result is exact: after scaling, C' / (G + C' + D) = f. f is taken in [1e-4, 1 - 1e-4] (core_seconds must stay
positive); the workload needs at least one CPU stage, and, for f < 1, some GPU or delay time.

Resolved inputs and hashes
--------------------------
``resolve`` loads and overrides everything into a ``Resolved`` scenario. ``Resolved.inputs(layout)`` is the complete
input of one solve (workload and rack as validated data, racks, layout, solver, time limit, objective, budgets, SKU
subsets, optimizer settings, the catalog's content digest and the package version); ``input_hash`` is the sha256 of
its canonical JSON (sorted keys, no spaces, UTF-8). Equal inputs hash equally whatever the scenario is called.
"""

from __future__ import annotations

import copy
import csv
import functools
import hashlib
import io
import itertools
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from advisor.catalog import (builtin_catalog, check_sku_ids, load_catalog, load_configuration, load_rack,
                             load_workload, read_yaml)
from advisor.errors import InputError, describe_validation
from advisor.layouts import LAYOUTS, Layout
from advisor.requests import MAX_RACKS
from advisor.optimizer.settings import OptimizerSettings
from models.base import BoundedNumbers
from models.catalog import Catalog
from models.config import Configuration
from models.hardware import Rack
from models.performance import gpu_serving, stage_gpu_latency_s
from models.workload import CpuStage, DelayStage, GpuStage, Workload

TOOL_SHARE = "workload.tool_share"
TOOL_SHARE_MIN = 1e-4
"""Smallest tool share applied (and 1 - this the largest): core_seconds must stay positive."""
RESERVED_KEYS = ("scenarios", "grid", "samples", "defaults")
LIST_FIELDS = ("gpus", "cpus", "layouts")



class OverridePathError(InputError):
    """An override path that does not exist in the object it names."""


class Scenario(BoundedNumbers):
    """One scenario as written (references not yet loaded)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: str = Field(min_length=1)
    workload: str | dict
    rack: str | dict
    racks: int = Field(default=1, ge=1, le=MAX_RACKS)
    catalog: str | None = None
    """Catalog folder (absolute once loaded from a file); None for the built-in catalog."""
    gpus: list[str] | None = None
    cpus: list[str] | None = None
    layouts: list[Layout] = Field(default_factory=lambda: list(LAYOUTS), min_length=1)
    solver: Literal["cbc", "ortools", "highs"] = "cbc"
    time_limit_s: float = Field(default=60.0, gt=0)
    objective: Literal["max_throughput", "min_cost", "min_power"] = "max_throughput"
    required_tasks_per_hour: float | None = Field(default=None, ge=0)
    capital_budget_usd: float | None = Field(default=None, gt=0)
    reference_gpu: str | None = None
    existing: str | dict | None = None
    """Configuration YAML file (relative to the scenario file) or inline mapping of the servers owned: they stay,
    the optimizer adds within the budgets (brownfield, advisor/optimizer/migration.py)."""
    allow_removal: bool = False
    """With `existing`: owned servers may be removed at the salvage value."""
    keep_hardware: bool = False
    """With `existing`: buy, remove and swap nothing; only the host cores' split and the queues are optimized."""
    overrides: dict[str, Any] = Field(default_factory=dict)
    base: str | None = None
    """Name of the scenario a grid point or sample was made from (None for one written out)."""
    sample: int | None = None
    """Index of the random draw (samples only)."""

    @field_validator("layouts")
    @classmethod
    def _unique_layouts(cls, v: list[str]) -> list[str]:
        return list(dict.fromkeys(v))

    @field_validator("overrides")
    @classmethod
    def _paths(cls, v: dict[str, Any]) -> dict[str, Any]:
        for k in v:
            parse_path(k)
        return v


# ----------------------------------------------------------------------------------------------------------------
# Dotted paths

_STEP = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[([^\[\]]+)\]")


def parse_path(path: str) -> tuple[str, list[str | int]]:
    """`workload.classes[0].stages[2].core_seconds` -> ("workload", ["classes", 0, "stages", 2, "core_seconds"])."""
    m = re.match(r"(workload|rack)(?=[.\[])", path)
    if not m:
        raise OverridePathError(f"override {path!r}: a path starts with `workload.` or `rack.`")
    steps: list[str | int] = []
    pos = m.end()
    while pos < len(path):
        s = _STEP.match(path, pos)
        if not s:
            raise OverridePathError(f"override {path!r}: cannot read the path from {path[pos:]!r} on "
                                    "(use `.field` and `[index]` steps)")
        if s.group(1) is not None:
            steps.append(s.group(1))
        else:
            raw = s.group(2).strip()
            steps.append(int(raw) if re.fullmatch(r"-?\d+", raw) else raw)
        pos = s.end()
    return m.group(1), steps


def _fmt(root: str, steps: list[str | int]) -> str:
    return root + "".join(f"[{s}]" if isinstance(s, int) else f".{s}" for s in steps)


def set_path(data: Any, root: str, steps: list[str | int], value: Any, path: str) -> None:
    """Set data[steps...] = value in place; every step must exist."""
    cur = data
    for depth, step in enumerate(steps):
        here = _fmt(root, steps[:depth])
        last = depth == len(steps) - 1
        if isinstance(cur, dict):
            if not isinstance(step, str) or step not in cur:
                known = ", ".join(sorted(cur)) or "none"
                raise OverridePathError(f"override {path!r}: {here} has no field {step!r} (fields: {known})")
            if last:
                cur[step] = value
            else:
                cur = cur[step]
        elif isinstance(cur, list):
            if isinstance(step, int):
                if not -len(cur) <= step < len(cur):
                    raise OverridePathError(f"override {path!r}: {here} has no index {step} "
                                            f"(it has {len(cur)} entr{'y' if len(cur) == 1 else 'ies'})")
                idx = step
            else:
                names = [e.get("name") for e in cur if isinstance(e, dict)]
                if step not in names:
                    raise OverridePathError(f"override {path!r}: {here} has no entry named {step!r} "
                                            f"(names: {', '.join(str(n) for n in names) or 'none'})")
                idx = names.index(step)
            if last:
                cur[idx] = value
            else:
                cur = cur[idx]
        else:
            what = "null" if cur is None else type(cur).__name__
            raise OverridePathError(f"override {path!r}: {here} is {what}, not a mapping or list; set {here} "
                                    "as a whole instead")


def apply_overrides(obj: BaseModel, root: str, overrides: list[tuple[str, Any]], where: str) -> BaseModel:
    """Dump, set every path, validate again (one validation for all, so coupled edits like shares work)."""
    if not overrides:
        return obj
    data = obj.model_dump(mode="json")
    for path, value in overrides:
        r, steps = parse_path(path)
        assert r == root
        if not steps:
            raise OverridePathError(f"override {path!r}: name a field inside {root}")
        set_path(data, root, steps, copy.deepcopy(value), path)
    try:
        return type(obj).model_validate(data)
    except ValidationError as err:
        paths = ", ".join(p for p, _ in overrides)
        raise InputError(describe_validation(err, f"{where}: {root} after overrides ({paths})", prefix=root)) from None


# ----------------------------------------------------------------------------------------------------------------
# Tool share


@dataclass(frozen=True)
class TaskTime:
    gpu_s: float
    cpu_s: float
    delay_s: float
    reference_gpu: str

    @property
    def tool_share(self) -> float:
        tot = self.gpu_s + self.cpu_s + self.delay_s
        return self.cpu_s / tot if tot > 0 else 0.0


def unloaded_task_time(workload: Workload, gpu, tp_domain_gpus: int) -> TaskTime:
    """Share-weighted unloaded task time split into GPU, tool (reference-core) and delay seconds."""
    serving = gpu_serving(workload, gpu, tp_domain_gpus)
    if not serving.fits:
        raise InputError(f"tool_share: reference GPU {gpu.id} hosts no replica: {serving.reason}")
    g = c_ = d = 0.0
    for cls in workload.classes:
        for s in cls.stages:
            if isinstance(s, GpuStage):
                g += cls.share * s.count * stage_gpu_latency_s(s, workload.served_model, serving)
            elif isinstance(s, CpuStage):
                c_ += cls.share * s.count * s.core_seconds / s.parallelism
            elif isinstance(s, DelayStage):
                d += cls.share * s.count * s.seconds
    return TaskTime(g, c_, d, gpu.id)


def apply_tool_share(workload: Workload, share: float, gpu, tp_domain_gpus: int) -> Workload:
    try:
        f = float(share)
    except (TypeError, ValueError):
        raise InputError(f"{TOOL_SHARE}: expected a number, got {share!r}") from None
    if not 0.0 <= f <= 1.0:
        raise InputError(f"{TOOL_SHARE}: {f:g} is not in [0, 1]")
    f = min(max(f, TOOL_SHARE_MIN), 1.0 - TOOL_SHARE_MIN)
    t = unloaded_task_time(workload, gpu, tp_domain_gpus)
    if t.cpu_s <= 0:
        raise InputError(f"{TOOL_SHARE}: workload {workload.id!r} has no CPU (tool) stage to rescale")
    if t.gpu_s + t.delay_s <= 0:
        raise InputError(f"{TOOL_SHARE}: workload {workload.id!r} has only tool stages; its tool share is 1")
    k = f * (t.gpu_s + t.delay_s) / ((1.0 - f) * t.cpu_s)
    data = workload.model_dump(mode="json")
    for cls in data["classes"]:
        for s in cls["stages"]:
            if s["resource"] == "cpu":
                s["core_seconds"] = s["core_seconds"] * k
    return Workload.model_validate(data)


# ----------------------------------------------------------------------------------------------------------------
# Canonical inputs


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def sha256_of(obj: Any) -> str:
    return hashlib.sha256(canonical_json(obj).encode("utf-8")).hexdigest()


def catalog_data(catalog: Catalog) -> dict:
    """What the optimizer reads from a catalog (CPUs, GPUs, chassis), as plain data in catalog order."""
    return {t: [e.model_dump(mode="json") for e in getattr(catalog, t)] for t in ("cpus", "gpus", "chassis")}


@functools.lru_cache(maxsize=32)
def _load_catalog_cached(folder: str | None) -> tuple[Catalog, dict, str]:
    cat = builtin_catalog() if folder is None else load_catalog(Path(folder))
    data = catalog_data(cat)
    return cat, data, sha256_of(data)


def load_catalog_ref(folder: str | None) -> tuple[Catalog, dict, str]:
    """(catalog, its optimizer-relevant data, that data's sha256), cached per folder."""
    return _load_catalog_cached(str(Path(folder).resolve()) if folder else None)


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("rack-advisor")
    except Exception:  # noqa: BLE001 - not installed: the hash still covers every input
        return "unknown"


@dataclass(frozen=True)
class Resolved:
    scenario: Scenario
    workload: Workload
    rack: Rack
    catalog: Catalog
    catalog_json: dict
    catalog_digest: str
    settings: OptimizerSettings
    existing: Configuration | None = None

    def inputs(self, layout: str) -> dict:
        s = self.scenario
        owned = {} if self.existing is None else {  # only where given: greenfield hashes stay as they were
            "existing": self.existing.model_dump(mode="json"), "allow_removal": s.allow_removal,
            # only where set: earlier brownfield rows keep their hashes (a resumed batch reuses them)
            **({"keep_hardware": True} if s.keep_hardware else {})}
        return owned | {
            "workload": self.workload.model_dump(mode="json"),
            "rack": self.rack.model_dump(mode="json"),
            "racks": s.racks,
            "layout": layout,
            "solver": s.solver,
            "time_limit_s": float(s.time_limit_s),
            "objective": s.objective,
            "required_tasks_per_hour": s.required_tasks_per_hour,
            "capital_budget_usd": s.capital_budget_usd,
            "gpu_ids": sorted(s.gpus) if s.gpus is not None else None,
            "cpu_ids": sorted(s.cpus) if s.cpus is not None else None,
            "settings": self.settings.model_dump(mode="json"),
            "catalog_sha256": self.catalog_digest,
            "version": _version(),
        }

    def input_hash(self, layout: str) -> str:
        return sha256_of(self.inputs(layout))

    @property
    def scenario_hash(self) -> str:
        """Hash of the inputs common to all layouts."""
        d = self.inputs("*")
        d.pop("layout")
        return sha256_of(d)


def resolve(s: Scenario, settings: OptimizerSettings | None = None) -> Resolved:
    """Load the catalog, workload and rack, check the SKU subsets, apply the overrides."""
    settings = settings or OptimizerSettings()
    where = f"scenario {s.name!r}"
    try:
        cat, cat_json, digest = load_catalog_ref(s.catalog)
    except InputError as e:
        raise InputError(f"{where}: catalog: {e}") from None
    try:
        w = load_workload(s.workload, cat)
        r = load_rack(s.rack, cat)
    except InputError as e:
        raise InputError(f"{where}: {e}") from None
    try:
        check_sku_ids(cat, s.gpus, s.cpus)
    except InputError as e:
        field = {"gpu_ids": "gpus", "cpu_ids": "cpus"}[e.loc[1]]
        raise InputError(f"{where}: {field}[{e.loc[2]}]: {e}", suggestions=e.suggestions) from None
    w_over = [(p, v) for p, v in s.overrides.items() if p.startswith("workload") and p != TOOL_SHARE]
    r_over = [(p, v) for p, v in s.overrides.items() if p.startswith("rack")]
    w = apply_overrides(w, "workload", w_over, where)  # type: ignore[assignment]
    r = apply_overrides(r, "rack", r_over, where)  # type: ignore[assignment]
    if TOOL_SHARE in s.overrides:
        tp = settings.assumptions.tensor_parallel_domain_gpus
        w = apply_tool_share(w, s.overrides[TOOL_SHARE], reference_gpu(s, cat, w, tp), tp)
    existing = None
    if s.existing is not None:
        try:
            existing = load_configuration(s.existing)
        except InputError as e:
            raise InputError(f"{where}: existing: {e}") from None
    return Resolved(s, w, r, cat, cat_json, digest, settings, existing)  # type: ignore[arg-type]


def reference_gpu(s: Scenario, cat: Catalog, workload: Workload | None = None, tp_domain_gpus: int = 8):
    """The GPU `workload.tool_share` measures GPU time on: the scenario's choice, else the first catalog GPU that
    hosts a replica of the workload's model in a domain of `tp_domain_gpus` (else the first GPU)."""
    gid = s.reference_gpu or (s.gpus[0] if s.gpus else None)
    if gid is None:
        first = next(iter(cat.gpus), None)
        if first is None:
            raise InputError(f"scenario {s.name!r}: {TOOL_SHARE} needs a GPU and the catalog has none")
        if workload is not None:
            first = next((g for g in cat.gpus if gpu_serving(workload, g, tp_domain_gpus).fits), first)
        return first
    if gid not in cat.gpus:
        raise InputError(f"scenario {s.name!r}: reference_gpu: unknown gpu id {gid!r}")
    return cat.gpus[gid]


# ----------------------------------------------------------------------------------------------------------------
# Reading files

SCENARIO_FIELDS = set(Scenario.model_fields) - {"overrides", "base", "sample", "name"}


def _is_path(key: str) -> bool:
    return key.startswith(("workload.", "workload[", "rack.", "rack["))


def _rel(value: Any, base_dir: Path | None) -> Any:
    """A file or folder reference relative to the scenario file, made absolute when it exists there."""
    if base_dir is None or not isinstance(value, str):
        return value
    p = Path(value)
    if p.is_absolute():
        return value
    cand = base_dir / p
    return str(cand.resolve()) if cand.exists() else value


def _scenario(raw: dict, defaults: dict, base_dir: Path | None, where: str, default_name: str) -> Scenario:
    if not isinstance(raw, dict):
        raise InputError(f"{where}: expected a mapping")
    merged: dict[str, Any] = {}
    overrides: dict[str, Any] = {}
    for src in (defaults, raw):
        for k, v in src.items():
            if k == "overrides":
                if not isinstance(v, dict):
                    raise InputError(f"{where}: overrides: expected a mapping of path: value")
                overrides.update(v)
            elif _is_path(k):
                overrides[k] = v
            else:
                merged[k] = v
    merged.setdefault("name", default_name)
    for k in ("workload", "rack", "existing"):
        if isinstance(merged.get(k), str) and merged[k].endswith((".yaml", ".yml", ".json")):
            merged[k] = _rel(merged[k], base_dir)
    if isinstance(merged.get("catalog"), str) and base_dir is not None and not Path(merged["catalog"]).is_absolute():
        merged["catalog"] = str((base_dir / merged["catalog"]).resolve())
    merged["overrides"] = overrides
    for k in ("workload", "rack"):
        if k not in merged:
            raise InputError(f"{where}: no {k} (give `{k}:` in the scenario or at the top of the file)")
    try:
        return Scenario.model_validate(merged)
    except ValidationError as err:
        raise InputError(describe_validation(err, where)) from None
    except InputError as err:  # an override path refused by Scenario's own check: say which scenario
        raise type(err)(f"{where}: {err}") from None


def _with(s: Scenario, values: dict[str, Any], name: str, sample: int | None = None) -> Scenario:
    fields = {k: v for k, v in values.items() if not _is_path(k)}
    over = {**s.overrides, **{k: v for k, v in values.items() if _is_path(k)}}
    data = {**s.model_dump(), **fields, "overrides": over, "name": name, "base": s.base or s.name}
    if sample is not None:
        data["sample"] = sample
    try:
        return Scenario.model_validate(data)
    except ValidationError as err:
        raise InputError(describe_validation(err, f"scenario {name!r}")) from None


def _check_key(k: Any, where: str) -> str:
    if not isinstance(k, str) or not (_is_path(k) or k in SCENARIO_FIELDS):
        raise InputError(f"{where}: {k!r} is neither a `workload.`/`rack.` path nor a scenario field "
                         f"({', '.join(sorted(SCENARIO_FIELDS))})")
    if _is_path(k):
        parse_path(k)
    return k


def _value_label(v: Any) -> str:
    if isinstance(v, float):
        s = f"{v:.6g}"
        return s if float(s) == v else repr(v)
    return str(v) if not isinstance(v, (dict, list)) else canonical_json(v)


def expand_grid(scenarios: list[Scenario], grid: dict, where: str) -> list[Scenario]:
    if not isinstance(grid, dict) or not grid:
        raise InputError(f"{where}: grid: expected a mapping of path: [values]")
    keys = [_check_key(k, f"{where}: grid") for k in grid]
    vals = []
    for k in keys:
        v = grid[k]
        if not isinstance(v, list) or not v:
            raise InputError(f"{where}: grid.{k}: expected a non-empty list of values")
        vals.append(v)
    out = []
    for s in scenarios:
        for combo in itertools.product(*vals):
            values = dict(zip(keys, combo))
            label = ", ".join(f"{k}={_value_label(v)}" for k, v in values.items())
            out.append(_with(s, values, f"{s.name}[{label}]"))
    return out


@dataclass(frozen=True)
class Dist:
    low: float
    high: float
    dist: Literal["uniform", "loguniform"]
    integer: bool

    def draw(self, rng) -> float | int:
        if self.dist == "loguniform":
            x = math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        else:
            x = rng.uniform(self.low, self.high)
        return int(round(x)) if self.integer else float(x)


def _dist(spec: Any, where: str) -> Dist:
    if isinstance(spec, list) and len(spec) == 2:
        spec = {"low": spec[0], "high": spec[1]}
    if not isinstance(spec, dict) or "low" not in spec or "high" not in spec:
        raise InputError(f"{where}: expected [low, high] or {{low, high, dist: uniform|loguniform, integer}}")
    extra = set(spec) - {"low", "high", "dist", "integer"}
    if extra:
        raise InputError(f"{where}: unknown key(s) {', '.join(sorted(extra))}")
    try:
        lo, hi = float(spec["low"]), float(spec["high"])
    except (TypeError, ValueError):
        raise InputError(f"{where}: low and high must be numbers") from None
    dist = str(spec.get("dist", "uniform")).replace("-", "").replace("_", "")
    if dist not in ("uniform", "loguniform"):
        raise InputError(f"{where}: dist must be uniform or loguniform, not {spec.get('dist')!r}")
    if hi < lo:
        raise InputError(f"{where}: high ({hi:g}) is below low ({lo:g})")
    if dist == "loguniform" and lo <= 0:
        raise InputError(f"{where}: loguniform needs low > 0")
    return Dist(lo, hi, dist, bool(spec.get("integer", False)))  # type: ignore[arg-type]


def expand_samples(scenarios: list[Scenario], samples: dict, where: str) -> list[Scenario]:
    import numpy as np

    if not isinstance(samples, dict) or not isinstance(samples.get("vary"), dict) or not samples["vary"]:
        raise InputError(f"{where}: samples: expected n, seed and a non-empty `vary:` mapping of path: range")
    extra = set(samples) - {"n", "seed", "vary"}
    if extra:
        raise InputError(f"{where}: samples: unknown key(s) {', '.join(sorted(extra))}")
    n = samples.get("n", 100)
    if not isinstance(n, int) or n < 1:
        raise InputError(f"{where}: samples.n: expected a positive integer")
    seed = samples.get("seed", 0)
    dists = {_check_key(k, f"{where}: samples.vary"): _dist(v, f"{where}: samples.vary.{k}")
             for k, v in samples["vary"].items()}
    rng = np.random.default_rng(seed)
    draws = [{k: d.draw(rng) for k, d in dists.items()} for _ in range(n)]
    width = len(str(n - 1))
    out = []
    for s in scenarios:
        for i, values in enumerate(draws):
            out.append(_with(s, values, f"{s.name}~s{i:0{width}d}", sample=i))
    return out


def scenarios_from_data(data: Any, where: str = "scenarios", base_dir: Path | None = None) -> list[Scenario]:
    if isinstance(data, list):
        data = {"scenarios": data}
    if not isinstance(data, dict):
        raise InputError(f"{where}: expected a mapping (defaults, scenarios, grid, samples) or a list of scenarios")
    defaults = {k: v for k, v in data.items() if k not in RESERVED_KEYS}
    if data.get("defaults") is not None:
        if not isinstance(data["defaults"], dict):
            raise InputError(f"{where}: defaults: expected a mapping")
        defaults = {**data["defaults"], **defaults}
    raw = data.get("scenarios")
    if raw is None:
        scen = [_scenario({}, defaults, base_dir, where, "base")]
    else:
        if not isinstance(raw, list) or not raw:
            raise InputError(f"{where}: scenarios: expected a non-empty list")
        scen = [_scenario(r, defaults, base_dir, f"{where}: scenarios[{i}]", f"s{i}") for i, r in enumerate(raw)]
    if data.get("grid") is not None:
        scen = expand_grid(scen, data["grid"], where)
    if data.get("samples") is not None:
        scen = expand_samples(scen, data["samples"], where)
    names = [s.name for s in scen]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise InputError(f"{where}: scenario names must be unique; repeated: {', '.join(dup[:5])}")
    return scen


def _csv_cell(v: str) -> Any:
    import yaml

    v = v.strip()
    if v == "":
        return None
    try:
        return yaml.safe_load(v)
    except yaml.YAMLError:
        return v


def scenarios_from_csv(text: str, where: str, base_dir: Path | None = None) -> list[Scenario]:
    reader = csv.DictReader(io.StringIO(text))
    if not reader.fieldnames:
        raise InputError(f"{where}: empty CSV (expected a header row)")
    for col in reader.fieldnames:
        c = col.strip()
        if not (_is_path(c) or c in SCENARIO_FIELDS or c == "name"):
            raise InputError(f"{where}: column {col!r} is neither a scenario field nor a `workload.`/`rack.` path")
    rows = []
    for i, row in enumerate(reader, start=2):
        out: dict[str, Any] = {}
        for col, cell in row.items():
            if col is None:
                raise InputError(f"{where}: line {i}: more cells than columns")
            col = col.strip()
            if cell is None or cell.strip() == "":
                continue
            if col in LIST_FIELDS:
                out[col] = [x for x in re.split(r"[;\s]+", cell.strip()) if x]
            elif col in ("name", "workload", "rack", "catalog", "reference_gpu", "solver", "objective"):
                out[col] = cell.strip()
            else:
                out[col] = _csv_cell(cell)
        out.setdefault("name", f"row{i}")
        rows.append(out)
    if not rows:
        raise InputError(f"{where}: no scenario rows")
    return scenarios_from_data({"scenarios": rows}, where, base_dir)


def load_scenarios(path: str | Path) -> list[Scenario]:
    path = Path(path)
    if path.suffix.lower() == ".csv":
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise InputError(f"{path}: no such file") from None
        return scenarios_from_csv(text, str(path), path.parent)
    return scenarios_from_data(read_yaml(path), str(path), path.parent)


def base_scenario(workload: str, rack: str, racks: int = 1, catalog: str | None = None,
                  gpus: list[str] | None = None, cpus: list[str] | None = None, layouts: list[str] | None = None,
                  solver: str = "cbc", time_limit_s: float = 60.0, reference_gpu: str | None = None,
                  overrides: dict[str, Any] | None = None, name: str = "base") -> Scenario:
    """A scenario from command-line style arguments (for the what-if commands)."""
    data = dict(name=name, workload=workload, rack=rack, racks=racks, catalog=catalog, gpus=gpus or None,
                cpus=cpus or None, solver=solver, time_limit_s=time_limit_s, reference_gpu=reference_gpu,
                overrides=overrides or {})
    if layouts:
        data["layouts"] = layouts
    try:
        return Scenario.model_validate(data)
    except ValidationError as err:
        raise InputError(describe_validation(err, "scenario")) from None


def vary(s: Scenario, values: dict[str, Any], name: str | None = None) -> Scenario:
    """A copy of `s` with these paths/fields set (name made from the values unless given)."""
    label = ", ".join(f"{k}={_value_label(v)}" for k, v in values.items())
    return _with(s, values, name or f"{s.name}[{label}]")
