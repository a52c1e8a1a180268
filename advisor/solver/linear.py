"""Solver-neutral MILP: named variables and constraints, each constraint in a named group.

Groups (`power`, `cooling_air`, `space`, ...) let an explanation or an infeasibility name the budget concerned.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

_UNSAFE = re.compile(r"[^A-Za-z0-9_]")


def safe_name(text: str) -> str:
    """A name every LP writer accepts (catalog ids contain dashes and dots)."""
    return _UNSAFE.sub("_", text)

Sense = Literal["<=", ">=", "=="]


@dataclass(frozen=True)
class Var:
    name: str
    lb: float = 0.0
    ub: float | None = None
    integer: bool = False


@dataclass(frozen=True)
class Constraint:
    name: str
    group: str
    terms: dict[str, float]
    sense: Sense
    rhs: float


@dataclass
class LinearModel:
    name: str
    vars: dict[str, Var] = field(default_factory=dict)
    constraints: list[Constraint] = field(default_factory=list)
    objective: dict[str, float] = field(default_factory=dict)
    maximize: bool = True
    check_group: Callable[[str], Any] | None = None
    """Called with each new constraint's group; raises for a group its owner has not registered (the optimizer
    passes advisor.optimizer.groups.group_of). None: any group."""

    def var(self, name: str, lb: float = 0.0, ub: float | None = None, integer: bool = False) -> str:
        if name in self.vars:
            raise ValueError(f"duplicate variable {name}")
        self.vars[name] = Var(name, lb, ub, integer)
        return name

    def add(self, name: str, group: str, terms: dict[str, float], sense: Sense, rhs: float) -> None:
        if self.check_group is not None:
            self.check_group(group)
        terms = {k: v for k, v in terms.items() if v != 0}
        for k in terms:
            if k not in self.vars:
                raise KeyError(f"constraint {name} uses unknown variable {k}")
        self.constraints.append(Constraint(name, group, terms, sense, rhs))

    def copy(self) -> LinearModel:
        return LinearModel(self.name, dict(self.vars), list(self.constraints), dict(self.objective), self.maximize,
                           self.check_group)

    def groups(self) -> list[str]:
        return sorted({c.group for c in self.constraints})


Status = Literal["optimal", "feasible", "infeasible", "time_limit", "unbounded", "error"]


@dataclass
class Solution:
    status: Status
    objective: float | None
    values: dict[str, float]
    best_bound: float | None = None
    gap: float | None = None
    seconds: float = 0.0
    duals: dict[str, float] = field(default_factory=dict)
    """Constraint name to dual value (LP solves only)."""
    backend: str = ""

    @property
    def has_solution(self) -> bool:
        return self.status in ("optimal", "feasible", "time_limit") and bool(self.values)
