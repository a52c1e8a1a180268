"""The report's migration block (brownfield answers, advisor/optimizer/migration.py): one row per step with its
tasks/h, gain, cost and changes, and the figures to check before the next step, rounded for reading."""

from __future__ import annotations

from typing import Any

from advisor.optimizer.migration import Migration, MigrationStep


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
