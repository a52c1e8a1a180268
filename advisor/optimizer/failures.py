"""Spares and failure domains: what one failed GPU server, one failed CPU node and one lost power feed cost, and
the answer with spares held back.

Every figure is the evaluator's (models.pipeline.evaluate) for the degraded configuration, with its operating figure
(advisor.optimizer.operating) at the planned load.

- Spares (`spares` N, `optimize_with_spares`): every rack keeps N spare servers of each pool (the GPU servers; the
  CPU-only nodes), of the pool's kind whose loss costs the most throughput in the answer (a kind: one chassis, CPU,
  GPU SKU and GPU count; ties: the most numerous), so that the worst single loss of the pool is covered.
  Spares are racked and cabled but powered off until a server of their pool fails, so they take space, weight and
  capital but no power or cooling (a spare draws only in place of the failed server). The optimizer solves again
  with their space and weight reserved in every rack (reserved_u, reserved_weight_kg) and their price taken off a
  capital budget, until the spare kinds of its answer are the ones reserved for (at most SPARE_PASSES solves); the
  answer's servers are the active ones, its throughput theirs. When the spares cannot be reserved (they do not fit
  an empty rack, or the passes do not settle on a kind), N servers of each pool are held back from the answer
  instead, and the stated throughput is that of the others. N = 0: no spares.
- One GPU server / one CPU node lost: the worst kind to lose one of (the smallest sustainable throughput after the
  loss), taken from the group with the most servers of that kind. With spares in that pool one of them takes the
  failed server's place: the figures are those of the active servers when it is of the same kind, else of the
  configuration with the spare serving instead of the failed server.
- One power feed lost: under 2N or N+1 redundancy the surviving feeds carry the whole rack (the power_feed budget
  the optimizer keeps), so throughput is unchanged; a server whose supplies cannot carry it on the surviving side
  (models.rack_physics.psu_warning) runs power-capped, which the model has no figure for: it is named. Without
  redundancy a lost feed drops the servers it carries; assumption: servers are spread evenly over the rack's feeds,
  each on one feed, so ceil(count / feeds) of every group of the rack with the most draw go down.
"""

from __future__ import annotations

import math
from typing import Any, Literal
from collections.abc import Callable

from models.assumptions import ModelAssumptions
from models.base import Frozen
from models.catalog import Catalog
from models.config import Configuration, ServerGroup
from models.hardware import Rack
from models.pipeline import evaluate
from models.workload import Workload

from advisor.optimizer.operating import PLANNED, meets_targets, operating_figure

OptimizeResult = Any
"""advisor.optimizer.optimize.OptimizeResult (not imported: optimize.py imports this module)."""


class LossCase(Frozen):
    """The answer after one failure."""

    loss: str
    """`one GPU server`, `one CPU node` or `one power feed`."""
    detail: str
    """What is lost and how the figure is made."""
    sustainable_tasks_per_hour: float | None
    """Sustainable throughput after the loss (None: not modelled, see detail)."""
    operating_tasks_per_hour: float | None
    """Operating figure after the loss (planned load of the degraded configuration, every tail target met)."""
    fraction_of_intact: float | None
    """Operating figure after the loss over the intact answer's."""
    planned_arrivals_served: bool | None
    """The intact answer's operating arrival rate still runs within every tail target after the loss."""


class Failures(Frozen):
    """Spares and the cost of one failure per failure domain."""

    spares_per_pool: int
    spares: list[str]
    """The spare servers of the row, e.g. `1x gpu-chassis (cpu, 8x gpu)`."""
    spares_mode: Literal["reserved", "held back", "none"] = "none"
    """`reserved` (bought besides the answer's servers, their space and weight kept free in every rack), `held back`
    (taken from the answer's servers) or `none`."""
    active_sustainable_tasks_per_hour: float
    """Sustainable throughput of the servers that serve (all of them without spares)."""
    active_operating_tasks_per_hour: float
    """Operating figure of the servers that serve: the headline when spares are held back."""
    cases: list[LossCase]


def kind_of(g: ServerGroup) -> tuple:
    return (g.chassis, g.cpu, g.gpu, g.gpus_per_server)


def describe(kind: tuple, n: int) -> str:
    chassis, cpu, gpu, gpus = kind
    return f"{n}x {chassis} ({cpu}" + (f", {gpus}x {gpu})" if gpu else ")")


def remove(cfg: Configuration, kind: tuple, n: int) -> Configuration:
    """`cfg` with n servers of this kind taken out, each time from the group (rack) with the most of them."""
    groups = [g.model_copy() for g in cfg.servers]
    for _ in range(n):
        idx = [i for i, g in enumerate(groups) if kind_of(g) == kind and g.count > 0]
        if not idx:
            break
        i = max(idx, key=lambda j: (groups[j].count, -j))
        groups[i] = groups[i].model_copy(update={"count": groups[i].count - 1}) if groups[i].count > 1 else None
        groups = [g for g in groups if g is not None]
    return cfg.model_copy(update={"servers": groups})


def _case(loss: str, detail: str, cfg: Configuration | None, w: Workload, rack: Rack, catalog: Catalog,
          a: ModelAssumptions, intact_op: float) -> LossCase:
    if cfg is None:
        return LossCase(loss=loss, detail=detail, sustainable_tasks_per_hour=None, operating_tasks_per_hour=None,
                        fraction_of_intact=None, planned_arrivals_served=None)
    if not cfg.servers:
        return LossCase(loss=loss, detail=detail + "; nothing is left to serve", sustainable_tasks_per_hour=0.0,
                        operating_tasks_per_hour=0.0, fraction_of_intact=0.0, planned_arrivals_served=False)
    try:
        x = evaluate(cfg, w, rack, catalog, a).throughput_tasks_per_hour
        fig = operating_figure(cfg, w, rack, catalog, a, x)
        served = intact_op > 0 and intact_op < x and meets_targets(cfg, w, rack, catalog, a, intact_op)[0]
    except ValueError as e:
        return LossCase(loss=loss, detail=f"{detail}; the model cannot evaluate what is left ({e})",
                        sustainable_tasks_per_hour=0.0, operating_tasks_per_hour=0.0, fraction_of_intact=0.0,
                        planned_arrivals_served=False)
    limit = "" if fig.limited_by == PLANNED else f" ({fig.limited_by} binds)"
    return LossCase(loss=loss, detail=detail + limit, sustainable_tasks_per_hour=x,
                    operating_tasks_per_hour=fig.operating_tasks_per_hour,
                    fraction_of_intact=fig.operating_tasks_per_hour / intact_op if intact_op > 0 else None,
                    planned_arrivals_served=served)


def _server_loss(loss: str, pool: list[tuple], spare: tuple | None, active: Configuration, w: Workload, rack: Rack,
                 catalog: Catalog, a: ModelAssumptions, intact_op: float, intact_x: float,
                 expired: Callable[[], bool] | None = None) -> LossCase:
    """`spare`: the kind of this pool's spares (None: no spare left in the pool). `expired`: the request's clock
    (kinds not yet evaluated when it runs out are left out, and the case says so)."""
    if not pool:
        what = "GPU servers" if loss == "one GPU server" else "CPU-only nodes (tools run on the GPU servers' cores)"
        return LossCase(loss=loss, detail=f"the answer has no {what}", sustainable_tasks_per_hour=None,
                        operating_tasks_per_hour=None, fraction_of_intact=None, planned_arrivals_served=None)
    cases = []
    for k in pool:
        if expired is not None and expired():
            break
        name = describe(k, 1).removeprefix("1x ")
        if spare == k:
            cases.append(LossCase(loss=loss, detail=f"{name} fails and a spare of its kind takes its place",
                                  sustainable_tasks_per_hour=intact_x, operating_tasks_per_hour=intact_op,
                                  fraction_of_intact=1.0 if intact_op > 0 else None,
                                  planned_arrivals_served=intact_op > 0))
            continue
        after = remove(active, k, 1)
        detail = f"{name} fails"
        if spare is not None:
            after = after.model_copy(update={"servers": [*after.servers, *_one(active, spare)]})
            detail += f" and a spare {describe(spare, 1).removeprefix('1x ')} serves in its place"
        cases.append(_case(loss, detail, after, w, rack, catalog, a, intact_op))
    if not cases:
        return LossCase(loss=loss, detail=f"not computed: the request's time limit ran out before the {len(pool)} "
                                          "kinds could be evaluated", sustainable_tasks_per_hour=None,
                        operating_tasks_per_hour=None, fraction_of_intact=None, planned_arrivals_served=None)
    worst = min(cases, key=lambda c: (c.sustainable_tasks_per_hour if c.sustainable_tasks_per_hour is not None
                                      else 0.0, c.operating_tasks_per_hour or 0.0))
    if len(cases) < len(pool):
        worst = worst.model_copy(update={"detail": worst.detail + f" (the worst of the {len(cases)} of {len(pool)} "
                                                                  "kinds evaluated before the time limit ran out)"})
    elif len(cases) > 1:
        worst = worst.model_copy(update={"detail": worst.detail + f" (the worst of {len(cases)} kinds to lose)"})
    return worst


def _one(cfg: Configuration, kind: tuple) -> list[ServerGroup]:
    """One server of this kind set up as the configuration's servers of its kind are (same rack, cores, queues)."""
    g = next(g for g in cfg.servers if kind_of(g) == kind) if any(kind_of(g) == kind for g in cfg.servers) else None
    return [] if g is None else [g.model_copy(update={"count": 1})]


def _feed_loss(active: Configuration, res_power_by_rack: dict[int, float], warnings: list[str], w: Workload, rack: Rack,
               catalog: Catalog, a: ModelAssumptions, intact_op: float, intact_x: float) -> LossCase:
    loss = "one power feed"
    if rack.feed_rating_w is None:
        return _case(loss, f"rack {rack.id} has no feed model (one power_kw budget): a lost supply is not modelled",
                     None, w, rack, catalog, a, intact_op)
    if rack.redundancy != "none":
        capped = sorted({m for m in warnings if "side is lost" in m})  # models.rack_physics.psu_warning
        detail = (f"{rack.redundancy}: the {rack.surviving_feeds} surviving of {rack.feeds} feeds carry the whole rack "
                  f"(the power_feed budget keeps the draw within them), so no server goes down")
        if capped:
            detail += ("; but " + "; ".join(capped) + " - the model has no figure for power-capped servers, so the "
                       "figure shown is an upper bound")
        return LossCase(loss=loss, detail=detail, sustainable_tasks_per_hour=intact_x,
                        operating_tasks_per_hour=intact_op, fraction_of_intact=1.0 if intact_op > 0 else None,
                        planned_arrivals_served=(intact_op > 0) if not capped else None)
    r = max(res_power_by_rack, key=lambda k: (res_power_by_rack[k], -k)) if res_power_by_rack else 0
    groups = []
    lost = []
    for g in active.servers:
        if g.rack != r:
            groups.append(g)
            continue
        down = math.ceil(g.count / rack.feeds)
        lost.append(describe(kind_of(g), down))
        if g.count - down > 0:
            groups.append(g.model_copy(update={"count": g.count - down}))
    detail = (f"no redundancy: one of rack {r}'s {rack.feeds} feeds goes down with the servers on it (assumption: "
              f"servers spread evenly over the feeds, each on one): {', '.join(lost) or 'none'}")
    return _case(loss, detail, active.model_copy(update={"servers": groups}), w, rack, catalog, a, intact_op)


def failures(res: OptimizeResult, w: Workload, rack: Rack, catalog: Catalog, a: ModelAssumptions,
             spares: int = 0, reserved: dict[tuple, int] | None = None,
             expired: Callable[[], bool] | None = None) -> Failures | None:
    """The loss cases of the optimizer's answer with its spares (None without an answer): `reserved` the spare kinds
    bought besides the answer (kind: servers in the row), else `spares` servers of each pool held back from it."""
    if not res.configuration or res.evaluation is None or res.operating is None:
        return None
    cfg = Configuration.model_validate(res.configuration)
    kinds: dict[tuple, int] = {}
    for g in cfg.servers:
        kinds[kind_of(g)] = kinds.get(kind_of(g), 0) + g.count
    gpu_pool = sorted((k for k in kinds if k[2] is not None), key=str)
    cpu_pool = sorted((k for k in kinds if k[2] is None), key=str)
    # each pool's spares: the kind whose loss costs the most, at most all of its servers
    if reserved is None:
        chosen = spare_kinds(res, w, rack, catalog, a) if spares else []
        held = {k: min(spares, kinds[k]) for k in chosen}
    else:
        chosen, held = list(reserved), {}
    spare_kind = {id(p): next(k for k in chosen if k in p) for p in (gpu_pool, cpu_pool) if any(k in p for k in chosen)}
    active = cfg
    for k, n in held.items():
        active = remove(active, k, n)
    if held and active.servers:
        x = evaluate(active, w, rack, catalog, a).throughput_tasks_per_hour
        op = operating_figure(active, w, rack, catalog, a, x).operating_tasks_per_hour
    elif held:
        x = op = 0.0
    else:
        x, op = res.throughput_tasks_per_hour, res.operating.operating_tasks_per_hour
    power = {ru.rack: ru.power_w for ru in res.evaluation.racks}
    cases = [
        _server_loss("one GPU server", gpu_pool, spare_kind.get(id(gpu_pool)), active, w, rack, catalog, a, op, x,
                     expired),
        _server_loss("one CPU node", cpu_pool, spare_kind.get(id(cpu_pool)), active, w, rack, catalog, a, op, x,
                     expired),
        _feed_loss(active, power, res.evaluation.warnings, w, rack, catalog, a, op, x),
    ]
    listed = reserved if reserved is not None else held
    return Failures(spares_per_pool=spares, spares=[describe(k, n) for k, n in sorted(listed.items(), key=str) if n],
                    spares_mode="reserved" if reserved else "held back" if held else "none",
                    active_sustainable_tasks_per_hour=x, active_operating_tasks_per_hour=op, cases=cases)


SPARE_PASSES = 3
"""Solves allowed to settle the spare kinds (the answer's most numerous kind per pool can change once their space is
reserved; a third solve that still changes them ends the search with spares held back instead)."""


def spare_kinds(res: OptimizeResult, w: Workload, rack: Rack, catalog: Catalog, a: ModelAssumptions) -> list[tuple]:
    """Each pool's kind whose single loss costs the most sustainable throughput in an answer (the evaluator's
    figure; ties: the most numerous, then the first by id)."""
    if not res.configuration:
        return []
    cfg = Configuration.model_validate(res.configuration)
    kinds: dict[tuple, int] = {}
    for g in cfg.servers:
        kinds[kind_of(g)] = kinds.get(kind_of(g), 0) + g.count

    def after_loss(k: tuple) -> float:
        left = remove(cfg, k, 1)
        if not left.servers:
            return 0.0
        try:
            return evaluate(left, w, rack, catalog, a).throughput_tasks_per_hour
        except ValueError:
            return 0.0
    out = []
    for pool in (sorted((k for k in kinds if k[2] is not None), key=str),
                 sorted((k for k in kinds if k[2] is None), key=str)):
        if pool:
            out.append(min(pool, key=lambda k: (after_loss(k), -kinds[k])) if len(pool) > 1 else pool[0])
    return out


def _reserve(rack: Rack, catalog: Catalog, kinds: list[tuple], n: int) -> Rack | None:
    """The rack with n powered-off spares of each kind counted as reserved gear (None: they leave no room)."""
    u = n * sum(catalog.chassis[k[0]].height_u for k in kinds)
    kg = n * sum(catalog.chassis[k[0]].weight_kg for k in kinds)
    if rack.reserved_u + u >= rack.height_u:
        return None
    return rack.model_copy(update={"reserved_u": rack.reserved_u + u, "reserved_weight_kg": rack.reserved_weight_kg + kg})


def _spare_capital(catalog: Catalog, kinds: list[tuple], n: int, racks: int, costs) -> float | None:
    from models.tco import server_price

    total = 0.0
    for ch, cpu, gpu, gpus in kinds:
        p, _ = server_price(catalog.chassis[ch], catalog.cpus[cpu], catalog.gpus[gpu] if gpu else None, gpus, costs)
        if p is None:
            return None
        total += p * n * racks
    return total


def optimize_with_spares(optimize: Callable[..., OptimizeResult], workload: Workload, rack: Rack, catalog: Catalog,
                         spares: int, **kw) -> OptimizeResult:
    """The optimizer's answer with `spares` powered-off spares of each pool in every rack (module docstring).
    `optimize`: advisor.optimizer.optimize.optimize."""
    from advisor.optimizer.settings import OptimizerSettings

    s = kw.get("settings") or OptimizerSettings()
    kw = {**kw, "spares": 0}
    racks = kw.get("racks", 1)
    capital = kw.get("capital_budget_usd")
    res = optimize(workload, rack, catalog, **kw)
    reserved_for: list[tuple] | None = None
    a = s.assumptions
    for _ in range(SPARE_PASSES):
        kinds = spare_kinds(res, workload, rack, catalog, a)
        if not kinds or kinds == reserved_for:
            break
        r2 = _reserve(rack, catalog, kinds, spares)
        extra = {}
        if capital is not None and r2 is not None:
            price = _spare_capital(catalog, kinds, spares, racks, s.assumptions.costs)
            r2 = r2 if price is not None and price < capital else None
            extra = {"capital_budget_usd": capital - price} if r2 is not None else {}
        if r2 is None:
            break
        try:
            nxt = optimize(workload, r2, catalog, **{**kw, **extra})
        except ValueError:  # nothing fits beside the spares
            break
        res, reserved_for = nxt, kinds
    if reserved_for is not None and spare_kinds(res, workload, rack, catalog, a) == reserved_for:
        u = spares * sum(catalog.chassis[k[0]].height_u for k in reserved_for)
        note = (f"spares: {spares} per pool in every rack ({', '.join(describe(k, spares) for k in reserved_for)}), "
                f"racked and powered off; {u} U and their weight are kept free in every rack, so the servers above "
                "are the active ones")
        f = failures(res, workload, rack, catalog, a, spares, reserved={k: spares * racks for k in reserved_for})
        return res.model_copy(update={"failures": f, "warnings": res.warnings + [note]})
    if reserved_for is not None:  # the last solve had space reserved for other kinds: the plain answer
        res = optimize(workload, rack, catalog, **kw)
    note = (f"spares: {spares} per pool could not be kept besides the answer (no room, no price, or the answer's "
            "kinds did not settle); they are held back from it, and the throughput of the others is stated")
    f = failures(res, workload, rack, catalog, a, spares)
    return res.model_copy(update={"failures": f, "warnings": res.warnings + [note]})


def with_failures(res: OptimizeResult, w: Workload, rack: Rack, catalog: Catalog, a: ModelAssumptions,
                  spares: int = 0, expired: Callable[[], bool] | None = None) -> OptimizeResult:
    f = failures(res, w, rack, catalog, a, spares, expired=expired)
    return res if f is None else res.model_copy(update={"failures": f})
