"""The compiled run loop (advisor/simulation/kernel.py) against the Python engine (des._Run): the same events and
draws, so for a seed the same figures, bit for bit, on every kind of model the simulator takes."""

from __future__ import annotations

import math

import pytest

from advisor.catalog import load_configuration
from advisor.errors import InputError
from advisor.service import resolve_inputs
from advisor.simulation import compiled, des
from advisor.simulation.des import (
    CPU,
    DELAY,
    GPU,
    IO,
    ClassSpec,
    QueueSpec,
    SimModel,
    SimSettings,
    SkuSpec,
    StageSpec,
    build_model,
    closed_form_at,
    simulate_model,
    stage_blocks,
)
from models.config import Configuration
from tests.test_simulation import TWO_LIMITED

EXAMPLES = __import__("pathlib").Path(__file__).resolve().parents[1] / "examples"


def _same(model: SimModel, **settings) -> dict:
    """Run both engines; every figure of every replication must be identical (the wall clock aside)."""
    out = {}
    for engine in ("python", "compiled"):
        res = simulate_model(model, SimSettings(engine=engine, **settings))
        out[engine] = [{k: v for k, v in r.items() if k != "wall_s"} for r in res["per_replication"]]
    assert out["compiled"] == out["python"]
    return res


def _ties_model() -> SimModel:
    """Same-time events on purpose (constant delays, tool and model calls, tasks admitted together when a larger
    sandbox frees); two SKUs with small batch limits (the pool's choice of replica and its FIFO); an I/O station."""
    a = [StageSpec("a/w", "w", DELAY, 1, 0, 0.0, mean_s=1.0), StageSpec("a/g", "g", GPU, 2, 0, 0.0, rel=[1.0, 0.8]),
         StageSpec("a/t", "t", CPU, 2, 0, 0.0, mean_s=2.0, queue="q")]
    b = [StageSpec("b/w", "w", DELAY, 1, 0, 0.0, mean_s=1.0), StageSpec("b/g", "g", GPU, 3, 0.5, 0.5, rel=[0.5, 0.4]),
         StageSpec("b/t", "t", CPU, 3, 0.5, 1.0, mean_s=1.0, queue="q"),
         StageSpec("b/i", "i", IO, 1, 0, 0.0, mean_s=0.5, queue="q")]
    return SimModel([ClassSpec("a", 0.5, 2.0, "q", a, stage_blocks(a)),
                     ClassSpec("b", 0.5, 1.0, "q", b, stage_blocks(b))],
                    [SkuSpec("g", 1, 1.0, 0.0, 3, 1.0, 1.0, 1, 1), SkuSpec("h", 1, 1.2, 0.1, 2, 1.0, 1.0, 1, 1)],
                    {"q": QueueSpec("q", 6, 1.0, 3, 1.0, 6.0, 0.0, 2)}, "ties", "ties")


def test_ties_closed_loop():
    res = _same(_ties_model(), agents=12, duration_s=400, warmup_s=20, replications=2, seed=7)
    assert res["tasks_measured"] == 453  # the pinned figure of tests/test_simulation.py


def test_ties_open_arrivals_beyond_the_sandboxes():
    """Open arrivals faster than the sandboxes hold: tasks queue for memory, the task table grows (from 2 spare
    rows), and the kernel stops every few events for the wall clock; none of it changes a figure."""
    old = compiled.TASK_ROWS_SPARE, compiled.CHUNK_EVENTS
    compiled.TASK_ROWS_SPARE, compiled.CHUNK_EVENTS = 2, 7
    try:
        res = _same(_ties_model(), arrival_rate_per_hour=2400, duration_s=300, warmup_s=10, replications=1, seed=3,
                    drain=False)
    finally:
        compiled.TASK_ROWS_SPARE, compiled.CHUNK_EVENTS = old
    assert res["tasks_measured"] > 0


def test_cpu_only_model_without_gpus():
    stages = [StageSpec("c/t", "t", CPU, 5, 0.5, 1.5, mean_s=2.0, queue="q"),
              StageSpec("c/d", "d", DELAY, 5, 0.5, 1.0, mean_s=0.5)]
    model = SimModel([ClassSpec("c", 1.0, 0.0, "q", stages, stage_blocks(stages))], [],
                     {"q": QueueSpec("q", 8, 1.0, 8, 1.0, 0.0)}, "cpu", "cpu")
    _same(model, agents=20, duration_s=600, replications=2, seed=1)


@pytest.mark.parametrize("name", ["hybrid-rl-liquid130.yaml", "gpu-first-h100-air40.yaml",
                                  "owned-b200-mixed-air40.yaml"])
def test_examples_at_their_closed_form_rate(builtin, name):
    cfg = load_configuration(EXAMPLES / name)
    wl, rack = resolve_inputs(cfg, None, None, builtin)
    ev = closed_form_at(cfg, wl, rack, builtin)
    _same(build_model(cfg, wl, builtin), arrival_rate_per_hour=ev.arrival_rate_tasks_per_hour, duration_s=300,
          replications=1, seed=11)


def test_sandbox_limited_closed_loop(builtin):
    """Two queues whose sandboxes both limit the agents: tasks wait FIFO for memory and disk and are admitted in
    bursts when a task ends."""
    wl, rack = builtin.workloads["rl-rollout"], builtin.racks["liquid-130kw"]
    cfg = Configuration.model_validate(TWO_LIMITED)
    ev = closed_form_at(cfg, wl, rack, builtin)
    n = math.ceil(2 * ev.throughput_tasks_per_hour / 3600.0 * ev.unloaded_task_seconds)
    _same(build_model(cfg, wl, builtin), agents=n, duration_s=1200, replications=1, seed=5)


def test_stage_kinds_agree():
    from advisor.simulation import kernel

    assert (kernel.GPU, kernel.CPU, kernel.DELAY, kernel.IO) == (GPU, CPU, DELAY, IO)


def test_python_engine_serves_what_the_kernel_does_not_carry():
    model = _ties_model()
    st = SimSettings(agents=4, duration_s=10)
    assert type(des._make_run(model, st, 0)) is des._CompiledRun
    assert type(des._make_run(model, st, 0, recorder=lambda *a: None)) is des._Run
    assert type(des._make_run(model, SimSettings(agents=4, count_coupling="comonotone"), 0)) is des._Run
    assert type(des._make_run(model, SimSettings(agents=4, engine="python"), 0)) is des._Run
    with pytest.raises(InputError, match="engine"):
        simulate_model(model, SimSettings(agents=4, engine="fortran"))


def _stage(draw, st, cls: str, i: int) -> StageSpec:
    kind = draw(st.sampled_from([GPU, CPU, DELAY, IO]))
    repeats = draw(st.booleans())
    count = draw(st.sampled_from([2.0, 3.5, 6.0])) if repeats else 1.0
    count_cv = draw(st.sampled_from([0.0, 0.3, 1.0])) if repeats else 0.0
    cv = draw(st.sampled_from([0.0, 0.5, 1.0, 2.5]))
    key = f"{cls}/s{i}"
    if kind == GPU:
        return StageSpec(key, f"s{i}", GPU, count, count_cv, cv, rel=[draw(st.sampled_from([0.5, 1.0, 1.5])),
                                                                      draw(st.sampled_from([0.4, 1.0]))])
    mean = draw(st.sampled_from([0.5, 1.0, 2.0]))
    return StageSpec(key, f"s{i}", kind, count, count_cv, cv, mean_s=mean, queue="q" if kind in (CPU, IO) else None,
                     parallelism=draw(st.sampled_from([1.0, 2.0])) if kind == CPU else 1.0)


def test_random_models_give_the_python_engines_figures():
    """Hypothesis: random small models (one or two classes, every stage kind, repeating turns, constant draws that
    make ties, one or two SKUs, sandbox memory that may bind), closed or open: identical figures."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    @st.composite
    def models(draw):
        classes = []
        skus = [SkuSpec("g", draw(st.integers(1, 3)), 1.0, draw(st.sampled_from([0.0, 0.1])),
                        draw(st.integers(1, 4)), 1.0, 1.0, 1, 1)]
        if draw(st.booleans()):
            skus.append(SkuSpec("h", 1, 1.3, 0.05, draw(st.integers(1, 3)), 0.8, 0.8, 1, 1))
        for c in range(draw(st.integers(1, 2))):
            stages = [_stage(draw, st, f"c{c}", i) for i in range(draw(st.integers(1, 5)))]
            for s in stages:
                s.rel = s.rel[:len(skus)] if s.kind == GPU else s.rel
            classes.append(ClassSpec(f"c{c}", 1.0 / (c + 1), draw(st.sampled_from([0.0, 1.0, 2.0])), "q", stages,
                                     stage_blocks(stages)))
        if not any(s.kind == GPU for c in classes for s in c.stages):
            skus = []
        q = QueueSpec("q", 8, 1.0, draw(st.integers(1, 6)), 1.0, draw(st.sampled_from([4.0, 6.0, 50.0])), 0.0,
                      draw(st.integers(1, 3)))
        return SimModel(classes, skus, {"q": q}, "random", "random")

    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
    @given(models(), st.booleans(), st.integers(0, 2**16))
    def check(model, closed, seed):
        load = dict(agents=6) if closed else dict(arrival_rate_per_hour=900.0)
        _same(model, duration_s=200, warmup_s=10, replications=1, seed=seed, max_sim_s=600, **load)

    check()
