"""A small solver-neutral linear model and two backends (PuLP/CBC and OR-Tools/SCIP)."""

from advisor.solver.backends import BACKENDS, solve
from advisor.solver.linear import Constraint, LinearModel, Solution, Var

__all__ = ["BACKENDS", "Constraint", "LinearModel", "Solution", "Var", "solve"]
