"""Fit a workload profile from traces of agent tasks, and measure each stage's share of task time.

Input formats (chosen by content, not by name):
- JSONL: one span per line with the fields written by advisor.simulation.traces (task_id, class, stage, resource,
  start, end, tokens_in, tokens_cached, tokens_out, cores, sandbox_memory_gb). start/end are seconds (numbers) or
  ISO-8601 timestamps.
- CSV: a header row with the same column names.
- OpenTelemetry JSON export: either OTLP/JSON (`{"resourceSpans": [{"scopeSpans": [{"spans": [...]}]}]}`,
  attributes as `[{"key": ..., "value": {"stringValue" | "intValue" | "doubleValue": ...}}]`, times in
  `startTimeUnixNano` / `endTimeUnixNano`), or a JSON list of SDK-style spans (`{"name", "start_time",
  "end_time", "attributes": {...}}` with ISO times, as the Python SDK's console exporter prints).
  Field mapping:
      agent.task_id                       -> task_id
      agent.class                         -> class
      agent.stage (else the span name)    -> stage
      agent.resource                      -> resource (gpu | cpu | delay; aliases llm -> gpu, tool -> cpu,
                                             wait -> delay)
      gen_ai.usage.input_tokens           -> tokens_in (all input tokens)
      gen_ai.usage.cache_read_input_tokens or gen_ai.usage.cache_read.input_tokens -> tokens_cached
      gen_ai.usage.output_tokens          -> tokens_out
      agent.cores                         -> cores
      agent.sandbox_memory_gb             -> sandbox_memory_gb
  Spans without agent.task_id (e.g. framework-internal spans) are not agent spans and are skipped and counted.

Bad rows (missing task_id/class/stage/resource/start/end, end before start, unknown resource, a gpu span without
tokens_out, a non-numeric field, a span whose class differs from its task's, a stage that changes resource) are excluded from the fit and
reported by line number (span index for OTel JSON); none is dropped silently. A trace with no usable row is an
error.

Fit:
- class shares: tasks of the class / tasks;
- per stage: mean count per task of the class (tasks without the stage count 0) and count_cv (sample std / mean);
- gpu: mean new input (tokens_in - tokens_cached), cached input and output tokens; cv = cv of span durations;
- cpu: work per call in reference-core seconds = duration x cores x per_core_perf of the CPU the trace was measured
  on (`--cpu SKU`), core_seconds = its mean, parallelism = mean cores (at least 1), cv = cv of the work;
- delay: mean and cv of durations;
- stage order: by the mean position of the stage's first span within the task;
- sandbox_memory_gb: mean over tasks of the largest value on the task's spans (0 if absent).
A span's duration is taken as its service time: traces should time a tool call from when it starts running (not
from when it was queued) for core_seconds to mean work.

Stage shares: each stage's time summed over tasks / summed task time, with task time = last end - first start
(gaps between spans count as `(untraced)`). 95% CIs by a seeded bootstrap over tasks (percentile method).
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import numpy as np

from advisor.errors import InputError

RESOURCES = {"gpu": "gpu", "cpu": "cpu", "delay": "delay", "io": "delay", "llm": "gpu", "tool": "cpu", "wait": "delay"}
REQUIRED = ("task_id", "class", "stage", "resource", "start", "end")
OTEL_MAP = {
    "agent.task_id": "task_id", "agent.class": "class", "agent.stage": "stage", "agent.resource": "resource",
    "gen_ai.usage.input_tokens": "tokens_in", "gen_ai.usage.output_tokens": "tokens_out",
    "gen_ai.usage.cache_read_input_tokens": "tokens_cached", "gen_ai.usage.cache_read.input_tokens": "tokens_cached",
    "agent.cores": "cores", "agent.sandbox_memory_gb": "sandbox_memory_gb",
}
MAX_BAD_LISTED = 50


@dataclass
class Span:
    line: int
    task_id: str
    cls: str
    stage: str
    resource: str
    start: float
    end: float
    tokens_in: float | None = None
    tokens_cached: float | None = None
    tokens_out: float | None = None
    cores: float | None = None
    memory_gb: float | None = None


@dataclass
class TraceRead:
    spans: list[Span]
    bad: list[tuple[int, str]] = field(default_factory=list)
    skipped_non_agent: int = 0
    format: str = ""
    unit: str = "line"


def _time(v) -> float:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    s = str(v).strip()
    try:
        return float(s)
    except ValueError:
        pass
    dt = datetime.fromisoformat(s.replace("Z", "+00:00"))
    return dt.timestamp()


def _num(v) -> float | None:
    if v is None or v == "":
        return None
    x = float(v)
    if not math.isfinite(x):
        raise ValueError("not finite")
    return x


def _keep(out, line: int, row: dict) -> None:
    """Add the row as a span, or record why it is bad (by line number); nothing is dropped silently."""
    sp, why = _row_to_span(line, row)
    if sp is None:
        out.bad.append((line, why))
    else:
        out.spans.append(sp)


def _row_to_span(line: int, row: dict) -> tuple[Span | None, str | None]:
    missing = [k for k in REQUIRED if row.get(k) in (None, "")]
    if missing:
        return None, f"missing {', '.join(missing)}"
    res = RESOURCES.get(str(row["resource"]).strip().lower())
    if res is None:
        return None, f"unknown resource {row['resource']!r} (expected gpu, cpu or delay)"
    try:
        start, end = _time(row["start"]), _time(row["end"])
    except (ValueError, TypeError):
        return None, "start/end is not a number or ISO-8601 time"
    if not (math.isfinite(start) and math.isfinite(end)):
        return None, "start/end is not finite"
    if end < start:
        return None, f"end ({end:g}) before start ({start:g})"
    try:
        sp = Span(line, str(row["task_id"]), str(row["class"]), str(row["stage"]), res, start, end,
                  _num(row.get("tokens_in")), _num(row.get("tokens_cached")), _num(row.get("tokens_out")),
                  _num(row.get("cores")), _num(row.get("sandbox_memory_gb")))
    except (ValueError, TypeError):
        return None, "a token, cores or memory field is not a number"
    if res == "gpu" and (sp.tokens_out is None or sp.tokens_out <= 0):
        return None, "gpu span without tokens_out"
    if res == "cpu" and sp.cores is not None and sp.cores <= 0:
        return None, "cores must be > 0"
    return sp, None


def _otel_attrs(attrs) -> dict:
    if isinstance(attrs, dict):
        return attrs
    out = {}
    for a in attrs or []:
        v = a.get("value", {})
        val = next(iter(v.values()), None) if isinstance(v, dict) and v else v
        out[a.get("key")] = val
    return out


def _otel_rows(doc) -> list[dict | None]:
    spans = []
    if isinstance(doc, dict) and "resourceSpans" in doc:
        for rs in doc["resourceSpans"] or []:
            for ss in rs.get("scopeSpans", rs.get("instrumentationLibrarySpans", [])) or []:
                spans.extend(ss.get("spans", []) or [])
        nano = True
    elif isinstance(doc, list):
        spans, nano = doc, False
    elif isinstance(doc, dict) and isinstance(doc.get("spans"), list):
        spans, nano = doc["spans"], False
    else:
        raise InputError("JSON trace: expected OTLP `resourceSpans`, a list of spans, or an object with `spans`")
    rows: list[dict | None] = []
    for s in spans:
        if not isinstance(s, dict):
            rows.append({})
            continue
        attrs = _otel_attrs(s.get("attributes"))
        if "agent.task_id" not in attrs:
            rows.append(None)
            continue
        row = {dst: attrs[src] for src, dst in OTEL_MAP.items() if src in attrs}
        row.setdefault("stage", s.get("name"))
        if nano or "startTimeUnixNano" in s:
            st, en = s.get("startTimeUnixNano"), s.get("endTimeUnixNano")
            row["start"] = None if st is None else int(st) / 1e9
            row["end"] = None if en is None else int(en) / 1e9
        else:
            row["start"], row["end"] = s.get("start_time"), s.get("end_time")
        rows.append(row)
    return rows


def read_traces(path: str | Path) -> TraceRead:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: cannot read ({e})") from None
    stripped = text.lstrip()
    out = TraceRead(spans=[])
    if not stripped:
        raise InputError(f"{path}: the trace is empty (no usable rows)")
    whole = None
    if stripped[0] in "[{":
        try:
            whole = json.loads(text)
        except json.JSONDecodeError:
            whole = None
    if whole is not None and (isinstance(whole, list) or "resourceSpans" in whole or "spans" in whole):
        out.format, out.unit = "otel-json", "span"
        for i, row in enumerate(_otel_rows(whole), start=1):
            if row is None:
                out.skipped_non_agent += 1
                continue
            sp, why = _row_to_span(i, row)
            if sp is None:
                out.bad.append((i, why))
            else:
                out.spans.append(sp)
    elif stripped[0] == "{":
        out.format = "jsonl"
        for i, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                out.bad.append((i, f"not valid JSON ({e.msg})"))
                continue
            if not isinstance(row, dict):
                out.bad.append((i, "not a JSON object"))
                continue
            _keep(out, i, row)
    else:
        out.format = "csv"
        reader = csv.DictReader(io.StringIO(text))
        if not reader.fieldnames or not set(REQUIRED) & set(reader.fieldnames):
            raise InputError(f"{path}: not JSONL, OTel JSON or CSV with a header naming {', '.join(REQUIRED)}")
        for row in reader:
            line = reader.line_num
            if None in row:
                out.bad.append((line, "more fields than the header"))
                continue
            _keep(out, line, row)
    # A span whose class differs from the first class seen for its task is bad too.
    first_cls: dict[str, str] = {}
    kept = []
    for sp in out.spans:
        c = first_cls.setdefault(sp.task_id, sp.cls)
        if c != sp.cls:
            out.bad.append((sp.line, f"class {sp.cls!r} differs from task {sp.task_id!r}'s class {c!r}"))
        else:
            kept.append(sp)
    # ... and so is a span whose resource differs from the first one seen for its class/stage.
    first_res: dict[tuple[str, str], str] = {}
    out.spans = []
    for sp in kept:
        r = first_res.setdefault((sp.cls, sp.stage), sp.resource)
        if r != sp.resource:
            out.bad.append((sp.line, f"stage {sp.cls}/{sp.stage} is {r} elsewhere but {sp.resource} here"))
        else:
            out.spans.append(sp)
    out.bad.sort()
    if not out.spans:
        detail = f"; {len(out.bad)} bad row(s), first: {out.unit} {out.bad[0][0]}: {out.bad[0][1]}" if out.bad else ""
        raise InputError(f"{path}: no usable rows in the trace{detail}")
    return out


# ------------------------------------------------------------------------------------------------------ analysis
@dataclass
class _Task:
    cls: str
    start: float
    end: float
    spans: list[Span]


def _tasks(spans: list[Span]) -> dict[str, _Task]:
    out: dict[str, _Task] = {}
    for sp in spans:
        t = out.get(sp.task_id)
        if t is None:
            out[sp.task_id] = _Task(sp.cls, sp.start, sp.end, [sp])
        else:
            t.start, t.end = min(t.start, sp.start), max(t.end, sp.end)
            t.spans.append(sp)
    return out


UNTRACED = "(untraced)"


def stage_shares(read: TraceRead, seed: int = 0, boot: int = 1000) -> dict[str, dict]:
    """`class/stage` -> {share, lo, hi}: share of summed task time, 95% bootstrap CI over tasks."""
    tasks = list(_tasks(read.spans).values())
    keys: list[str] = []
    index: dict[str, int] = {}
    for t in tasks:
        for sp in t.spans:
            k = f"{sp.cls}/{sp.stage}"
            if k not in index:
                index[k] = len(keys)
                keys.append(k)
    n, s = len(tasks), len(keys)
    mat = np.zeros((n, s + 1))
    tot = np.zeros(n)
    for i, t in enumerate(tasks):
        for sp in t.spans:
            mat[i, index[f"{sp.cls}/{sp.stage}"]] += sp.end - sp.start
        wall = t.end - t.start
        traced = mat[i, :s].sum()
        mat[i, s] = max(0.0, wall - traced)
        tot[i] = max(wall, traced)
    keys.append(UNTRACED)
    grand = tot.sum()
    if grand <= 0:
        return {k: {"share": 0.0, "lo": 0.0, "hi": 0.0} for k in keys}
    point = mat.sum(axis=0) / grand
    rng = np.random.default_rng(seed)
    draws = np.empty((boot, s + 1))
    chunk = max(1, min(boot, 2_000_000 // max(n, 1)))
    done = 0
    while done < boot:
        b = min(chunk, boot - done)
        idx = rng.integers(0, n, size=(b, n))
        w = np.zeros((b, n))
        np.add.at(w, (np.repeat(np.arange(b), n), idx.ravel()), 1.0)
        draws[done:done + b] = (w @ mat) / (w @ tot)[:, None]
        done += b
    lo, hi = np.percentile(draws, [2.5, 97.5], axis=0)
    out = {k: {"share": float(point[j]), "lo": float(lo[j]), "hi": float(hi[j])} for j, k in enumerate(keys)}
    if point[s] < 1e-12:
        out.pop(UNTRACED)
    return out


def _sig(x: float, digits: int = 4) -> float:
    if x == 0 or not math.isfinite(x):
        return float(x)
    return float(f"{x:.{digits}g}")


def _cv(v: np.ndarray) -> float:
    if v.size < 2 or v.mean() <= 0:
        return 0.0
    return float(v.std(ddof=1) / v.mean())


def fit_workload(read: TraceRead, per_core_perf: float, served_model: str, workload_id: str = "fitted",
                 name: str | None = None, source: str = "") -> dict:
    """A workload profile (as a YAML-ready dict, loadable with advisor.catalog.load_workload)."""
    tasks = _tasks(read.spans)
    by_class: dict[str, list[_Task]] = {}
    for t in tasks.values():
        by_class.setdefault(t.cls, []).append(t)
    n_tasks = len(tasks)
    classes = []
    raw_shares = {c: len(ts) / n_tasks for c, ts in by_class.items()}
    # Rounded shares that still sum to 1: round all, give the remainder to the largest class.
    shares = {c: round(v, 6) for c, v in raw_shares.items()}
    big = max(shares, key=shares.get)
    shares[big] = round(shares[big] + 1.0 - sum(shares.values()), 9)
    for cname, ts in sorted(by_class.items(), key=lambda kv: -len(kv[1])):
        stage_spans: dict[str, list[Span]] = {}
        first_pos: dict[str, list[float]] = {}
        counts: dict[str, np.ndarray] = {}
        resource: dict[str, str] = {}
        mems = []
        for ti, t in enumerate(ts):
            ordered = sorted(t.spans, key=lambda sp: (sp.start, sp.end))
            seen = set()
            mems.append(max((sp.memory_gb or 0.0) for sp in t.spans))
            for pos, sp in enumerate(ordered):
                stage_spans.setdefault(sp.stage, []).append(sp)
                resource.setdefault(sp.stage, sp.resource)
                if sp.stage not in seen:
                    seen.add(sp.stage)
                    first_pos.setdefault(sp.stage, []).append(pos / max(1, len(ordered) - 1))
                counts.setdefault(sp.stage, np.zeros(len(ts)))[ti] += 1
        stages = []
        for st in sorted(stage_spans, key=lambda k: float(np.mean(first_pos[k]))):
            sps = stage_spans[st]
            cnt = counts[st]
            d = np.array([sp.end - sp.start for sp in sps])
            base = {"name": st, "count": _sig(float(cnt.mean())), "count_cv": _sig(_cv(cnt), 3)}
            res = resource[st]
            if res == "gpu":
                t_in = np.array([sp.tokens_in or 0.0 for sp in sps])
                t_c = np.array([sp.tokens_cached or 0.0 for sp in sps])
                t_out = np.array([sp.tokens_out for sp in sps])
                stage = {"resource": "gpu", **base, "cv": _sig(_cv(d), 3),
                         "new_input_tokens": _sig(float(np.maximum(t_in - t_c, 0).mean())),
                         "cached_input_tokens": _sig(float(t_c.mean())), "output_tokens": _sig(float(t_out.mean()))}
            elif res == "cpu":
                cores = np.array([sp.cores if sp.cores else 1.0 for sp in sps])
                work = d * cores * per_core_perf
                if work.mean() <= 0:
                    raise InputError(f"class {cname!r} stage {st!r}: tool spans have zero duration")
                stage = {"resource": "cpu", **base, "cv": _sig(_cv(work), 3),
                         "core_seconds": _sig(float(work.mean())),
                         "parallelism": _sig(max(1.0, float(cores.mean())), 3)}
            else:
                if d.mean() <= 0:
                    raise InputError(f"class {cname!r} stage {st!r}: delay spans have zero duration")
                stage = {"resource": "delay", **base, "cv": _sig(_cv(d), 3), "seconds": _sig(float(d.mean()))}
            stages.append(stage)
        classes.append({"name": cname, "share": shares[cname], "sandbox_memory_gb": _sig(float(np.mean(mems)), 4),
                        "stages": stages})
    bad_note = ""
    if read.bad:
        listed = ", ".join(str(b[0]) for b in read.bad[:MAX_BAD_LISTED])
        more = f" (+{len(read.bad) - MAX_BAD_LISTED} more)" if len(read.bad) > MAX_BAD_LISTED else ""
        bad_note = f" {len(read.bad)} bad row(s) excluded ({read.unit}s {listed}{more})."
    return {
        "id": workload_id,
        "name": name or f"Fitted from {n_tasks} traced tasks",
        "served_model": served_model,
        "source": source or "fitted from traces by `advisor fit`",
        "notes": (f"Fitted by advisor fit from {len(read.spans)} spans of {n_tasks} tasks ({read.format}); CPU work "
                  f"normalized to the reference core with per_core_perf {per_core_perf:g}.{bad_note}"),
        "classes": classes,
    }
