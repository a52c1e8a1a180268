"""The HTML recommendation report: one self-contained file (inline CSS, inline SVG, no script, no external request).

Every figure in it comes from the optimizer / pipeline-model output or from a catalog entry, which the report
lists with its source. `render_report(request)` returns the HTML and a JSON-ready dict of the same figures.
"""

from __future__ import annotations

import io
import math
import re
import time
from dataclasses import dataclass
from datetime import datetime, UTC
from importlib import resources
from typing import Any, Literal, NamedTuple

import jinja2
from markupsafe import Markup
from pydantic import BaseModel

from advisor.catalog import builtin_catalog, check_sku_ids, load_rack, load_workload
from advisor.deadline import Deadline
from advisor.layouts import LAYOUT_COLORS, LAYOUT_NAMES, LAYOUTS, Outcome, best_layout, tied_layouts
from advisor.optimizer.compare import LayoutComparison, chip_vs_rack, compare_layouts
from advisor.errors import InputError
from advisor.operations import operating_thresholds
from advisor.parallel import run_all
from advisor.report.decisions import failure_rows, go_no_go, operating_glance
from advisor.optimizer.groups import BUDGET_GROUPS
from advisor.report import names
from advisor.report.names import Names
from advisor.report.stages import stage_sensitivity
from advisor.optimizer.optimize import OptimizeResult, optimize
from advisor.optimizer.settings import OptimizerSettings
from advisor.report.migration import brownfield_kwargs, migration_view, sweep_point
from models.assumptions import ModelAssumptions
from advisor.requests import ReportRequest
from models.catalog import Catalog
from models.config import Configuration
from models.hardware import Rack
from models.performance import gpu_serving
from models.tco import CostAssumptions
from models.tco import server_price as tco_server_price
from models.pipeline import Evaluation, evaluate
from models.workload import CpuStage, Workload

ROLE_COLORS = {"gpu": "#7a5195", "cpu": "#2a9d8f", "reserved": "#8d99ae"}
RESOURCE_COLORS = {"gpu": "#7a5195", "cpu": "#2a9d8f", "cpu_wait": "#e9c46a", "delay": "#b0b7c3"}
SECTIONS = ("glance", "bom", "time", "layouts", "why", "operate", "sources")


# ----------------------------------------------------------------------------------------------------------- helpers

def _finite(obj: Any) -> Any:
    """JSON-safe copy: non-finite floats become None."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def fmt(x: Any, spec: str = ",.0f", unit: str = "") -> str:
    if x is None:
        return "n/a"
    if isinstance(x, float) and not math.isfinite(x):
        return "unbounded" if x > 0 else "n/a"
    s = format(x, spec)
    return f"{s} {unit}" if unit else s


def pct(x: Any, digits: int = 0) -> str:
    return fmt(x, f".{digits}%")


def secs(x: float | None) -> str:
    """A wait or duration: ms below a second, '< 1 ms' when the model says practically none."""
    if x is None:
        return "n/a"
    if not math.isfinite(x):
        return "unbounded"
    if x < 0.001:
        return "< 1 ms"
    if x < 1:
        return f"{x * 1000:,.0f} ms"
    return f"{x:,.2f} s"


_URL = re.compile(r"https?://[^\s<>\"'),;]+")


def link_parts(text: str | None) -> list[tuple[str, bool]]:
    """Split text into (piece, is_url) so the template can link http(s) URLs and escape everything."""
    if not text:
        return []
    out, pos = [], 0
    for m in _URL.finditer(text):
        if m.start() > pos:
            out.append((text[pos:m.start()], False))
        out.append((m.group(0).rstrip("."), True))
        pos = m.start() + len(m.group(0).rstrip("."))
    if pos < len(text):
        out.append((text[pos:], False))
    return out


def _gpus(r: OptimizeResult) -> int:
    return sum(s.count * s.gpus_per_server for s in r.servers)


def _kwh_per_1000(r: OptimizeResult) -> float | None:
    """Facility kWh per 1,000 tasks at the operating point (= Wh per task, `models.tco`)."""
    return r.tco.energy_wh_per_task if r.tco is not None else None


def _usd_per_1000(r: OptimizeResult) -> float | None:
    return r.tco.cost_usd_per_1000_tasks if r.tco is not None else None


def _outcomes(results: list[OptimizeResult]) -> list[Outcome]:
    return [Outcome(r.layout, r.throughput_tasks_per_hour, r.power_w, r.gap) for r in results]


def _truncate(s: str, n: int) -> str:
    return s if len(s) <= n else s[: max(1, n - 1)] + "…"


# ------------------------------------------------------------------------------------------------------------ charts

def _svg(fig, name: str) -> Markup:
    """Matplotlib figure (Agg canvas) to an inline <svg>, with ids prefixed so several charts share one page."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    s = buf.getvalue()
    s = s[s.index("<svg"):]
    ids = set(re.findall(r'\sid="([^"]+)"', s))
    s = re.sub(r'(\sid=")([^"]+)"', lambda m: f'{m.group(1)}{name}-{m.group(2)}"', s)
    s = re.sub(r'(href="#|url\(#)([^")]+)',
               lambda m: f"{m.group(1)}{name}-{m.group(2)}" if m.group(2) in ids else m.group(0), s)
    s = s.replace("<svg ", f'<svg role="img" aria-label="{name}" ', 1)
    return Markup(s)  # generated by matplotlib: labels are glyph paths, comments escaped by its SVG writer


def _figure(w: float, h: float):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w, h), dpi=100)
    return fig


def _style(ax) -> None:
    ax.spines["top"].set_visible(False)
    ax.spines["right"].set_visible(False)
    ax.tick_params(labelsize=8)
    ax.grid(axis="x", color="#e5e7eb", linewidth=0.6)
    ax.set_axisbelow(True)


def chart_stage_shares(ev: Evaluation) -> Markup:
    rows = []
    for st in ev.stage_times:
        tot = st.service_s + st.wait_s
        svc = st.share * (st.service_s / tot) if tot > 0 else 0.0
        rows.append((names.stage(f"{st.task_class}/{st.stage}"), st.resource, svc, st.share - svc))
    rows.sort(key=lambda r: r[2] + r[3])
    fig = _figure(7.2, 0.9 + 0.28 * len(rows))
    ax = fig.add_subplot()
    y = range(len(rows))
    ax.barh(y, [r[2] for r in rows], color=[RESOURCE_COLORS.get(r[1], "#999") for r in rows])
    ax.barh(y, [r[3] for r in rows], left=[r[2] for r in rows], color=RESOURCE_COLORS["cpu_wait"], hatch="//",
            edgecolor="white")
    ax.set_yticks(list(y))
    ax.set_yticklabels([r[0] for r in rows], parse_math=False)
    for i, r in enumerate(rows):
        ax.text(r[2] + r[3], i, f" {r[2] + r[3]:.1%}", va="center", fontsize=7, parse_math=False)
    ax.set_xlabel("share of mean task time at the operating point", fontsize=8)
    from matplotlib.patches import Patch
    ax.legend(handles=[Patch(color=RESOURCE_COLORS["gpu"], label="GPU (LLM call)"),
                       Patch(color=RESOURCE_COLORS["cpu"], label="CPU (tool call)"),
                       Patch(color=RESOURCE_COLORS["cpu_wait"], label="waiting for a core"),
                       Patch(color=RESOURCE_COLORS["delay"], label="delay (holds nothing)")],
              fontsize=7, loc="lower right", frameon=False)
    ax.set_xlim(0, max([r[2] + r[3] for r in rows] + [0.01]) * 1.18)
    _style(ax)
    return _svg(fig, "chart-stage-shares")


def gpu_time_split(ev: Evaluation) -> dict[str, dict[str, float]] | None:
    """GPU serving capacity: busy vs idle. At sustainable throughput the model splits the idle part into waiting on
    CPU stages and other (delays); at the operating point the extra idle part is the load kept below capacity."""
    if ev.gpus == 0 or "gpu" not in ev.utilization:
        return None
    idle_cpu = ev.gpu_idle_on_cpu_fraction
    idle_other = max(0.0, ev.gpu_idle_fraction - idle_cpu)
    u = min(1.0, ev.utilization["gpu"])
    op_cpu = min(idle_cpu, 1.0 - u)
    op_other = min(idle_other, 1.0 - u - op_cpu)
    return {
        "sustainable": {"busy": 1.0 - ev.gpu_idle_fraction, "idle_on_cpu": idle_cpu, "idle_other": idle_other,
                        "headroom": 0.0},
        "operating_point": {"busy": u, "idle_on_cpu": op_cpu, "idle_other": op_other,
                            "headroom": max(0.0, 1.0 - u - op_cpu - op_other)},
    }


def chart_gpu_time(split: dict[str, dict[str, float]], op_label: str) -> Markup:
    fig = _figure(7.2, 1.7)
    ax = fig.add_subplot()
    labels = ["at sustainable throughput", "at the operating point"]
    keys = ["sustainable", "operating_point"]
    parts = [("busy", "busy serving", RESOURCE_COLORS["gpu"]),
             ("idle_on_cpu", "idle: tasks in CPU tool stages", RESOURCE_COLORS["cpu_wait"]),
             ("idle_other", "idle: tasks in delays", RESOURCE_COLORS["delay"]),
             ("headroom", "idle: load below capacity", "#dfe3ea")]
    for i, k in enumerate(keys):
        left = 0.0
        for key, _, color in parts:
            v = max(0.0, split[k][key])
            ax.barh(i, v, left=left, color=color)
            if v >= 0.06:
                ax.text(left + v / 2, i, f"{v:.0%}", ha="center", va="center", fontsize=7,
                        color="white" if key == "busy" else "#1f2937")
            left += v
    ax.set_yticks([0, 1])
    ax.set_yticklabels(labels, parse_math=False)
    ax.set_xlim(0, 1)
    ax.invert_yaxis()
    ax.set_xlabel("fraction of GPU serving capacity", fontsize=8)
    from matplotlib.patches import Patch
    ax.legend(handles=[Patch(color=c, label=lbl) for _, lbl, c in parts], fontsize=7, ncol=4, frameon=False,
              loc="upper center", bbox_to_anchor=(0.5, -0.45))
    _style(ax)
    return _svg(fig, "chart-gpu-time")


def chart_utilization(ev: Evaluation, alerts: dict[str, float]) -> Markup:
    items = sorted(ev.utilization.items(), key=lambda kv: kv[1])
    fig = _figure(7.2, 0.8 + 0.32 * len(items))
    ax = fig.add_subplot()
    vals = [min(v, 1.5) if math.isfinite(v) else 1.5 for _, v in items]
    colors = [RESOURCE_COLORS["gpu"] if k == "gpu" else RESOURCE_COLORS["cpu"] if k.startswith("cpu")
              else RESOURCE_COLORS["delay"] for k, _ in items]
    ax.barh(range(len(items)), vals, color=colors)
    for i, (k, v) in enumerate(items):
        ax.text(vals[i], i, f" {fmt(v, '.0%')}", va="center", fontsize=7, parse_math=False)
        if k in alerts:
            ax.plot([alerts[k], alerts[k]], [i - 0.4, i + 0.4], color="#c44e52", linewidth=1.2)
    ax.set_yticks(range(len(items)))
    ax.set_yticklabels([names.pool(k) for k, _ in items], parse_math=False)
    ax.axvline(1.0, color="#333", linewidth=0.8, linestyle=":")
    ax.set_xlim(0, max(1.1, max(vals) * 1.15))
    ax.set_xlabel("utilization at the operating point (red tick: alert threshold)", fontsize=8)
    _style(ax)
    return _svg(fig, "chart-utilization")


def chart_layouts(results: list[OptimizeResult], ratios: dict[str, float | None]) -> Markup:
    fig = _figure(7.2, 2.4)
    ax1, ax2 = fig.subplots(1, 2)
    labels = [LAYOUT_NAMES[r.layout] for r in results]
    tph = [r.throughput_tasks_per_hour for r in results]
    ax1.bar(labels, tph, color=[LAYOUT_COLORS[r.layout] for r in results])
    for i, r in enumerate(results):
        ratio = ratios.get(r.layout)
        ax1.text(i, tph[i], f"{tph[i]:,.0f}\n" + (f"{ratio:.2f}x A" if ratio is not None else "A: none"),
                 ha="center", va="bottom", fontsize=7)
    ax1.set_ylabel("tasks per hour", fontsize=8)
    ax1.set_ylim(0, max(tph + [1.0]) * 1.3)
    usd = [_usd_per_1000(r) for r in results]
    priced = all(v is not None for v in usd)
    e = usd if priced else [_kwh_per_1000(r) for r in results]
    ax2.bar(labels, [v or 0.0 for v in e], color=[LAYOUT_COLORS[r.layout] for r in results])
    for i, v in enumerate(e):
        ax2.text(i, v or 0.0, fmt(v, ",.2f" if priced else ",.1f"), ha="center", va="bottom", fontsize=7)
    ax2.set_ylabel("USD per 1,000 tasks (TCO)" if priced else "facility kWh per 1,000 tasks", fontsize=8)
    ax2.set_ylim(0, max([v or 0.0 for v in e] + [1.0]) * 1.25)
    for ax in (ax1, ax2):
        _style(ax)
        ax.grid(axis="y", color="#e5e7eb", linewidth=0.6)
        ax.tick_params(axis="x", labelsize=7)
    fig.tight_layout()
    return _svg(fig, "chart-layouts")


def chart_sweep(sweep: dict, name: str, xlabel: str, xlog: bool, current_x: float) -> Markup:
    fig = _figure(7.2, 2.8)
    ax = fig.add_subplot()
    xs = [p["x"] for p in sweep["points"]]
    for lay in LAYOUTS:
        ys = [p["throughput"].get(lay) for p in sweep["points"]]
        ax.plot(xs, [y if y is not None else float("nan") for y in ys], marker="o", markersize=3.5,
                color=LAYOUT_COLORS[lay], label=LAYOUT_NAMES[lay])
    ax.axvline(current_x, color="#333", linewidth=0.8, linestyle=":")
    top = max([y for p in sweep["points"] for y in p["throughput"].values() if y is not None] + [1.0])
    ax.text(current_x, top * 1.12, " this rack", fontsize=7, va="top")
    for ch in sweep["changes"]:
        ax.axvline(ch["x_mid"], color="#c44e52", linewidth=1.0, linestyle="--")
        ax.text(ch["x_mid"], top * 1.02, f" best: {ch['from']} → {ch['to']}", fontsize=7, color="#c44e52",
                va="top", rotation=90 if len(sweep["changes"]) > 2 else 0, parse_math=False)
    if xlog:
        ax.set_xscale("log", base=2)
    ax.set_xticks(xs)
    ax.set_xticklabels([p["tick"] for p in sweep["points"]], parse_math=False)
    ax.minorticks_off()
    ax.set_ylim(0, top * 1.15)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylabel("tasks per hour", fontsize=8)
    ax.legend(fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    _style(ax)
    ax.grid(axis="y", color="#e5e7eb", linewidth=0.6)
    return _svg(fig, name)


# -------------------------------------------------------------------------------------------------------- sections

def _server_label(cat: Catalog, s) -> tuple[str, str]:
    ch, cpu = cat.chassis[s.chassis], cat.cpus[s.cpu]
    sockets = ch.cpu_sockets
    if s.gpu:
        g = cat.gpus[s.gpu]
        short = f"{s.gpus_per_server}× {g.name} · {sockets}× {cpu.name}"
    else:
        short = f"CPU node · {sockets}× {cpu.name}"
    full = f"{ch.name} ({ch.id}): {short}; {s.power_w_each:,.0f} W, {s.space_u_each} U"
    return short, full


def server_price(cat: Catalog, s, costs: CostAssumptions | None = None) -> tuple[float | None, list[str]]:
    """Catalog price of one server (chassis + CPUs + GPUs + host memory) and the parts without a price."""
    gpu = cat.gpus[s.gpu] if s.gpu else None
    return tco_server_price(cat.chassis[s.chassis], cat.cpus[s.cpu], gpu, s.gpus_per_server,
                            costs or CostAssumptions())


def bill_of_materials(cat: Catalog, res: OptimizeResult, rack: Rack, racks: int,
                      costs: CostAssumptions | None = None) -> list[dict]:
    ev = res.evaluation
    out = []
    for r in range(racks):
        rows = []
        for s in res.servers:
            if s.rack != r:
                continue
            ch, cpu = cat.chassis[s.chassis], cat.cpus[s.cpu]
            g = cat.gpus[s.gpu] if s.gpu else None
            price, missing = server_price(cat, s, costs)
            rows.append({
                "count": s.count, "role": ch.role, "chassis_id": ch.id, "chassis": ch.name,
                "cpu_id": cpu.id, "cpu": f"{cpu.vendor} {cpu.name}", "sockets": ch.cpu_sockets,
                "gpu_id": g.id if g else None, "gpu": f"{g.vendor} {g.name}" if g else None,
                "gpus_per_server": s.gpus_per_server, "power_w_each": s.power_w_each, "u_each": s.space_u_each,
                "power_w_total": s.power_w_each * s.count, "u_total": s.space_u_each * s.count,
                "orchestration_cores_per_gpu": s.orchestration_cores_per_gpu if s.gpu else None,
                "queue_cores": s.queue_cores, "price_each_usd": price, "price_missing": missing,
            })
        usage = next((u for u in ev.racks if u.rack == r), None) if ev else None
        out.append({"rack": r, "rows": rows, "usage": usage.model_dump() if usage else None,
                    "reserved_u": rack.reserved_u, "reserved_power_w": rack.reserved_power_w})
    return out


def capital(cat: Catalog, res: OptimizeResult, costs: CostAssumptions | None = None) -> dict:
    total, missing = 0.0, set()
    for s in res.servers:
        p, miss = server_price(cat, s, costs)
        if p is None:
            missing.update(miss)
        else:
            total += p * s.count
    known = not missing and bool(res.servers)
    return {"known": known, "total_usd": total if known else None, "missing": sorted(missing),
            "usd_per_task_per_hour": (total / res.throughput_tasks_per_hour)
            if known and res.throughput_tasks_per_hour > 0 else None}


ELEV = {"upx": 14, "x0": 34, "w": 270, "top": 28, "label_chars": 46}
"""Rack elevation drawing geometry (pixels per U, left margin, rack width, top margin, label length)."""


def elevation(cat: Catalog, res: OptimizeResult, rack: Rack, racks: int) -> list[dict]:
    g = ELEV
    ev = res.evaluation
    out = []
    for r in range(racks):
        items, pos = [], 1  # U numbered from 1 at the bottom
        servers = sorted((s for s in res.servers if s.rack == r), key=lambda s: (s.gpu is None, -s.space_u_each))
        for s in servers:
            short, full = _server_label(cat, s)
            role = "gpu" if s.gpu else "cpu"
            for _ in range(s.count):
                items.append({"u": pos, "h": s.space_u_each, "role": role, "label": _truncate(short, g["label_chars"]),
                              "title": full})
                pos += s.space_u_each
        used_top = pos - 1
        usage = next((u for u in ev.racks if u.rack == r), None) if ev else None
        sw = cat.switches[rack.tor_switch] if rack.tor_switch and rack.tor_switch in cat.switches else None
        if usage is not None and usage.switches and sw is not None:  # top-of-rack switches under the reserved gear
            for k in range(usage.switches):
                items.append({"u": rack.height_u - rack.reserved_u - (k + 1) * sw.height_u + 1, "h": sw.height_u,
                              "role": "reserved", "label": _truncate(f"ToR switch {sw.id} ({sw.height_u} U)",
                                                                     g["label_chars"]),
                              "title": f"{sw.name}: {sw.ports} ports, {rack.uplinks_per_switch} uplinks, "
                                       f"{sw.power_w:,.0f} W"})
            used_top += usage.switches * sw.height_u
        if rack.reserved_u:
            items.append({"u": rack.height_u - rack.reserved_u + 1, "h": rack.reserved_u, "role": "reserved",
                          "label": f"reserved: management switch, patch panels, PDUs ({rack.reserved_u} U)",
                          "title": f"reserved {rack.reserved_u} U, {rack.reserved_power_w:,.0f} W (rack profile)"})
        for it in items:
            it["y"] = g["top"] + (rack.height_u - (it["u"] + it["h"] - 1)) * g["upx"]
            it["px"] = it["h"] * g["upx"] - 1
        out.append({
            "rack": r, "height_u": rack.height_u, "items": items, "overflow": used_top > rack.usable_u,
            "free_u": max(0, rack.usable_u - used_top),
            "usage": usage.model_dump() if usage else None,
            "width": g["x0"] + g["w"] + 12, "height": g["top"] + rack.height_u * g["upx"] + 74,
            "geom": g, "u_labels": [{"u": u, "y": g["top"] + (rack.height_u - u) * g["upx"] + g["upx"] - 4}
                                    for u in range(1, rack.height_u + 1)],
        })
    return out


def _scale_tools(w: Workload, f: float) -> Workload:
    classes = [c.model_copy(update={"stages": [s.model_copy(update={"core_seconds": s.core_seconds * f})
                                               if isinstance(s, CpuStage) else s for s in c.stages]})
               for c in w.classes]
    return w.model_copy(update={"classes": classes})


def _tool_share(ev: Evaluation | None) -> float | None:
    if ev is None:
        return None
    return ev.resource_shares.get("cpu", 0.0) + ev.resource_shares.get("cpu_wait", 0.0)


def sweep(kind: Literal["power", "tools"], factors: list[float], w: Workload, rack: Rack, cat: Catalog,
          base: list[OptimizeResult], kw: dict, budget_s: float) -> dict:
    """Re-optimize every layout at each factor. Layouts A and B (cheap) go first at every point, hybrid last, so a
    spent budget leaves hybrid points out rather than whole points; those are marked skipped."""
    deadline = time.perf_counter() + budget_s
    got: dict[float, dict[str, OptimizeResult]] = {f: {} for f in factors}
    todo = []
    for lay in LAYOUTS:
        for f in factors:
            if abs(f - 1.0) < 1e-12:
                got[f][lay] = next(r for r in base if r.layout == lay)
            else:
                todo.append((f, lay))

    def point(item: tuple[float, str]) -> OptimizeResult | None:
        f, lay = item
        if time.perf_counter() >= deadline:  # a point not started within the budget is skipped
            return None
        if kind == "power":
            w2, r2 = w, rack.model_copy(update={"power_kw": rack.power_kw * f})
        else:
            w2, r2 = _scale_tools(w, f), rack
        return sweep_point(w2, r2, cat, lay, kw)

    # the points are independent: solved side by side, in the order above (advisor/parallel.py)
    settings = kw.get("settings") or OptimizerSettings()
    for (f, lay), res in zip(todo, run_all(point, todo, settings.concurrent_solves)):
        if res is not None:
            got[f][lay] = res
    points = []
    for f in factors:
        res = got[f]
        complete = len(res) == len(LAYOUTS)
        best_id = best_layout(_outcomes(list(res.values()))) if complete else None
        best = res.get(best_id) if best_id else None
        tied = tied_layouts(_outcomes(list(res.values()))) if complete else []
        share = _tool_share(best.evaluation) if best else None
        if kind == "power":
            x, tick = rack.power_kw * f, f"{rack.power_kw * f:,.0f} kW\n({f:g}x)"
        else:
            x, tick = f, f"{f:g}x" + (f"\n({share:.0%} tools)" if share is not None else "")
        points.append({
            "factor": f, "x": x, "tick": tick,
            "throughput": {lay: res[lay].throughput_tasks_per_hour if lay in res else None for lay in LAYOUTS},
            "status": {lay: res[lay].status if lay in res else "skipped" for lay in LAYOUTS},
            "best": best.layout if best and best.throughput_tasks_per_hour > 0 else None, "tied": tied,
            "tool_share": share,
        })
    changes = []
    done = [p for p in points if "skipped" not in p["status"].values()]
    for p, q in zip(done, done[1:]):
        # a change only when neither point's best layout ties the other point's best
        if p["best"] and q["best"] and p["best"] not in q["tied"] and q["best"] not in p["tied"]:
            mid = math.sqrt(p["x"] * q["x"]) if kind == "tools" else (p["x"] + q["x"]) / 2
            changes.append({"after": p["factor"], "before": q["factor"], "x_mid": mid,
                            "from": p["best"], "to": q["best"]})
    skipped = [f"{p['factor']:g}x {lay}" for p in points for lay, st in p["status"].items() if st == "skipped"]
    return {"kind": kind, "points": points, "changes": changes, "skipped": skipped, "budget_s": budget_s}


def _most_used(res: OptimizeResult, cat: Catalog, kind: str) -> str | None:
    units: dict[str, int] = {}
    for s in res.servers:
        if kind == "gpu" and s.gpu:
            units[s.gpu] = units.get(s.gpu, 0) + s.count * s.gpus_per_server
        elif kind == "cpu":
            units[s.cpu] = units.get(s.cpu, 0) + s.count * cat.chassis[s.chassis].cpu_sockets
    return max(units, key=units.get) if units else None


class ChipPair(NamedTuple):
    kind: str
    chosen: str
    other: str
    why: str
    """Why this comparison matters for the answer."""


def _socket_throughput(cat: Catalog, cpu: str) -> float:
    c = cat.cpus[cpu]
    return c.cores * c.per_core_perf


def cpu_pair(chosen: OptimizeResult, cat: Catalog) -> ChipPair | None:
    """The chosen CPU against the one a buyer reading spec sheets would take instead: the highest socket throughput
    among the CPUs the answer's chassis accept (the next highest when the chosen CPU leads already)."""
    mine = _most_used(chosen, cat, "cpu")
    if not mine:
        return None
    boards = [cat.chassis[s.chassis] for s in chosen.servers if s.cpu == mine]
    alts = sorted((c for c in cat.cpus if c.id != mine and any(ch.accepts_cpu(c) for ch in boards)),
                  key=lambda c: -_socket_throughput(cat, c.id))
    if not alts:
        return None
    alt = alts[0]
    leads = _socket_throughput(cat, mine) >= _socket_throughput(cat, alt.id)
    why = (f"the CPU with the most socket throughput among those the chosen servers take ({alt.name}), the one a "
           "buyer comparing spec sheets would pick instead" if not leads else
           f"the next best socket throughput among the CPUs the chosen servers take ({alt.name}): the chosen CPU "
           "leads per chip already")
    return ChipPair("cpu", mine, alt.id, why + "; each side is the rack re-optimized with every server on that CPU")


def gpu_pair(chosen: OptimizeResult, w: Workload, rack: Rack, cat: Catalog) -> ChipPair | None:
    """The chosen GPU against its previous generation (`previous_generation` in the catalog), else against the
    nearest slower GPU per chip a rack like this can hold that serves the model."""
    g0 = _most_used(chosen, cat, "gpu")
    if not g0:
        return None
    prev = cat.gpus[g0].previous_generation
    if prev is not None:
        return ChipPair("gpu", g0, prev, f"{cat.gpus[prev].name} is the generation {cat.gpus[g0].name} succeeds: "
                                         "what an upgrade from it buys per rack")
    per_chip = {}
    for g in cat.gpus:
        if not any(ch.accepts_gpu(g) and (ch.cooling == "air" or rack.liquid_cooling_kw > 0) for ch in cat.chassis):
            continue
        try:
            per_chip[g.id] = gpu_serving(w, g).tasks_per_s_per_gpu()
        except InputError:  # a GPU that cannot serve the model is no alternative
            continue
    if g0 not in per_chip:
        return None
    slower = sorted(((v, k) for k, v in per_chip.items() if k != g0 and v <= per_chip[g0]), reverse=True)
    faster = sorted((v, k) for k, v in per_chip.items() if k != g0 and v > per_chip[g0])
    if slower:
        return ChipPair("gpu", g0, slower[0][1], "the catalog has no previous generation of this GPU; this is the "
                                                 "nearest slower GPU per chip that serves the model in such a rack")
    if faster:
        return ChipPair("gpu", g0, faster[0][1], "the catalog has no previous generation of this GPU; this is the "
                                                 "nearest faster GPU per chip that serves the model in such a rack")
    return None


def layout_story(cmp: LayoutComparison, cat: Catalog) -> list[str]:
    """Sentences built from the three layout results: where each puts its power and what stops it."""
    return [Names(cat).text(line) for line in _layout_story(cmp)]


def _layout_story(cmp: LayoutComparison) -> list[str]:
    lines = []
    for r in cmp.results:
        if r.throughput_tasks_per_hour <= 0:
            lines.append(f"{LAYOUT_NAMES[r.layout]} delivers no throughput: {r.message}")
            continue
        gpu_w = sum(s.power_w_each * s.count for s in r.servers if s.gpu)
        cpu_w = sum(s.power_w_each * s.count for s in r.servers if not s.gpu)
        tot = gpu_w + cpu_w
        lines.append(
            f"{LAYOUT_NAMES[r.layout]}: {_gpus(r)} GPUs, "
            + (f"{r.cores_per_gpu:.1f} host cores per GPU, " if r.cores_per_gpu is not None else "")
            + f"{gpu_w / tot:.0%} of server power in GPU servers and {cpu_w / tot:.0%} in CPU nodes; "
            f"{r.throughput_tasks_per_hour:,.0f} tasks/h, bottleneck {names.pool(r.bottleneck)}, GPU capacity idle "
            f"{r.gpu_idle_fraction:.0%}; binding: {names.budgets(r.binding_constraints)}.")
    a = cmp.results[0]
    best = next(r for r in cmp.results if r.layout == cmp.best_layout)
    if best.layout != "a" and a.throughput_tasks_per_hour > 0 and best.throughput_tasks_per_hour > 0:
        ga, gb = {s.gpu for s in a.servers if s.gpu}, {s.gpu for s in best.servers if s.gpu}
        same = f"Both use the same GPU SKU ({', '.join(sorted(ga))}), so per chip they are equal; " \
            if ga and ga == gb else ""
        lines.append(
            f"{same}per rack, {LAYOUT_NAMES[best.layout]} finishes "
            f"{best.throughput_tasks_per_hour / a.throughput_tasks_per_hour:.2f}x the tasks of layout A, whose "
            f"bottleneck is {names.pool(a.bottleneck)} with {a.gpu_idle_fraction:.0%} of its GPU serving capacity idle: the same "
            "power, cooling and space buy a better-balanced set of GPUs and CPU cores.")
    return lines


def operations(res: OptimizeResult, w: Workload, assumptions: ModelAssumptions, headroom: float) -> dict:
    """Metrics to watch with thresholds from the model's operating point (numbers from `advisor.operations`, which
    the Prometheus exporter uses too): alert at value + headroom x (limit - value)."""
    ev = res.evaluation
    if ev is None:
        return {"metrics": [], "alerts": {}}
    t = operating_thresholds(ev, w, assumptions, headroom)
    tail_label = t.tail_label
    metrics = []
    for q in t.queues:
        u, u_alert, wait_alert = q.utilization, q.utilization_alert, q.wait_alert_s
        metrics += [
            {"metric": f"CPU run-queue depth per core, {names.queue_name(q.queue)}", "scope": f"hosts serving {', '.join(q.classes)}",
             "expected": fmt(q.run_queue_depth_per_core, ".2f"), "alert": f"> {fmt(q.run_queue_depth_per_core_alert, '.2f')}",
             "basis": f"busy cores {u:.0%} of {q.cores:,.0f} plus waiting calls x {q.mean_parallelism:.2f} cores "
                      f"(M/M/{q.servers}); alert at {u_alert:.0%} load"},
            {"metric": f"Tool-call wait for a core, {tail_label}, {names.queue_name(q.queue)}", "scope": "scheduler / sandbox pool",
             "expected": secs(q.wait_tail_s), "alert": f"> {secs(wait_alert)}",
             "basis": f"M/M/c wait quantile ({q.servers} call slots, {q.calls_per_s:,.1f} calls/s, call "
                      f"{q.mean_call_s:.2f} s) at {u:.0%} load; alert "
                      + (f"at the workload's tool-wait target ({secs(q.wait_target_s)})" if q.wait_target_s
                         else f"at the wait quantile at {u_alert:.0%} load")},
            {"metric": f"Tool calls waiting for a core, {names.queue_name(q.queue)}", "scope": "scheduler / sandbox pool",
             "expected": fmt(q.waiting_calls_mean, ".2f"), "alert": f"> {q.waiting_calls_alert:,}",
             "basis": f"M/M/c queue length at the planned load: mean {q.waiting_calls_mean:.2f}; alert above its "
                      f"{tail_label}"},
            {"metric": f"Sandbox start time, {tail_label}, {names.queue_name(q.queue)}", "scope": "sandbox runtime",
             "expected": "pilot baseline", "alert": f"> baseline × {1 + headroom:g} + {secs(wait_alert)}",
             "basis": "the model has no sandbox start cost; a start waits for a core like a tool call, so alert "
                      f"when it exceeds the baseline by the headroom ({headroom:.0%}) plus the core-wait alert"},
            {"metric": f"I/O wait share of core time, {names.queue_name(q.queue)}", "scope": "tool hosts",
             "expected": "≈ 0 (tools modelled CPU-bound)", "alert": f"> {q.iowait_share_alert:.0%}",
             "basis": f"I/O wait eats the {1 - u:.0%} headroom the queue has at {u:.0%} utilization; "
                      f"alert when it takes {headroom:.0%} of it"},
            {"metric": f"CPU utilization, {names.queue_name(q.queue)}", "scope": "tool hosts", "expected": f"{u:.0%}",
             "alert": f"> {u_alert:.0%}", "basis": "pipeline model at the operating point"},
        ]
    if t.gpu:
        g = t.gpu
        metrics += [
            {"metric": "GPU utilization (serving capacity in use)", "scope": "GPU servers", "expected": f"{g.utilization:.0%}",
             "alert": f"> {g.utilization_alert:.0%}, or < {g.utilization_low_alert:.0%} while arrivals are at plan",
             "basis": f"pipeline model at the operating point ({ev.operating_point})"},
            {"metric": "GPU idle waiting on CPU tools (share of capacity)", "scope": "GPU servers",
             "expected": f"{g.idle_on_cpu_fraction:.0%}", "alert": f"> {g.idle_on_cpu_alert:.0%}",
             "basis": "idle serving capacity at the operating point attributed to tasks in CPU tool stages"},
        ]
    if t.task_time:
        tt = t.task_time
        metrics.append({"metric": f"Task completion time, {tail_label}", "scope": "agent orchestrator",
                        "expected": fmt(tt.expected_s, ",.0f", "s"),
                        "alert": f"> {fmt(tt.alert_s, ',.0f', 's')} (SLO)" if tt.alert_basis == "slo" else
                        f"> {fmt(tt.alert_s, ',.0f', 's')} (model p99)",
                        "basis": "lognormal mixture fit of per-class task-time mean and variance"})
    return {"metrics": metrics, "alerts": t.pool_alerts}


def export_links(res: OptimizeResult, w: Workload, cat: Catalog, assumptions: ModelAssumptions,
                 headroom: float) -> list[dict]:
    """The operations artifacts (`advisor export`) as data: URLs, so the self-contained report can offer them as
    downloads under its `default-src 'none'` policy. A format that cannot be exported says why instead."""
    import base64

    from advisor.export import FORMATS, plan_for, render

    if not res.configuration or res.evaluation is None:
        return []
    try:
        plan = plan_for(res, w, cat, assumptions=assumptions, alert_headroom=headroom)
    except InputError as e:
        return [{"format": f, "filename": None, "href": None, "bytes": 0, "error": str(e)} for f in FORMATS]
    out = []
    for f in FORMATS:
        try:
            art = render(f, plan)
        except InputError as e:
            out.append({"format": f, "filename": None, "href": None, "bytes": 0, "error": str(e)})
            continue
        data = art.text.encode("utf-8")
        out.append({"format": f, "filename": art.filename, "bytes": len(data), "error": None,
                    "href": f"data:{art.media_type};charset=utf-8;base64,{base64.b64encode(data).decode()}"})
    return out


def risks(res: OptimizeResult, cmp: LayoutComparison, sweeps: dict, sources: list[dict], w: Workload,
          cat: Catalog) -> list[str]:
    """One list of risks in people's words: a warning the evaluator and the optimizer both raise is listed once."""
    n = Names(cat)
    out, seen = [], set()
    for r in _risks(res, sweeps, sources):
        text = n.text(r)
        key = re.sub(r"^(Model|Optimizer) warning: ", "", text)
        if key not in seen:
            seen.add(key)
            out.append(text)
    return out


def _risks(res: OptimizeResult, sweeps: dict, sources: list[dict]) -> list[str]:
    out = []
    ev = res.evaluation
    if res.status not in ("optimal",):
        out.append(f"Solver status {res.status}" + (f" (gap {res.gap:.2%})" if res.gap else "")
                   + ": a better configuration may exist; re-run with a longer time limit.")
    if ev is not None:
        if ev.bottleneck.startswith("sandboxes:"):
            out.append(f"The bottleneck is the {names.pool(ev.bottleneck)}: sandboxes live as long as their tasks, "
                       "so any wait (GPU batching, tool queues) leaves fewer of them running. Sandbox size and "
                       "task time decide it; measure both in the pilot, and more memory or disk per core on the "
                       "tool servers raises it.")
        elif ev.bottleneck_kind in ("cpu", "slo", "memory"):
            out.append(f"The bottleneck is {names.pool(ev.bottleneck)}: throughput scales with the tool work per task; if tools "
                       "are heavier than the workload file says, throughput falls in proportion (see the tool-time "
                       "sweep).")
        elif ev.bottleneck_kind in ("disk", "io"):
            out.append(f"The bottleneck is {names.pool(ev.bottleneck)}: sandbox storage (local NVMe capacity or bandwidth) limits "
                       "throughput; the per-sandbox disk and per-call I/O figures of the workload decide it, so "
                       "measure them in the pilot.")
        elif ev.bottleneck_kind in ("gpu", "orchestration"):
            out.append(f"The bottleneck is {names.pool(ev.bottleneck)}: serving rates (tokens per call, batching) decide the "
                       "throughput; verify them in the pilot.")
        for s in ev.serving:
            if not s.calibrated:
                out.append(f"GPU {s.key}: serving rate is a roofline estimate ({s.basis}), not a measurement.")
        if ev.slo_met is False:
            out.append("The p95 task-time target is missed at the operating point.")
        out += [f"Model warning: {x}" for x in ev.warnings]
    budgets = [g for g in res.binding_constraints if g in BUDGET_GROUPS]
    if budgets:
        out.append(f"Binding budgets: {names.budgets(budgets)}; a lower real budget (derating, a hot aisle) removes "
                   "servers first (see the power sweep).")
    for sw in sweeps.values():
        for ch in sw["changes"]:
            what = "rack power" if sw["kind"] == "power" else "tool work per task"
            out.append(f"The best layout changes from {LAYOUT_NAMES.get(ch['from'], ch['from'])} to "
                       f"{LAYOUT_NAMES.get(ch['to'], ch['to'])} when {what} moves from "
                       f"{ch['after']:g}x to {ch['before']:g}x of the plan.")
    assumed = [s["id"] for s in sources if s["source"].lower().startswith("assumption")]
    if assumed:
        out.append(f"Figures marked as assumptions in the catalog: {', '.join(assumed)}.")
    out += [f"Optimizer warning: {x}" for x in res.warnings]
    return out


def _scaled_config(res: OptimizeResult, counts: list[int]) -> Configuration:
    cfg = Configuration.model_validate(res.configuration)
    servers = [g.model_copy(update={"count": n, "rack": 0}) for g, n in zip(cfg.servers, counts) if n > 0]
    return cfg.model_copy(update={"servers": servers, "racks": 1})


def pilot_plan(res: OptimizeResult, w: Workload, rack: Rack, cat: Catalog, racks: int,
               assumptions: ModelAssumptions, headroom: float = 0.5) -> list[dict]:
    """Staged roll-out: one GPU server with its share of CPU nodes, half a rack, one rack, the row; each stage's
    expected throughput is the pipeline model's figure for exactly that slice, with go/no-go criteria on the
    monitored metrics from that slice's own thresholds (advisor/report/decisions.py)."""
    if not res.configuration or not res.servers:
        return []
    cfg = Configuration.model_validate(res.configuration)
    rack0 = [g.count if g.rack == 0 else 0 for g in cfg.servers]
    gpu_groups = [i for i, g in enumerate(cfg.servers) if g.gpu and rack0[i]]
    gpu_servers = sum(rack0[i] for i in gpu_groups)
    stages = []
    if gpu_groups and gpu_servers > 1:
        big = max(gpu_groups, key=lambda i: rack0[i])
        counts = [1 if i == big else (0 if cfg.servers[i].gpu else max(1, math.ceil(n / gpu_servers)) if n else 0)
                  for i, n in enumerate(rack0)]
        stages.append(("1. One GPU server and its share of CPU nodes", counts))
    half = [math.ceil(n / 2) for n in rack0]
    if half != rack0:
        stages.append(("2. Half a rack", half))
    stages.append(("3. One full rack", rack0))
    if racks > 1:
        stages.append((f"4. The row of {racks} racks", [g.count for g in cfg.servers]))
    out = []
    for title, counts in stages:
        item = {"stage": title, "servers": [], "expected_tasks_per_hour": None, "gpu_utilization": None,
                "bottleneck": None, "note": None, "go_no_go": []}
        for g, n in zip(cfg.servers, counts):
            if n:
                item["servers"].append(f"{n}× {g.chassis} ({g.cpu}" + (f", {g.gpus_per_server}× {g.gpu})" if g.gpu else ")"))
        try:
            if title.startswith("4."):
                ev = res.evaluation
            else:
                ev = evaluate(_scaled_config(res, counts), w, rack, cat, assumptions)
            item.update(expected_tasks_per_hour=ev.throughput_tasks_per_hour, bottleneck=ev.bottleneck,
                        gpu_utilization=ev.utilization.get("gpu"),
                        go_no_go=go_no_go(ev, w, assumptions, headroom))
        except InputError as e:
            item["note"] = f"model cannot evaluate this slice: {e}"
        out.append(item)
    return out


def sources(cat: Catalog, w: Workload, rack: Rack, results: list[OptimizeResult], extra: dict[str, set[str]]) -> list[dict]:
    used = {"chassis": set(), "cpu": set(), "gpu": set()}
    for r in results:
        for s in r.servers:
            used["chassis"].add(s.chassis)
            used["cpu"].add(s.cpu)
            if s.gpu:
                used["gpu"].add(s.gpu)
    for k, v in extra.items():
        used[k] |= v
    rows = [
        {"kind": "workload", "id": w.id, "name": w.name, "source": w.source, "notes": w.notes, "basis": None},
        {"kind": "served model", "id": w.served_model.id, "name": w.served_model.name,
         "source": w.served_model.source, "notes": w.served_model.notes, "basis": None},
    ]
    for c in w.served_model.calibrations:
        rows.append({"kind": "calibration", "id": f"{w.served_model.id} on {c.gpu}",
                     "name": f"prefill {c.prefill_tokens_per_s:,.0f} tok/s, decode {c.decode_tokens_per_s:,.0f} tok/s",
                     "source": c.source, "notes": None, "basis": None})
    rows.append({"kind": "rack", "id": rack.id, "name": rack.name, "source": rack.source, "notes": rack.notes,
                 "basis": None})
    for kind, table in (("chassis", cat.chassis), ("cpu", cat.cpus), ("gpu", cat.gpus)):
        for i in sorted(used[kind]):
            e = table[i]
            rows.append({"kind": kind, "id": e.id, "name": getattr(e, "name", e.id), "source": e.source,
                         "notes": e.notes, "basis": getattr(e, "perf_basis", None)})
    for r in rows:
        r["source_parts"] = link_parts(r["source"])
    return rows


def field_docs(model: BaseModel) -> list[dict]:
    return [{"name": n, "value": getattr(model, n) if not isinstance(getattr(model, n), BaseModel) else "(below)",
             "doc": f.description or ""} for n, f in type(model).model_fields.items()]


# ----------------------------------------------------------------------------------------------------------- render

def _env() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(resources.files("templates"))), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(fmt=fmt, pct=pct)
    env.globals.update(LAYOUT_NAMES=LAYOUT_NAMES, ROLE_COLORS=ROLE_COLORS, LAYOUT_COLORS=LAYOUT_COLORS)
    return env


SWEEP_DETAIL = "throughput"
"""How much of each sweep point's answer is derived (OptimizerSettings.answer_detail): the charts read its tasks/h
and status only, so the tie-break stages, failure figures and migration plan are left out."""
COMPARE_SHARE = 0.7
"""Share of a report's search time the layout comparison may take (its answers are the report); the rest is left
for the sensitivity sweeps and chip-vs-rack, which mark what they could not finish as skipped."""
RENDER_RESERVE_S = 4.0
RENDER_RESERVE_SHARE = 0.5
"""Of a report's time limit, min(RENDER_RESERVE_S, RENDER_RESERVE_SHARE x limit) is kept for charts, tables and
HTML after the searches (measured 1-4 s for charts on a 2-core machine, the upper end under heavy load)."""


@dataclass(frozen=True)
class ReportInputs:
    """What every step of a report reads: the request, the catalog, the optimizer settings and the resolved
    workload and rack."""

    req: ReportRequest
    cat: Catalog
    s: OptimizerSettings
    w: Workload
    rack: Rack
    clock: Deadline
    """The searches' share of the request's wall clock (what is left after the render reserve)."""

    def solve_kwargs(self) -> dict:
        return dict(racks=self.req.racks, backend=self.req.solver, gpu_ids=self.req.gpu_ids,
                    cpu_ids=self.req.cpu_ids, settings=self.s)


def report_inputs(request: ReportRequest | dict, catalog: Catalog | None,
                  settings: OptimizerSettings | None, deadline: Deadline | None = None) -> ReportInputs:
    t0 = time.perf_counter()
    req = request if isinstance(request, ReportRequest) else ReportRequest.model_validate(request)
    total = Deadline(req.time_limit_s - (time.perf_counter() - t0), parent=deadline)
    cat = catalog or builtin_catalog()
    check_sku_ids(cat, req.gpu_ids, req.cpu_ids)
    w, rack = load_workload(req.workload, cat), load_rack(req.rack, cat)
    # One clock for the whole report (advisor/deadline.py): the comparison, the sweeps and chip-vs-rack share
    # time_limit_s; what the comparison leaves goes to the sweeps (within their own budget), then chip-vs-rack.
    _figure(1, 1)  # the plotting library's first import (seconds on a cold process) counts against the limit
    clock = total.within(total.remaining() - min(RENDER_RESERVE_S, RENDER_RESERVE_SHARE * total.limit))
    return ReportInputs(req, cat, settings or OptimizerSettings(), w, rack, clock)


def solve_layouts(x: ReportInputs) -> tuple[LayoutComparison, OptimizeResult]:
    """The comparison of A, B and hybrid, and the answer the report recommends (the requested layout, else the
    best)."""
    cmp = compare_layouts(x.w, x.rack, x.cat, deadline=x.clock.within(x.clock.limit * COMPARE_SHARE),
                          spares=x.req.spares, **x.solve_kwargs(), **brownfield_kwargs(x.req))
    chosen = x.req.layout or cmp.best_layout
    return cmp, next(r for r in cmp.results if r.layout == chosen)


def sensitivity_sweeps(x: ReportInputs, cmp: LayoutComparison) -> dict[str, dict]:
    """Rack-power and tool-time sweeps, sharing the request's sweep budget (empty when sensitivity is off)."""
    if not x.req.sensitivity:
        return {}
    t1 = time.perf_counter()
    skw = dict(x.solve_kwargs(), time_limit_s=min(x.req.sweep_time_limit_s, x.req.time_limit_s),
               deadline=x.clock, **brownfield_kwargs(x.req))
    skw["settings"] = x.s.model_copy(update={"answer_detail": SWEEP_DETAIL})
    budget = min(x.req.sweep_budget_s, x.clock.remaining())
    sweeps = {"power": sweep("power", x.req.power_factors, x.w, x.rack, x.cat, cmp.results, skw, budget / 2)}
    left = budget - (time.perf_counter() - t1)
    sweeps["tools"] = sweep("tools", x.req.tool_factors, x.w, x.rack, x.cat, cmp.results, skw, max(left, 0.0))
    return sweeps


def chip_comparisons(x: ReportInputs, res: OptimizeResult) -> tuple[list[dict], list[str]]:
    """Chip-vs-rack for the pairs that matter to this answer (its CPU against the spec-sheet alternative, its GPU
    against the previous generation), each with why it was picked; and why a pair has no comparison."""
    pairs = [p for p in (cpu_pair(res, x.cat), gpu_pair(res, x.w, x.rack, x.cat)) if p] if res.servers else []
    out, errors = [], []
    for p in pairs:
        if x.clock.no_time():
            errors.append(f"{p.chosen} against {p.other}: the request's time limit was spent before this comparison")
            continue
        try:
            # b over a: the chosen SKU over the alternative, so a ratio above 1 is what the answer gains by it
            cvr = chip_vs_rack(p.kind, p.other, p.chosen, x.w, x.rack, x.cat, layout=res.layout, racks=x.req.racks,
                               backend=x.req.solver,
                               time_limit_s=min(x.req.sweep_time_limit_s, x.req.time_limit_s), settings=x.s,
                               deadline=x.clock)
            out.append({"why": p.why, "cvr": cvr})
        except InputError as e:
            errors.append(f"{p.chosen} against {p.other}: {e}")
    return out, errors


def report_charts(cmp: LayoutComparison, ev: Evaluation | None, split: dict | None, ops: dict,
                  sweeps: dict[str, dict], rack: Rack) -> dict[str, Markup | None]:
    charts: dict[str, Markup | None] = {k: None for k in ("stage_shares", "gpu_time", "utilization", "layouts",
                                                            "sens_power", "sens_tools")}
    if ev is not None:
        charts["stage_shares"] = chart_stage_shares(ev)
        if split:
            charts["gpu_time"] = chart_gpu_time(split, ev.operating_point)
        if ev.utilization:
            charts["utilization"] = chart_utilization(ev, ops["alerts"])
    charts["layouts"] = chart_layouts(cmp.results, cmp.ratio_vs_a)
    if "power" in sweeps:
        charts["sens_power"] = chart_sweep(sweeps["power"], "chart-sens-power", "rack power budget (kW per rack)",
                                           False, rack.power_kw)
        charts["sens_tools"] = chart_sweep(sweeps["tools"], "chart-sens-tools",
                                           "tool work per task (CPU core_seconds x factor; share of task time)",
                                           True, 1.0)
    return charts


def at_a_glance(x: ReportInputs, cmp: LayoutComparison, res: OptimizeResult, cap: dict) -> dict:
    """The headline block: the answer, its ratio to A, energy and cost per task, budgets used, what binds."""
    ev, a = res.evaluation, cmp.results[0]
    return {
        "layout": res.layout, "layout_name": LAYOUT_NAMES[res.layout],
        "why_chosen": "as requested" if x.req.layout else "the most tasks per hour of A, B and hybrid",
        "status": res.status, "message": res.message,
        "tasks_per_hour": res.throughput_tasks_per_hour, "ratio_vs_a": cmp.ratio_vs_a.get(res.layout),
        "a_tasks_per_hour": a.throughput_tasks_per_hour,
        "kwh_per_1000_tasks": _kwh_per_1000(res), "a_kwh_per_1000_tasks": _kwh_per_1000(a),
        "tco": res.tco.model_dump() if res.tco else None, "a_tco": a.tco.model_dump() if a.tco else None,
        "power_w": res.power_w, "power_budget_w": x.rack.power_kw * 1000 * x.req.racks,
        "space_u": res.space_u, "space_budget_u": x.rack.height_u * x.req.racks,
        "gpus": _gpus(res), "cores": ev.cores if ev else None, "bottleneck": res.bottleneck,
        "binding": [g for g in res.binding_constraints if g in BUDGET_GROUPS],
        "p50_s": ev.p50_task_seconds if ev else None, "p95_s": ev.p95_task_seconds if ev else None,
        "operating_point": ev.operating_point if ev else None,
        "arrival_tasks_per_hour": ev.arrival_rate_tasks_per_hour if ev else None,
        "capital": cap, "infeasibility": [i.model_dump() for i in res.infeasibility],
        "operating": operating_glance(res), "failures": failure_rows(res),
    }


def budget_rows(res: OptimizeResult, rack: Rack, racks: int) -> list[dict]:
    """The budget table in the units the rest of the report uses: power and heat in kW, space in U of the whole rack
    height (the reserved U counted as used, as the bill of materials and the elevation count them)."""
    rows = []
    for c in res.constraints:
        if c.group not in BUDGET_GROUPS:
            continue
        used, avail, unit, f = c.used, c.available, c.unit, ",.0f"
        if c.unit == "W":
            used, avail, unit, f = used / 1000, avail / 1000, "kW", ",.1f"
        elif c.group == "space":
            used, avail = used + rack.reserved_u, avail + rack.reserved_u
        rows.append({"id": c.name, "title": names.constraint(c.name, c.group, racks), "used": used,
                     "available": avail, "unit": unit, "fmt": f, "binding": c.binding})
    return rows


def _short(name: str) -> str:
    """A catalog name without its parenthesized details: `Interactive coding agents (Claude Code ...)` -> the
    first part."""
    return re.sub(r"\s*\([^)]*\)", "", name).strip() or name


def short_title(w: Workload, rack: Rack) -> str:
    """One line: what runs, in which rack."""
    return f"{_short(w.name)} in a {_short(rack.name)[:1].lower()}{_short(rack.name)[1:]}"


def render_report(request: ReportRequest | dict, catalog: Catalog | None = None,
                  settings: OptimizerSettings | None = None, deadline: Deadline | None = None) -> tuple[str, dict]:
    """Optimize, explain and render. Returns (html, data); raises InputError for bad input. `time_limit_s` covers
    all of it, within `deadline` if given (the request's clock, started where the request arrived).

    Steps: resolve the inputs, solve the layouts, sweep the budgets, compare chips, derive the operations
    (thresholds, pilot, risks), draw the charts, then render the template and the JSON data from one context."""
    t0 = time.perf_counter()
    x = report_inputs(request, catalog, settings, deadline)
    req, cat, s, w, rack = x.req, x.cat, x.s, x.w, x.rack
    timing: dict[str, float] = {}

    cmp, res = solve_layouts(x)
    ev = res.evaluation
    timing["compare_s"] = time.perf_counter() - t0

    t1 = time.perf_counter()
    sweeps = sensitivity_sweeps(x, cmp)
    timing["sweeps_s"] = time.perf_counter() - t1

    t1 = time.perf_counter()
    chips, chip_errors = chip_comparisons(x, res)
    timing["chip_vs_rack_s"] = time.perf_counter() - t1

    t1 = time.perf_counter()
    stage_sens = stage_sensitivity(
        res, w, rack, cat, s.assumptions, req.stage_step,
        lambda w2: optimize(w2, rack, cat, layout=res.layout, explain=False, spares=req.spares,
                            time_limit_s=min(req.sweep_time_limit_s, req.time_limit_s), deadline=x.clock,
                            **x.solve_kwargs(), **brownfield_kwargs(req)))
    timing["stage_sensitivity_s"] = time.perf_counter() - t1

    extra = {"chassis": set(), "cpu": set(), "gpu": set()}
    for c in chips:
        extra[c["cvr"].kind] |= {c["cvr"].a.sku, c["cvr"].b.sku}
    src = sources(cat, w, rack, cmp.results, extra)
    ops = operations(res, w, s.assumptions, req.alert_headroom)
    split = gpu_time_split(ev) if ev else None

    t1 = time.perf_counter()
    charts = report_charts(cmp, ev, split, ops, sweeps, rack)
    timing["charts_s"] = time.perf_counter() - t1

    glance = at_a_glance(x, cmp, res, capital(cat, res, s.assumptions.costs))
    ctx = {
        "title": short_title(w, rack),
        "generated": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "req": req, "workload": w, "rack": rack, "cmp": cmp, "res": res, "ev": ev, "glance": glance,
        "bom": bill_of_materials(cat, res, rack, req.racks, s.assumptions.costs),
        "elevation": elevation(cat, res, rack, req.racks),
        "split": split, "charts": charts, "sweeps": sweeps, "chips": chips, "chip_errors": chip_errors,
        "story": layout_story(cmp, cat), "ops": ops, "risks": risks(res, cmp, sweeps, src, w, cat),
        "pilot": pilot_plan(res, w, rack, cat, req.racks, s.assumptions, req.alert_headroom), "sources": src,
        "assumptions": [f for f in field_docs(s.assumptions) if f["name"] != "costs"],
        "optimizer_settings": [f for f in field_docs(s) if f["name"] not in ("assumptions", "time_limit_s")],
        "report_settings": [{"name": n, "value": getattr(req, n), "doc": f.description or ""}
                            for n, f in ReportRequest.model_fields.items()
                            if n in ("solver", "time_limit_s", "power_factors", "tool_factors", "sweep_time_limit_s",
                                     "sweep_budget_s", "alert_headroom")],
        "constraints": [c for c in res.constraints if c.group in BUDGET_GROUPS],
        "budget_rows": budget_rows(res, rack, req.racks),
        "bounds": sorted(ev.bounds, key=lambda b: b.tasks_per_hour) if ev else [],
        "per_1000": {r.layout: _kwh_per_1000(r) for r in cmp.results},
        "usd_per_1000": {r.layout: _usd_per_1000(r) for r in cmp.results},
        "cost_assumptions": field_docs(s.assumptions.costs),
        "gpus_of": {r.layout: _gpus(r) for r in cmp.results},
        "sections": SECTIONS,
        "exports": export_links(res, w, cat, s.assumptions, req.alert_headroom),
        "migration": migration_view(res.migration),
        "names": Names(cat),
        "stage_sens": stage_sens,
    }
    html = _env().get_template("report.html.j2").render(**ctx)
    timing["total_s"] = time.perf_counter() - t0
    return html, report_data(ctx, s, timing)


def report_data(ctx: dict, s: OptimizerSettings, timing: dict[str, float]) -> dict:
    """The report's figures as JSON (the same context the HTML was rendered from)."""
    ev, res, cmp = ctx["ev"], ctx["res"], ctx["cmp"]
    return _finite({
        "request": ctx["req"].model_dump(mode="json"),
        "generated": ctx["generated"],
        "glance": ctx["glance"],
        "bill_of_materials": ctx["bom"],
        "time": {"stage_shares": ev.stage_shares if ev else {}, "resource_shares": ev.resource_shares if ev else {},
                 "gpu_time": ctx["split"], "utilization": ev.utilization if ev else {}},
        "comparison": cmp.model_dump(mode="json", exclude={"results": {"__all__": {"evaluation"}}}),
        "chosen": res.model_dump(mode="json"),
        "chip_vs_rack": [dict(c["cvr"].model_dump(mode="json"), why=c["why"]) for c in ctx["chips"]],
        "layout_story": ctx["story"],
        "sensitivity": ctx["sweeps"],
        "operations": {"metrics": ctx["ops"]["metrics"], "risks": ctx["risks"], "pilot": ctx["pilot"]},
        "sources": [{k: v for k, v in r.items() if k != "source_parts"} for r in ctx["sources"]],
        "assumptions": {"model": s.assumptions.model_dump(mode="json"),
                        "optimizer": s.model_dump(mode="json", exclude={"assumptions"})},
        "migration": ctx["migration"],
        "stage_sensitivity": ctx["stage_sens"],
        "timing": timing,
    })
