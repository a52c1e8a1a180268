"""The MILP's constraint groups, registered once: name, people's title, unit, kind and the inequality it states.

Every constraint the optimizer adds belongs to a group; `LinearModel.add` refuses a group that is not registered
here (a per-queue or per-row group is `<name>:<suffix>`, e.g. `tool_cores:shared`). Explanations, shadow prices,
infeasibility diagnoses and the report read titles and units from this registry, and the table in docs/model.md
§9.4 is generated from it (`python -m advisor.optimizer.groups`; tests/test_groups.py checks it is current).

Kinds: `budget` (a physical or money budget a planner can change: explanations price it and an infeasibility
names it), `capacity` (what the hardware can deliver for the throughput), `structure` (how the variables fit
together), `objective` (stages and objectives add it)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Literal

Kind = Literal["budget", "capacity", "structure", "objective"]


@dataclass(frozen=True)
class Group:
    name: str
    title: str
    """What a person calls it (reports and CLI tables)."""
    unit: str
    """Unit of the constraint's right-hand side as written ("scaled" where it is a normalized balance)."""
    kind: Kind
    scope: str
    """One constraint per what: rack, row, queue, option, model."""
    statement: str
    """The inequality, in the notation of docs/model.md §9."""


GROUPS: dict[str, Group] = {g.name: g for g in (
    Group("power", "rack power", "W", "budget", "rack", "sum_o P_o n[r,o] + P_sw k[r] <= usable rack power"),
    Group("power_feed", "power feeds after a feed loss", "W", "budget", "rack",
          "sum_o P_o n[r,o] + P_sw k[r] <= feed rating x continuous-load factor x surviving feeds - reserved power"),
    Group("cooling_air", "air cooling", "W", "budget", "rack",
          "sum_o H_air_o n[r,o] + P_sw k[r] <= air cooling - reserved power"),
    Group("cooling_liquid", "liquid cooling", "W", "budget", "rack", "sum_o H_liq_o n[r,o] <= liquid cooling"),
    Group("space", "rack space", "U", "budget", "rack", "sum_o U_o n[r,o] + U_sw k[r] <= usable U"),
    Group("weight", "rack weight", "kg", "budget", "rack",
          "sum_o m_o n[r,o] + m_sw k[r] <= max weight - reserved weight"),
    Group("network_ports", "top-of-rack switch ports", "ports", "budget", "rack",
          "sum_o ports_o n[r,o] <= (switch ports - uplinks) k[r], k[r] integer"),
    Group("capital", "capital budget", "USD", "budget", "model", "sum_{r,o} price_o n[r,o] <= capital budget "
          "(brownfield: sum price_o (n[r,o] - E[r,o]) + (1 - salvage) price_o rem[r,o] <= capital budget)"),
    Group("fixed_servers", "servers you own", "servers", "structure", "rack x option",
          "n[r,o] + rem[r,o] >= E[r,o], 0 <= rem[r,o] <= E[r,o] if removal is allowed, else rem = 0; "
          "unpriced owned servers under a capital budget: n[r,o] <= E[r,o]; a migration step: n[r,o] = E[r,o]"),
    Group("gpu_serving", "GPU serving capacity", "tasks/h", "capacity", "model",
          "X <= sum_fixed serving_o N_o + sum_flexible s_o"),
    Group("gpu_compute", "GPU compute", "tasks/h", "capacity", "option", "s_o <= gpu_rate_o N_o"),
    Group("orchestration", "inference-engine host cores", "tasks/h", "capacity", "option",
          "s_o <= orchestration_rate_o u_o"),
    Group("engine_cores", "serving-engine core floor", "cores", "capacity", "option",
          "u_o >= F_o N_o, F_o = replicas_o x (engine cores per replica + per GPU x GPUs per replica)"),
    Group("core_split", "host core split", "cores", "structure", "option", "sum_q y[o,q] + u_o <= cores_o N_o"),
    Group("tool_cores", "tool-queue cores", "reference cores", "capacity", "queue",
          "W_q X / 3600 <= sum_o speed_o y[o,q]"),
    Group("slo", "tool-wait target", "calls/s", "capacity", "queue",
          "v_q X / 3600 <= piecewise-linear capacity curve in the queue's integer server count"),
    Group("queue_floor", "one call slot and one I/O stream per isolated queue", "cores, MB/s", "structure", "queue",
          "X <= X_max z_q, sum_o y[o,q] >= pbar_q z_q, sum_o bw_o y[o,q] >= io_stream z_q (two or more queues)"),
    Group("sku_routing", "routing over mixed SKUs", "tasks/h", "structure", "model",
          "sum_g x_g = X, lo cap_g <= x_g <= hi cap_g; per queue sum_s x[q,s] = X, lo qcap_s <= W_q x[q,s] / 3600 "
          "<= hi qcap_s (utilization bands, §9.3); s_o = orchestration_rate_o u_o (= GPU capacity where the engine "
          "floor drives the GPUs)"),
    Group("sandbox_memory", "sandbox memory", "GB", "capacity", "queue",
          "(sum_g M_G x_g + sum_s M_S x[q,s] + M_D X) / 3600 <= sum_o mem_per_core_o y[o,q]"),
    Group("sandbox_disk", "sandbox disk", "GB", "capacity", "queue",
          "(sum_g K_G x_g + sum_s K_S x[q,s] + K_D X) / 3600 <= sum_o disk_per_core_o y[o,q]"),
    Group("io_bandwidth", "sandbox I/O bandwidth", "MB/s", "capacity", "queue",
          "B_q X / 3600 <= sum_o io_mbps_per_core_o y[o,q]"),
    Group("required_throughput", "required throughput", "tasks/h", "objective", "model", "X >= required tasks/h"),
    Group("gpu_first", "GPU-first rule (layout A)", "tasks/h", "objective", "model",
          "sum_o gpu_rate_o N_o >= (1 - tie tolerance) x the largest GPU capacity the budgets allow"),
    Group("tie_window", "tie-break stage window", "-", "objective", "model",
          "the previous stage's objective stays within throughput_tie_tolerance of its optimum (§9.5)"),
    Group("stage_bound", "tie-break stage bound from its curve-free relaxation", "-", "objective", "model",
          "a later stage's objective >= (<=, maximizing) its optimum over the same model without the tail-wait "
          "curves (a relaxation; §9.5)"),
    Group("polish", "lexicographic polish", "-", "objective", "model",
          "an earlier stage's objective >= its optimum - tolerance (canonical answers, §9.5)"),
    Group("operating_rate", "operating rate", "tasks/h", "objective", "model",
          "served load = load fraction x X (TCO objectives)"),
    Group("energy_dispatch", "energy dispatch", "tasks/h", "objective", "model",
          "work routed to GPUs and tool cores at the operating point covers the load (TCO objectives)"),
    Group("row_patterns", "rack patterns of a row", "racks", "structure", "row",
          "sum_p racks_p <= R; servers of each option = sum_p count[p,o] racks_p (column generation, §9.5)"),
)}


def group_of(name: str) -> Group:
    """The registered group of a constraint group name (`tool_cores:shared` -> tool_cores)."""
    base = name.split(":", 1)[0]
    try:
        return GROUPS[base]
    except KeyError:
        raise KeyError(f"constraint group {name!r} is not registered in advisor.optimizer.groups.GROUPS") from None


BUDGET_GROUPS: tuple[str, ...] = tuple(g.name for g in GROUPS.values() if g.kind == "budget")
BUDGET_UNITS: dict[str, str] = {g: GROUPS[g].unit for g in BUDGET_GROUPS}
RACK_GROUPS: tuple[str, ...] = tuple(g.name for g in GROUPS.values() if g.kind == "budget" and g.scope == "rack")


def markdown_table() -> str:
    """The table of groups for docs/model.md §9.4."""
    rows = ["| group | what | unit | kind | one per | states |", "|---|---|---|---|---|---|"]
    for g in GROUPS.values():
        rows.append(f"| `{g.name}` | {g.title} | {g.unit} | {g.kind} | {g.scope} | `{g.statement}` |")
    return "\n".join(rows)


if __name__ == "__main__":
    sys.stdout.write(markdown_table() + "\n")
