"""Brownfield racks and migration plans.

`--existing CONFIG` names the servers a user owns (a configuration as `advisor optimize --save-config` writes it).
`owned_servers` turns it into the optimizer's fixed-server constraint group (advisor/optimizer/formulation.py,
`define_fixed_servers`): every owned server stays, or with `allow_removal` may go at its salvage value
(`CostAssumptions.salvage_fraction`), and the optimizer chooses what to add within the budgets. Only the hardware is
fixed: how the owned servers' cores are split between the serving engine and the tool queues is re-optimized.

`plan_migration` orders the way from the owned configuration to the recommended one: re-split the cores you own
(reserve host cores for the serving engine, split or merge tool queues), then the hardware changes by role (a CPU
tier, GPU servers; a removal and an addition of one role together are a swap), in an order whose every intermediate
configuration fits the rack budgets. Each step's tasks/h is the evaluator's figure for that step's hardware with its
best software split (an optimization with exactly that hardware); its cost comes from catalog prices."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any, Literal

from pydantic import Field

from advisor.optimizer.formulation import FixedServers
from advisor.optimizer.options import ServerOption, enumerate_options
from advisor.optimizer.settings import OptimizerSettings
from models.base import Frozen
from models.errors import InputError
from models.catalog import Catalog
from models.config import SHARED_QUEUE, Configuration, ServerGroup
from models.hardware import Rack
from models.pipeline import Evaluation, evaluate
from models.tco import server_price
from models.workload import Workload

Action = Literal["as_is", "reconfigure", "remove", "add_cpu_tier", "add_gpu_servers", "swap_cpu", "swap_gpu"]
KEEP_GAIN = 1e-6
"""A software-only step is listed when it gains at least this fraction of the owned configuration's tasks/h."""


class ServerDelta(Frozen):
    """Servers a step adds or removes."""

    chassis: str
    cpu: str
    gpu: str | None
    gpus_per_server: int
    count: int
    rack: int
    price_usd_each: float | None
    """Catalog price (chassis + CPUs + GPUs + host memory); None where a part has no price."""


class MetricCheck(Frozen):
    """A figure to measure after a step, against what the model expects there, before taking the next step."""

    metric: str
    expected: float | None
    unit: str
    why: str


class MigrationStep(Frozen):
    step: int
    """0: the owned configuration as it runs today."""
    action: Action
    title: str
    changes: list[str]
    """What changes, in a planner's words."""
    added: list[ServerDelta] = Field(default_factory=list)
    removed: list[ServerDelta] = Field(default_factory=list)
    tasks_per_hour: float
    """The evaluator's sustainable throughput of this step's configuration."""
    gain_tasks_per_hour: float
    """Over the step before."""
    cost_usd: float | None
    """Catalog price of the servers added less the salvage value of those removed; None where a price is unknown."""
    bottleneck: str
    power_w: float
    space_u: int
    checks: list[MetricCheck]
    """Metrics to check before the next step."""
    configuration: dict
    """This step's configuration (feed to `advisor evaluate`)."""


class Migration(Frozen):
    existing_tasks_per_hour: float
    recommended_tasks_per_hour: float
    total_cost_usd: float | None
    """Sum of the steps' costs (None where a price is unknown)."""
    salvage_fraction: float
    steps: list[MigrationStep]
    notes: list[str] = Field(default_factory=list)


class NotACandidate(InputError):
    """An owned server the layout's candidates cannot hold (compare reports that layout infeasible in group
    fixed_servers)."""


def option_key(g: ServerGroup) -> str:
    """The optimizer's option key of a server group (advisor/optimizer/options.py)."""
    return f"{g.chassis}|{g.cpu}|{g.gpu or '-'}|{g.gpus_per_server}"


def owned_counts(cfg: Configuration) -> dict[tuple[int, str], int]:
    out: dict[tuple[int, str], int] = defaultdict(int)
    for g in cfg.servers:
        out[g.rack, option_key(g)] += g.count
    return dict(out)


def check_existing(existing: Configuration, workload: Workload, rack: Rack, racks: int, catalog: Catalog,
                   settings: OptimizerSettings) -> tuple[Configuration, Evaluation]:
    """The owned configuration over the requested row, evaluated; ValueError (naming the field and the numbers)
    where it does not fit the request."""
    if existing.racks > racks:
        raise InputError(f"existing configuration {existing.name!r} has {existing.racks} racks, the request "
                         f"{racks}: ask for at least {existing.racks} racks", loc=("body", "existing", "racks"))
    cfg = existing.model_copy(update={"racks": racks})
    try:
        ev = evaluate(cfg, workload, rack, catalog, settings.assumptions)
    except ValueError as e:  # an unknown id or a queue the workload does not have
        raise InputError(f"existing configuration {existing.name!r}: {e}", loc=("body", "existing")) from None
    over = [f"rack {r.rack}: {', '.join(r.exceeded)}" for r in ev.racks if r.exceeded]
    if over:
        raise InputError(f"existing configuration {existing.name!r} exceeds the budgets of rack profile {rack.id} "
                         f"({'; '.join(over)}): the servers you own must fit the rack you optimize",
                         loc=("body", "existing", "servers"))
    return cfg, ev


def owned_servers(existing: Configuration, options: list[ServerOption], servings: dict, catalog: Catalog,
                  workload: Workload, rack: Rack, layout: str, settings: OptimizerSettings, allow_removal: bool,
                  software_only: bool) -> tuple[list[ServerOption], dict, FixedServers]:
    """The candidates with every owned server among them (whatever the SKU filters and the pruning of dominated
    servers left out), and the fixed-server constraint data. ValueError for an owned server the layout cannot
    hold."""
    counts = owned_counts(existing)
    keys = {k for _, k in counts}
    have = {o.key for o in options}
    if keys - have:
        s = settings
        every, all_servings = enumerate_options(
            catalog, workload, rack, layout, s.layout_a_orchestration_cores_per_gpu,
            s.assumptions.host_os_reserved_memory_gb, s.assumptions.tensor_parallel_domain_gpus, prune=False,
            costs=s.assumptions.costs)
        by_key = {o.key: o for o in every}
        for i, g in enumerate(existing.servers):
            k = option_key(g)
            if k in have:
                continue
            if k not in by_key:
                why = {"a": "layout a puts only GPU servers with their chassis's default CPU in a rack",
                       "b": "layout b has no CPU-only tool nodes"}.get(layout, "it does not fit an empty rack of "
                                                                            "this profile or serve the workload")
                raise NotACandidate(f"existing configuration servers[{i}] ({g.chassis}, {g.cpu}, "
                                    f"{g.gpus_per_server} x {g.gpu or 'no GPU'}) is not a candidate server of "
                                    f"layout {layout}: {why}", loc=("body", "existing", "servers", i))
            options = [*options, by_key[k]]
            have.add(k)
            sk = by_key[k].serving_key
            if sk is not None and sk not in servings:
                servings = {**servings, sk: all_servings[sk]}
    if software_only:
        options = [o for o in options if o.key in keys]
    fixed = FixedServers(counts=counts, allow_removal=allow_removal,
                         salvage_fraction=settings.assumptions.costs.salvage_fraction, exact=software_only)
    return options, servings, fixed


def with_engine_floor(existing: Configuration, options: list[ServerOption]) -> Configuration:
    """The owned configuration with every GPU server's engine reservation raised to its serving engines' host-core
    floor where it is below (the evaluator only warns there; the optimizer never goes below the floor), tool-queue
    cores scaled down to the cores left. The baseline an answer must not fall below."""
    prof = {o.key: o.profile for o in options}
    groups = []
    for g in existing.servers:
        pr = prof.get(option_key(g))
        if pr is None or not g.gpu or pr.engine_min_cores <= g.orchestration_cores_per_gpu * g.gpus_per_server:
            groups.append(g)
            continue
        orch = pr.engine_min_cores / g.gpus_per_server
        qc = g.queue_cores
        left = pr.cores - pr.engine_min_cores
        if qc and sum(qc.values()) > left:
            qc = {k: v * left / sum(qc.values()) for k, v in qc.items()}
        groups.append(g.model_copy(update={"orchestration_cores_per_gpu": orch, "queue_cores": qc}))
    return existing.model_copy(update={"servers": groups})


# ------------------------------------------------------------------------------------------------------ the plan

def _price(g: ServerGroup, catalog: Catalog, settings: OptimizerSettings) -> float | None:
    price, _ = server_price(catalog.chassis[g.chassis], catalog.cpus[g.cpu],
                            catalog.gpus[g.gpu] if g.gpu else None, g.gpus_per_server, settings.assumptions.costs)
    return price


def _deltas(a: dict[tuple[int, str], int], b: dict[tuple[int, str], int], proto: dict[str, ServerGroup],
            catalog: Catalog, settings: OptimizerSettings) -> list[ServerDelta]:
    """Servers in b beyond a."""
    out = []
    for (r, k) in sorted(set(b)):
        extra = b[r, k] - a.get((r, k), 0)
        if extra > 0:
            g = proto[k]
            out.append(ServerDelta(chassis=g.chassis, cpu=g.cpu, gpu=g.gpu, gpus_per_server=g.gpus_per_server,
                                   count=extra, rack=r, price_usd_each=_price(g, catalog, settings)))
    return out


def _hardware(counts: dict[tuple[int, str], int], proto: dict[str, ServerGroup], base: Configuration
              ) -> Configuration:
    groups = [ServerGroup(chassis=proto[k].chassis, cpu=proto[k].cpu, gpu=proto[k].gpu,
                          gpus_per_server=proto[k].gpus_per_server, count=c, rack=r)
              for (r, k), c in sorted(counts.items()) if c > 0]
    return base.model_copy(update={"servers": groups, "queues": None, "name": "step"})


def _fits(counts, proto, base: Configuration, workload, rack, catalog, settings) -> bool:
    if not any(counts.values()):
        return False
    ev = evaluate(_hardware(counts, proto, base), workload, rack, catalog, settings.assumptions)
    return ev.within_budgets


def _describe(d: ServerDelta) -> str:
    what = f"{d.gpus_per_server} x {d.gpu}" if d.gpu else "CPU-only"
    price = f", {d.price_usd_each:,.0f} USD each" if d.price_usd_each is not None else ", no catalog price"
    return f"{d.count} x {d.chassis} ({d.cpu}, {what}) in rack {d.rack}{price}"


def _software_changes(before: Configuration, after: Configuration, profiles: dict) -> list[str]:
    """What re-splitting the owned servers' cores changes: engine cores per GPU and the tool queues."""
    out = []
    orch_b = {(g.rack, option_key(g)): g.orchestration_cores_per_gpu for g in before.servers if g.gpu}
    for g in after.servers:
        k = (g.rack, option_key(g))
        if g.gpu and k in orch_b and abs(orch_b[k] - g.orchestration_cores_per_gpu) > 1e-6:
            out.append(f"reserve {g.orchestration_cores_per_gpu:.2f} host cores per GPU for the serving engine on "
                       f"{g.chassis} ({g.gpus_per_server} x {g.gpu}) in rack {g.rack} (now "
                       f"{orch_b[k]:.2f})")

    def part(c: Configuration) -> list[list[str]]:  # no queues or one queue: one shared queue
        return sorted(sorted(q.classes) for q in c.queues) if c.queues and len(c.queues) > 1 else [[SHARED_QUEUE]]
    if part(before) != part(after):
        names = ["+".join(q) for q in part(after)]
        verb = "split the tool queue into" if len(names) > len(part(before)) else "run the tool queues as"
        out.append(f"{verb} {len(names)} queue(s): {', '.join(names)}")
    for role, label in (("gpu", "GPU hosts"), ("cpu", "CPU-only nodes")):
        b, a = _tool_cores(before, role, profiles), _tool_cores(after, role, profiles)
        if abs(a - b) >= 1.0:
            out.append(f"tool-queue cores on {label}: {b:,.0f} -> {a:,.0f}")
    return out


def _tool_cores(cfg: Configuration, role: str, profiles: dict) -> float:
    """Cores the tool queues get on servers of one role (queue_cores omitted: every core not reserved)."""
    tot = 0.0
    for g in cfg.servers:
        if (g.gpu is not None) != (role == "gpu"):
            continue
        if g.queue_cores is not None:
            tot += g.count * sum(g.queue_cores.values())
        elif option_key(g) in profiles:
            tot += g.count * (profiles[option_key(g)].cores - g.orchestration_cores_per_gpu * g.gpus_per_server)
    return tot


def _checks(action: Action, ev: Evaluation, workload: Workload) -> list[MetricCheck]:
    """What to measure after a step, with the model's expected value there."""
    out = [MetricCheck(metric="sustained throughput", expected=ev.throughput_tasks_per_hour, unit="tasks/h",
                       why=f"the step's capacity; the model's bottleneck here is {ev.bottleneck}")]
    if ev.gpus:
        out.append(MetricCheck(metric="GPU serving capacity idle at saturation", expected=ev.gpu_idle_fraction,
                               unit="fraction", why="GPU time lost to tool, delay and I/O stages; it should fall "
                                                    "as tool work moves off the GPU hosts"))
        out.append(MetricCheck(metric="GPU idle waiting on CPU tools", expected=ev.gpu_idle_on_cpu_fraction,
                               unit="fraction", why="the part a CPU tier or more tool cores removes"))
    if action in ("reconfigure", "add_cpu_tier", "swap_cpu", "remove"):
        for q in ev.queues:
            out.append(MetricCheck(metric=f"tool queue {q.name}: core utilization", expected=q.utilization,
                                   unit="fraction", why=f"{q.cores:,.0f} cores at the operating point "
                                                        f"({ev.operating_point})"))
            out.append(MetricCheck(metric=f"tool queue {q.name}: mean wait per call", expected=q.wait_mean_s,
                                   unit="s", why="queueing before a tool call starts"))
    if workload.slo is not None and ev.p95_task_seconds is not None:
        out.append(MetricCheck(metric="task time p95", expected=ev.p95_task_seconds, unit="s",
                               why=f"at the operating point ({ev.operating_point}); the workload's targets must "
                                   "hold before the next step adds load"))
    out.append(MetricCheck(metric="rack power draw", expected=ev.power_w, unit="W",
                           why="planning power of the step's servers against the rack budget"))
    return out


def plan_migration(existing: Configuration, existing_ev: Evaluation, baseline_ev: Evaluation, result: Any,
                   workload: Workload, rack: Rack, catalog: Catalog, settings: OptimizerSettings,
                   options: list[ServerOption], software_split: Callable[[Configuration], Any]) -> Migration:
    """Ordered steps from the owned configuration (`existing_ev` as configured, `baseline_ev` with the serving
    engines' core floor reserved) to the recommended one (`result`, an OptimizeResult). `software_split(hw)` is
    the optimizer's answer for exactly the hardware `hw` (advisor/optimizer/optimize.py passes it in)."""

    final = Configuration.model_validate(result.configuration)
    own, fin = owned_counts(existing), owned_counts(final)
    proto = {option_key(g): g for g in [*existing.servers, *final.servers]}
    salvage = settings.assumptions.costs.salvage_fraction
    profiles = {o.key: o.profile for o in options}
    notes: list[str] = []
    starved = baseline_ev is not existing_ev
    if starved:
        notes.append(f"as configured, the owned GPU servers reserve fewer host cores than their serving engines' "
                     f"floor; the model's {existing_ev.throughput_tasks_per_hour:,.0f} tasks/h for them assumes the "
                     f"engines keep up (with the floor reserved: {baseline_ev.throughput_tasks_per_hour:,.0f})")

    def removed_of(role: str) -> dict:
        return {k: v for k, v in own.items() if ("|-|" in k[1]) == (role == "cpu") and fin.get(k, 0) < v}

    def added_of(role: str) -> dict:
        return {k: v for k, v in fin.items() if ("|-|" in k[1]) == (role == "cpu") and own.get(k, 0) < v}

    # hardware change units: per role, removals and additions together (a swap when both)
    units = [role for role in ("cpu", "gpu") if removed_of(role) or added_of(role)]

    def apply(counts: dict, role: str) -> dict:
        out = dict(counts)
        for k, v in removed_of(role).items():
            out[k] = fin.get(k, 0)
        for k, v in added_of(role).items():
            out[k] = v
        return {k: v for k, v in out.items() if v > 0}

    sequence: list[tuple[Action, dict]] = []
    state = dict(own)
    order = None
    for cand in (units, units[::-1]):
        cur, ok = dict(own), True
        for role in cand[:-1]:
            cur = apply(cur, role)
            ok = ok and _fits(cur, proto, existing, workload, rack, catalog, settings)
        if ok:
            order = cand
            break
    if order is None:  # every removal first (it always fits: the owned servers do), then the additions
        gone = {k: min(v, fin.get(k, 0)) for k, v in own.items()}
        sequence.append(("remove", {k: v for k, v in gone.items() if v > 0}))
        state = sequence[-1][1]
        order = units
        notes.append("no role's change fits next to the other role's owned servers: the removals come first")
    removed_first = bool(sequence)
    for role in order:
        rm, ad = ({} if removed_first else removed_of(role)), added_of(role)
        if not rm and not ad:
            continue
        state = apply(state, role)
        action: Action = (f"swap_{role}" if rm and ad else  # type: ignore[assignment]
                          ("add_cpu_tier" if role == "cpu" else "add_gpu_servers") if ad else "remove")
        sequence.append((action, dict(state)))

    steps: list[MigrationStep] = []
    ev0 = existing_ev
    steps.append(MigrationStep(step=0, action="as_is", title="the servers you own, as configured today",
                               changes=[], tasks_per_hour=ev0.throughput_tasks_per_hour, gain_tasks_per_hour=0.0,
                               cost_usd=0.0, bottleneck=ev0.bottleneck, power_w=ev0.power_w, space_u=ev0.space_u,
                               checks=_checks("as_is", ev0, workload),
                               configuration=existing.model_dump(mode="json", exclude_none=True)))
    prev_cfg, prev_counts, prev_x = existing, own, ev0.throughput_tasks_per_hour

    def best_software(counts: dict) -> tuple[Configuration, Evaluation] | None:
        """The hardware `counts` with its best software split (the last step is the answer itself)."""
        if counts == fin:
            return final, result.evaluation
        try:
            res = software_split(_hardware(counts, proto, existing))
        except ValueError:
            return None
        if not res.configuration or res.evaluation is None:
            return None
        return Configuration.model_validate(res.configuration), res.evaluation

    # step 1: the owned servers' cores re-split (reserve engine cores, split or merge tool queues)
    soft = best_software(own)
    base_x = baseline_ev.throughput_tasks_per_hour
    if soft is not None and (soft[1].throughput_tasks_per_hour > base_x * (1 + KEEP_GAIN) or starved):
        cfg, ev = soft
        steps.append(MigrationStep(
            step=1, action="reconfigure", title="re-split the cores you own (no purchase)",
            changes=_software_changes(existing, cfg, profiles) or ["re-split the owned servers' cores"],
            tasks_per_hour=ev.throughput_tasks_per_hour, gain_tasks_per_hour=ev.throughput_tasks_per_hour - prev_x,
            cost_usd=0.0, bottleneck=ev.bottleneck, power_w=ev.power_w, space_u=ev.space_u,
            checks=_checks("reconfigure", ev, workload), configuration=cfg.model_dump(mode="json", exclude_none=True)))
        prev_cfg, prev_x = cfg, ev.throughput_tasks_per_hour
    titles = {"remove": "remove servers", "add_cpu_tier": "add a CPU tier for the tool queues",
              "add_gpu_servers": "add GPU servers", "swap_cpu": "swap CPU-only servers",
              "swap_gpu": "swap GPU servers"}
    for action, counts in sequence:
        got = best_software(counts)
        if got is None:
            notes.append(f"step {titles[action]}: no configuration of that hardware gives throughput; it is "
                         "listed without a figure")
            continue
        cfg, ev = got
        added = _deltas(prev_counts, counts, proto, catalog, settings)
        removed = _deltas(counts, prev_counts, proto, catalog, settings)
        spend = [d.price_usd_each for d in added] + [d.price_usd_each for d in removed]
        cost = (None if any(p is None for p in spend) else
                sum(d.price_usd_each * d.count for d in added) - salvage * sum(d.price_usd_each * d.count
                                                                              for d in removed))
        changes = ([f"remove {_describe(d)}" for d in removed] + [f"add {_describe(d)}" for d in added]
                   + _software_changes(prev_cfg, cfg, profiles))
        steps.append(MigrationStep(
            step=len(steps), action=action, title=titles[action], changes=changes, added=added, removed=removed,
            tasks_per_hour=ev.throughput_tasks_per_hour, gain_tasks_per_hour=ev.throughput_tasks_per_hour - prev_x,
            cost_usd=cost, bottleneck=ev.bottleneck, power_w=ev.power_w, space_u=ev.space_u,
            checks=_checks(action, ev, workload), configuration=cfg.model_dump(mode="json", exclude_none=True)))
        prev_cfg, prev_counts, prev_x = cfg, counts, ev.throughput_tasks_per_hour
    costs = [s.cost_usd for s in steps]
    total = None if any(c is None for c in costs) else sum(costs)  # type: ignore[arg-type]
    if removed_of("cpu") or removed_of("gpu"):
        notes.append(f"removed servers return {salvage:.0%} of their catalog price (salvage_fraction)")
    return Migration(existing_tasks_per_hour=ev0.throughput_tasks_per_hour,
                     recommended_tasks_per_hour=result.throughput_tasks_per_hour, total_cost_usd=total,
                     salvage_fraction=salvage, steps=steps, notes=notes)
