"""Batch throughput: scenarios (scenario x layout solves) per minute with 1 and 2 local worker processes and on a
Dask LocalCluster, with the speedup over one worker.

    python bench/bench_batch.py            # 24 solves per configuration (mini catalog, small rack)
    python bench/bench_batch.py --quick    # 12 solves
    python bench/bench_batch.py --builtin  # built-in catalog: swe-agent on air-40kw (larger solves)
    python bench/bench_batch.py --solves 60 --cluster-workers 2 --repeat 3

Each configuration solves the same grid into a fresh results folder (nothing cached). Pool start-up is included,
as a user would see it; the first configuration also pays for warming the OS file cache.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from advisor.studies.batch import run_batch  # noqa: E402
from advisor.studies.scenarios import scenarios_from_data  # noqa: E402

MINI = ROOT / "tests" / "data" / "mini"


def grid(n: int, builtin: bool = False, solver: str = "cbc"):
    per = max(1, n // 3)
    shares = [round(0.1 + 0.8 * i / max(1, per - 1), 4) for i in range(per)]
    where = ({"workload": "swe-agent", "rack": "air-40kw"} if builtin else
             {"catalog": str(MINI), "workload": "agent", "rack": "r15"})
    return scenarios_from_data({**where, "solver": solver, "time_limit_s": 30,
                                "grid": {"workload.tool_share": shares}})


REPEAT = 1


def per_solve(scen) -> None:
    """Each solve of the grid timed alone (the batch worker's own function, in this process)."""
    from advisor.studies.batch import solve_job
    from advisor.studies.scenarios import resolve

    total = 0.0
    for s in scen:
        r = resolve(s)
        for lay in s.layouts:
            t0 = time.perf_counter()
            out = solve_job(r.inputs(lay), r.catalog_json)
            dt = time.perf_counter() - t0
            total += dt
            print(f"{s.name:40s} {lay:7s} {dt:7.2f} s  {out.get('status')!s:10s} "
                  f"{out.get('throughput') or 0:9,.1f} tasks/h", flush=True)
    print(f"total {total:.1f} s")


def timed(label: str, scen, **kw) -> tuple[str, int, float]:
    """Best of REPEAT runs (the machine may be shared; the best run is the least disturbed)."""
    best = float("inf")
    for _ in range(REPEAT):
        with tempfile.TemporaryDirectory() as d:
            t0 = time.perf_counter()
            s = run_batch(scen, d, export=False, **kw)
            best = min(best, time.perf_counter() - t0)
        assert s.stats.solved == s.stats.rows and s.stats.errors == 0, s.line
    return label, s.stats.solved, best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--solves", type=int, default=24)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--cluster-workers", type=int, default=2)
    ap.add_argument("--builtin", action="store_true",
                    help="Built-in catalog, swe-agent on air-40kw (larger solves) instead of the mini fixture.")
    ap.add_argument("--repeat", type=int, default=1, help="Runs per configuration; the best is reported.")
    ap.add_argument("--solver", default="cbc", help="The scenarios' MILP backend (cbc, ortools, highs).")
    ap.add_argument("--no-dask", action="store_true", help="Local workers only (skip the Dask LocalCluster).")
    ap.add_argument("--per-solve", action="store_true",
                    help="Time each scenario x layout solve on its own, in this process, instead.")
    args = ap.parse_args()
    global REPEAT
    REPEAT = max(1, args.repeat)
    n = 12 if args.quick else args.solves
    scen = grid(n, args.builtin, args.solver)
    print(f"solver {args.solver}, {'built-in catalog' if args.builtin else 'mini catalog'}, {len(scen)} scenarios")
    if args.per_solve:
        per_solve(scen)
        return
    results = [timed("local, 1 worker", scen, workers=1), timed("local, 2 workers", scen, workers=2)]
    if not args.no_dask:
        from distributed import Client, LocalCluster

        with LocalCluster(n_workers=args.cluster_workers, threads_per_worker=1, processes=True,
                          dashboard_address=None) as cluster, Client(cluster) as client:
            client.run(lambda: __import__("advisor.optimizer.optimize"))  # warm imports, as a long-lived cluster is
            results.append(timed(f"Dask LocalCluster, {args.cluster_workers} workers", scen, scheduler=client))
    base = results[0][1] / results[0][2]
    print(f"{'configuration':34s} {'solves':>6s} {'seconds':>8s} {'per min':>8s} {'speedup':>8s}")
    for label, k, dt in results:
        rate = k / dt
        print(f"{label:34s} {k:6d} {dt:8.2f} {rate * 60:8.1f} {rate / base:7.2f}x")


if __name__ == "__main__":
    main()
