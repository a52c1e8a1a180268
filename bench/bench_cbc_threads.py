"""CBC with `-threads 1` against CBC's serial default, on one small MILP solved many times.

PuLP passes `-threads N` whenever a thread count is given. With N = 1 CBC runs its threaded branch and bound with
one worker; in the CBC build PuLP bundles this stalls for about 10 s at the end of roughly one solve in 50-100,
whatever the model (first seen as a 10 s CBC call on a 9-variable model inside a 6 s report deadline). The solver
backend therefore omits the flag for one thread. This bench prints, per flag set, the median and worst wall time
and how many solves took over 2 s.

    python bench/bench_cbc_threads.py [--runs 200]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import pulp

STALL_S = 2.0
"""A solve slower than this is a stall (the model solves in about 20 ms)."""


def small_milp(path: Path) -> None:
    """A rack-sized knapsack: four server counts, tool cores and throughput, as the optimizer's smallest stage."""
    prob = pulp.LpProblem("small", pulp.LpMaximize)
    n = [pulp.LpVariable(f"n{i}", 0, ub, cat=pulp.LpInteger) for i, ub in enumerate((2, 2, 4, 3))]
    y = [pulp.LpVariable(f"y{i}", 0) for i in range(4)]
    x = pulp.LpVariable("X", 0)
    prob += x
    power = (14300, 10200, 3040, 1450)
    cores = (96, 128, 64, 384)
    gpu = (8 * 900, 8 * 700, 4 * 420, 0)
    prob += pulp.lpSum(p * v for p, v in zip(power, n)) <= 40_000
    prob += pulp.lpSum(10 * v for v in n) <= 40
    for i in range(4):
        prob += y[i] <= cores[i] * n[i]
    prob += 0.9 * x <= pulp.lpSum(g * v for g, v in zip(gpu, n))
    prob += 3.1 * x <= pulp.lpSum(y)
    prob.writeMPS(str(path))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200)
    args = ap.parse_args()
    cbc = pulp.PULP_CBC_CMD().path
    with tempfile.TemporaryDirectory() as tmp:
        mps = Path(tmp) / "small.mps"
        small_milp(mps)
        for label, flags in (("-threads 1 (PuLP with threads=1)", ["-threads", "1"]), ("serial (no -threads)", [])):
            times = []
            for _ in range(args.runs):
                t = time.perf_counter()
                subprocess.run([cbc, str(mps), "max", "-sec", "5", "-timeMode", "elapsed", *flags, "-ratio", "1e-6",
                                "-branch", "-printingOptions", "all", "-solution", str(Path(tmp) / "sol.txt")],
                               capture_output=True, check=True)
                times.append(time.perf_counter() - t)
            stalls = sum(t > STALL_S for t in times)
            print(f"{label:36s} runs {args.runs}  median {statistics.median(times) * 1e3:7.1f} ms  "
                  f"worst {max(times):6.2f} s  over {STALL_S:.0f} s: {stalls}", flush=True)


if __name__ == "__main__":
    main()
