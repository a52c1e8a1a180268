"""Benchmark of `advisor report` (a script, not a test): wall time per preset report and the sweep points it skips.

    python bench/bench_report.py                 # every built-in workload on air-40kw, once each
    python bench/bench_report.py --all           # every workload on every built-in rack
    python bench/bench_report.py --compare       # also the previous way (one solve at a time, full sweep answers)
    python bench/bench_report.py --repeat 3      # median of 3 renders per pair

Each report is rendered in one warm process (`advisor.report.html.render_report` at the default request, as
`advisor report -w W -r R` does after its imports), so the figure is what a user waits for once the plotting
library is loaded. `skipped` counts the sensitivity-sweep points that were not computed within the sweep budget
(the target is none). With --compare the same pairs are also rendered with `concurrent_solves=1` and full
answers at every sweep point (the code before both changes), and the ratio previous/now is printed per pair and for
the medians. Wall time (time.perf_counter): the work runs solver processes side by side, so CPU time of this
process would miss most of it; run on a quiet machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
warnings.filterwarnings("ignore", category=DeprecationWarning)

import advisor.report.html as html  # noqa: E402
from advisor.catalog import builtin_catalog  # noqa: E402
from advisor.optimizer.settings import OptimizerSettings  # noqa: E402


def render(workload: str, rack: str, previous: bool) -> tuple[float, int, dict]:
    settings = OptimizerSettings(concurrent_solves=1) if previous else OptimizerSettings()
    detail = html.SWEEP_DETAIL
    html.SWEEP_DETAIL = "full" if previous else detail
    try:
        t0 = time.perf_counter()
        _, data = html.render_report({"workload": workload, "rack": rack}, settings=settings)
        secs = time.perf_counter() - t0
    finally:
        html.SWEEP_DETAIL = detail
    skipped = sum(len(s.get("skipped", [])) for s in (data.get("sweeps") or {}).values())
    return secs, skipped, data.get("timing", {})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--all", action="store_true", help="every built-in rack (default: air-40kw only)")
    ap.add_argument("--compare", action="store_true", help="also time the previous way and print ratios")
    ap.add_argument("--repeat", type=int, default=1, help="renders per pair (median)")
    args = ap.parse_args()
    cat = builtin_catalog()
    racks = [r.id for r in cat.racks] if args.all else ["air-40kw"]
    pairs = [(w, r) for r in racks for w in sorted(x.id for x in cat.workloads)]
    html._figure(1, 1)  # the plotting library's import, once, outside the timings
    print(f"{'workload':<20} {'rack':<14} {'now s':>7} {'skipped':>7} {'sweeps s':>8}"
          + (f" {'previous s':>10} {'skipped':>7} {'ratio':>6}" if args.compare else ""))
    now_all, prev_all, skipped_all = [], [], 0
    for w, r in pairs:
        runs = [render(w, r, False) for _ in range(args.repeat)]
        now = statistics.median(t for t, _, _ in runs)
        skipped = max(k for _, k, _ in runs)
        skipped_all += skipped
        sweeps_s = statistics.median(tm.get("sweeps_s", 0.0) for _, _, tm in runs)
        now_all.append(now)
        line = f"{w:<20} {r:<14} {now:7.2f} {skipped:7d} {sweeps_s:8.2f}"
        if args.compare:
            pruns = [render(w, r, True) for _ in range(args.repeat)]
            prev = statistics.median(t for t, _, _ in pruns)
            prev_all.append(prev)
            line += f" {prev:10.2f} {max(k for _, k, _ in pruns):7d} {prev / now:6.2f}x"
        print(line, flush=True)
    med = statistics.median(now_all)
    print(f"median over {len(pairs)} pairs: {med:.2f} s; skipped sweep points in all: {skipped_all}")
    if args.compare:
        pmed = statistics.median(prev_all)
        print(f"previous median {pmed:.2f} s; ratio previous/now {pmed / med:.2f}x")


if __name__ == "__main__":
    main()
