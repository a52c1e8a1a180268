"""Benchmark of the simulator (a script, not a test): the replication engine against the previous one, and a whole
multi-replication run serial against parallel, with the figures side by side.

    python bench/bench_sim.py            # hybrid example + two other examples (~6 min on 2 cores)
    python bench/bench_sim.py --quick    # hybrid example only, one repeat

Engine: one replication of each example configuration at the closed form's arrival rate (open arrivals,
`--window` simulated seconds after the default warm-up), on
  previous  bench/reference_sim.py: the engine of bb2e1cb (a SimPy process per task, a timeout per tool call and
            delay, a new timer per GPU replica change)
  python    advisor.simulation.des._Run (SimSettings(engine="python")): tasks filed by wake time on a float-keyed
            calendar beside SimPy's, FIFO slot stations placed on arrival, the GPU pool's next completion held
            beside the calendars, one run loop with each task's stages inline
  compiled  the default (SimSettings(engine="compiled")): the same run loop compiled with numba
            (advisor/simulation/kernel.py), the same events and draws, so the same figures (the script checks it)
Times are CPU seconds of this process (time.process_time; the engines are single-threaded), medians over
`--repeats`; the ratios are previous / compiled and python / compiled. The compiled loop is loaded (or compiled,
the first time on a machine) before the clock starts; the load is printed on its own. The figures (throughput, p95
task time, GPU utilization) are printed beside the closed form's so that the accuracy can be compared.

Run: `--replications` replications of the hybrid example (`--run-window` seconds each), the previous engine
serially, the current one serially and in `--workers` processes (SimSettings.workers, as `advisor simulate` does
by default): wall seconds, and the 95% intervals of throughput and p95 task time side by side. The parallel run
must give exactly the serial figures (each replication has its own seed); the script checks it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

warnings.filterwarnings("ignore", category=DeprecationWarning)

from advisor.catalog import builtin_catalog, load_configuration  # noqa: E402
from advisor.service import resolve_inputs  # noqa: E402
from advisor.simulation.des import SimSettings, build_model, closed_form_at, simulate_model  # noqa: E402
from reference_sim import simulate_reference  # noqa: E402

HYBRID = "hybrid-rl-liquid130.yaml"
OTHERS = ("gpu-first-h100-air40.yaml", "owned-b200-mixed-air40.yaml")


def _setup(name: str):
    cat = builtin_catalog()
    cfg = load_configuration(ROOT / "examples" / name)
    w, r = resolve_inputs(cfg, None, None, cat)
    ev = closed_form_at(cfg, w, r, cat)
    return build_model(cfg, w, cat), ev


def _cpu(fn) -> tuple[float, dict]:
    t = time.process_time()
    out = fn()
    return time.process_time() - t, out


def _fig(res: dict, key: str) -> float | None:
    v = res.get(key)
    return v["mean"] if isinstance(v, dict) else v


def _warm() -> float:
    """Load the compiled loop (or compile it, the first time on a machine): CPU seconds."""
    model, ev = _setup(HYBRID)
    return _cpu(lambda: simulate_model(model, SimSettings(arrival_rate_per_hour=ev.arrival_rate_tasks_per_hour,
                                                           duration_s=1.0, warmup_s=0.0, replications=1)))[0]


def _figures(res: dict) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in res["per_replication"]]


def engine(name: str, window_s: float, repeats: int) -> tuple[float, float]:
    model, ev = _setup(name)
    st = dict(arrival_rate_per_hour=ev.arrival_rate_tasks_per_hour, duration_s=window_s, replications=1, seed=0,
              wall_clock_s=3600.0)
    prev, py, comp = [], [], []
    for _ in range(repeats):  # alternated, so that a noisy stretch of the machine hits all three
        t, rp = _cpu(lambda: simulate_reference(model, SimSettings(**st)))
        prev.append(t)
        t, ry = _cpu(lambda: simulate_model(model, SimSettings(**st, engine="python")))
        py.append(t)
        t, rc = _cpu(lambda: simulate_model(model, SimSettings(**st)))
        comp.append(t)
        if _figures(ry) != _figures(rc):
            raise SystemExit(f"{name}: the compiled loop's figures differ from the Python engine's")
    mp, my, mc = statistics.median(prev), statistics.median(py), statistics.median(comp)
    print(f"{name}: previous {mp:6.2f} s, python {my:6.2f} s, compiled {mc:6.2f} s CPU (median of {repeats}): "
          f"previous / compiled {mp / mc:.1f}x, python / compiled {my / mc:.1f}x; python = compiled figures: yes")
    util = rc["utilization"].get("gpu", {}).get("mean")
    putil = rp["utilization"].get("gpu", {}).get("mean")
    print(f"    throughput tasks/h  closed form {ev.arrival_rate_tasks_per_hour:9,.0f}   previous "
          f"{_fig(rp, 'throughput_tasks_per_hour'):9,.0f}   current {_fig(rc, 'throughput_tasks_per_hour'):9,.0f}")
    print(f"    p95 task s          closed form {ev.p95_task_seconds:9,.1f}   previous "
          f"{_fig(rp, 'p95_task_seconds'):9,.1f}   current {_fig(rc, 'p95_task_seconds'):9,.1f}")
    if util is not None:
        print(f"    GPU utilization     closed form {ev.utilization['gpu']:9.3f}   previous {putil:9.3f}   "
              f"current {util:9.3f}")
    return mp / mc, my / mc


def _ci(res: dict, key: str, fmt: str) -> str:
    v = res[key]
    return f"{v['mean']:{fmt}} ± {v['half_width']:{fmt}}"


def run(window_s: float, replications: int, workers: int) -> None:
    model, ev = _setup(HYBRID)
    base = dict(arrival_rate_per_hour=ev.arrival_rate_tasks_per_hour, duration_s=window_s,
                replications=replications, seed=0, wall_clock_s=3600.0)
    rows = []
    for label, fn in (("previous, serial", lambda: simulate_reference(model, SimSettings(**base))),
                      ("python, serial", lambda: simulate_model(model, SimSettings(**base, engine="python"))),
                      ("compiled, serial", lambda: simulate_model(model, SimSettings(**base))),
                      (f"compiled, {workers} processes", lambda: simulate_model(model, SimSettings(**base,
                                                                                              workers=workers)))):
        t = time.perf_counter()
        res = fn()
        rows.append((label, time.perf_counter() - t, res))
    prev_wall = rows[0][1]
    print(f"\n{HYBRID}: {replications} replications x {window_s:,.0f} s window at "
          f"{ev.arrival_rate_tasks_per_hour:,.0f} tasks/h (closed form p95 {ev.p95_task_seconds:,.1f} s)")
    for label, wall, res in rows:
        print(f"    {label:24s} {wall:7.1f} s wall ({prev_wall / wall:4.2f}x)   throughput "
              f"{_ci(res, 'throughput_tasks_per_hour', ',.0f')} tasks/h   p95 {_ci(res, 'p95_task_seconds', ',.1f')} s")
    python, serial, parallel = (_figures(res) for _, _, res in rows[1:])
    if serial != parallel or python != serial:
        raise SystemExit("the runs' figures differ (python, compiled serial, compiled parallel)")
    print("    figures identical (python, compiled serial, compiled in processes): yes")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--window", type=float, default=3000.0, help="engine section: simulated window, seconds")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--run-window", type=float, default=1500.0, help="run section: window per replication")
    ap.add_argument("--replications", type=int, default=4)
    ap.add_argument("--workers", type=int, default=max(1, min(2, os.cpu_count() or 1)))
    a = ap.parse_args()
    names = (HYBRID,) if a.quick else (HYBRID, *OTHERS)
    repeats = 1 if a.quick else a.repeats
    print(f"compiled loop loaded in {_warm():.2f} CPU s (compiled the first time on a machine)")
    print(f"engine: one replication, {a.window:,.0f} s window, CPU seconds")
    ratios = [engine(n, a.window, repeats) for n in names]
    print(f"engine ratio previous / compiled: median {statistics.median(r[0] for r in ratios):.1f}x, "
          f"python / compiled: median {statistics.median(r[1] for r in ratios):.1f}x over {len(ratios)} "
          "configurations")
    run(a.run_window, a.replications, a.workers)


if __name__ == "__main__":
    main()
