"""Benchmark of the closed-form evaluator and the screening API (a script, not a test): per-call medians and ratios.

    python bench/bench_evaluate.py            # examples and the 16 preset answers (~2 min on 2 cores)
    python bench/bench_evaluate.py --quick    # examples and 4 preset answers

For each example configuration (examples/*.yaml) and each preset answer (the hybrid optimum of every built-in
workload on every built-in rack), it times `models.pipeline.evaluate`:
  fast      the evaluator as it is (repeated calls of one configuration: cached closed-network, birth-death and
            serving derivations are reused, as for an API client or report that evaluates a configuration again)
  cold      the evaluator with every cache cleared before each call (a configuration seen for the first time)
  previous  the evaluator with the hot functions of eb6e984 patched back in (bench/reference_impl.py: scipy.stats
            cdf bisection for the task-time quantiles, the full convolution algorithm, no caches)
and checks that fast and previous give the same evaluation (every number to 1e-9 relative). Times are CPU seconds
of this process (time.process_time), less sensitive than wall time to other jobs on a shared machine; medians
over repeats. The screening section times `models.screening.screen` on arrays of random configurations of each
preset pair and prints configurations per second.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

warnings.filterwarnings("ignore", category=DeprecationWarning)

import numpy as np  # noqa: E402

import models.pipeline as pipeline  # noqa: E402
from advisor.catalog import builtin_catalog, load_configuration  # noqa: E402
from advisor.optimizer.optimize import optimize  # noqa: E402
from advisor.service import resolve_inputs  # noqa: E402
from models.performance import clear_serving_cache  # noqa: E402
from models.queueing import clear_caches  # noqa: E402
from reference_impl import previous_implementation  # noqa: E402

REL = 1e-9


def clear_all() -> None:
    clear_caches()
    clear_serving_cache()


def per_call(fn, repeats: int, budget_s: float, before=None) -> list[float]:
    times: list[float] = []
    start = time.process_time()
    while len(times) < repeats and (len(times) < 3 or time.process_time() - start < budget_s):
        if before:
            before()
        t = time.process_time()
        fn()
        times.append(time.process_time() - t)
    return times


def compare(a, b, path: str = "") -> list[str]:
    """Paths where two dumped evaluations differ by more than REL relative (numbers) or at all (other values)."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return [f"{path}: keys {sorted(a)} != {sorted(b)}"]
        return [d for k in a for d in compare(a[k], b[k], f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: lengths {len(a)} != {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in compare(x, y, f"{path}[{i}]")]
    if isinstance(a, float) and isinstance(b, float):
        if a == b or abs(a - b) <= REL * max(abs(a), abs(b)):
            return []
        return [f"{path}: {a!r} != {b!r}"]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def cases(quick: bool):
    cat = builtin_catalog()
    out = []
    for f in sorted((ROOT / "examples").glob("*.yaml")):
        try:
            cfg = load_configuration(f)
        except Exception:  # noqa: BLE001 - scenario files and the like are not configurations
            continue
        w, r = resolve_inputs(cfg, None, None, cat)
        out.append((f"example {f.name}", cfg, w, r, cat))
    workloads = sorted(cat.workloads.entries)
    racks = sorted(cat.racks.entries)
    pairs = [(w, r) for w in workloads for r in racks]
    if quick:
        pairs = [p for p in pairs if p[1] in ("air-40kw", "liquid-130kw")][:4]
    for wid, rid in pairs:
        w, r = cat.workloads[wid], cat.racks[rid]
        res = optimize(w, r, cat, layout="hybrid", explain=False)
        if not res.servers:
            print(f"  (preset {wid} on {rid}: no answer, {res.status}; skipped)", flush=True)
            continue
        out.append((f"preset {wid} on {rid}", load_configuration(res.configuration), w, r, cat))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=200, help="fast-path calls per configuration (median)")
    ap.add_argument("--previous-repeats", type=int, default=7, help="previous-implementation calls per configuration")
    args = ap.parse_args()
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    print(f"bench_evaluate at {commit or '?'}; CPU ms per evaluate call (median)", flush=True)
    all_cases = cases(args.quick)
    print(f"{'configuration':<44} {'fast ms':>8} {'cold ms':>8} {'prev ms':>8} {'prev/fast':>9} {'prev/cold':>9} "
          f"{'agree':>6}", flush=True)
    fast_all, cold_all, ratios, ratios_cold = [], [], [], []
    for name, cfg, w, r, cat in all_cases:
        ev_fast = pipeline.evaluate(cfg, w, r, cat)
        fast = statistics.median(per_call(lambda: pipeline.evaluate(cfg, w, r, cat), args.repeats, 5.0))
        cold = statistics.median(per_call(lambda: pipeline.evaluate(cfg, w, r, cat), max(5, args.repeats // 10),
                                          5.0, before=clear_all))
        with previous_implementation():
            ev_prev = pipeline.evaluate(cfg, w, r, cat)
            prev = statistics.median(per_call(lambda: pipeline.evaluate(cfg, w, r, cat), args.previous_repeats, 5.0))
        diffs = compare(ev_fast.model_dump(mode="json"), ev_prev.model_dump(mode="json"))
        fast_all.append(fast)
        cold_all.append(cold)
        ratios.append(prev / fast)
        ratios_cold.append(prev / cold)
        print(f"{name:<44} {fast * 1e3:8.3f} {cold * 1e3:8.3f} {prev * 1e3:8.2f} {prev / fast:9.0f} "
              f"{prev / cold:9.1f} {'yes' if not diffs else 'NO':>6}", flush=True)
        for d in diffs[:5]:
            print(f"    differs: {d}")
    print(f"{'all (median of medians)':<44} {statistics.median(fast_all) * 1e3:8.3f} "
          f"{statistics.median(cold_all) * 1e3:8.3f} {'':>8} {statistics.median(ratios):9.0f} "
          f"{statistics.median(ratios_cold):9.1f}")
    print(f"slowest fast median {max(fast_all) * 1e3:.3f} ms; slowest cold median {max(cold_all) * 1e3:.3f} ms")
    screening_section(all_cases)


def screening_section(all_cases, n: int = 100_000) -> None:
    from models.screening import screen, server_menu

    print(f"\nscreening: models.screening.screen on {n:,} configurations per case (the case's server groups, "
          "counts drawn uniformly from 0 to twice the case's count + 1)", flush=True)
    print(f"{'configuration':<44} {'median s':>9} {'configs/s':>12}")
    rates = []
    rng = np.random.default_rng(1)
    for name, cfg, w, r, cat in all_cases:
        menu = server_menu(w, r, cat, cfg.servers, cfg.queues)
        base = np.array([g.count for g in cfg.servers])
        counts = rng.integers(0, 2 * base + 2, size=(n, len(base)))
        screen(menu, counts[:10])
        times = per_call(lambda: screen(menu, counts), 5, 10.0)
        med = statistics.median(times)
        rates.append(n / med)
        print(f"{name:<44} {med:9.3f} {n / med:12,.0f}", flush=True)
    print(f"median {statistics.median(rates):,.0f} configurations/s, slowest case {min(rates):,.0f} "
          "(one core, CPU time)")


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
