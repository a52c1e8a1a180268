"""Local-search certificate of an optimizer answer: evaluate its neighbours with the closed-form evaluator.

Neighbours of a configuration (docs/model.md section 9.5, "Certificate"):
- one server more or fewer in a group;
- one server of a group swapped for one of another candidate option in the same rack, and one server of any
  candidate option added (CPU-only nodes included; its cores go to each tool queue in turn);
- a whole group's CPU or GPU SKU swapped for another candidate on the same chassis;
- cores moved between orchestration and each tool queue, and between tool queues (1 core and 0.1 core per server).

A neighbour must be a candidate of the request (layout, SKU filters, capital budget), keep the serving engines'
host-core floor on every GPU server and fit every rack budget.
For throughput objectives it beats the answer when the evaluator gives it more than `certificate_min_gain`
(relative) more sustainable throughput; for cost objectives when it still delivers what is required and costs (in
the objective's terms) that much less. The optimizer adopts a better neighbour and searches again from it (at most
`certificate_steps` times) and lowers the status: the MILP's answer was not the optimum.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterator

from advisor.optimizer.options import ServerOption
from models.base import Frozen
from models.config import Configuration, ServerGroup
from models.hardware import Rack
from models.performance import GpuServing, cpu_call_seconds, stage_gpu_latency_s
from models.pipeline import Evaluation
from models.workload import CpuStage, DelayStage, GpuStage, Workload

HOUR_S = 3600.0

CORE_STEPS = (1.0, 0.1)
"""Cores per server moved between orchestration and queues in the core-move neighbours (a whole core, and a tenth
for splits the MILP sets to fractions)."""


class Certificate(Frozen):
    neighbours: int
    """Neighbours of the returned answer checked (within budgets): evaluated, or shown by a cheap upper bound on
    their throughput not to beat it."""
    best_gain: float | None
    """Best relative improvement among the fully evaluated ones, in the objective's terms (throughput for the
    throughput objectives, cost or power for the others); <= the minimum gain means none beats the answer. None when
    every neighbour was settled by the bound."""
    adopted: int = 0
    """Better neighbours adopted before this answer (0: the solver's answer stood)."""
    complete: bool = True
    """False when the time limit stopped the search before every neighbour was evaluated."""


def _opt_key(o: ServerOption) -> tuple:
    pr = o.profile
    return (pr.chassis.id, pr.cpu.id, pr.gpu.id if pr.gpu else None, pr.gpus)


def _grp_key(g: ServerGroup) -> tuple:
    return (g.chassis, g.cpu, g.gpu, g.gpus_per_server)


def _default_split(o: ServerOption, queue: str | None) -> tuple[float, dict[str, float]]:
    """Orchestration cores per GPU and queue cores for a server of an option not in the answer: orchestration just
    enough for its GPUs (flexible options) or the option's fixed reservation, every other core to `queue`."""
    pr = o.profile
    orch = pr.orchestration_cores_per_gpu
    if o.flexible_orchestration and pr.gpus:
        k = pr.orchestration_tasks_per_core_s
        orch = 0.0 if not math.isfinite(k) or k <= 0 else min(pr.cores / pr.gpus, pr.gpu_tasks_per_s / (k * pr.gpus))
        orch = max(orch, _engine_floor_per_gpu(o))
    tool = pr.cores - orch * pr.gpus if (o.flexible_orchestration and pr.gpus) else pr.tool_cores
    return orch, ({queue: tool} if queue and tool > 0 else {})


def _engine_floor_per_gpu(o: ServerOption) -> float:
    """Host cores per GPU the serving engines of the option's replicas need (0 without replicas)."""
    pr = o.profile
    return pr.engine_min_cores / pr.gpus if pr.gpus and pr.replicas else 0.0


def _canonical(groups: list[ServerGroup]) -> list[ServerGroup]:
    """Merge groups of the same rack, option and split; drop empty ones; sort."""
    merged: dict[tuple, ServerGroup] = {}
    for g in groups:
        if g.count <= 0:
            continue
        k = (g.rack, *_grp_key(g), round(g.orchestration_cores_per_gpu, 12),
             tuple(sorted((q, round(c, 12)) for q, c in (g.queue_cores or {}).items())))
        if k in merged:
            merged[k] = merged[k].model_copy(update={"count": merged[k].count + g.count})
        else:
            merged[k] = g
    return [merged[k] for k in sorted(merged, key=lambda k: (k[0], str(k[1:])))]


class _Neighbour(list):
    """A neighbour's server groups; `rack` is the one rack it changes (the other racks' groups are the answer's own
    objects), so `fits` need only check that rack's budgets."""

    def __init__(self, groups: list[ServerGroup], rack: int, lo: int, hi: int, base: _Base | None = None):
        super().__init__(groups)
        self.rack, self.lo, self.hi, self.base = rack, lo, hi, base
        """The rack changed, where its groups lie in the list, and the answer's groups it changes."""


def neighbours(cfg: Configuration, options: list[ServerOption], queues: list[str], layout: str
               ) -> Iterator[list[ServerGroup]]:
    """Every neighbour's server groups, in a fixed order, one at a time (a row of many racks has groups by the
    thousand, so building them all first could outlast the request's clock, which the caller checks between
    neighbours)."""
    by_key = {_opt_key(o): o for o in options}
    # Canonical groups sort by rack first, so each rack's groups are one block and a neighbour (which changes one
    # rack) is the other racks' groups as they are around its rack's block made canonical again: the same list as
    # canonicalizing the whole, without sorting a row of a thousand racks for each neighbour.
    groups = _Base(_canonical(list(cfg.servers)))
    block: dict[int, tuple[int, int]] = {}
    for j, g in enumerate(groups):
        block[g.rack] = (block.get(g.rack, (j, j))[0], j + 1)
    first_of: dict[tuple, ServerGroup] = {}
    for g in groups:
        first_of.setdefault(_grp_key(g), g)

    def in_rack(r: int, added: list[ServerGroup], without: int | None = None) -> list[ServerGroup]:
        """The neighbour whose rack `r` holds its groups but `without` (an index) plus `added`."""
        if r in block:
            lo, hi = block[r]
        else:  # an empty rack: its block goes where the rack order puts it
            lo = hi = next((j for j, g in enumerate(groups) if g.rack > r), len(groups))
        mine = _canonical([groups[j] for j in range(lo, hi) if j != without] + added)
        return _Neighbour(groups[:lo] + mine + groups[hi:], r, lo, lo + len(mine), groups)

    def with_(i: int, new: ServerGroup | None, extra: list[ServerGroup] = ()) -> list[ServerGroup]:
        return in_rack(groups[i].rack, ([new] if new is not None else []) + list(extra), without=i)

    def fresh(o: ServerOption, rack: int) -> list[ServerGroup]:
        pr = o.profile
        same = first_of.get(_opt_key(o))
        if same is not None:
            return [same.model_copy(update={"count": 1, "rack": rack})]
        out_ = []
        for q in (queues or [None]):
            orch, qc = _default_split(o, q)
            out_.append(ServerGroup(chassis=pr.chassis.id, cpu=pr.cpu.id, gpu=pr.gpu.id if pr.gpu else None,
                                    gpus_per_server=pr.gpus, count=1, rack=rack, orchestration_cores_per_gpu=orch,
                                    queue_cores=qc))
        return out_

    # Racks with the same servers have the same neighbours up to which rack is which: moves in the first of each
    # such set of racks stand for the others (a row of identical racks has one rack's neighbours).
    content: dict[int, list] = {}
    for g in groups:
        content.setdefault(g.rack, []).append(g.model_dump_json(exclude={"rack"}))
    seen: dict[tuple, int] = {}
    for r in sorted(content):
        seen.setdefault(tuple(sorted(content[r])), r)
    reps = set(seen.values())
    empty = sorted(set(range(cfg.racks)) - set(content))
    racks = sorted(reps) + empty[:1]
    keep = [i for i, g in enumerate(groups) if g.rack in reps]
    for i in keep:
        g = groups[i]
        yield with_(i, g.model_copy(update={"count": g.count + 1}))
        yield with_(i, g.model_copy(update={"count": g.count - 1}))
    for r in racks:
        for o in options:
            for new in fresh(o, r):
                yield in_rack(r, [new])
    for i in keep:
        g = groups[i]
        for o in options:
            if _opt_key(o) == _grp_key(g):
                continue
            for new in fresh(o, g.rack):
                yield with_(i, g.model_copy(update={"count": g.count - 1}), [new])
    for i in keep:
        g = groups[i]
        for o in options:
            k = _opt_key(o)
            if k == _grp_key(g) or k[0] != g.chassis or k[3] != g.gpus_per_server:
                continue
            if (k[2] is None) != (g.gpu is None):
                continue
            pr = o.profile
            orch = g.orchestration_cores_per_gpu if o.flexible_orchestration else pr.orchestration_cores_per_gpu
            if pr.gpus:
                orch = min(max(orch, _engine_floor_per_gpu(o)), pr.cores / pr.gpus)
            tool = pr.cores - orch * pr.gpus if (o.flexible_orchestration and pr.gpus) else pr.tool_cores
            qc = dict(g.queue_cores or {})
            tot = sum(qc.values())
            if tot > tool and tot > 0:
                qc = {q: c * tool / tot for q, c in qc.items()}
            yield (with_(i, g.model_copy(update={"cpu": pr.cpu.id, "gpu": pr.gpu.id if pr.gpu else None,
                                                      "orchestration_cores_per_gpu": orch, "queue_cores": qc})))
    for i in keep:
        g = groups[i]
        o = by_key.get(_grp_key(g))
        if o is None:
            continue
        pr = o.profile
        qc = dict(g.queue_cores or {})
        for step in CORE_STEPS:
            if o.flexible_orchestration and pr.gpus and layout != "a":
                for q in queues:
                    # orchestration -> queue q, and back
                    per_gpu = step / pr.gpus
                    if g.orchestration_cores_per_gpu - per_gpu >= _engine_floor_per_gpu(o) - 1e-12:
                        yield (with_(i, g.model_copy(update={
                            "orchestration_cores_per_gpu": g.orchestration_cores_per_gpu - per_gpu,
                            "queue_cores": {**qc, q: qc.get(q, 0.0) + step}})))
                    if qc.get(q, 0.0) >= step and g.orchestration_cores_per_gpu + per_gpu <= pr.cores / pr.gpus:
                        yield (with_(i, g.model_copy(update={
                            "orchestration_cores_per_gpu": g.orchestration_cores_per_gpu + per_gpu,
                            "queue_cores": {**qc, q: qc[q] - step}})))
            for q1 in queues:
                for q2 in queues:
                    if q1 != q2 and qc.get(q1, 0.0) >= step:
                        yield (with_(i, g.model_copy(update={
                            "queue_cores": {**qc, q1: qc[q1] - step, q2: qc.get(q2, 0.0) + step}})))


class Usage(Frozen):
    """Budget use per rack of a list of server groups (what `fits` checks), kept for the neighbours of one answer."""

    per_rack: dict[int, tuple[float, float, float, float]]
    """Power, air heat, liquid heat (W) and space (U) per rack."""
    capital_per_rack_usd: dict[int, float]
    valid: bool
    """Every group a candidate within the row with its engines' host cores."""


def usage(groups: list[ServerGroup], options: list[ServerOption], racks: int) -> Usage:
    by_key = {_opt_key(o): o for o in options}
    use: dict[int, list[float]] = {}
    capital: dict[int, float] = {}
    valid = True
    for g in groups:
        o = by_key.get(_grp_key(g))
        if o is None or g.rack >= racks:
            valid = False
            break
        pr = o.profile
        if pr.gpus and g.orchestration_cores_per_gpu < _engine_floor_per_gpu(o) - 1e-9:
            valid = False  # not buildable: the engines would lack their host cores
            break
        u = use.setdefault(g.rack, [0.0, 0.0, 0.0, 0.0])
        for j, v in enumerate((pr.power_w, pr.air_heat_w, pr.liquid_heat_w, pr.space_u)):
            u[j] += g.count * v
        capital[g.rack] = capital.get(g.rack, 0.0) + g.count * (pr.price_usd or 0.0)
    return Usage(per_rack={r: tuple(u) for r, u in use.items()}, capital_per_rack_usd=capital, valid=valid)


def fitting_usage(groups: list[ServerGroup], options: list[ServerOption], rack: Rack, racks: int) -> Usage | None:
    """The usage of groups that are valid and within every rack's budgets (None otherwise)."""
    u = usage(groups, options, racks)
    return u if u.valid and all(_within(x, rack) for x in u.per_rack.values()) else None


def _within(u, rack: Rack) -> bool:
    cap = (rack.usable_power_w, rack.air_cooling_kw * 1000 - rack.reserved_power_w, rack.liquid_cooling_kw * 1000,
           rack.usable_u)
    return not any(x > c * (1 + 1e-12) + 1e-9 for x, c in zip(u, cap))


def fits(groups: list[ServerGroup], options: list[ServerOption], rack: Rack, racks: int,
         capital_budget_usd: float | None, base: Usage | None = None) -> bool:
    """Every group is a candidate option with at least its serving engines' host cores (the MILP's engine_cores
    group), every rack within its budgets, the capital budget kept. `base`: the usage of the answer whose neighbour
    `groups` is, when that answer fits (`fitting_usage`): then only the neighbour's changed rack needs checking."""
    if base is not None and isinstance(groups, _Neighbour):
        part = usage(groups[groups.lo:groups.hi], options, racks)
        if not part.valid or not _within(part.per_rack.get(groups.rack, (0.0,) * 4), rack):
            return False
        capital = (sum(base.capital_per_rack_usd.values()) - base.capital_per_rack_usd.get(groups.rack, 0.0)
                   + part.capital_per_rack_usd.get(groups.rack, 0.0))
        return capital_budget_usd is None or capital <= capital_budget_usd * (1 + 1e-12)
    u = usage(groups, options, racks)
    if not u.valid or not all(_within(x, rack) for x in u.per_rack.values()):
        return False
    capital = sum(u.capital_per_rack_usd.values())
    return capital_budget_usd is None or capital <= capital_budget_usd * (1 + 1e-12)


_Sums = tuple[dict[str, float], dict[str, float], dict[str, float], dict[str, float]]


def _capacities(groups: list[ServerGroup], by_key: dict, queues: list[str]) -> _Sums:
    """GPU serving capacity per serving kind (tasks/s), and per queue its cores, reference-core capacity and
    sandbox memory (GB)."""
    cap: dict[str, float] = {}
    qcores: dict[str, float] = dict.fromkeys(queues, 0.0)
    qcap = dict(qcores)
    qmem = dict(qcores)
    for g in groups:
        o = by_key[_grp_key(g)]
        pr = o.profile
        if pr.gpus:
            if o.flexible_orchestration:
                k = pr.orchestration_tasks_per_core_s
                orch = math.inf if not math.isfinite(k) else k * g.orchestration_cores_per_gpu * pr.gpus
                serve = min(pr.gpu_tasks_per_s, orch)
            else:
                serve = pr.serving_tasks_per_s
            cap[pr.serving_key] = cap.get(pr.serving_key, 0.0) + g.count * serve
        for q, c in (g.queue_cores or {}).items():
            if q in qcores:
                qcores[q] += g.count * c
                qcap[q] += g.count * c * pr.per_core_perf
                qmem[q] += g.count * c * pr.memory_per_core_gb
    return cap, qcores, qcap, qmem


def _plus(a: _Sums, b: _Sums) -> _Sums:
    out = []
    for x, y in zip(a, b):
        z = dict(x)
        for k, v in y.items():
            z[k] = z.get(k, 0.0) + v
        out.append(z)
    return tuple(out)


class _Base(list):
    """An answer's canonical groups, with the capacities of the racks before and after each rack summed once (so a
    neighbour's ceiling costs its own rack, not the row)."""

    def around(self, rack: int, by_key: dict, queues: list[str]) -> tuple[_Sums, _Sums]:
        if getattr(self, "_prefix", None) is None:
            racks = sorted({g.rack for g in self})
            blocks = {r: [] for r in racks}
            for g in self:
                blocks[g.rack].append(g)
            empty = ({}, dict.fromkeys(queues, 0.0), dict.fromkeys(queues, 0.0), dict.fromkeys(queues, 0.0))
            sums = [_capacities(blocks[r], by_key, queues) for r in racks]
            prefix = [empty]
            for x in sums:
                prefix.append(_plus(prefix[-1], x))
            suffix = [empty]
            for x in reversed(sums):
                suffix.append(_plus(x, suffix[-1]))
            self._racks, self._prefix, self._suffix = racks, prefix, suffix[::-1]
        i = bisect.bisect_left(self._racks, rack)
        j = i + 1 if i < len(self._racks) and self._racks[i] == rack else i
        return self._prefix[i], self._suffix[j]


def ceiling_tasks_per_hour(groups: list[ServerGroup], options: list[ServerOption], workload: Workload,
                           queues: dict[str, list[str]], servings: dict[str, GpuServing]) -> float:
    """The evaluator's sustainable throughput without the tail-wait, sandbox-disk and I/O bounds (so at least the
    evaluator's; equal to it when those do not bind): GPU
    serving (per server the smaller of GPU and orchestration capacity), each queue's tool cores and each queue's
    sandbox memory with calls routed in proportion to capacity, as models/pipeline.py `evaluate` computes them
    (tests/test_exact_memory.py checks the two agree). Cheap: screens neighbours before a full evaluation."""
    by_key = {_opt_key(o): o for o in options}
    if isinstance(groups, _Neighbour) and groups.base is not None:
        # the other racks' capacities come summed from the answer's (a row of a thousand racks, one rack changed)
        before, after = groups.base.around(groups.rack, by_key, list(queues))
        cap, qcores, qcap, qmem = _plus(_plus(before, _capacities(groups[groups.lo:groups.hi], by_key,
                                                                  list(queues))), after)
    else:
        cap, qcores, qcap, qmem = _capacities(groups, by_key, list(queues))
    total = sum(cap.values())
    llm = any(isinstance(st, GpuStage) for c in workload.classes for st in c.stages)
    out = [total] if llm else []
    route = {k: v / total for k, v in cap.items()} if total > 0 else {k: 1.0 / len(cap) for k in cap}
    cls = {c.name: c for c in workload.classes}
    for q, names in queues.items():
        perf = qcap[q] / qcores[q] if qcores[q] > 0 else 1.0
        work = demand = 0.0
        for name in names:
            c = cls[name]
            t = 0.0
            for st in c.stages:
                if isinstance(st, GpuStage):
                    t += st.count * sum(r * stage_gpu_latency_s(st, workload.served_model, servings[k])
                                        for k, r in route.items())
                elif isinstance(st, CpuStage):
                    t += st.count * cpu_call_seconds(st, perf)
                    work += c.share * st.count * st.core_seconds
                elif isinstance(st, DelayStage):
                    t += st.count * st.seconds
                # other stages (I/O) count as taking no time: the memory bound only rises, so this stays a ceiling
            demand += c.share * t * c.sandbox_memory_gb
        if work > 0:
            out.append(qcap[q] / work)
        if demand > 0:
            out.append(qmem[q] / demand)
    return max(0.0, min(out)) * HOUR_S if out else 0.0


def search(cfg: Configuration, value: Callable[[Evaluation], float], evaluate: Callable[[Configuration], Evaluation],
           options: list[ServerOption], rack: Rack, capital_budget_usd: float | None, layout: str,
           min_gain: float, max_steps: int, expired: Callable[[], bool],
           current: Evaluation, promising: Callable[[list[ServerGroup], Evaluation], bool] | None = None
           ) -> tuple[Configuration, Evaluation, Certificate]:
    """Hill-climb from `cfg`: adopt the best neighbour while one beats the current answer by more than `min_gain`
    (relative, in `value`, larger is better). `promising(groups, current)` False means the neighbour cannot beat
    the current answer (a cheap bound says so): it counts as checked without a full evaluation. Returns the final
    configuration, its evaluation and its certificate."""
    queues = [q.name for q in cfg.queues] if cfg.queues else []
    adopted = 0
    while True:
        base = value(current)
        count, best, best_gain, complete = 0, None, None, True
        used = fitting_usage(cfg.servers, options, rack, cfg.racks)
        for groups in neighbours(cfg, options, queues, layout):
            if expired():
                complete = False
                break
            if not groups or not fits(groups, options, rack, cfg.racks, capital_budget_usd, used):
                continue
            if promising is not None and not promising(groups, current):
                count += 1
                continue
            try:
                nb = cfg.model_copy(update={"servers": groups})
                ev = evaluate(nb)
            except ValueError:
                continue  # e.g. queue cores above what the server has left after orchestration
            if not ev.within_budgets:
                continue
            count += 1
            v = value(ev)
            if not math.isfinite(v):
                continue  # not a valid answer of the request (misses what is required, less GPU for layout A)
            gain = (v - base) / max(abs(base), 1e-9)
            if best_gain is None or gain > best_gain:
                best_gain, best = gain, (nb, ev)
        if best is not None and best_gain is not None and best_gain > min_gain and adopted < max_steps:
            cfg, current = best
            adopted += 1
            continue
        return cfg, current, Certificate(neighbours=count, best_gain=best_gain, adopted=adopted, complete=complete)
