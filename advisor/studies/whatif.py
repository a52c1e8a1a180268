"""What-if studies on top of the batch runner: sweeps, layout crossovers, Pareto fronts, Monte Carlo robustness.

Every solve goes through advisor.studies.batch.Runner, so studies run in parallel (local processes or Dask), and with an
output folder they are cached in its results.sqlite: a repeated or extended study solves only new points.

- sweep: one or two parameters over ranges (``rack.power_kw=20:140:10``, or a list ``racks=1,2,4``); per point and
  layout the throughput, power per task (Wh per task = W / (tasks/h)) and, where every server chosen has a price,
  capital per unit of throughput (USD per task/h: the price of the servers over the tasks per hour they deliver).
- crossover: the value of one parameter where the best layout changes, by a coarse scan then bisection of each
  interval whose ends have different winners, until the interval is at most 2 x tol wide; reported as
  "hybrid overtakes a at tool_share = 0.42 ± 0.01" (the midpoint and half the final interval).
- pareto: throughput against capital cost or power by the epsilon-constraint method: the most throughput T* of
  each layout, then for t = T* x k / n (k = 1..n) the least cost (or power) that still gives t, and the points no
  other point dominates (at least as much throughput for no more cost, one of them strictly). For cost, servers
  without a price are left out (a capital budget of PRICED_ONLY_BUDGET_USD applies that filter).
- robustness: scenarios with sampled inputs; for each draw the best layout and, for each layout, its regret
  (best throughput - its throughput) / best throughput; reported as win shares and mean / p95 / max regret.

The best layout of one point is the one with the most throughput; layouts within 1e-6 (relative) of it tie and the
tie goes to the lower power, then to the order a, b, hybrid.
"""

from __future__ import annotations

import csv
import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from advisor.studies.batch import Runner, read_rows
from advisor.layouts import LAYOUT_COLORS, LAYOUTS
from advisor.studies.batch_report import best_layout, new_figure, svg_of
from advisor.errors import InputError
from advisor.studies.scenarios import Scenario, vary

PRICED_ONLY_BUDGET_USD = 1e15
"""Capital budget that binds nothing but makes the optimizer use priced servers only (for the cost front)."""


# ----------------------------------------------------------------------------------------------------------------
# Parameters


def _num(text: str, where: str) -> int | float:
    t = text.strip()
    try:
        return int(t) if re.fullmatch(r"[-+]?\d+", t) else float(t)
    except ValueError:
        raise InputError(f"{where}: {t!r} is not a number") from None


def parse_vary(spec: str, need_step: bool = True) -> tuple[str, list]:
    """`PATH=a:b:step` (a, a+step, ... up to b), `PATH=a:b` (the range, for crossover) or `PATH=v1,v2,...`."""
    if "=" not in spec:
        raise InputError(f"--vary {spec!r}: expected PATH=a:b:step or PATH=v1,v2,...")
    path, rng = (x.strip() for x in spec.split("=", 1))
    if not path:
        raise InputError(f"--vary {spec!r}: no path before '='")
    where = f"--vary {spec}"
    if ":" in rng:
        parts = [_num(p, where) for p in rng.split(":")]
        if len(parts) == 2 and not need_step:
            if parts[1] <= parts[0]:
                raise InputError(f"{where}: the upper end must exceed the lower")
            return path, parts
        if len(parts) != 3:
            raise InputError(f"{where}: expected a:b:step" + ("" if need_step else " or a:b"))
        a, b, step = parts
        if step <= 0 or b < a:
            raise InputError(f"{where}: need step > 0 and b >= a")
        n = int(math.floor((b - a) / step + 1e-9)) + 1
        if n > 10_000:
            raise InputError(f"{where}: {n} values; use a larger step")
        ints = all(isinstance(x, int) for x in parts)
        vals = [a + i * step if ints else round(a + i * step, 12) for i in range(n)]
        return path, vals
    vals = [_num(v, where) for v in rng.split(",") if v.strip()]
    if not vals:
        raise InputError(f"{where}: no values")
    if not need_step and len(vals) == 2:
        return path, sorted(vals)
    return path, vals


def parse_set(specs: list[str] | None) -> dict[str, Any]:
    """`--set PATH=VALUE` (VALUE read as YAML)."""
    import yaml

    out: dict[str, Any] = {}
    for s in specs or []:
        if "=" not in s:
            raise InputError(f"--set {s!r}: expected PATH=VALUE")
        k, v = s.split("=", 1)
        out[k.strip()] = yaml.safe_load(v)
    return out


def short(path: str) -> str:
    """Display name of a path: its last field (`workload.tool_share` -> tool_share)."""
    m = re.findall(r"[A-Za-z_][A-Za-z0-9_]*", path)
    return m[-1] if m else path


def _metrics(row: dict | None) -> dict:
    if not row or row.get("status") == "error" or row.get("throughput") is None:
        return {"status": row.get("status") if row else None, "throughput": None, "power_w": None,
                "wh_per_task": None, "capital_usd": None, "usd_per_task_per_hour": None,
                "usd_per_1000_tasks": None, "error": row.get("error") if row else None}
    t, p, c = row["throughput"], row["power_w"], row["capital_usd"]
    return {"status": row["status"], "throughput": t, "power_w": p,
            "wh_per_task": row.get("energy_wh_per_task"), "capital_usd": c,
            "usd_per_task_per_hour": c / t if t and c is not None else None,
            "usd_per_1000_tasks": row.get("cost_usd_per_1000_tasks"), "error": row.get("error")}


def check_point(base: Scenario, values: dict) -> None:
    """Fail now on a path that does not exist (rather than record every point as an error)."""
    from advisor.studies.scenarios import OverridePathError, resolve

    try:
        resolve(vary(base, values))
    except OverridePathError:
        raise
    except InputError:
        pass


def _solve_points(runner: Runner, base: Scenario, points: list[dict], description: str) -> list[dict[str, dict]]:
    """Rows by layout for each point (a dict of path -> value)."""
    scen = [vary(base, p) for p in points]
    runner.run(scen, description=description)
    rows = read_rows(runner.db_path, [s.name for s in scen])
    by: dict[str, dict[str, dict]] = defaultdict(dict)
    for r in rows:
        by[r["scenario"]][r["layout"]] = r
    return [by.get(s.name, {}) for s in scen]


# ----------------------------------------------------------------------------------------------------------------
# Sweep


@dataclass
class SweepResult:
    paths: list[str]
    layouts: list[str]
    points: list[dict]
    """Each: values (path -> value), layouts (layout -> metrics), best."""

    @property
    def any_capital(self) -> bool:
        return any(m["usd_per_task_per_hour"] is not None for p in self.points for m in p["layouts"].values())

    def table(self) -> tuple[list[str], list[list[str]]]:
        head = [short(p) for p in self.paths]
        for lay in self.layouts:
            head += [f"{lay} tasks/h", f"{lay} Wh/task"] + ([f"{lay} $/(task/h)"] if self.any_capital else [])
        head.append("best")
        body = []
        for p in self.points:
            row = [f"{p['values'][k]:g}" if isinstance(p["values"][k], (int, float)) else str(p["values"][k])
                   for k in self.paths]
            for lay in self.layouts:
                m = p["layouts"].get(lay) or _metrics(None)
                row += [_f(m["throughput"], 0, m["status"]), _f(m["wh_per_task"], 2)]
                if self.any_capital:
                    row.append(_f(m["usd_per_task_per_hour"], 0))
            row.append(p["best"] or "-")
            body.append(row)
        return head, body

    def write_csv(self, path: Path) -> Path:
        with path.open("w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow([*self.paths, "layout", "status", "throughput_tasks_per_hour", "power_w", "wh_per_task",
                        "capital_usd", "usd_per_task_per_hour", "usd_per_1000_tasks", "best_layout", "error"])
            for p in self.points:
                for lay in self.layouts:
                    m = p["layouts"].get(lay) or _metrics(None)
                    w.writerow([*(p["values"][k] for k in self.paths), lay, m["status"], _c(m["throughput"]),
                                _c(m["power_w"]), _c(m["wh_per_task"]), _c(m["capital_usd"]),
                                _c(m["usd_per_task_per_hour"]), _c(m["usd_per_1000_tasks"]), p["best"] or "",
                                m["error"] or ""])
        return path

    def figure(self):
        if len(self.paths) == 1:
            k = self.paths[0]
            rows = 3 if self.any_capital else 2
            fig = new_figure(7.0, 2.4 * rows)
            axes = fig.subplots(rows, 1, sharex=True)
            xs = [p["values"][k] for p in self.points]
            for lay in self.layouts:
                for ax, key in zip(axes, ("throughput", "wh_per_task", "usd_per_task_per_hour")):
                    ys = [_nan(p["layouts"].get(lay, {}).get(key)) for p in self.points]
                    ax.plot(xs, ys, "o-", ms=3, lw=1.2, label=lay, color=LAYOUT_COLORS.get(lay))
            axes[0].set_ylabel("tasks / hour")
            axes[1].set_ylabel("Wh per task")
            if self.any_capital:
                axes[2].set_ylabel("USD per task/h")
            axes[-1].set_xlabel(k)
            axes[0].legend(frameon=False)
            axes[0].set_title(f"Sweep of {k}")
            return fig
        k1, k2 = self.paths
        v1 = sorted({p["values"][k1] for p in self.points})
        v2 = sorted({p["values"][k2] for p in self.points})
        fig = new_figure(3.2 * (len(self.layouts) + 1), 3.2)
        axes = fig.subplots(1, len(self.layouts) + 1)
        idx = {(p["values"][k1], p["values"][k2]): p for p in self.points}
        top = max((m["throughput"] or 0 for p in self.points for m in p["layouts"].values()), default=1) or 1
        for ax, lay in zip(axes, self.layouts):
            grid = [[_nan((idx.get((a, b)) or {"layouts": {}})["layouts"].get(lay, {}).get("throughput"))
                     for a in v1] for b in v2]
            im = ax.imshow(grid, origin="lower", aspect="auto", vmin=0, vmax=top, cmap="viridis",
                           extent=_extent(v1, v2))
            ax.set_title(f"{lay}: tasks/h", fontsize=9)
            ax.set_xlabel(short(k1))
            ax.set_ylabel(short(k2))
        fig.colorbar(im, ax=axes[:-1].tolist(), shrink=0.8)
        ax = axes[-1]
        for lay in self.layouts:
            pts = [(p["values"][k1], p["values"][k2]) for p in self.points if p["best"] == lay]
            if pts:
                ax.scatter(*zip(*pts), s=30, marker="s", color=LAYOUT_COLORS.get(lay), label=lay)
        ax.set_title("best layout", fontsize=9)
        ax.set_xlabel(short(k1))
        ax.legend(frameon=False, fontsize=7)
        return fig

    def write_chart(self, folder: Path, stem: str = "sweep") -> list[Path]:
        return write_figure(self.figure(), folder, stem)


def write_figure(fig, folder: Path, stem: str) -> list[Path]:
    """Save a chart as SVG (for reports) and PNG (for slides)."""
    svg = folder / f"{stem}.svg"
    svg.write_text(svg_of(fig), encoding="utf-8")
    png = folder / f"{stem}.png"
    fig.savefig(png, format="png", dpi=110, bbox_inches="tight")
    return [svg, png]


def _extent(v1, v2):
    def edges(v):
        if len(v) == 1:
            return v[0] - 0.5, v[0] + 0.5
        return v[0] - (v[1] - v[0]) / 2, v[-1] + (v[-1] - v[-2]) / 2
    return (*edges(v1), *edges(v2))


def _f(v: float | None, d: int, status: str | None = None) -> str:
    if v is None:
        return status or "-"
    s = f"{v:,.{d}f}"
    return s + (f" ({status})" if status not in (None, "optimal") else "")


def _c(v: float | None) -> str:
    return "" if v is None else repr(float(v))


def _nan(v: float | None) -> float:
    return math.nan if v is None else v


def sweep(base: Scenario, varies: list[tuple[str, list]], runner: Runner) -> SweepResult:
    if not 1 <= len(varies) <= 2:
        raise InputError("sweep takes one or two --vary parameters")
    import itertools

    paths = [p for p, _ in varies]
    check_point(base, {p: v[0] for p, v in varies})
    points = [dict(zip(paths, combo)) for combo in itertools.product(*(v for _, v in varies))]
    rows = _solve_points(runner, base, points, "sweep")
    out = []
    for values, by in zip(points, rows):
        out.append({"values": values, "layouts": {lay: _metrics(by.get(lay)) for lay in base.layouts},
                    "best": best_layout(by)})
    return SweepResult(paths, list(base.layouts), out)


# ----------------------------------------------------------------------------------------------------------------
# Crossover


@dataclass
class Crossover:
    before: str | None
    after: str | None
    value: float
    half_width: float


@dataclass
class CrossoverResult:
    path: str
    low: float
    high: float
    tol: float
    crossovers: list[Crossover]
    evaluated: list[tuple[float, str | None, dict[str, float | None]]]
    """(value, best layout, throughput by layout) at every value solved, sorted."""

    def _d(self) -> int:
        return max(0, -math.floor(math.log10(self.tol))) if self.tol > 0 else 6

    def sentences(self) -> list[str]:
        d, name = self._d(), short(self.path)
        if not self.crossovers:
            winners = {w for _, w, _ in self.evaluated}
            w = next(iter(winners)) if len(winners) == 1 else None
            return [f"{w or 'no layout'} is the best layout over the whole range {name} = {self.low:g} to "
                    f"{self.high:g} (checked at {len(self.evaluated)} values)"]
        out = []
        for c in self.crossovers:
            hw = math.ceil(c.half_width * 10 ** d - 1e-9) / 10 ** d
            hw_s = f"{hw:.{d}f}" if hw > 0 else f"{c.half_width:.1g}"
            out.append(f"{c.after or 'no layout'} overtakes {c.before or 'no layout'} at {name} = "
                       f"{c.value:.{d}f} ± {hw_s}")
        return out

    def sentence(self) -> str:
        return "; ".join(self.sentences())


def crossover(base: Scenario, path: str, low: float, high: float, runner: Runner, tol: float = 0.01,
              scan: int = 4) -> CrossoverResult:
    """Where the best layout changes between low and high: a scan at scan + 1 evenly spaced values, then bisection
    of every interval whose ends have different winners until it is at most 2 x tol wide."""
    if tol <= 0:
        raise InputError("--tol must be positive")
    if high <= low:
        raise InputError("crossover needs low < high")
    check_point(base, {path: low})
    seen: dict[float, tuple[str | None, dict]] = {}

    def at(xs: list[float]) -> None:
        new = [x for x in xs if x not in seen]
        if not new:
            return
        rows = _solve_points(runner, base, [{path: x} for x in new], "crossover")
        for x, by in zip(new, rows):
            seen[x] = (best_layout(by), {lay: (by.get(lay) or {}).get("throughput") for lay in base.layouts})

    n = max(1, scan)
    grid = [low + (high - low) * i / n for i in range(n + 1)]
    at(grid)
    brackets = [(a, b) for a, b in zip(grid, grid[1:]) if seen[a][0] != seen[b][0]]
    found = []
    while brackets:
        # bisect every open bracket one step at a time, solving their midpoints together
        mids = [(a + b) / 2 for a, b in brackets if (b - a) / 2 > tol]
        at(mids)
        nxt = []
        for a, b in brackets:
            if (b - a) / 2 <= tol:
                found.append(Crossover(seen[a][0], seen[b][0], (a + b) / 2, (b - a) / 2))
                continue
            m = (a + b) / 2
            if seen[m][0] != seen[a][0]:
                nxt.append((a, m))
            if seen[m][0] != seen[b][0]:
                nxt.append((m, b))
        brackets = nxt
    found.sort(key=lambda c: c.value)
    ev = sorted((x, w, t) for x, (w, t) in seen.items())
    return CrossoverResult(path, low, high, tol, found, ev)


# ----------------------------------------------------------------------------------------------------------------
# Pareto


@dataclass
class ParetoPoint:
    layout: str
    target: float | None
    """Throughput asked for (None for the max-throughput anchor)."""
    throughput: float
    cost: float
    """Capital USD (against=cost) or power W (against=power)."""
    power_w: float
    capital_usd: float | None
    configuration: dict
    scenario: str


@dataclass
class ParetoResult:
    against: str
    front: list[ParetoPoint]
    candidates: list[ParetoPoint]
    failed: list[tuple[str, str]] = field(default_factory=list)

    @property
    def unit(self) -> str:
        return "USD" if self.against == "cost" else "W"

    def table(self) -> tuple[list[str], list[list[str]]]:
        head = ["layout", "tasks/h", "capital USD", "power kW", "servers"]
        if self.against == "power":
            head[2], head[3] = head[3], head[2]
        body = []
        for p in self.front:
            servers = ", ".join(f"{g['count']}x {g['chassis']}/{g['cpu']}" + (f"/{g['gpus_per_server']}x{g['gpu']}"
                                                                               if g.get("gpu") else "")
                                for g in p.configuration.get("servers", []))
            cap = "-" if p.capital_usd is None else f"{p.capital_usd:,.0f}"
            kw = f"{p.power_w / 1000:,.1f}"
            body.append([p.layout, f"{p.throughput:,.0f}", *((cap, kw) if self.against == "cost" else (kw, cap)),
                         servers])
        return head, body

    def write_csv(self, path: Path) -> Path:
        import json

        with path.open("w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(["layout", "target_tasks_per_hour", "throughput_tasks_per_hour", self.against, "power_w",
                        "capital_usd", "configuration"])
            for p in self.front:
                w.writerow([p.layout, _c(p.target), repr(p.throughput), repr(p.cost), repr(p.power_w),
                            _c(p.capital_usd), json.dumps(p.configuration)])
        return path

    def figure(self):
        fig = new_figure(6.5, 4.0)
        ax = fig.subplots()
        scale = 1.0 if self.against == "cost" else 1000.0
        for lay in LAYOUTS:
            c = [(p.cost / scale, p.throughput) for p in self.candidates if p.layout == lay]
            if c:
                ax.scatter(*zip(*c), s=14, color=LAYOUT_COLORS.get(lay), alpha=0.35)
            f = [(p.cost / scale, p.throughput) for p in self.front if p.layout == lay]
            if f:
                ax.scatter(*zip(*f), s=36, color=LAYOUT_COLORS.get(lay), label=f"{lay} (front)", edgecolor="k")
        xs = sorted((p.cost / scale, p.throughput) for p in self.front)
        if xs:
            ax.step(*zip(*xs), where="post", color="k", lw=0.8)
        ax.set_xlabel("capital (USD)" if self.against == "cost" else "power (kW)")
        ax.set_ylabel("tasks / hour")
        ax.set_title(f"Throughput against {'capital cost' if self.against == 'cost' else 'power'}: Pareto front")
        ax.legend(frameon=False, fontsize=8)
        return fig

    def write_chart(self, folder: Path, stem: str = "pareto") -> list[Path]:
        return write_figure(self.figure(), folder, stem)


def non_dominated(points: list[ParetoPoint], rel: float = 1e-9) -> list[ParetoPoint]:
    """Points no other dominates (more or equal throughput at less or equal cost, one strictly); equal points
    are kept once."""
    def dominates(q: ParetoPoint, p: ParetoPoint) -> bool:
        ge = q.throughput >= p.throughput * (1 - rel)
        le = q.cost <= p.cost * (1 + rel) + 1e-9
        strict = q.throughput > p.throughput * (1 + rel) or q.cost < p.cost * (1 - rel) - 1e-9
        return ge and le and strict

    keep: list[ParetoPoint] = []
    for p in sorted(points, key=lambda p: (p.cost, -p.throughput)):
        if any(dominates(q, p) for q in points):
            continue
        if any(abs(k.cost - p.cost) <= rel * max(1, p.cost) and abs(k.throughput - p.throughput)
               <= rel * max(1, p.throughput) for k in keep):
            continue
        keep.append(p)
    return keep


def pareto(base: Scenario, runner: Runner, against: str = "cost", points: int = 10) -> ParetoResult:
    """Epsilon-constraint front of throughput against capital cost or power, over the base scenario's layouts."""
    if against not in ("cost", "power"):
        raise InputError("--against is cost or power")
    if points < 1:
        raise InputError("--points must be at least 1")
    extra: dict[str, Any] = {"objective": "max_throughput"}
    if against == "cost":
        extra["capital_budget_usd"] = PRICED_ONLY_BUDGET_USD
    anchors = [vary(base, {**extra, "layouts": [lay]}, name=f"{base.name}|pareto|{against}|max|{lay}")
               for lay in base.layouts]
    runner.run(anchors, description="pareto anchors")
    rows = read_rows(runner.db_path, [s.name for s in anchors])
    top = {r["layout"]: r for r in rows if r["status"] != "error" and (r["throughput"] or 0) > 0}
    failed = [(r["layout"], r["error"] or r["message"] or r["status"]) for r in rows if r["layout"] not in top]
    if not top:
        raise InputError("no layout delivers any throughput here"
                         + (f" ({failed[0][0]}: {failed[0][1]})" if failed else ""))
    t_max = max(r["throughput"] for r in top.values())
    ladder = []
    objective = "min_cost" if against == "cost" else "min_power"
    for lay, r in top.items():
        for k in range(1, points + 1):
            t = t_max * k / points
            if t <= r["throughput"] * (1 + 1e-9):
                t = min(t, r["throughput"])
                ladder.append(vary(base, {**extra, "layouts": [lay], "objective": objective,
                                          "required_tasks_per_hour": t},
                                   name=f"{base.name}|pareto|{against}|{lay}|t={t:.6g}"))
    runner.run(ladder, description="pareto ladder")
    import json

    cands = []
    targets = {s.name: s.required_tasks_per_hour for s in ladder}
    for r in rows + read_rows(runner.db_path, [s.name for s in ladder]):
        if r["status"] == "error" or not r["throughput"] or not r["configuration_json"]:
            if r["scenario"] in targets:
                failed.append((r["layout"], r["error"] or r["message"] or r["status"]))
            continue
        cost = r["capital_usd"] if against == "cost" else r["power_w"]
        if cost is None:
            continue
        cands.append(ParetoPoint(r["layout"], targets.get(r["scenario"]), r["throughput"], cost, r["power_w"],
                                 r["capital_usd"], json.loads(r["configuration_json"]), r["scenario"]))
    return ParetoResult(against, non_dominated(cands), cands, failed)


# ----------------------------------------------------------------------------------------------------------------
# Robustness


@dataclass
class LayoutRobustness:
    layout: str
    wins: int
    win_share: float
    mean_regret: float
    p95_regret: float
    max_regret: float
    mean_throughput: float
    top_share: float = 0.0
    """Share of draws where this layout is best or tied with the best (regret below 1e-6)."""


@dataclass
class RobustnessResult:
    group: str
    draws: int
    """Draws with an answer from every layout (the others are left out and counted in `skipped`)."""
    skipped: int
    layouts: list[LayoutRobustness]

    def sentence(self) -> str:
        best = max(self.layouts, key=lambda x: (x.win_share, -x.mean_regret))
        safest = min(self.layouts, key=lambda x: (x.mean_regret, x.max_regret))
        return (f"{self.group}: {best.layout} wins {best.win_share:.0%} of {self.draws} draws (ties go to the lower "
                f"power; {safest.layout} is best or tied in {safest.top_share:.0%}); choosing "
                f"{safest.layout} loses {safest.mean_regret:.1%} of the best throughput on average "
                f"(p95 {safest.p95_regret:.1%}, worst {safest.max_regret:.1%})")


def _quantile(xs: list[float], q: float) -> float:
    import numpy as np

    return float(np.quantile(np.asarray(xs, dtype=float), q)) if xs else math.nan


def robustness(scenarios: list[Scenario], runner: Runner) -> list[RobustnessResult]:
    """Win shares and regret per layout, for each base scenario's samples."""
    runner.run(scenarios, description="robustness")
    rows = read_rows(runner.db_path, [s.name for s in scenarios])
    groups = {s.name: (s.base or s.name) for s in scenarios}
    by: dict[str, dict[str, dict]] = defaultdict(dict)
    for r in rows:
        by[r["scenario"]][r["layout"]] = r
    layouts_of = {s.name: list(s.layouts) for s in scenarios}
    per_group: dict[str, list[tuple[str | None, dict[str, float]]]] = defaultdict(list)
    skipped: dict[str, int] = defaultdict(int)
    for s in scenarios:
        g = groups[s.name]
        lays = layouts_of[s.name]
        rs = by.get(s.name, {})
        if len(lays) < 2:
            raise InputError(f"scenario {s.name!r}: robustness needs at least two layouts")
        if any(lay not in rs or rs[lay]["status"] == "error" or rs[lay]["throughput"] is None for lay in lays):
            skipped[g] += 1
            continue
        thr = {lay: rs[lay]["throughput"] for lay in lays}
        per_group[g].append((best_layout(rs), thr))
    out = []
    for g in dict.fromkeys(groups.values()):
        draws = per_group.get(g, [])
        lays = [lay for lay in LAYOUTS if draws and lay in draws[0][1]]
        stats = []
        for lay in lays:
            regrets = []
            for _, thr in draws:
                best = max(thr.values())
                regrets.append((best - thr[lay]) / best if best > 0 else 0.0)
            wins = sum(1 for w, _ in draws if w == lay)
            stats.append(LayoutRobustness(lay, wins, wins / len(draws) if draws else 0.0,
                                          sum(regrets) / len(regrets) if regrets else math.nan,
                                          _quantile(regrets, 0.95), max(regrets) if regrets else math.nan,
                                          sum(t[lay] for _, t in draws) / len(draws) if draws else math.nan,
                                          sum(1 for x in regrets if x < 1e-6) / len(draws) if draws else 0.0))
        out.append(RobustnessResult(g, len(draws), skipped.get(g, 0), stats))
    return out


def robustness_figure(results: list[RobustnessResult], regrets: dict | None = None):
    fig = new_figure(7.0, 2.8 * len(results))
    axes = fig.subplots(len(results), 2, squeeze=False)
    for (ax1, ax2), r in zip(axes, results):
        lays = [x.layout for x in r.layouts]
        ax1.bar(lays, [x.win_share for x in r.layouts], color=[LAYOUT_COLORS.get(k) for k in lays])
        ax1.set_ylabel("share of draws won")
        ax1.set_title(f"{r.group}: wins ({r.draws} draws)", fontsize=9)
        ax2.bar(lays, [x.mean_regret for x in r.layouts], color=[LAYOUT_COLORS.get(k) for k in lays], alpha=0.6,
                label="mean")
        ax2.scatter(lays, [x.p95_regret for x in r.layouts], color="k", marker="_", s=200, label="p95")
        ax2.scatter(lays, [x.max_regret for x in r.layouts], color="k", marker="x", s=20, label="max")
        ax2.set_ylabel("regret (share of best)")
        ax2.set_title("regret of choosing each layout", fontsize=9)
        ax2.legend(frameon=False, fontsize=7)
    return fig


def write_robustness(results: list[RobustnessResult], folder: Path) -> list[Path]:
    """robustness.csv (one row per group and layout) and the regret chart; returns the files written."""
    import csv

    path = folder / "robustness.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["group", "draws", "layout", "wins", "win_share", "top_share", "mean_regret", "p95_regret",
                    "max_regret", "mean_throughput"])
        for r in results:
            for x in r.layouts:
                w.writerow([r.group, r.draws, x.layout, x.wins, x.win_share, x.top_share, x.mean_regret, x.p95_regret,
                            x.max_regret, x.mean_throughput])
    return [path, *write_figure(robustness_figure(results), folder, "robustness")]
