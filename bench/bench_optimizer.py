"""Benchmark of the rack-filling optimizer (a script, not a test): medians over repeats, status, gap and ratios.

    python bench/bench_optimizer.py            # full run (~10 min on 2 cores)
    python bench/bench_optimizer.py --quick    # ~1 min

Sections:
  layouts  one rack, built-in catalog, layouts a / b / hybrid (swe-agent, rl-rollout x air-40kw, liquid-130kw)
  catalog  catalogs scaled to ~100 CPU and ~30 GPU SKUs (perturbed copies of the built-in entries, new ids)
  racks    1, 10, 100 racks (swe-agent, rl-rollout, and rl-rollout split into 8 classes)
  slo      a binding tool-wait target (rl-rollout on air-40kw, p95 wait 0.5 s), layouts b and hybrid
  classes  1, 4, 16 task classes (a preset's classes split into perturbed sub-classes)
  oracle   the MILP against the exhaustive oracle (tests/oracle.py) at the largest size the oracle finishes in the
           time budget (~60 s by default), with the speed ratio
Times are wall-clock seconds of `optimize(..., explain=False)`; the solver's time limit is set per section.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import warnings  # noqa: E402

warnings.filterwarnings("ignore", category=DeprecationWarning)

from advisor.catalog import builtin_catalog  # noqa: E402
from advisor.optimizer.optimize import optimize  # noqa: E402
from advisor.optimizer.settings import OptimizerSettings  # noqa: E402
from models.catalog import Catalog  # noqa: E402
from models.workload import Workload  # noqa: E402

import oracle as orc  # noqa: E402


def _fmt_gap(g) -> str:
    return "-" if g is None else f"{g:.1e}"


class Table:
    def __init__(self, title: str):
        self.title = title
        print(f"\n== {title}")
        print(f"{'case':<46} {'status':<11} {'gap':>8} {'tasks/h':>13} {'median s':>9} {'min s':>7} {'runs':>4} "
              f"{'ratio':>7}")

    def row(self, case: str, res, times: list[float], ratio: float | None = None, extra: str = "") -> None:
        r = f"{ratio:7.2f}" if ratio is not None else f"{'':>7}"
        print(f"{case:<46} {res.status:<11} {_fmt_gap(res.gap):>8} {res.throughput_tasks_per_hour:>13,.1f} "
              f"{statistics.median(times):>9.3f} {min(times):>7.3f} {len(times):>4} {r} {extra}", flush=True)


REPEAT_BUDGET_S = 40.0
"""Stop repeating a case once its runs have taken this long (a case that hits the solver's time limit runs once)."""


def timed(repeats: int, fn):
    times, res = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        res = fn()
        times.append(time.perf_counter() - t0)
        if sum(times) > REPEAT_BUDGET_S:
            break
    return res, times


# ---------------------------------------------------------------------------------------------- synthetic inputs


def _revalidate(obj, **upd):
    return type(obj).model_validate({**obj.model_dump(), **upd})


def scaled_catalog(n_cpus: int, n_gpus: int, seed: int = 7) -> Catalog:
    """The built-in catalog plus perturbed copies of its CPU and GPU entries (new ids) up to n_cpus / n_gpus."""
    rng = random.Random(seed)
    base = builtin_catalog()
    cpus = list(base.cpus)
    src = list(base.cpus)
    i = 0
    while len(cpus) < n_cpus:
        c = src[i % len(src)]
        cores = max(4, int(round(c.cores * rng.uniform(0.75, 1.25))))
        cpus.append(_revalidate(c, id=f"{c.id}-v{i}", name=f"{c.name} v{i}", cores=cores,
                                threads=max(cores, int(round(c.threads / c.cores * cores))),
                                tdp_w=c.tdp_w * rng.uniform(0.85, 1.15),
                                per_core_perf=c.per_core_perf * rng.uniform(0.85, 1.15),
                                list_price_usd=(c.list_price_usd * rng.uniform(0.8, 1.2)) if c.list_price_usd else None))
        i += 1
    gpus = list(base.gpus)
    srcg = list(base.gpus)
    new_cal: dict[str, list] = {sm.id: [x.model_dump() for x in sm.calibrations] for sm in base.served_models}
    j = 0
    while len(gpus) < n_gpus:
        g = srcg[j % len(srcg)]
        f = rng.uniform(0.8, 1.25)
        gid = f"{g.id}-v{j}"
        gpus.append(_revalidate(g, id=gid, name=f"{g.name} v{j}", tdp_w=g.tdp_w * rng.uniform(0.85, 1.15),
                                bf16_tflops=g.bf16_tflops * f, fp8_tflops=g.fp8_tflops * f,
                                memory_bandwidth_tbps=g.memory_bandwidth_tbps * rng.uniform(0.85, 1.15),
                                price_usd=(g.price_usd * rng.uniform(0.8, 1.2)) if g.price_usd else None))
        for _sm_id, cals in new_cal.items():
            for c in list(cals):
                if c["gpu"] == g.id:
                    cals.append({**c, "gpu": gid, "prefill_tokens_per_s": c["prefill_tokens_per_s"] * f,
                                 "decode_tokens_per_s": c["decode_tokens_per_s"] * f})
        j += 1
    sms = {sm.id: _revalidate(sm, calibrations=new_cal[sm.id]) for sm in base.served_models}
    workloads = []
    for w in base.workloads:
        sm = next((s for s in sms.values() if s.name == w.served_model.name), None)
        workloads.append(w.model_copy(update={"served_model": sm}) if sm else w)
    return Catalog.build(cpus=cpus, gpus=gpus, chassis=list(base.chassis), racks=list(base.racks),
                         served_models=list(sms.values()), workloads=workloads)


def split_classes(w: Workload, k: int, seed: int = 11) -> Workload:
    """About k classes: each class of the preset split into sub-classes with perturbed stage counts and shares."""
    if k <= 1:
        # one class: the share-weighted merge is not exact for latencies, so keep the dominant class alone
        c = max(w.classes, key=lambda c: c.share)
        return w.model_copy(update={"classes": [c.model_copy(update={"share": 1.0})]})
    rng = random.Random(seed)
    per = max(1, k // len(w.classes))
    classes = []
    for c in w.classes:
        parts = [rng.uniform(0.5, 1.5) for _ in range(per)]
        tot = sum(parts)
        for i, p in enumerate(parts):
            stages = [s.model_copy(update={"count": s.count * rng.uniform(0.7, 1.3)}) for s in c.stages]
            classes.append(c.model_copy(update={"name": f"{c.name}-{i}", "share": c.share * p / tot,
                                                "stages": stages}))
    total = sum(c.share for c in classes)
    classes = [c.model_copy(update={"share": c.share / total}) for c in classes]
    fix = 1.0 - sum(c.share for c in classes[:-1])
    classes[-1] = classes[-1].model_copy(update={"share": fix})
    return Workload.model_validate({**w.model_dump(), "classes": [c.model_dump() for c in classes]})


# ---------------------------------------------------------------------------------------------------- sections


def bench_layouts(repeats: int, quick: bool) -> None:
    cat = builtin_catalog()
    t = Table("one rack, built-in catalog, per layout (ratio: time / layout a's time)")
    workloads = ["swe-agent", "rl-rollout"]
    racks = ["air-40kw", "liquid-130kw"]
    for w in workloads:
        for r in racks:
            base = None
            for lay in ("a", "b", "hybrid"):
                res, times = timed(repeats, lambda: optimize(cat.workloads[w], cat.racks[r], cat, layout=lay,
                                                             explain=False))
                base = base or statistics.median(times)
                t.row(f"{w} {r} {lay}", res, times, statistics.median(times) / base)


def bench_catalog(repeats: int, quick: bool, time_limit: float) -> None:
    sizes = [(18, 11), (50, 20), (100, 30)] if not quick else [(18, 11), (100, 30)]
    t = Table(f"catalog size, hybrid, rl-rollout on liquid-130kw (ratio: time / smallest; limit {time_limit:g} s)")
    base = None
    for nc, ng in sizes:
        cat = scaled_catalog(nc, ng)
        wl, rk = cat.workloads["rl-rollout"], cat.racks["liquid-130kw"]
        s = OptimizerSettings(time_limit_s=time_limit)
        res, times = timed(repeats, lambda: optimize(wl, rk, cat, layout="hybrid", explain=False, settings=s))
        base = base or statistics.median(times)
        t.row(f"{len(cat.cpus)} CPUs x {len(cat.gpus)} GPUs", res, times, statistics.median(times) / base)


def bench_racks(repeats: int, quick: bool, time_limit: float) -> None:
    cat = builtin_catalog()
    counts = [1, 10, 100]
    cases = [("swe-agent", "air-40kw", 1), ("rl-rollout", "liquid-130kw", 1), ("rl-rollout", "liquid-130kw", 8)]
    for w, r, k in cases:
        wl = cat.workloads[w] if k == 1 else split_classes(cat.workloads[w], k)
        label = f"{w}" if k == 1 else f"{w} split into {len(wl.classes)} classes"
        t = Table(f"racks, hybrid, {label} on {r} (ratio: time / 1 rack; limit {time_limit:g} s)")
        base = None
        for n in counts:
            s = OptimizerSettings(time_limit_s=time_limit)
            res, times = timed(repeats, lambda: optimize(wl, cat.racks[r], cat, layout="hybrid",
                                                         racks=n, explain=False, settings=s))
            base = base or statistics.median(times)
            per = res.throughput_tasks_per_hour / n
            t.row(f"{n} racks", res, times, statistics.median(times) / base, f"({per:,.1f} tasks/h per rack)")


def bench_slo(repeats: int, quick: bool, time_limit: float) -> None:
    from models.workload import Slo

    cat = builtin_catalog()
    wl = cat.workloads["rl-rollout"].model_copy(update={"slo": Slo(tool_wait_p95_seconds=0.5)})
    t = Table(f"tail-wait target 0.5 s, rl-rollout on air-40kw (ratio: time / layout b; limit {time_limit:g} s)")
    base = None
    for lay in ("b", "hybrid"):
        s = OptimizerSettings(time_limit_s=time_limit)
        res, times = timed(repeats, lambda: optimize(wl, cat.racks["air-40kw"], cat, layout=lay, explain=False,
                                                     settings=s))
        base = base or statistics.median(times)
        slo = min((b.tasks_per_hour for b in res.evaluation.bounds if b.kind == "slo"), default=None)
        t.row(f"layout {lay}", res, times, statistics.median(times) / base,
              f"(slo bound {slo:,.1f}; predicted {res.predicted_tasks_per_hour:,.1f})" if slo else "")


def bench_classes(repeats: int, quick: bool, time_limit: float) -> None:
    cat = builtin_catalog()
    ks = [1, 4, 16]
    t = Table(f"task classes, hybrid, rl-rollout on air-40kw (ratio: time / 1 class; limit {time_limit:g} s)")
    base = None
    for k in ks:
        wl = split_classes(cat.workloads["rl-rollout"], k)
        s = OptimizerSettings(time_limit_s=time_limit)
        res, times = timed(repeats, lambda: optimize(wl, cat.racks["air-40kw"], cat, layout="hybrid", explain=False,
                                                     settings=s))
        base = base or statistics.median(times)
        t.row(f"{len(wl.classes)} classes (partition {len(res.partition)} queues)", res, times,
              statistics.median(times) / base)


def bench_oracle(repeats: int, quick: bool, budget_s: float) -> None:
    """Grow a 5-option instance's rack until the oracle would exceed the budget; time both at each size."""
    inst = None
    for seed in range(300, 400):
        cand = orc.random_instance(seed, max_options=5, max_vectors=2000)
        if cand.notes["options"] == 5 and cand.notes["llm"]:
            inst = cand
            break
    assert inst is not None
    t = Table(f"MILP vs exhaustive oracle (seed {inst.seed}, 5 options, hybrid; oracle budget {budget_s:g} s; "
              "ratio: oracle time / MILP time)")
    scale = 1.0
    last_t = None
    while True:
        rack = orc.scaled_rack(inst.rack, power=scale, air=scale, liquid=scale,
                               space=int(round((scale - 1) * inst.rack.height_u)))
        t0 = time.perf_counter()
        o = orc.oracle(inst.catalog, inst.workload, rack, "hybrid")
        t_or = time.perf_counter() - t0
        res, times = timed(repeats, lambda: optimize(inst.workload, rack, inst.catalog, layout="hybrid",
                                                     explain=False))
        agree = "agree" if orc.abs_rel(res.throughput_tasks_per_hour, o.tasks_per_hour) <= 1e-6 else "DISAGREE"
        t.row(f"{rack.power_kw:,.1f} kW, {o.vectors:,} vectors, oracle {t_or:.2f} s", res, times,
              t_or / statistics.median(times), f"oracle {o.tasks_per_hour:,.1f} ({agree})")
        # vectors grow roughly like scale^(options); stop before the next step would blow the budget
        growth = (t_or / last_t) if last_t else 1.5 ** 5
        last_t = t_or
        if t_or * max(growth, 1.5) > budget_s:
            break
        scale *= 1.5


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="about a minute: fewer repeats and smaller sizes")
    ap.add_argument("--repeats", type=int, default=None, help="repeats per case (default 5; 1 with --quick)")
    ap.add_argument("--time-limit", type=float, default=None, help="solver time limit per solve in the scaling "
                    "sections (default 60 s; 10 s with --quick)")
    ap.add_argument("--oracle-budget", type=float, default=None, help="seconds the oracle may take (default 60; "
                    "5 with --quick)")
    ap.add_argument("--only", nargs="*", choices=["layouts", "catalog", "racks", "slo", "classes", "oracle"],
                    default=None)
    a = ap.parse_args(argv)
    repeats = a.repeats or (1 if a.quick else 5)
    tl = a.time_limit or (10.0 if a.quick else 60.0)
    ob = a.oracle_budget or (5.0 if a.quick else 60.0)
    only = set(a.only or ["layouts", "catalog", "racks", "slo", "classes", "oracle"])
    t0 = time.perf_counter()
    print(f"rack-advisor optimizer benchmark: repeats {repeats}, time limit {tl:g} s, oracle budget {ob:g} s"
          f"{' (quick)' if a.quick else ''}")
    if "layouts" in only:
        bench_layouts(repeats, a.quick)
    if "catalog" in only:
        bench_catalog(repeats, a.quick, tl)
    if "racks" in only:
        bench_racks(repeats, a.quick, tl)
    if "slo" in only:
        bench_slo(repeats, a.quick, tl)
    if "classes" in only:
        bench_classes(repeats, a.quick, tl)
    if "oracle" in only:
        bench_oracle(repeats, a.quick, ob)
    print(f"\ntotal {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
