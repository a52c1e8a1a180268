"""Terminal tables for the CLI (rich)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from models.pipeline import Evaluation


def _num(x: float | None, fmt: str = ",.0f") -> str:
    return "n/a" if x is None else format(x, fmt)


def print_evaluation(ev: Evaluation, console: Console) -> None:
    console.print(f"[bold]{ev.configuration}[/bold]  workload [cyan]{ev.workload}[/cyan]  rack [cyan]{ev.rack_profile}[/cyan]")
    head = Table(show_header=False, box=None)
    head.add_row("Sustainable throughput", f"[bold]{_num(ev.throughput_tasks_per_hour)}[/bold] tasks/h")
    nxt = (f"; relieving it gains up to {ev.relief_gain:.0%} before {ev.next_bottleneck} binds"
           if ev.next_bottleneck and ev.relief_gain is not None else "")
    head.add_row("Bottleneck", f"{ev.bottleneck} ({ev.bottleneck_kind}), heaviest stage {ev.bottleneck_stage}{nxt}")
    head.add_row("GPU idle at that throughput", f"{ev.gpu_idle_fraction:.1%} (waiting on CPU stages: {ev.gpu_idle_on_cpu_fraction:.1%})")
    head.add_row("Operating point", f"{ev.operating_point}: {_num(ev.arrival_rate_tasks_per_hour)} tasks/h")
    head.add_row("Task time p50 / p95 / p99",
                 f"{_num(ev.p50_task_seconds, ',.1f')} / {_num(ev.p95_task_seconds, ',.1f')} / {_num(ev.p99_task_seconds, ',.1f')} s"
                 f"  (unloaded mean {ev.unloaded_task_seconds:,.1f} s)")
    if ev.slo_met is not None:
        head.add_row("p95 SLO", "met" if ev.slo_met else "[red]missed[/red]")
    if ev.closed_loop:
        cl = ev.closed_loop
        head.add_row("Closed loop (exact product form)", f"{cl.agents:,} agents: {cl.throughput_tasks_per_hour:,.0f} tasks/h, "
                     f"mean task {_num(cl.mean_task_seconds, ',.1f')} s")
    head.add_row("Power / air / liquid", f"{ev.power_w / 1000:,.1f} kW / {ev.air_heat_w / 1000:,.1f} kW / {ev.liquid_heat_w / 1000:,.1f} kW")
    head.add_row("Space", f"{ev.space_u} U; {ev.gpus} GPUs, {ev.cores:,} cores")
    if ev.tco is not None:
        head.add_row("Cost", tco_line(ev.tco))
    console.print(head)

    t = Table(title="Throughput bound per pool")
    for col in ("pool", "tasks/h", "how"):
        t.add_column(col)
    for b in sorted(ev.bounds, key=lambda b: b.tasks_per_hour):
        mark = " *" if b.name == ev.bottleneck else ""
        t.add_row(b.name + mark, _num(b.tasks_per_hour), b.detail)
    console.print(t)

    if ev.serving:
        t = Table(title="Serving: replica pools")
        for col in ("pool", "replicas", "TP x PP", "GPUs used / idle", "HBM GB / replica", "weights GB",
                    "KV GB / replica", "max batch", "engine cores / replica"):
            t.add_column(col)
        for sp in ev.serving:
            t.add_row(sp.key, str(sp.replicas), f"{sp.tp_degree} x {sp.pp_degree}", f"{sp.gpus_used} / {sp.gpus_idle}",
                      f"{sp.hbm_gb_per_replica:,.0f}", f"{sp.weights_gb:,.0f}", f"{sp.kv_gb_per_replica:,.0f}",
                      str(sp.max_batch), f"{sp.engine_cores_per_replica:g}")
        console.print(t)

    t = Table(title="Where a task's time goes (operating point)")
    for col in ("class/stage", "resource", "service s", "wait s", "share"):
        t.add_column(col)
    for st in ev.stage_times:
        t.add_row(f"{st.task_class}/{st.stage}", st.resource, f"{st.service_s:,.1f}", f"{st.wait_s:,.1f}", f"{st.share:.1%}")
    console.print(t)

    t = Table(title="Utilization (operating point)")
    t.add_column("pool")
    t.add_column("utilization")
    for k, v in ev.utilization.items():
        t.add_row(k, f"{v:.1%}")
    console.print(t)

    t = Table(title="Racks")
    for col in ("rack", "power kW", "air kW", "liquid kW", "U", "weight kg", "ToR switches (ports)", "exceeded"):
        t.add_column(col)
    for r in ev.racks:
        t.add_row(str(r.rack), f"{r.power_w / 1000:,.1f} / {r.power_budget_w / 1000:,.1f}",
                  f"{r.air_heat_w / 1000:,.1f} / {r.air_cooling_w / 1000:,.0f}",
                  f"{r.liquid_heat_w / 1000:,.1f} / {r.liquid_cooling_w / 1000:,.0f}",
                  f"{r.space_u} / {r.space_budget_u}",
                  f"{r.weight_kg:,.0f} / {_num(r.weight_budget_kg)}",
                  f"{r.switches} ({r.network_ports} / {r.network_ports_available})" if r.network_ports_available
                  or r.switches else "-",
                  "; ".join(r.exceeded) or "-")
    console.print(t)
    if any(r.feeds for r in ev.racks):
        t = Table(title="Power feeds (load vs rating x continuous-load factor)")
        for col in ("rack", "feed", "normal kW", "one feed/side lost kW", "derated rating kW", "ok"):
            t.add_column(col)
        for r in ev.racks:
            for f in r.feeds:
                t.add_row(str(r.rack), f.feed, f"{f.normal_w / 1000:,.2f}",
                          "n/a (no redundancy)" if f.one_lost_w is None else f"{f.one_lost_w / 1000:,.2f}",
                          f"{f.rating_w / 1000:,.2f}", "[red]over[/red]" if f.exceeded else "yes")
        console.print(t)
    for w in ev.warnings:
        console.print(f"[yellow]warning:[/yellow] {w}")


def tco_line(t) -> str:
    """Cost and energy at the operating point in one line (`models.tco.Tco`)."""
    energy = (f"{t.energy_wh_per_task:,.1f} Wh per task, {t.facility_power_w / 1000:,.1f} kW facility draw "
              f"(PUE {t.assumptions.pue:g})" if t.energy_wh_per_task is not None else "no throughput")
    if t.cost_usd_per_hour is None:
        return f"capital unknown (no price for {', '.join(t.unpriced)}); {energy}"
    per_k = f"USD {t.cost_usd_per_1000_tasks:,.2f} per 1,000 tasks, " if t.cost_usd_per_1000_tasks is not None else ""
    return (f"{per_k}USD {t.cost_usd_per_hour:,.2f}/h (capital USD {t.capital_usd:,.0f} over "
            f"{t.assumptions.amortization_years:g} years, energy USD {t.energy_usd_per_hour:,.2f}/h); {energy}")


def print_optimize(res, console: Console) -> None:
    gap = f", gap {res.gap:.2%}" if res.gap else ""
    console.print(f"[bold]layout {res.layout}[/bold]: {res.status}{gap} ({res.solver}, {res.seconds:.2f} s)")
    if res.status == "infeasible" or not res.servers:
        console.print(f"[red]{res.message}[/red]")
        for d in res.infeasibility:
            console.print(f"  - {d.message}")
        return
    headline = operating_headline(res)
    if headline:
        console.print(headline)
    console.print(f"{'sustainable maximum ' if headline else ''}[bold]{res.throughput_tasks_per_hour:,.0f} "
                  f"tasks/h[/bold]; bottleneck {res.bottleneck}; binding: {', '.join(res.binding_constraints) or 'none'}")
    for line in failure_lines(res):
        console.print(line)
    t = Table(title="Servers")
    for c in ("rack", "count", "chassis", "cpu", "gpu", "orch cores/GPU", "queue cores per server", "power each W"):
        t.add_column(c)
    for s in res.servers:
        t.add_row(str(s.rack), str(s.count), s.chassis, s.cpu, f"{s.gpus_per_server}x {s.gpu}" if s.gpu else "-",
                  f"{s.orchestration_cores_per_gpu:,.2f}" if s.gpu else "-",
                  ", ".join(f"{k}: {v:,.1f}" for k, v in s.queue_cores.items()) or "-", f"{s.power_w_each:,.0f}")
    console.print(t)
    if res.cores_per_gpu is not None:
        console.print(f"host cores per GPU {res.cores_per_gpu:.1f} (orchestration {res.orchestration_cores_per_gpu:.1f}); "
                      f"GPU idle at this throughput {res.gpu_idle_fraction:.1%}")
    console.print(f"power {res.power_w / 1000:,.1f} kW, air {res.air_heat_w / 1000:,.1f} kW, "
                  f"liquid {res.liquid_heat_w / 1000:,.1f} kW, space {res.space_u} U")
    if res.evaluation is not None and res.evaluation.tco is not None:
        console.print(f"cost at {res.evaluation.tco.operating_tasks_per_hour:,.0f} tasks/h: {tco_line(res.evaluation.tco)}")
    for q in res.queues:
        console.print(f"queue {q['name']}: classes {', '.join(q['classes'])}; {q['cores']:,.1f} cores")
    for p in res.shadow_prices:
        line = f"  {p.group}: {p.tasks_per_hour_per_unit:,.1f} tasks/h per {p.unit} (LP relaxation)"
        if p.what_it_takes:
            line += f"; {p.what_it_takes}"
        console.print(line)
    for w in res.warnings:
        console.print(f"[yellow]warning:[/yellow] {w}")


def operating_headline(res) -> str | None:
    """The operating figure (advisor/optimizer/operating.py) as the headline line."""
    op = res.operating
    if op is None:
        return None
    why = "every tail target met" if op.limited_by == "planned load" else f"{op.limited_by} binds below it"
    return (f"[bold]{op.operating_tasks_per_hour:,.0f} tasks/h at the planned {op.planned_load:.0%} load[/bold] "
            f"({why})")


def failure_lines(res) -> list[str]:
    """Spares and one-failure figures (advisor/optimizer/failures.py)."""
    f = res.failures
    if f is None:
        return []
    out = []
    if f.spares:
        how = "kept besides the servers below" if f.spares_mode == "reserved" else "held back from the servers below"
        out.append(f"spares {how} ({f.spares_per_pool} per pool): {', '.join(f.spares)}; the active servers deliver "
                   f"[bold]{f.active_operating_tasks_per_hour:,.0f} tasks/h[/bold] at the planned load "
                   f"(sustainable {f.active_sustainable_tasks_per_hour:,.0f})")
    for c in f.cases:
        if c.operating_tasks_per_hour is None:
            out.append(f"  {c.loss} lost: not modelled - {c.detail}")
            continue
        share = f" ({c.fraction_of_intact:.0%})" if c.fraction_of_intact is not None else ""
        served = "" if c.planned_arrivals_served is None else (
            "; planned arrivals still within targets" if c.planned_arrivals_served else
            "; planned arrivals no longer within targets")
        out.append(f"  {c.loss} lost: {c.operating_tasks_per_hour:,.0f} tasks/h{share}{served} - {c.detail}")
    return out


def print_compare(cmp, console: Console) -> None:
    t = Table(title="Layouts")
    for c in ("layout", "status", "tasks/h at plan", "tasks/h max", "vs A", "GPUs", "power kW", "U", "USD/1k tasks", "bottleneck", "binding"):
        t.add_column(c)
    for r in cmp.results:
        ratio = cmp.ratio_vs_a.get(r.layout)
        gpus = sum(s.count * s.gpus_per_server for s in r.servers)
        op = f"{r.operating.operating_tasks_per_hour:,.0f}" if r.operating is not None else "n/a"
        t.add_row(r.layout, r.status, op, f"{r.throughput_tasks_per_hour:,.0f}", f"{ratio:.2f}x" if ratio else "n/a",
                  str(gpus), f"{r.power_w / 1000:,.1f}", str(r.space_u),
                  f"{r.tco.cost_usd_per_1000_tasks:,.2f}" if r.tco and r.tco.cost_usd_per_1000_tasks is not None
                  else "n/a", r.bottleneck,
                  ", ".join(r.binding_constraints))
    console.print(t)
    console.print(cmp.summary)
    if cmp.layout_fit is not None:
        console.print(cmp.layout_fit.sentence, highlight=False)
    if cmp.hybrid_note:
        console.print(cmp.hybrid_note, highlight=False)


def _check_value(v: float | None, unit: str) -> str:
    if v is None:
        return "n/a"
    if unit == "fraction":
        return f"{v:.1%}"
    return f"{v:,.2f} {unit}" if abs(v) < 10 else f"{v:,.0f} {unit}"


def print_migration(mig, console: Console) -> None:
    """A brownfield answer's migration plan (advisor/optimizer/migration.py): one row per step, then each step's
    changes and the metrics to check before the next."""
    if mig is None:
        return
    cost = f"USD {mig.total_cost_usd:,.0f}" if mig.total_cost_usd is not None else "unknown (a price is missing)"
    console.print(f"[bold]migration[/bold]: {mig.existing_tasks_per_hour:,.0f} -> "
                  f"{mig.recommended_tasks_per_hour:,.0f} tasks/h in {len(mig.steps) - 1} step(s); cost {cost}")
    t = Table(title="Migration steps")
    for c in ("step", "what", "tasks/h", "gain", "cost USD", "bottleneck"):
        t.add_column(c)
    for s in mig.steps:
        t.add_row(str(s.step), s.title, _num(s.tasks_per_hour), f"{s.gain_tasks_per_hour:+,.0f}", _num(s.cost_usd),
                  s.bottleneck)
    console.print(t)
    for s in mig.steps:
        console.print(f"step {s.step}: {s.title}", highlight=False)
        for c in s.changes:
            console.print(f"  - {c}", highlight=False)
        console.print("  check: " + "; ".join(f"{c.metric} {_check_value(c.expected, c.unit)}" for c in s.checks),
                      highlight=False)
    for n in mig.notes:
        console.print(f"  note: {n}", highlight=False)
