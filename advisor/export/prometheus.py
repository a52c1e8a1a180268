"""Prometheus alerting rules for the thresholds the report derives (`advisor.operations`), one rule group.

Sources: node_exporter (node_load1, node_cpu_seconds_total), NVIDIA DCGM exporter (DCGM_FI_PROF_GR_ENGINE_ACTIVE),
cAdvisor via the kubelet (container_cpu_usage_seconds_total, container_cpu_cfs_*), and, where no standard exporter
exists, application metrics the agent platform must export (APP_METRICS). Node-level series must carry a `ra_group`
label naming the server group (the relabeling is shown in the file header).
"""

from __future__ import annotations

import re

import yaml

from advisor.export.names import DNS1123_LABEL
from advisor.export.plan import Plan, QueuePlan
from advisor.operations import WAIT_RESOLUTION_S

GROUP_LABEL = "ra_group"
"""Target label naming the server group on node_exporter and DCGM series."""
APP_METRICS = {
    "agent_tool_call_wait_seconds": "histogram, label queue: time a tool call waits for a core (from request to "
                                    "start on a core)",
    "agent_tool_calls_waiting": "gauge, label queue: tool calls waiting for a core now",
    "agent_sandbox_start_seconds": "histogram, label queue: time from sandbox request to sandbox ready",
    "agent_task_duration_seconds": "histogram: task completion time, start to final answer",
    "agent_tasks_started_total": "counter: tasks started",
    "agent_live_tasks": "gauge, label stage_resource (gpu|cpu|delay): live tasks by the kind of stage they are in",
}
"""Application metrics the rules need (no standard exporter measures these); `queue` carries the queue id."""


def _num(x: float) -> str:
    return f"{x:.6g}"


def _regex(values: list[str]) -> str:
    """Alternation of sanitized ids (DNS-1123 labels: no regex metacharacters, nothing to escape in PromQL)."""
    if not all(DNS1123_LABEL.match(v) for v in values):
        raise ValueError(f"not sanitized ids: {values}")
    return "|".join(values)


def _quote(s: str) -> str:
    """A PromQL string literal."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _meta_label(domain: str) -> str:
    return "__meta_kubernetes_node_label_" + re.sub(r"[^a-zA-Z0-9]", "_", f"{domain}/group")


def _rule(alert: str, expr: str, for_: str, labels: dict, summary: str, expected: str, basis: str,
          source: str) -> dict:
    return {"alert": alert, "expr": expr, "for": for_, "labels": {"severity": "warning", **labels},
            "annotations": {"summary": summary, "model_expected": expected, "model_basis": basis,
                            "metric_source": source}}


def _app(name: str) -> str:
    return f"application metric {name} ({APP_METRICS[name]}): the agent platform must export it"


def queue_rules(plan: Plan, q: QueuePlan) -> list[dict]:
    t = plan.thresholds
    th = next((x for x in t.queues if x.queue == q.name), None)
    if th is None or not q.groups:
        return []
    s = plan.settings
    win, for_ = s.rate_window, s.alert_for
    groups = [plan.groups[i] for i in q.groups]
    sel = f'{GROUP_LABEL}=~"{_regex([g.id for g in groups])}"'
    node_cores = sum(g.count * g.cores for g in groups)
    ns = f'namespace="{s.prefix}-tool-{q.id}", container!=""'
    qsel = f"queue={_quote(q.id)}"
    phi = _num(t.tail_quantile)
    lbl = {"queue": q.id}
    name = q.name
    shared_note = "" if all(set(g.queue_cores_whole) == {q.name} and g.role == "cpu" for g in groups) else \
        " (these nodes also run other queues or the inference engine, which add to the measured value)"
    return [
        _rule("ToolQueueRunQueueDepthHigh",
              f"sum(node_load1{{{sel}}}) / {node_cores} > {_num(th.run_queue_depth_per_core_alert)}", for_, lbl,
              f"Tool queue {name!r}: runnable tasks per physical core above the model's figure at alert load",
              f"{th.run_queue_depth_per_core:.3f} per core at the operating point",
              f"busy cores {th.utilization:.1%} of {th.cores:,.1f} plus waiting calls x {th.mean_parallelism:.2f} "
              f"cores (M/M/{th.servers}); threshold = the same at {th.utilization_alert:.1%} load; {node_cores} "
              f"physical cores on the queue's nodes{shared_note}",
              "node_exporter node_load1 (1-minute load average: runnable + uninterruptible tasks)"),
        _rule("ToolQueueCpuUtilizationHigh",
              f"sum(rate(container_cpu_usage_seconds_total{{{ns}}}[{win}])) / {q.cores_whole} "
              f"> {_num(th.utilization_alert)}", for_, lbl,
              f"Tool queue {name!r}: CPU utilization above the alert level",
              f"{th.utilization:.1%} of {q.cores_whole} cores",
              f"pipeline model at the operating point; alert at value + {t.headroom:g} x (1 - value)",
              "cAdvisor container_cpu_usage_seconds_total, the queue's namespace"),
        _rule("ToolQueueCpuThrottled",
              f"sum(rate(container_cpu_cfs_throttled_periods_total{{{ns}}}[{win}])) / "
              f"sum(rate(container_cpu_cfs_periods_total{{{ns}}}[{win}])) > {_num(th.iowait_share_alert)}",
              for_, lbl, f"Tool queue {name!r}: sandboxes throttled by their CPU limits",
              "about 0: a call runs on the cores it holds",
              f"throttled periods stretch tool calls like lost cores; alert when they take {t.headroom:g} of the "
              f"{1 - th.utilization:.1%} headroom the queue has",
              "cAdvisor container_cpu_cfs_throttled_periods_total / container_cpu_cfs_periods_total"),
        _rule("ToolQueueIowaitHigh",
              f'sum(rate(node_cpu_seconds_total{{mode="iowait", {sel}}}[{win}])) / '
              f'count(node_cpu_seconds_total{{mode="idle", {sel}}}) > {_num(th.iowait_share_alert)}', for_, lbl,
              f"Tool queue {name!r}: CPU time lost to I/O wait",
              "about 0 (tools modelled CPU-bound)",
              f"I/O wait eats the {1 - th.utilization:.1%} headroom the queue has at {th.utilization:.1%} "
              f"utilization; alert when it takes {t.headroom:g} of it",
              'node_exporter node_cpu_seconds_total{mode="iowait"}'),
        _rule("ToolCallWaitHigh",
              f"histogram_quantile({phi}, sum by (le) (rate(agent_tool_call_wait_seconds_bucket{{{qsel}}}[{win}]))) "
              f"> {_num(th.wait_alert_s)}", for_, lbl,
              f"Tool queue {name!r}: {t.tail_label} wait for a core above "
              + ("the workload's tool-wait target" if th.wait_target_s else "the model's figure at alert load"),
              f"{t.tail_label} {th.wait_tail_s:.4g} s at the operating point",
              f"M/M/c wait quantile (x {th.wait_scale:.2f} for call-time variability): c={th.servers}, "
              f"{th.calls_per_s:.3f} calls/s, mean call {th.mean_call_s:.2f} s; threshold "
              + (f"= the tool-wait target {th.wait_target_s:g} s" if th.wait_target_s else
                 f"at {th.calls_per_s_alert:.3f} calls/s ({th.utilization_alert:.1%} load)")
              + f", at least {WAIT_RESOLUTION_S * 1000:g} ms above the expected wait",
              _app("agent_tool_call_wait_seconds")),
        _rule("ToolCallsWaitingHigh",
              f"max_over_time(agent_tool_calls_waiting{{{qsel}}}[{win}]) > {th.waiting_calls_alert}", for_, lbl,
              f"Tool queue {name!r}: more calls waiting for a core than the model's {t.tail_label} at the planned "
              "load",
              f"{th.waiting_calls_mean:.3g} calls waiting on average at the operating point",
              f"M/M/c queue length: P(waiting > k) = C rho^(k+1) with c={th.servers}, {th.calls_per_s:.3f} calls/s, "
              f"mean call {th.mean_call_s:.2f} s; threshold = its {t.tail_label} ({th.waiting_calls_alert}), above the "
              "mean",
              _app("agent_tool_calls_waiting")),
        _rule("SandboxStartSlow",
              f"histogram_quantile({phi}, sum by (le) (rate(agent_sandbox_start_seconds_bucket{{{qsel}}}[{win}]))) "
              f"> {_num(1 + t.headroom)} * histogram_quantile({phi}, sum by (le) (rate("
              f"agent_sandbox_start_seconds_bucket{{{qsel}}}[{s.baseline_window}]))) + {_num(th.wait_alert_s)}",
              for_, lbl,
              f"Tool queue {name!r}: sandbox start {t.tail_label} grew beyond its baseline's headroom plus the core "
              "wait alert",
              f"the trailing {s.baseline_window} {t.tail_label} (the pilot baseline)",
              f"the model has no sandbox start cost; a start waits for a core like a tool call, so alert when it "
              f"exceeds the baseline x (1 + headroom {t.headroom:g}) plus the {t.tail_label} core-wait alert "
              f"({th.wait_alert_s:.4g} s)",
              _app("agent_sandbox_start_seconds")),
    ]


def gpu_rules(plan: Plan) -> list[dict]:
    t = plan.thresholds
    g = t.gpu
    gpu_groups = [x for x in plan.groups if x.role == "gpu"]
    if g is None or not gpu_groups:
        return []
    s = plan.settings
    sel = f'{GROUP_LABEL}=~"{_regex([x.id for x in gpu_groups])}"'
    active = f"avg(DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{sel}}})"
    src = ("DCGM exporter DCGM_FI_PROF_GR_ENGINE_ACTIVE (graphics engine active ratio, a proxy for serving capacity "
           "in use; DCGM_FI_DEV_GPU_UTIL / 100 where profiling metrics are off)")
    return [
        _rule("GpuServingNearSaturation", f"{active} > {_num(g.utilization_alert)}", s.alert_for, {},
              "GPUs busier than the alert level: tasks will queue for the model",
              f"{g.utilization:.1%} at the operating point ({t.operating_point})",
              f"pipeline model; alert at value + {t.headroom:g} x (1 - value)", src),
        _rule("GpuUnderusedAtPlannedLoad",
              f"{active} < {_num(g.utilization_low_alert)} and sum(rate(agent_tasks_started_total[{s.rate_window}])) "
              f"* 3600 >= {_num(t.arrival_rate_tasks_per_hour)}", s.alert_for, {},
              "GPUs well below the model's utilization while arrivals are at plan: something upstream starves them",
              f"{g.utilization:.1%} at {t.arrival_rate_tasks_per_hour:,.0f} tasks/h",
              f"pipeline model at the operating point; alert at value - {t.headroom:g} x (1 - value), the high "
              "alert's band mirrored", src + "; " + _app("agent_tasks_started_total")),
        _rule("GpuIdleOnCpuTools",
              f'(1 - {active}) * sum(agent_live_tasks{{stage_resource="cpu"}}) / '
              f'sum(agent_live_tasks{{stage_resource=~"cpu|delay"}}) > {_num(g.idle_on_cpu_alert)}',
              s.alert_for, {}, "GPU capacity idle because tasks wait on CPU tools",
              f"{g.idle_on_cpu_fraction:.1%} of serving capacity",
              "idle capacity at the operating point (1 - utilization) split by the share of non-GPU time tasks spend "
              f"in tool stages (as model gpu_idle_on_cpu_fraction); alert at value + {t.headroom:g} x (1 - value)",
              src + "; " + _app("agent_live_tasks")),
    ]


def task_rules(plan: Plan) -> list[dict]:
    t = plan.thresholds
    tt = t.task_time
    if tt is None or tt.alert_s is None:
        return []
    basis = "the workload's SLO target" if tt.alert_basis == "slo" else "the model's p99 task time"
    return [_rule(
        "TaskTimeTailHigh",
        f"histogram_quantile({_num(t.tail_quantile)}, sum by (le) (rate(agent_task_duration_seconds_bucket"
        f"[{plan.settings.rate_window}]))) > {_num(tt.alert_s)}", plan.settings.alert_for, {},
        f"Task completion {t.tail_label} above {basis}", f"{t.tail_label} {tt.expected_s:,.0f} s",
        f"lognormal mixture fit of per-class task-time mean and variance; threshold = {basis}",
        _app("agent_task_duration_seconds"))]


def render(plan: Plan) -> str:
    rules = [r for q in plan.queues for r in queue_rules(plan, q)] + gpu_rules(plan) + task_rules(plan)
    doc = {"groups": [{"name": f"{plan.settings.prefix}-rack-advisor", "rules": rules}]}
    meta = _meta_label(plan.settings.label_domain)
    head = [
        f"rack-advisor export: Prometheus alerting rules for configuration {plan.configuration!r}",
        f"workload {plan.workload}, rack {plan.rack}: thresholds sit {plan.thresholds.headroom:g} of the way from the",
        f"model's value at the operating point ({plan.thresholds.operating_point}) to the limit.",
        "Check: promtool check rules this-file. Node-level series need the server group as label "
        f"{GROUP_LABEL}, e.g. for node_exporter",
        "on Kubernetes nodes labelled by the k8s export:",
        "  kubernetes_sd_configs: [{role: node}]",
        "  relabel_configs:",
        "    - {source_labels: [__address__], regex: '(.*):10250', replacement: '${1}:9100', target_label: __address__}",
        f"    - {{source_labels: [{meta}], target_label: {GROUP_LABEL}}}",
        "(same relabeling for the DCGM exporter on :9400; on Slurm clusters set the label in file_sd targets).",
        "Application metrics the agent platform must export (queue label = the queue id used below):",
        *[f"  {k}: {v}" for k, v in APP_METRICS.items()],
    ]
    return "".join(f"# {line}\n" for line in head) + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True,
                                                                      width=120)
