"""Kubernetes manifests for a plan: one multi-document YAML that `kubectl apply -f` accepts as a whole.

- PriorityClass, Namespace, ResourceQuota and LimitRange for the inference engine and for each tool queue, carrying
  the optimizer's core and memory allocation (see `advisor.export.plan` for rounding and the memory rule).
- Per server group a ConfigMap in kube-system holding that group's KubeletConfiguration (static CPU manager,
  reserved CPUs, topology manager, taints) and its `--node-labels`, the way kubeadm distributes kubelet config.

Namespaces reach their nodes through the PodNodeSelector and PodTolerationRestriction admission plugins (namespace
annotations), so tool sandboxes need no per-pod node selector or toleration.
"""

from __future__ import annotations

import json

import yaml

from advisor.export.names import dns_label
from advisor.export.plan import MIB_PER_GIB, GroupPlan, Plan, QueuePlan
from models.errors import InputError

KUBELET_API = "kubelet.config.k8s.io/v1beta1"
NODE_SELECTOR_ANNOTATION = "scheduler.alpha.kubernetes.io/node-selector"
TOLERATIONS_ANNOTATION = "scheduler.alpha.kubernetes.io/defaultTolerations"
TIER_VALUES = {"gpu": "gpu", "cpu": "cpu-tool"}
"""Value of the tier label and taint per server role."""


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the embedded kubelet configs) as literal blocks, so their comments stay readable."""


def _str(dumper: yaml.SafeDumper, s: str):
    return dumper.represent_scalar("tag:yaml.org,2002:str", s, style="|" if "\n" in s else None)


_Dumper.add_representer(str, _str)


def _dump(obj: dict) -> str:
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=120)


def _comment(text: str) -> str:
    return "".join(f"# {line}".rstrip() + "\n" for line in text.splitlines())


def _mi(gb: float) -> str:
    return f"{int(gb * MIB_PER_GIB)}Mi"


def _cpuset(ids: list[int]) -> str:
    """Linux cpuset list syntax: 0-1,64-65."""
    ids = sorted(set(ids))
    out, start = [], None
    for i, x in enumerate(ids):
        if start is None:
            start = x
        if i + 1 == len(ids) or ids[i + 1] != x + 1:
            out.append(f"{start}-{x}" if x != start else f"{x}")
            start = None
    return ",".join(out)


class _Names:
    def __init__(self, plan: Plan):
        s = plan.settings
        self.p, self.d = s.prefix, s.label_domain
        self.tier_key = f"{self.d}/tier"
        self.group_key = f"{self.d}/group"

    def queue_ns(self, q: QueuePlan) -> str:
        return f"{self.p}-tool-{q.id}"

    def queue_label(self, q: QueuePlan) -> str:
        return f"q.{self.d}/{q.id}"

    @property
    def inference_ns(self) -> str:
        return f"{self.p}-inference"

    def group(self, g: GroupPlan) -> str:
        return dns_label(f"{self.p}-{g.id}")


def node_labels(plan: Plan, g: GroupPlan) -> dict[str, str]:
    n = _Names(plan)
    labels = {n.tier_key: TIER_VALUES[g.role], n.group_key: g.id}
    for q in plan.queues:
        if g.index in q.groups:
            labels[n.queue_label(q)] = "true"
    return labels


def _taint(plan: Plan, role: str) -> dict:
    return {"key": _Names(plan).tier_key, "value": TIER_VALUES[role], "effect": "NoSchedule"}


def _toleration(plan: Plan, role: str) -> dict:
    return {"key": _Names(plan).tier_key, "operator": "Equal", "value": TIER_VALUES[role], "effect": "NoSchedule"}


def _namespace(name: str, role: str, node_selector: str, roles: list[str], plan: Plan, extra: dict) -> dict:
    d = plan.settings.label_domain
    tolerations = [_toleration(plan, r) for r in roles]
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {f"{d}/role": role},
                         "annotations": {NODE_SELECTOR_ANNOTATION: node_selector,
                                         TOLERATIONS_ANNOTATION: json.dumps(tolerations), **extra}}}


def kubelet_config(plan: Plan, g: GroupPlan) -> str:
    """The KubeletConfiguration for one server group, as commented YAML text."""
    s = plan.settings
    mem_reserved = _mi(g.os_reserved_memory_gb)
    taint = _taint(plan, g.role)
    what = " ".join(f"{g.count} x {g.chassis} ({g.sockets} x {g.cpu}".split()) \
        + (" ".join(f", {g.gpus_per_server} x {g.gpu})".split()) if g.gpu else ")")
    lines = [
        f"# KubeletConfiguration for server group {g.id}: {what}",
        f"# {g.cores} physical cores ({g.sockets} socket(s) x {g.cores_per_socket}, {g.threads_per_core} thread(s) per core).",
        f"apiVersion: {KUBELET_API}",
        "kind: KubeletConfiguration",
    ]
    if g.role == "gpu":
        k = s.system_reserved_cores
        if g.orchestration_cores_whole + k > g.cores:
            raise InputError(f"server group {g.id}: {g.orchestration_cores_whole} orchestration + {k} reserved cores "
                             f"exceed its {g.cores} cores")
        # Linux numbers the first hardware thread of every core first and SMT siblings after (cpu c and c + cores).
        ids = [c + t * g.cores for t in range(g.threads_per_core) for c in range(k)]
        lines += [
            "# static: the inference engine pod (Guaranteed QoS: requests == limits, integer cpu) gets",
            f"# {g.orchestration_cores_whole} exclusive cores per server (optimizer: {g.orchestration_cores:.3f}, rounded up), so",
            "# tool sandboxes in the shared pool never slow tokenizing, scheduling and detokenizing for the GPUs.",
            "cpuManagerPolicy: static",
            "cpuManagerPolicyOptions:",
            "  # whole physical cores only: the model counts cores, and an SMT sibling shared with a sandbox is not one",
            '  full-pcpus-only: "true"',
            f"# {k} physical core(s) (all their hardware threads) for kubelet, container runtime and node agents. The",
            "# static policy needs a non-zero reservation; these CPUs stay in the shared pool, so tool cores are not lost.",
            "# CPU ids assume Linux's usual enumeration (SMT siblings after all cores): check with `lscpu -e`.",
            f'reservedSystemCPUs: "{_cpuset(ids)}"',
            f"# restricted: admit the engine only with the narrowest NUMA alignment of its cores and its {g.gpus_per_server}",
            "# GPUs (GPU-to-host traffic stays on the socket the GPUs hang off); pod scope aligns all its containers.",
            f"topologyManagerPolicy: {s.topology_manager_policy}",
            "topologyManagerScope: pod",
        ]
    else:
        lines += [
            "# none: tool sandboxes are Burstable and share every core; exclusive cores would strand idle cores",
            "# between tool calls, which the model's queue (all cores serve any call) does not do.",
            "cpuManagerPolicy: none",
            "# nothing to align on a CPU-only node (no devices)",
            "topologyManagerPolicy: none",
        ]
    lines += [
        f"# the model keeps {g.os_reserved_memory_gb:g} GB per server for OS, runtime and page cache (host_os_reserved_memory_gb);",
        f"# the other {g.memory_gb - g.os_reserved_memory_gb:g} GB is shared out by cores ({g.memory_per_core_gb:.2f} GB per core).",
        "systemReserved:",
        f"  memory: {mem_reserved}",
        "# only pods that tolerate this taint land here (the namespaces' default tolerations)",
        "registerWithTaints:",
        f"  - key: {taint['key']}",
        f"    value: {taint['value']}",
        f"    effect: {taint['effect']}",
    ]
    return "\n".join(lines) + "\n"


def render(plan: Plan) -> str:
    n = _Names(plan)
    s = plan.settings
    d = s.label_domain
    docs: list[tuple[str, dict]] = []
    roles_present = {g.role for g in plan.groups}

    gpu_groups = [g for g in plan.groups if g.role == "gpu"]
    if gpu_groups:
        docs.append((
            "The inference engine outranks every tool queue: an idle GPU costs more than a waiting tool call.",
            {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": n.inference_ns},
             "value": s.inference_priority, "globalDefault": False, "preemptionPolicy": "PreemptLowerPriority",
             "description": "rack-advisor: inference engine (GPU serving and its orchestration cores)"}))
    for q in plan.queues:
        docs.append((
            f"Tool queue {q.name!r}: equal priority to the other queues, no preemption; isolation comes from quotas.",
            {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": n.queue_ns(q)},
             "value": s.tool_queue_priority, "globalDefault": False, "preemptionPolicy": "Never",
             "description": f"rack-advisor: tool queue {q.name}"}))

    if gpu_groups:
        ns = n.inference_ns
        per_server_cpu = max(g.orchestration_cores_whole for g in gpu_groups)
        per_server_mem = max(g.orchestration_cores * g.memory_per_core_gb for g in gpu_groups)
        gpus: dict[str, int] = {}
        for g in gpu_groups:
            res = s.devices(g.gpu_vendor).resource
            gpus[res] = gpus.get(res, 0) + g.count * g.gpus_per_server
        docs.append((
            "Inference engines run on GPU servers only (PodNodeSelector) and tolerate their taint.",
            _namespace(ns, "inference", f"{n.tier_key}={TIER_VALUES['gpu']}", ["gpu"], plan,
                       {f"{d}/orchestration-cores-exact": f"{plan.inference_cores:.4f}",
                        f"{d}/gpus": str(plan.gpus)})))
        docs.append((
            f"Orchestration cores over all GPU servers: {plan.inference_cores:.3f} from the optimizer, "
            f"{plan.inference_cores_whole} as whole cores\n(each server's figure rounded up), and every GPU. Memory: "
            "the orchestration cores' per-core share of host memory.",
            {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": ns, "namespace": ns},
             "spec": {"hard": {"requests.cpu": str(plan.inference_cores_whole),
                               "limits.cpu": str(plan.inference_cores_whole),
                               "requests.memory": _mi(plan.inference_memory_gb),
                               "limits.memory": _mi(plan.inference_memory_gb),
                               **{f"requests.{r}": str(c) for r, c in gpus.items()}}}}))
        docs.append((
            "Defaults make an engine container Guaranteed (requests == limits, integer cpu): the static CPU manager\n"
            "then pins it to exclusive cores aligned with its GPUs. Engine cores per server by group: "
            + ", ".join(f"{g.id} {g.orchestration_cores_whole}" for g in gpu_groups) + ".",
            {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": ns, "namespace": ns},
             "spec": {"limits": [{"type": "Container",
                                  "default": {"cpu": str(per_server_cpu), "memory": _mi(per_server_mem)},
                                  "defaultRequest": {"cpu": str(per_server_cpu), "memory": _mi(per_server_mem)},
                                  "max": {"cpu": str(per_server_cpu), "memory": _mi(per_server_mem)}}]}}))

    for q in plan.queues:
        ns = n.queue_ns(q)
        roles = sorted({plan.groups[i].role for i in q.groups} & roles_present)
        th = next((t for t in plan.thresholds.queues if t.queue == q.name), None)
        extra = {f"{d}/queue": q.name, f"{d}/classes": json.dumps(q.classes, ensure_ascii=False),
                 f"{d}/cores-exact": f"{q.cores:.4f}", f"{d}/memory-gb-exact": f"{q.memory_gb:.3f}"}
        if th:
            extra[f"{d}/concurrent-calls"] = str(th.servers)
        if q.memory_in_use_gb is not None:
            extra[f"{d}/memory-in-use-gb"] = f"{q.memory_in_use_gb:.3f}"
        docs.append((
            f"Tool queue {q.name!r} (classes {', '.join(q.classes)}): its sandboxes land only on nodes that give it\n"
            "cores (PodNodeSelector on the queue label) and tolerate those nodes' taints.",
            _namespace(ns, "tool-queue", f"{n.queue_label(q)}=true", roles, plan, extra)))
        mem = {"requests.memory": _mi(q.memory_gb), "limits.memory": _mi(q.memory_gb)} if q.memory_gb > 0 else {}
        use = (f"; the evaluation predicts {q.memory_in_use_gb:,.0f} GB of live sandboxes at the operating point"
               if q.memory_in_use_gb is not None else "")
        docs.append((
            f"Cores: {q.cores:.3f} from the optimizer (queue_cores x servers), {q.cores_whole} as whole cores.\n"
            f"Memory: {q.memory_gb:,.1f} GB, the queue's per-core share of host memory (the model's sandbox allocation){use}.",
            {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": ns, "namespace": ns},
             "spec": {"hard": {"requests.cpu": str(q.cores_whole), "limits.cpu": str(q.cores_whole), **mem}}}))
        lim = {"cpu": str(q.max_parallelism_cores)}
        if q.sandbox_memory_gb_max > 0:
            lim["memory"] = _mi(q.sandbox_memory_gb_max)
        calls = f" admits the model's {th.servers} concurrent calls" if th else ""
        docs.append((
            f"A tool call holds at most {q.max_parallelism_cores} core(s) (the widest stage's parallelism); a sandbox "
            f"holds its class's sandbox_memory_gb\n(largest here {q.sandbox_memory_gb_max:g} GB). With calls "
            f"requesting the cores they hold, the cpu quota{calls}.",
            {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": ns, "namespace": ns},
             "spec": {"limits": [{"type": "Container", "default": dict(lim), "defaultRequest": dict(lim),
                                  "max": dict(lim)}]}}))

    for g in plan.groups:
        labels = node_labels(plan, g)
        flag = ",".join(f"{k}={v}" for k, v in labels.items())
        docs.append((
            f"Server group {g.id}: {g.count} node(s). Start each node's kubelet with --config=<the kubelet-config.yaml "
            f"below>\nand --node-labels={flag}",
            {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": f"{n.group(g)}-kubelet", "namespace": "kube-system",
                          "labels": {n.group_key: g.id, n.tier_key: TIER_VALUES[g.role]}},
             "data": {"kubelet-config.yaml": kubelet_config(plan, g), "node-labels": flag, "nodes": str(g.count)}}))

    head = _comment(
        f"rack-advisor export: Kubernetes manifests for configuration {plan.configuration!r}\n"
        f"workload {plan.workload}, rack {plan.rack}: {plan.throughput_tasks_per_hour:,.0f} tasks/h sustainable.\n"
        "Apply: kubectl apply -f this-file. Needs the PodNodeSelector and PodTolerationRestriction admission plugins\n"
        "(kube-apiserver --enable-admission-plugins=...,PodNodeSelector,PodTolerationRestriction) and the GPU\n"
        "vendor's device plugin. Sandboxes use priorityClassName = their namespace's name.")
    body = "---\n".join(_comment(c) + _dump(o) for c, o in docs)
    return head + "---\n" + body
