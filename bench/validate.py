"""Closed form (models/pipeline.py) against the discrete-event simulator (advisor/simulation/des.py) over a grid of
configurations built from the built-in catalog; writes docs/validation.md and docs/validation.svg.

Run from the repository root:
    python bench/validate.py            # full grid (~10 minutes on 2 cores)
    python bench/validate.py --quick    # a dozen configurations, fewer tasks (a smoke check, ~1-2 minutes)

Per configuration two simulations, each with independent replications:
- throughput: a closed loop of N agents, N = 2 x (sustainable throughput x unloaded task time) (twice the knee
  population: the bottleneck runs close to saturation). Error = closed form's throughput at N agents (exact
  product-form solution, `closed_loop.throughput_tasks_per_hour`) vs the simulated throughput. The simulated
  throughput is also set against the sustainable-throughput bound.
- latency: open Poisson arrivals at 80% of the closed form's sustainable throughput. Error = closed form's p95 task
  time (and mean) vs the simulated one.
Errors are (closed form - simulation) / simulation.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from advisor.catalog import builtin_catalog, load_configuration  # noqa: E402
from advisor.simulation.des import SimSettings, auto_duration, build_model, closed_form_at, simulate_model  # noqa: E402
from models.workload import CpuStage  # noqa: E402

TARGET_THR_MEDIAN, TARGET_THR_WORST, TARGET_P95_MEDIAN = 0.03, 0.10, 0.15
LOAD = 0.8
RACK = "liquid-130kw"  # budgets play no part in the comparison; a roomy rack keeps every configuration legal

# (label, layout, GPU server, CPU-only tool node or None)
HARDWARE = [
    ("dgx-h100", "A", dict(chassis="dgx-h100", cpu="xeon-8480c", gpu="h100-sxm", gpus_per_server=8), None),
    ("hgx-b200", "A", dict(chassis="hgx-b200-10u", cpu="xeon-8480c", gpu="b200", gpus_per_server=8), None),
    ("sp5-h200", "B", dict(chassis="hgx-8gpu-sp5-8u", cpu="epyc-9965", gpu="h200-sxm", gpus_per_server=8), None),
    ("pcie-h100nvl", "B", dict(chassis="pcie-4gpu-2u", cpu="epyc-9965", gpu="h100-nvl", gpus_per_server=4), None),
    ("dgx-h100+epyc", "hybrid", dict(chassis="dgx-h100", cpu="xeon-8480c", gpu="h100-sxm", gpus_per_server=8),
     dict(chassis="cpu-1u-2s", cpu="epyc-9965")),
    ("oam-mi300x+epyc", "hybrid", dict(chassis="oam-8gpu-8u", cpu="epyc-9755", gpu="mi300x", gpus_per_server=8),
     dict(chassis="cpu-2u-2s", cpu="epyc-9755")),
]
WORKLOADS = ["swe-agent", "rl-rollout", "model-eval", "batch-generation"]
RATIOS = [0.5, 1.0, 3.0]  # tool-core capacity / GPU capacity the grid aims at
QUICK = [("dgx-h100", w, r) for w in WORKLOADS for r in (0.5, 3.0)] + [
    ("dgx-h100+epyc", "rl-rollout", 1.0), ("sp5-h200", "swe-agent", 1.0), ("hgx-b200", "model-eval", 1.0),
    ("dgx-h100", "swe-agent", "orch")]


def _cpu_work(workload, classes=None) -> float:
    return sum(c.share * s.count * s.core_seconds for c in workload.classes if classes is None or c.name in classes
               for s in c.stages if isinstance(s, CpuStage))


def make_config(cat, hw: tuple, workload, ratio) -> dict | None:
    """A configuration dict whose tool cores give `ratio` x the GPU bound (capped by the cores there are);
    ratio "orch" keeps plenty of tool cores but reserves orchestration cores for only 70% of the GPUs' capacity."""
    label, layout, gsrv, tnode = hw
    orch_per_gpu = 2.0
    probe = {"name": "probe", "servers": [{**gsrv, "count": 1, "orchestration_cores_per_gpu": orch_per_gpu}]}
    ev = closed_form_at(load_configuration(probe), workload, cat.racks[RACK], cat)
    if ratio == "orch":  # orchestration capacity at 70% of the GPUs' (the closed form scales GPU service by 0.7)
        gpu_b = next(b.tasks_per_hour for b in ev.bounds if b.name == "gpu")
        orch_b = next(b.tasks_per_hour for b in ev.bounds if b.name == "orchestration")
        orch_per_gpu = round(orch_per_gpu * 0.7 * gpu_b / orch_b, 4)
    if not ev.serving or any(sv.replicas == 0 for sv in ev.serving):
        return None  # the server hosts no replica of the model (replicas never span servers)
    count = 1
    gpu_x = next(b.tasks_per_hour for b in ev.bounds if b.name == "gpu") * count / 3600.0
    chassis = cat.chassis[gsrv["chassis"]]
    host_cores = chassis.cpu_sockets * cat.cpus[gsrv["cpu"]].cores - orch_per_gpu * gsrv["gpus_per_server"]
    r = 3.0 if ratio == "orch" else ratio
    name = f"{label}/{workload.id}/{'orch-starved' if ratio == 'orch' else f'r{ratio:g}'}"
    if tnode is None:
        perf = cat.cpus[gsrv["cpu"]].per_core_perf
        need = r * gpu_x * _cpu_work(workload) / perf
        per_server = min(host_cores, max(2.0, math.ceil(need / count)))
        server = {**gsrv, "count": count, "orchestration_cores_per_gpu": orch_per_gpu,
                  "queue_cores": {"shared": float(per_server)}}
        return {"name": name, "layout": layout, "servers": [server]}
    # Hybrid: no tools on the GPU servers; one CPU-only node with an isolated queue per class, cores split by the
    # classes' CPU work.
    perf = cat.cpus[tnode["cpu"]].per_core_perf
    node_cores = cat.chassis[tnode["chassis"]].cpu_sockets * cat.cpus[tnode["cpu"]].cores
    qc = {}
    for c in workload.classes:
        w = _cpu_work(workload, {c.name})
        if w > 0:
            qc[c.name] = float(max(2, math.ceil(r * gpu_x * w / perf)))
    total = sum(qc.values())
    if total > node_cores:
        qc = {k: float(max(2, math.floor(v * node_cores / total))) for k, v in qc.items()}
    server = {**gsrv, "count": count, "orchestration_cores_per_gpu": orch_per_gpu, "queue_cores": {}}
    return {"name": name, "layout": layout, "servers": [server, {**tnode, "count": 1, "queue_cores": qc}],
            "queues": [{"name": c, "classes": [c]} for c in qc]}


def _rel(cf: float | None, sim: dict | None) -> float | None:
    if cf is None or not sim or sim.get("mean") in (None, 0):
        return None
    return (cf - sim["mean"]) / sim["mean"]


def run_one(args) -> dict:
    hw_label, wl_id, ratio, quick, seed = args
    t0 = time.monotonic()
    cat = builtin_catalog()
    wl = cat.workloads[wl_id]
    hw = next(h for h in HARDWARE if h[0] == hw_label)
    data = make_config(cat, hw, wl, ratio)
    if data is None:
        return {"skip": f"{hw_label}/{wl_id}: model does not fit"}
    layout = data.pop("layout")
    cfg = load_configuration(data)
    rack = cat.racks[RACK]
    ev = closed_form_at(cfg, wl, rack, cat)
    model = build_model(cfg, wl, cat)
    x_star = ev.throughput_tasks_per_hour
    gpu_b = next((b.tasks_per_hour for b in ev.bounds if b.name == "gpu"), math.inf)
    cpu_b = min((b.tasks_per_hour for b in ev.bounds if b.kind == "cpu"), default=math.inf)
    ratio_actual = cpu_b / gpu_b
    if ev.bottleneck_kind == "memory":
        regime = "memory-bound"
    elif ev.bottleneck in ("orchestration", "gpu+orchestration"):
        regime = "orchestration-bound"
    elif ratio_actual < 0.8:
        regime = "CPU-bound"
    elif ratio_actual > 1.25:
        regime = "GPU-bound"
    else:
        regime = "balanced"
    reps = 2 if quick else 3
    target = 200 if quick else 400
    # Throughput: closed loop at twice the knee population.
    n_agents = max(2, math.ceil(2 * x_star / 3600.0 * ev.unloaded_task_seconds))
    ev_n = closed_form_at(cfg, wl, rack, cat, agents=n_agents)
    x_n = ev_n.closed_loop.throughput_tasks_per_hour if ev_n.closed_loop else None
    dur = auto_duration(x_n or x_star, n_agents / max(x_n or x_star, 1e-9) * 3600.0 / 4, target)
    # Warm-ups of 3 mean task times at the operating point (the default, based on unloaded times, is too short
    # when queueing stretches tasks and biases the simulated times low).
    warm = 3.0 * n_agents / max(x_n or x_star, 1e-9) * 3600.0
    thr = simulate_model(model, SimSettings(agents=n_agents, duration_s=dur, warmup_s=min(warm, dur), replications=reps,
                                            seed=seed, drain=False, wall_clock_s=120))
    # Latency: open arrivals at 80% of the sustainable throughput.
    lam = LOAD * x_star
    ev_o = closed_form_at(cfg, wl, rack, cat, arrival_rate_per_hour=lam)
    dur_o = auto_duration(lam, (ev_o.mean_task_seconds or ev_o.unloaded_task_seconds) / 4, target)
    warm_o = 3.0 * (ev_o.mean_task_seconds or ev_o.unloaded_task_seconds)
    lat = simulate_model(model, SimSettings(arrival_rate_per_hour=lam, duration_s=dur_o, warmup_s=min(warm_o, dur_o),
                                            replications=reps, seed=seed + 1, wall_clock_s=120))
    sim_x = thr.get("throughput_tasks_per_hour")
    return {
        "name": cfg.name, "layout": layout, "workload": wl_id, "regime": regime, "bottleneck": ev.bottleneck,
        "ratio": ratio_actual, "x_star": x_star, "agents": n_agents, "cf_x_n": x_n,
        "sim_x_n": sim_x, "thr_err": _rel(x_n, sim_x),
        "bound_err": _rel(x_star, sim_x),
        "cf_p95": ev_o.p95_task_seconds, "sim_p95": lat.get("p95_task_seconds"),
        "p95_err": _rel(ev_o.p95_task_seconds, lat.get("p95_task_seconds")),
        "cf_mean": ev_o.mean_task_seconds, "sim_mean": lat.get("mean_task_seconds"),
        "mean_err": _rel(ev_o.mean_task_seconds, lat.get("mean_task_seconds")),
        "cf_util": ev_o.utilization, "sim_util": {k: v["mean"] for k, v in lat.get("utilization", {}).items()},
        "sim_tool_wait": {k: v["mean"] for k, v in lat.get("tool_wait_mean_s", {}).items()},
        "cf_tool_wait": {q.name: q.wait_mean_s for q in ev_o.queues},
        "cf_gpu_call": None, "sim_gpu_call": (lat.get("gpu_mean_call_s") or {}).get("mean"),
        "tasks": thr.get("tasks_measured", 0) + lat.get("tasks_measured", 0),
        "truncated": thr["truncated"] + lat["truncated"], "wall_s": time.monotonic() - t0,
        "warnings": ev.warnings,
    }


def grid(quick: bool) -> list[tuple]:
    if quick:
        return [(h, w, r) for h, w, r in QUICK]
    cells = [(h[0], w, r) for h in HARDWARE for w in WORKLOADS for r in RATIOS]
    cells += [("dgx-h100", w, "orch") for w in WORKLOADS]
    return cells


def _fmt(x, f="+.1%") -> str:
    return "n/a" if x is None else format(x, f)


def _summ(vals: list[float | None]) -> tuple[float | None, float | None, int]:
    v = [abs(x) for x in vals if x is not None]
    return (statistics.median(v), max(v), len(v)) if v else (None, None, 0)


def write_chart(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    regimes = sorted({r["regime"] for r in rows})
    colors = dict(zip(regimes, ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown"]))
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    for ax, key, target, title in ((axes[0], "thr_err", TARGET_THR_WORST, "Throughput at N agents"),
                                   (axes[1], "p95_err", TARGET_P95_MEDIAN, "p95 task time at 80% load")):
        for reg in regimes:
            pts = [(i, r[key]) for i, r in enumerate(rows) if r["regime"] == reg and r[key] is not None]
            if pts:
                ax.scatter([p[0] for p in pts], [100 * p[1] for p in pts], s=18, color=colors[reg], label=reg)
        ax.axhspan(-100 * target, 100 * target, color="0.9", zorder=0)
        ax.axhline(0, color="0.5", lw=0.8)
        ax.set_title(title)
        ax.set_xlabel("configuration (index in docs/validation.md)")
        ax.set_ylabel("closed form vs simulation, %")
    axes[0].legend(fontsize=8, loc="best")
    fig.suptitle("rack-advisor: closed form against discrete-event simulation (shaded: target band)")
    fig.tight_layout()
    fig.savefig(path, format="svg")
    plt.close(fig)


def write_doc(rows: list[dict], skipped: list[str], path: Path, cmd: str, wall: float, quick: bool) -> dict:
    thr_med, thr_worst, n_thr = _summ([r["thr_err"] for r in rows])
    p95_med, p95_worst, n_p95 = _summ([r["p95_err"] for r in rows])
    mean_med, mean_worst, _ = _summ([r["mean_err"] for r in rows])
    bnd_med, bnd_worst, _ = _summ([r["bound_err"] for r in rows])
    ok = lambda v, t: "met" if v is not None and v <= t else "**missed**"  # noqa: E731
    L = ["# Validation: closed form against simulation", "",
         f"Regenerate: `{cmd}` (from the repository root; {wall / 60:.1f} min wall on {os.cpu_count()} cores"
         f"{', quick mode' if quick else ''}).", "",
         "The closed form is `models.pipeline.evaluate`; the simulator is `advisor/simulation/des.py` (SimPy; its "
         "docstring states every modelling choice). Each configuration is built from the built-in catalog "
         "(`bench/validate.py` `make_config`): layout A = GPU servers only, tools on host cores; B = more host cores "
         "per GPU (SP5 hosts with 192-core EPYCs); hybrid = GPU servers with no tool cores plus a CPU-only node "
         "with one isolated queue per class. Tool cores are sized to a target ratio of CPU to GPU capacity "
         f"({', '.join(f'{r:g}' for r in RATIOS)}), plus orchestration-starved variants (orchestration cores for 70% of the GPU capacity).", "",
         "- **Throughput**: closed loop of N agents, N = twice the knee population (sustainable throughput x "
         "unloaded task time), so the bottleneck runs near saturation. Error = closed form at N agents (exact "
         "product-form solution) vs the simulated throughput; `vs bound` = the sustainable-throughput bound vs the "
         "simulated throughput.",
         f"- **Latency**: open Poisson arrivals at {LOAD:.0%} of the sustainable throughput; p95 and mean task time.",
         "- Error = (closed form - simulation) / simulation. Simulated figures are means over independent "
         "replications (warm-up discarded).", "",
         "## Summary", "",
         "| figure | median abs error | worst abs error | target | status |", "|---|---|---|---|---|",
         f"| throughput at N agents ({n_thr} configs) | {_fmt(thr_med, '.1%')} | {_fmt(thr_worst, '.1%')} | "
         f"median <= {TARGET_THR_MEDIAN:.0%}, worst <= {TARGET_THR_WORST:.0%} | "
         f"median {ok(thr_med, TARGET_THR_MEDIAN)}, worst {ok(thr_worst, TARGET_THR_WORST)} |",
         f"| p95 task time at {LOAD:.0%} load ({n_p95} configs) | {_fmt(p95_med, '.1%')} | {_fmt(p95_worst, '.1%')} | "
         f"median <= {TARGET_P95_MEDIAN:.0%} | {ok(p95_med, TARGET_P95_MEDIAN)} |",
         f"| mean task time at {LOAD:.0%} load | {_fmt(mean_med, '.1%')} | {_fmt(mean_worst, '.1%')} | - | - |",
         f"| sustainable bound vs simulated throughput at N agents | {_fmt(bnd_med, '.1%')} | "
         f"{_fmt(bnd_worst, '.1%')} | - | - |", "",
         "## By regime", "",
         "| regime | configs | throughput median / worst | p95 median / worst | mean median / worst |",
         "|---|---|---|---|---|"]
    for reg in sorted({r["regime"] for r in rows}):
        rr = [r for r in rows if r["regime"] == reg]
        a, b, _ = _summ([r["thr_err"] for r in rr])
        c, d, _ = _summ([r["p95_err"] for r in rr])
        e, f, _ = _summ([r["mean_err"] for r in rr])
        L.append(f"| {reg} | {len(rr)} | {_fmt(a, '.1%')} / {_fmt(b, '.1%')} | {_fmt(c, '.1%')} / {_fmt(d, '.1%')} | "
                 f"{_fmt(e, '.1%')} / {_fmt(f, '.1%')} |")
    L += ["", "## Where the closed form misses", "", MISSES_TEXT, "",
          "## Per configuration", "",
          "| # | configuration | layout | regime | bottleneck | CPU/GPU cap | N | thr closed | thr sim | thr err | "
          "vs bound | p95 closed s | p95 sim s | p95 err | mean err | tool wait closed / sim s |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(rows):
        tw = "; ".join(f"{k}: {_fmt(r['cf_tool_wait'].get(k), '.2f')} / {_fmt(v, '.2f')}"
                       for k, v in r["sim_tool_wait"].items())
        L.append(f"| {i} | {r['name']} | {r['layout']} | {r['regime']} | {r['bottleneck']} | {r['ratio']:.2f} | "
                 f"{r['agents']} | {_fmt(r['cf_x_n'], ',.0f')} | {_fmt(r['sim_x_n'] and r['sim_x_n']['mean'], ',.0f')} | "
                 f"{_fmt(r['thr_err'])} | {_fmt(r['bound_err'])} | {_fmt(r['cf_p95'], ',.0f')} | "
                 f"{_fmt(r['sim_p95'] and r['sim_p95']['mean'], ',.0f')} | {_fmt(r['p95_err'])} | "
                 f"{_fmt(r['mean_err'])} | {tw} |")
    if skipped:
        L += ["", "Skipped (the served model does not fit the GPUs): " + "; ".join(skipped)]
    trunc = [r["name"] for r in rows if r["truncated"]]
    if trunc:
        L += ["", "Replications stopped by the simulated-time bound or wall-clock guard: " + ", ".join(trunc)]
    L += ["", "![validation chart](validation.svg)", ""]
    path.write_text("\n".join(L), encoding="utf-8")
    return {"thr_median": thr_med, "thr_worst": thr_worst, "p95_median": p95_med, "p95_worst": p95_worst,
            "mean_median": mean_med, "bound_median": bnd_med, "bound_worst": bnd_worst}


MISSES_TEXT = (Path(__file__).with_name("validation_misses.md").read_text(encoding="utf-8")
               if Path(__file__).with_name("validation_misses.md").exists() else "(see the tables)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a dozen configurations, fewer tasks")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--out", type=Path, default=ROOT / "docs")
    a = ap.parse_args(argv)
    t0 = time.monotonic()
    cells = grid(a.quick)
    jobs = [(h, w, r, a.quick, a.seed + 10 * i) for i, (h, w, r) in enumerate(cells)]
    rows, skipped = [], []
    with ProcessPoolExecutor(max_workers=a.jobs) as ex:
        for res in ex.map(run_one, jobs):
            if "skip" in res:
                skipped.append(res["skip"])
                continue
            rows.append(res)
            print(f"{res['name']:45s} {res['regime']:20s} thr {_fmt(res['thr_err']):>7s} p95 {_fmt(res['p95_err']):>7s}"
                  f" mean {_fmt(res['mean_err']):>7s}  {res['wall_s']:.0f}s", flush=True)
    wall = time.monotonic() - t0
    a.out.mkdir(parents=True, exist_ok=True)
    cmd = "python bench/validate.py" + (" --quick" if a.quick else "")
    s = write_doc(rows, skipped, a.out / "validation.md", cmd, wall, a.quick)
    write_chart(rows, a.out / "validation.svg")
    print(f"{len(rows)} configurations in {wall:.0f} s: " + ", ".join(f"{k} {_fmt(v, '.1%')}" for k, v in s.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
