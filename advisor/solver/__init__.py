"""A small solver-neutral linear model and three backends: CBC (via PuLP), SCIP (via OR-Tools) and HiGHS (via
SciPy; also the LP solver behind shadow prices and the row search's small integer programs)."""

from advisor.solver.backends import BACKENDS, solve
from advisor.solver.linear import Constraint, LinearModel, Solution, Var

__all__ = ["BACKENDS", "Constraint", "LinearModel", "Solution", "Var", "solve"]
