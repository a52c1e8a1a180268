"""The report's migration block (brownfield answers, advisor/optimizer/migration.py): one row per step with its
tasks/h, gain, cost and changes, and the figures to check before the next step, rounded for reading."""

from __future__ import annotations

from typing import Any

from advisor.optimizer.migration import Migration, MigrationStep
from advisor.optimizer.optimize import OptimizeResult, not_a_candidate_result, optimize
from models.errors import InputError


def _check_text(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    if unit == "fraction":
        return f"{value:.1%}"
    if unit == "W":
        return f"{value / 1000:,.1f} kW"
    return f"{value:,.2f} {unit}" if abs(value) < 10 else f"{value:,.0f} {unit}"


def _step(s: MigrationStep) -> dict[str, Any]:
    return {"step": s.step, "title": s.title, "action": s.action, "changes": s.changes,
            "tasks_per_hour": s.tasks_per_hour, "gain_tasks_per_hour": s.gain_tasks_per_hour, "cost_usd": s.cost_usd,
            "bottleneck": s.bottleneck,
            "checks": [{"metric": c.metric, "expected": _check_text(c.expected, c.unit), "why": c.why}
                       for c in s.checks]}


def migration_view(mig: Migration | None) -> dict[str, Any] | None:
    """What the template's migration block shows; None for a greenfield answer."""
    if mig is None:
        return None
    return {"existing_tasks_per_hour": mig.existing_tasks_per_hour,
            "recommended_tasks_per_hour": mig.recommended_tasks_per_hour, "total_cost_usd": mig.total_cost_usd,
            "salvage_fraction": mig.salvage_fraction, "steps": [_step(s) for s in mig.steps], "notes": mig.notes}


def brownfield_kwargs(req) -> dict[str, Any]:
    """The optimizer arguments of a report request's owned servers (none for a greenfield report)."""
    if getattr(req, "existing", None) is None:
        return {}
    return {"existing": req.existing, "allow_removal": req.allow_removal,
            "software_only": getattr(req, "keep_hardware", False)}


def sweep_point(workload, rack, catalog, layout: str, kw: dict) -> OptimizeResult:
    """One sensitivity-sweep solve. A point whose budgets cannot hold any candidate server (a legacy rack at half
    its power cannot hold one GPU server), whose budgets cannot hold the owned servers, or whose layout cannot (a
    CPU tier in layout b) is an infeasible point with the reason, not a failed report."""
    try:
        return optimize(workload, rack, catalog, layout=layout, explain=False, **kw)
    except InputError as e:
        group = "fixed_servers" if "existing" in kw else "candidates"
        return not_a_candidate_result(layout, kw.get("backend", "cbc"), str(e), group=group)
