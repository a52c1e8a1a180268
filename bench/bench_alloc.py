"""Python-level allocation growth of repeated solves in one process (a script, not a test): tells a leak in our code
from the allocator's drift that bench_load.py's RSS slope also sees.

    python bench/bench_alloc.py                 # 4 warm-up solves, then 3 rounds of 40 (~3 min on 2 cores)
    python bench/bench_alloc.py --rounds 5 --per-round 20

The solves are bench_load.py's optimize mix (hybrid, explain off, 5 s limit, swe-agent and rl-rollout on air-40kw,
built-in catalog). After each round: tracemalloc's traced bytes less the previous round's, after gc. A leak grows
by about the same amount every round; caches and lazy state level off.
"""

from __future__ import annotations

import argparse
import gc
import tracemalloc

from advisor.catalog import builtin_catalog
from advisor.optimizer.optimize import optimize

PAIRS = [("swe-agent", "air-40kw"), ("rl-rollout", "air-40kw")]
"""As bench_load.py's SOLVE_PAIRS for the built-in catalog."""
TIME_LIMIT_S = 5.0
"""As bench_load.py's SOLVE_TIME_LIMIT_S."""
WARM_UP = 4
"""Solves before tracing starts: imports, the catalog's derived tables and first-call caches."""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--per-round", type=int, default=40)
    a = ap.parse_args()
    cat = builtin_catalog()

    def solve(i: int) -> None:
        w, r = PAIRS[i % len(PAIRS)]
        optimize(cat.workloads[w], cat.racks[r], cat, layout="hybrid", time_limit_s=TIME_LIMIT_S, explain=False)

    for i in range(WARM_UP):
        solve(i)
    tracemalloc.start()
    gc.collect()
    prev = tracemalloc.get_traced_memory()[0]
    for k in range(a.rounds):
        for i in range(a.per_round):
            solve(i)
        gc.collect()
        cur = tracemalloc.get_traced_memory()[0]
        print(f"round {k + 1}: {a.per_round} solves, traced Python memory {cur - prev:+,} B "
              f"({(cur - prev) / a.per_round:+,.0f} B per solve)", flush=True)
        prev = cur


if __name__ == "__main__":
    main()
