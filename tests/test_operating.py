"""The operating point (advisor/optimizer/operating.py), failure domains (advisor/optimizer/failures.py) and alert
thresholds that never sit at their expected value (advisor/operations.py)."""

from __future__ import annotations

import math

import pytest

from advisor.catalog import builtin_catalog, load_rack, load_workload
from advisor.operations import mmc_queue_length_quantile, operating_thresholds
from advisor.optimizer.failures import remove
from advisor.optimizer.operating import PLANNED, meets_targets, operating_figure, tail_checks
from advisor.optimizer.optimize import optimize
from advisor.simulation.des import SimSettings, auto_duration, build_model, simulate_model
from models.assumptions import ModelAssumptions
from models.config import Configuration
from models.queueing import erlang_c
from tiers import tiered

A = ModelAssumptions()


@pytest.fixture(scope="module")
def cat():
    return builtin_catalog()


@pytest.fixture(scope="module")
def swe(cat):
    w, r = load_workload("swe-agent", cat), load_rack("legacy-air-15kw", cat)
    return optimize(w, r, cat, explain=False), w, r


def test_operating_figure_is_the_planned_load_when_targets_hold(swe):
    res, w, _ = swe
    op = res.operating
    assert op.limited_by == PLANNED
    assert op.planned_load == A.operating_load_fraction
    assert op.operating_tasks_per_hour == pytest.approx(0.8 * res.throughput_tasks_per_hour)
    assert op.sustainable_tasks_per_hour == res.throughput_tasks_per_hour
    assert {t.target.split(",")[0] for t in op.tails} == {"p95 task time", "p95 wait for a tool core"}
    assert all(t.met and t.value_s <= t.target_s for t in op.tails)


def test_target_utilization_of_the_workload_sets_the_planned_load(swe, cat):
    res, w, r = swe
    w2 = w.model_copy(update={"slo": w.slo.model_copy(update={"target_utilization": 0.6})})
    cfg = Configuration.model_validate(res.configuration)
    op = operating_figure(cfg, w2, r, cat, A)
    assert op.planned_load == 0.6
    assert op.operating_tasks_per_hour == pytest.approx(0.6 * res.throughput_tasks_per_hour)


def test_a_binding_task_time_target_lowers_the_operating_figure(swe, cat):
    """A p95 task-time target between the unloaded p95 and the p95 at the planned load binds: the figure is the
    largest rate meeting it (met there, missed just above), below the planned load."""
    res, w, r = swe
    cfg = Configuration.model_validate(res.configuration)
    planned = 0.8 * res.throughput_tasks_per_hour
    p95_planned = next(t.value_s for t in res.operating.tails if "task time" in t.target)
    _, low = meets_targets(cfg, w, r, cat, A, 0.05 * planned)
    p95_low = next(t.value_s for t in low if "task time" in t.target)
    assert p95_low < p95_planned
    target = 0.5 * (p95_low + p95_planned)
    w2 = w.model_copy(update={"slo": w.slo.model_copy(update={"p95_task_seconds": target})})
    op = operating_figure(cfg, w2, r, cat, A)
    assert "task time" in op.limited_by
    assert 0.05 * planned < op.operating_tasks_per_hour < planned
    assert meets_targets(cfg, w2, r, cat, A, op.operating_tasks_per_hour)[0]
    assert not meets_targets(cfg, w2, r, cat, A, op.operating_tasks_per_hour * 1.001)[0]


def test_unreachable_target_gives_zero(swe, cat):
    res, w, r = swe
    cfg = Configuration.model_validate(res.configuration)
    w2 = w.model_copy(update={"slo": w.slo.model_copy(update={"p95_task_seconds": 1.0})})
    op = operating_figure(cfg, w2, r, cat, A)
    assert op.operating_tasks_per_hour == 0.0 and "task time" in op.limited_by


def test_operating_figure_meets_every_tail_target_in_the_simulator(swe, cat):
    """The done-when test of issue #20 item 1: open arrivals at the operating figure, simulated by the project's
    discrete-event simulator, meet the p95 task-time and p95 tool-wait targets."""
    res, w, r = swe
    cfg = Configuration.model_validate(res.configuration)
    rate = res.operating.operating_tasks_per_hour
    model = build_model(cfg, w, cat)
    sim = simulate_model(model, SimSettings(arrival_rate_per_hour=rate, replications=5, seed=20,
                                            duration_s=auto_duration(rate, res.evaluation.mean_task_seconds, 1500)))
    assert sim["truncated"] == 0
    p95 = sim["p95_task_seconds"]
    assert p95["mean"] + p95["half_width"] <= w.slo.p95_task_seconds
    for q, v in sim["tool_wait_p95_s"].items():
        assert v["mean"] + v["half_width"] <= w.slo.tool_wait_p95_seconds, q


def test_max_operating_throughput_objective(cat):
    w, r = load_workload("swe-agent", cat), load_rack("legacy-air-15kw", cat)
    a = optimize(w, r, cat, explain=False)
    b = optimize(w, r, cat, objective="max_operating_throughput", explain=False)
    # the planned load limits: the max-throughput answer is optimal for the operating figure too
    assert b.operating.operating_tasks_per_hour == pytest.approx(a.operating.operating_tasks_per_hour)
    assert b.status == a.status


# --------------------------------------------------------------------------------------------------- failures

def test_failure_cases_come_from_the_evaluator(cat):
    w, r = load_workload("rl-rollout", cat), load_rack("air-40kw", cat)
    res = optimize(w, r, cat, explain=False)
    f = res.failures
    assert f.spares == [] and f.active_operating_tasks_per_hour == res.operating.operating_tasks_per_hour
    cases = {c.loss: c for c in f.cases}
    assert set(cases) == {"one GPU server", "one CPU node", "one power feed"}
    gpu = cases["one GPU server"]
    cfg = Configuration.model_validate(res.configuration)
    kinds = {(g.chassis, g.cpu, g.gpu, g.gpus_per_server) for g in cfg.servers if g.gpu}
    from models.pipeline import evaluate
    worst = min(evaluate(remove(cfg, k, 1), w, r, cat).throughput_tasks_per_hour for k in kinds)
    assert gpu.sustainable_tasks_per_hour == pytest.approx(worst)
    assert gpu.sustainable_tasks_per_hour < res.throughput_tasks_per_hour
    feed = cases["one power feed"]
    assert r.redundancy == "2N" and feed.sustainable_tasks_per_hour == res.throughput_tasks_per_hour
    assert "2N" in feed.detail


def test_spares_are_kept_besides_the_answer(cat):
    """Spares are bought besides the active servers: every rack still fits them (space, weight) powered off, and
    losing a server of the pool's costliest kind is covered."""
    from models.pipeline import evaluate

    w, r = load_workload("rl-rollout", cat), load_rack("air-40kw", cat)
    plain = optimize(w, r, cat, explain=False)
    res = optimize(w, r, cat, explain=False, spares=1)
    f = res.failures
    assert f.spares_mode == "reserved" and len(f.spares) == 1  # one pool (no CPU-only nodes)
    assert f.active_sustainable_tasks_per_hour == res.throughput_tasks_per_hour
    assert res.throughput_tasks_per_hour <= plain.throughput_tasks_per_hour * (1 + 1e-9)
    cfg = Configuration.model_validate(res.configuration)
    spare = next(g for g in cfg.servers if f"{g.chassis} ({g.cpu}, {g.gpus_per_server}x {g.gpu})" in f.spares[0])
    full = cfg.model_copy(update={"servers": [*cfg.servers, spare.model_copy(update={"count": 1})]})
    exceeded = " ".join(x for ru in evaluate(full, w, r, cat).racks for x in ru.exceeded)
    assert "space" not in exceeded and "weight" not in exceeded
    gpu = next(c for c in f.cases if c.loss == "one GPU server")
    assert gpu.fraction_of_intact == 1.0 and "spare of its kind" in gpu.detail


def test_spares_without_room_are_held_back(cat):
    w, r = load_workload("swe-agent", cat), load_rack("legacy-air-15kw", cat)
    plain = optimize(w, r, cat, explain=False)
    used = plain.space_u - r.reserved_u
    tight = r.model_copy(update={"reserved_u": r.height_u - used})
    res = optimize(w, tight, cat, explain=False, spares=1)
    f = res.failures
    assert f.spares_mode == "held back"
    assert f.active_sustainable_tasks_per_hour < res.throughput_tasks_per_hour
    assert any("held back" in x for x in res.warnings)


def test_feed_loss_without_redundancy_drops_servers(cat):
    w, r = load_workload("rl-rollout", cat), load_rack("air-40kw", cat)
    r2 = r.model_copy(update={"redundancy": "none"})
    res = optimize(w, r2, cat, explain=False)
    feed = next(c for c in res.failures.cases if c.loss == "one power feed")
    assert "no redundancy" in feed.detail
    assert feed.sustainable_tasks_per_hour < res.throughput_tasks_per_hour


# ------------------------------------------------------------------------------------------------- thresholds

def test_queue_length_quantile_matches_its_definition():
    c, lam, s = 10, 8.0, 1.0
    k = mmc_queue_length_quantile(c, lam, s, 0.95)
    C, rho = erlang_c(c, lam * s), lam * s / c
    assert C * rho ** (k + 1) <= 0.05 + 1e-12
    assert k == 0 or C * rho ** k > 0.05


@pytest.mark.parametrize("preset,rack", tiered([("swe-agent", "air-40kw"), ("interactive-rl-mix", "legacy-air-15kw"),
                                                ("rl-rollout", "air-40kw"), ("model-eval", "legacy-air-15kw"),
                                                ("batch-generation", "air-40kw")], fast=2))
def test_no_alert_threshold_equals_its_expected_value(cat, preset, rack):
    """The done-when test of issue #20 item 7: every threshold sits strictly on the alerting side of the model's
    value at the operating point, and the report prints them differently."""
    from advisor.report.html import operations

    w, r = load_workload(preset, cat), load_rack(rack, cat)
    res = optimize(w, r, cat, explain=False)
    t = operating_thresholds(res.evaluation, w, A, 0.5)
    for q in t.queues:
        assert q.wait_alert_s > q.wait_tail_s
        if q.wait_target_s:
            assert q.wait_alert_s == q.wait_target_s
        assert q.waiting_calls_alert > q.waiting_calls_mean
        assert q.utilization_alert > q.utilization
        assert q.run_queue_depth_per_core_alert > q.run_queue_depth_per_core
        assert q.iowait_share_alert > 0
    if t.gpu:
        g = t.gpu
        assert g.utilization_low_alert < g.utilization < g.utilization_alert
        assert g.idle_on_cpu_alert > g.idle_on_cpu_fraction
        assert math.isclose(g.idle_on_cpu_fraction + g.utilization, 1.0) or g.idle_on_cpu_fraction < 1 - g.utilization
    if t.task_time and t.task_time.alert_s is not None:
        assert t.task_time.alert_s > t.task_time.expected_s
    for m in operations(res, w, A, 0.5)["metrics"]:
        shown = m["alert"].lstrip("<> ").split(",")[0].split(" (")[0]
        assert shown != m["expected"], m


def test_tail_checks_name_every_target(swe):
    res, w, _ = swe
    checks = tail_checks(res.evaluation, w, A)
    assert len(checks) == 1 + len(res.evaluation.queues)


def test_max_operating_throughput_when_a_target_binds(cat):
    """A task-time target just below the p95 at the planned load binds: the objective returns the best operating
    figure among the candidates it tried, never below the max-throughput answer's, labelled as not proven."""
    w, r = load_workload("swe-agent", cat), load_rack("air-40kw", cat)
    base = optimize(w, r, cat, explain=False, gpu_ids=["b200", "mi325x"])
    p95 = next(t.value_s for t in base.operating.tails if "task time" in t.target)
    w2 = w.model_copy(update={"slo": w.slo.model_copy(update={"p95_task_seconds": 0.97 * p95})})
    a = optimize(w2, r, cat, explain=False, gpu_ids=["b200", "mi325x"])
    b = optimize(w2, r, cat, explain=False, gpu_ids=["b200", "mi325x"], objective="max_operating_throughput")
    assert "task time" in a.operating.limited_by
    assert b.operating.operating_tasks_per_hour >= a.operating.operating_tasks_per_hour * (1 - 1e-9)
    assert b.status == "feasible" and "not proven optimal" in b.warnings[-1]


def test_prometheus_rules_export_the_same_thresholds(cat):
    import yaml

    from advisor.export import ExportSettings, plan_for, render
    from advisor.export.plan import GPU_DEVICES

    w, r = load_workload("swe-agent", cat), load_rack("air-40kw", cat)
    res = optimize(w, r, cat, explain=False)
    plan = plan_for(res, w, cat, settings=ExportSettings(gpu_devices={"T": GPU_DEVICES["NVIDIA"]}))
    rules = {(x["alert"], x["labels"].get("queue")): x for x in
             yaml.safe_load(render("prometheus", plan).text)["groups"][0]["rules"]}
    t = plan.thresholds
    for q in t.queues:
        qid = plan.queue(q.queue).id
        assert rules["ToolCallWaitHigh", qid]["expr"].endswith(f"> {q.wait_alert_s:.6g}")
        assert q.wait_alert_s == w.slo.tool_wait_p95_seconds
        assert rules["ToolCallsWaitingHigh", qid]["expr"].endswith(f"> {q.waiting_calls_alert}")
        assert f"> {1 + t.headroom:.6g} * histogram_quantile" in rules["SandboxStartSlow", qid]["expr"]
    assert f"< {t.gpu.utilization_low_alert:.6g} and" in rules["GpuUnderusedAtPlannedLoad", None]["expr"]
    assert rules["GpuIdleOnCpuTools", None]["expr"].endswith(f"> {t.gpu.idle_on_cpu_alert:.6g}")
    assert t.gpu.utilization_low_alert < t.gpu.utilization
