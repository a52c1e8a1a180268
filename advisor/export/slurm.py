"""Slurm configuration for a plan: a bundle of three files, each section introduced by a `# ---8<--- NAME` line.

- `slurm.conf` fragment (Include it from slurm.conf): NodeName per server group with its topology, memory, GPUs and
  CoreSpecCount = the cores reserved for inference orchestration; PartitionName per tool queue limited to the
  queue's cores per node (MaxCPUsPerNode).
- `gres.conf`: the GPU device files per server group.
- `qos.sh`: sacctmgr commands creating one QoS per tool queue whose GrpTRES caps the queue at its total cores and
  memory, the optimizer's allocation.

`split_bundle(text)` returns the files by name.
"""

from __future__ import annotations

from advisor.export.plan import MIB_PER_GIB, GroupPlan, Plan, QueuePlan

SECTION = "# ---8<--- "
FILES = ("slurm.conf", "gres.conf", "qos.sh")


def node_names(plan: Plan, g: GroupPlan) -> str:
    """Hostlist expression for the group's nodes, e.g. ra-g0-cpu1u-[001-015]."""
    width = max(3, len(str(g.count)))
    return f"{plan.settings.prefix}-{g.id}-[{1:0{width}d}-{g.count:0{width}d}]"


def partition_name(plan: Plan, q: QueuePlan, g: GroupPlan | None = None) -> str:
    return f"{plan.settings.prefix}-{q.id}" + (f"-{g.id}" if g else "")


def qos_name(plan: Plan, q: QueuePlan) -> str:
    return f"{plan.settings.prefix}-{q.id}"


def _mib(gb: float) -> int:
    return int(gb * MIB_PER_GIB)


def _one_line(s: str) -> str:
    return " ".join(str(s).split())


def partitions(plan: Plan, q: QueuePlan) -> list[tuple[str, list[GroupPlan], int]]:
    """(partition name, its groups, MaxCPUsPerNode). One partition when every node gives the queue the same CPUs;
    else one per group (Slurm's MaxCPUsPerNode is per partition), submitted to together with -p a,b."""
    groups = [plan.groups[i] for i in q.groups]
    cpus = {g.index: g.queue_cores_whole[q.name] * g.threads_per_core for g in groups}
    if len(set(cpus.values())) <= 1:
        return [(partition_name(plan, q), groups, next(iter(cpus.values()), 0))] if groups else []
    return [(partition_name(plan, q, g), [g], cpus[g.index]) for g in groups]


def _conf(plan: Plan) -> str:
    out = [
        f"# rack-advisor export: Slurm nodes and partitions for configuration {_one_line(repr(plan.configuration))}",
        f"# workload {_one_line(plan.workload)}, rack {_one_line(plan.rack)}: "
        f"{plan.throughput_tasks_per_hour:,.0f} tasks/h sustainable.",
        "# Include this file from slurm.conf, which must set: SelectType=select/cons_tres and",
        "# SelectTypeParameters=CR_Core_Memory (whole cores and memory are the plan's units), GresTypes=gpu, and",
        "# TaskPlugin=task/cgroup,task/affinity with ConstrainCores=yes in cgroup.conf, so CoreSpecCount and",
        "# MemSpecLimit hold. CPUs count hardware threads: MaxCPUsPerNode = queue cores x ThreadsPerCore.",
        "",
    ]
    for g in plan.groups:
        cpus = g.sockets * g.cores_per_socket * g.threads_per_core
        what = _one_line(f"{g.count} x {g.chassis}, {g.sockets} x {g.cpu}"
                         + (f", {g.gpus_per_server} x {g.gpu}" if g.gpu else ""))
        out.append(f"# server group {g.id}: {what}; RealMemory is the catalog's {g.memory_gb:g} GB: lower it to "
                   "`slurmd -C`'s figure if the kernel keeps some")
        out.append(f"# MemSpecLimit: the model's {g.os_reserved_memory_gb:g} GB OS reservation (host_os_reserved_memory_gb)")
        line = (f"NodeName={node_names(plan, g)} CPUs={cpus} Sockets={g.sockets} CoresPerSocket={g.cores_per_socket} "
                f"ThreadsPerCore={g.threads_per_core} RealMemory={_mib(g.memory_gb)} "
                f"MemSpecLimit={_mib(g.os_reserved_memory_gb)}")
        if g.role == "gpu":
            out.append(f"# CoreSpecCount: {g.orchestration_cores_whole} cores for inference orchestration (optimizer: "
                       f"{g.orchestration_cores:.3f}, rounded up). Jobs never get them; run the engine as a node")
            out.append("# service pinned to them (slurmd keeps specialized cores out of job cgroups); it owns the GPUs,"
                       " which tool jobs never request.")
            if g.orchestration_cores_whole > 0:
                line += f" CoreSpecCount={g.orchestration_cores_whole}"
            line += f" Gres=gpu:{g.gpus_per_server}"
        line += f" Feature={'gpu' if g.role == 'gpu' else 'cpu-tool'},{g.id} State=UNKNOWN"
        out += [line, ""]
    for q in plan.queues:
        parts = partitions(plan, q)
        if not parts:
            out += [f"# tool queue {_one_line(repr(q.name))}: no whole cores on any node; no partition", ""]
            continue
        out.append(f"# tool queue {_one_line(repr(q.name))} (classes {_one_line(', '.join(q.classes))}): "
                   f"{q.cores_whole} whole cores in all (optimizer: {q.cores:.3f}); QoS {qos_name(plan, q)} caps the total")
        if len(parts) > 1:
            out.append(f"# its nodes give it different core counts: submit with -p {','.join(p[0] for p in parts)}")
        for name, groups, cpus in parts:
            nodes = ",".join(node_names(plan, g) for g in groups)
            out.append(f"PartitionName={name} Nodes={nodes} MaxCPUsPerNode={cpus} QOS={qos_name(plan, q)} "
                       "OverSubscribe=NO Default=NO State=UP")
        out.append("")
    return "\n".join(out)


def _gres(plan: Plan) -> str:
    out = ["# gres.conf: GPU device files per server group (same directory as slurm.conf)"]
    for g in plan.groups:
        if g.role != "gpu":
            continue
        dev = plan.settings.devices(g.gpu_vendor)
        first, last = dev.first, dev.first + g.gpus_per_server - 1
        files = dev.device_glob.format(first=first, last=last) if last > first else \
            dev.device_glob.split("[", 1)[0] + str(first)
        out.append(f"# {_one_line(g.gpu)} ({_one_line(g.gpu_vendor)}): {dev.source}")
        out.append(f"NodeName={node_names(plan, g)} Name=gpu File={files}")
    return "\n".join(out) + "\n"


def _qos(plan: Plan) -> str:
    out = ["#!/bin/sh", "# One QoS per tool queue: GrpTRES caps the queue at the optimizer's cores (as CPUs: hardware",
           "# threads) and memory (MB), over all its partitions. Needs slurmdbd accounting "
           "(AccountingStorageEnforce=limits,qos).", "set -e"]
    for q in plan.queues:
        cpus = sum(plan.groups[i].count * plan.groups[i].queue_cores_whole[q.name] * plan.groups[i].threads_per_core
                   for i in q.groups)
        if not cpus:
            continue
        name = qos_name(plan, q)
        tres = f"cpu={cpus}" + (f",mem={_mib(q.memory_gb)}" if q.memory_gb > 0 else "")
        out.append(f"# tool queue {_one_line(repr(q.name))}: {q.cores_whole} cores, {q.memory_gb:,.1f} GB")
        out.append(f"sacctmgr -i add qos {name}")
        out.append(f"sacctmgr -i modify qos where name={name} set GrpTRES={tres} Flags=DenyOnLimit")
    return "\n".join(out) + "\n"


def render(plan: Plan) -> str:
    parts = {"slurm.conf": _conf(plan), "gres.conf": _gres(plan), "qos.sh": _qos(plan)}
    return "".join(f"{SECTION}{name}\n{text}" for name, text in parts.items())


def split_bundle(text: str) -> dict[str, str]:
    """The bundle's files by name."""
    files: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines(keepends=True):
        if line.startswith(SECTION):
            current = line[len(SECTION):].strip()
            files[current] = []
        elif current is None:
            raise ValueError("not a rack-advisor Slurm bundle: text before the first section line")
        else:
            files[current].append(line)
    return {k: "".join(v) for k, v in files.items()}
