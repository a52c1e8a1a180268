"""Exports of a batch results database: flat CSV, JSON, and a self-contained HTML summary with inline SVG charts."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
from collections import Counter
from datetime import datetime, UTC
from pathlib import Path
from typing import Any

from advisor import layouts
from advisor.layouts import LAYOUT_COLORS, LAYOUTS, Outcome
from advisor.studies.results import COLUMN_NAMES, DB_NAME, read_rows

CSV_COLUMNS = ("scenario", "layout", "status", "throughput", "power_w", "space_u", "capital_usd", "cost_usd_per_hour",
               "cost_usd_per_1000_tasks", "energy_wh_per_task", "gap", "bottleneck",
               "binding_json", "solve_seconds", "started", "finished", "worker", "hash", "scenario_hash", "base",
               "sample", "overrides_json", "error", "message", "configuration_json")
JSON_FIELDS = ("overrides_json", "inputs_json", "binding_json", "configuration_json")


def svg_of(fig) -> str:
    """A matplotlib Figure as an inline <svg> element (text kept as text, no external references)."""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "rack-advisor"}):
        fig.savefig(buf, format="svg", bbox_inches="tight")
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", buf.getvalue(), flags=re.S)
    start = text.find("<svg")
    return text[start:] if start >= 0 else text


def new_figure(width: float = 7.5, height: float = 3.6):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=100)


def best_layout(by_layout: dict[str, dict]) -> str | None:
    """The best of a scenario's result rows by advisor.layouts.best_layout (errors left out)."""
    return layouts.best_layout(Outcome(k, r["throughput"], r.get("power_w") or 0.0, r.get("gap"))
                               for k, r in by_layout.items()
                               if r.get("status") != "error" and r.get("throughput") is not None)


def pivot(rows: list[dict]) -> list[dict]:
    """One entry per scenario: its overrides, each layout's row, the best layout."""
    out: dict[str, dict] = {}
    for r in rows:
        e = out.setdefault(r["scenario"], {"scenario": r["scenario"], "overrides": _loads(r["overrides_json"]) or {},
                                           "layouts": {}, "base": r["base"], "sample": r["sample"]})
        e["layouts"][r["layout"]] = r
    for e in out.values():
        e["best"] = best_layout(e["layouts"])
    return list(out.values())


def _loads(v: Any) -> Any:
    if v is None or not isinstance(v, str):
        return v
    try:
        return json.loads(v)
    except ValueError:
        return v


def write_atomic(path: Path, text: str) -> Path:
    """Write a file whole or not at all: into a temporary file beside it, flushed to disk, then renamed over it
    (a reader, or a run killed half-way, sees the old file or the new one, never a part)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def export_csv(rows: list[dict], path: Path) -> Path:
    keys = sorted({k for r in rows for k in (_loads(r["overrides_json"]) or {})})
    buf = io.StringIO(newline="")
    w = csv.writer(buf)
    w.writerow([*CSV_COLUMNS, *keys])
    for r in rows:
        over = _loads(r["overrides_json"]) or {}
        w.writerow([("" if r.get(c) is None else r.get(c)) for c in CSV_COLUMNS]
                   + [("" if over.get(k) is None else over.get(k)) for k in keys])
    return write_atomic(path, buf.getvalue())


def export_json(rows: list[dict], path: Path) -> Path:
    out = []
    for r in rows:
        d = {k: r.get(k) for k in COLUMN_NAMES}
        for k in JSON_FIELDS:
            d[k.removesuffix("_json")] = _loads(d.pop(k))
        out.append(d)
    return write_atomic(path, json.dumps(out, indent=1, allow_nan=False, default=str))


def _charts(rows: list[dict], piv: list[dict]) -> list[dict]:
    charts = []
    ok = [r for r in rows if r["status"] != "error" and r["throughput"] is not None]
    layouts = [lay for lay in LAYOUTS if any(r["layout"] == lay for r in rows)]
    # 1. best-layout counts
    wins = Counter(e["best"] for e in piv if e["best"])
    if wins:
        fig = new_figure(5.5, 2.8)
        ax = fig.subplots()
        ax.bar(layouts, [wins.get(k, 0) for k in layouts], color=[LAYOUT_COLORS.get(k, "grey") for k in layouts])
        ax.set_ylabel("scenarios won")
        ax.set_title("Best layout (most tasks/h) per scenario")
        charts.append({"title": "Best layout per scenario", "svg": svg_of(fig)})
    # 2. throughput by scenario and layout
    if ok:
        fig = new_figure(8.0, 3.6)
        ax = fig.subplots()
        names = [e["scenario"] for e in piv]
        x = list(range(len(names)))
        for lay in layouts:
            ys = [e["layouts"].get(lay, {}).get("throughput") for e in piv]
            ys = [math.nan if y is None else y for y in ys]
            ax.plot(x, ys, "o-" if len(x) <= 60 else "-", ms=3, lw=1, label=lay, color=LAYOUT_COLORS.get(lay))
        ax.set_xlabel("scenario (in file order)")
        ax.set_ylabel("tasks / hour")
        ax.set_title("Throughput by scenario and layout")
        ax.legend(frameon=False)
        if len(names) <= 30:
            ax.set_xticks(x, [n if len(n) <= 28 else n[:27] + "…" for n in names], rotation=60, ha="right",
                          fontsize=7)
        charts.append({"title": "Throughput by scenario", "svg": svg_of(fig)})
        # 3. throughput vs power
        fig = new_figure(5.5, 3.6)
        ax = fig.subplots()
        for lay in layouts:
            pts = [(r["power_w"] / 1000.0, r["throughput"]) for r in ok if r["layout"] == lay and r["power_w"]]
            if pts:
                ax.scatter(*zip(*pts), s=12, label=lay, color=LAYOUT_COLORS.get(lay), alpha=0.8)
        ax.set_xlabel("power used (kW)")
        ax.set_ylabel("tasks / hour")
        ax.set_title("Throughput against power")
        ax.legend(frameon=False)
        charts.append({"title": "Throughput against power", "svg": svg_of(fig)})
    return charts


def render_html(rows: list[dict], title: str = "rack-advisor batch") -> str:
    import templates
    from jinja2 import Environment, FileSystemLoader

    env = Environment(loader=FileSystemLoader(Path(templates.__file__).parent), autoescape=True)
    env.filters["num"] = lambda v, d=0: "" if v is None else f"{v:,.{d}f}"
    piv = pivot(rows)
    layouts = [lay for lay in LAYOUTS if any(r["layout"] == lay for r in rows)]
    statuses = Counter(r["status"] for r in rows)
    errors = [r for r in rows if r["status"] == "error"]
    override_keys = sorted({k for e in piv for k in e["overrides"]})
    solve_s = sum(r["solve_seconds"] or 0.0 for r in rows)
    return env.get_template("batch.html.j2").render(
        title=title, generated=datetime.now(UTC).isoformat(timespec="seconds"), rows=rows, pivot=piv,
        layouts=layouts, statuses=sorted(statuses.items()), errors=errors, override_keys=override_keys,
        charts=_charts(rows, piv), solve_seconds=solve_s, colors=LAYOUT_COLORS,
        wins=Counter(e["best"] for e in piv if e["best"]))


def export_all(out_dir: Path | str, scenarios: list[str] | None = None) -> dict[str, Path]:
    """results.csv, results.json and report.html in out_dir, for the given scenarios (default all in the DB)."""
    out = Path(out_dir)
    rows = read_rows(out / DB_NAME, scenarios)
    if scenarios is not None:  # keep file order
        order = {n: i for i, n in enumerate(scenarios)}
        lay = {k: i for i, k in enumerate(LAYOUTS)}
        rows.sort(key=lambda r: (order.get(r["scenario"], 1 << 30), lay.get(r["layout"], 9)))
    paths = {"csv": export_csv(rows, out / "results.csv"), "json": export_json(rows, out / "results.json")}
    paths["html"] = write_atomic(out / "report.html", render_html(rows, title=f"rack-advisor batch: {out.name}"))
    return paths
