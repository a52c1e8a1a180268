"""HiGHS (through SciPy) as the third backend: MILPs and LPs of a LinearModel, LP duals for shadow prices, and the
small dense integer programs of the row search (rack-pattern pricing and packing).

SciPy ships HiGHS, so this backend needs no solver binary; it is the one whose LP duals the optimizer reads (one LP
solver for every shadow price, so answers do not depend on which MIP backend the user picked)."""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, linprog, milp
from scipy.sparse import coo_matrix

from advisor import cancel
from advisor.solver.linear import LinearModel, Solution

_stdout_lock = threading.Lock()
_stdout_users = 0
_stdout_saved: int | None = None


def _c_flush() -> None:
    try:
        ctypes.CDLL(None).fflush(None)  # C stdio's buffers, so HiGHS's lines go where fd 1 points now
    except (OSError, AttributeError):  # no C library to call: nothing buffered we could flush
        pass


@contextmanager
def c_stdout_silenced() -> Iterator[None]:
    """SciPy's HiGHS prints debugging lines with C printf to standard output during some MIP solves, whatever its
    display options ("HighsMipSolverData::transformNewIntegerFeasibleSolution tmpSolver.run();"); they corrupted
    `advisor optimize --racks 10 --json`. While any MIP solve runs, file descriptor 1 points at the null device.
    Reference-counted under a lock: solves run side by side in threads (advisor/parallel.py)."""
    global _stdout_users, _stdout_saved
    with _stdout_lock:
        if _stdout_users == 0:
            sys.stdout.flush()
            _c_flush()
            _stdout_saved = os.dup(1)
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.close(null)
        _stdout_users += 1
    try:
        yield
    finally:
        with _stdout_lock:
            _stdout_users -= 1
            if _stdout_users == 0 and _stdout_saved is not None:
                _c_flush()
                os.dup2(_stdout_saved, 1)
                os.close(_stdout_saved)
                _stdout_saved = None


_MILP_OPTIMAL, _MILP_LIMIT, _MILP_INFEASIBLE, _MILP_UNBOUNDED = 0, 1, 2, 3
"""scipy.optimize.milp status codes (0 optimal, 1 time/node/iteration limit, 2 infeasible, 3 unbounded)."""


def _matrices(model: LinearModel, objective: dict[str, float], maximize: bool):
    names = list(model.vars)
    col = {n: j for j, n in enumerate(names)}
    c = np.zeros(len(names))
    for k, a in objective.items():
        c[col[k]] = -a if maximize else a  # HiGHS minimizes
    a = np.zeros((len(model.constraints), len(names)))
    lo = np.full(len(model.constraints), -np.inf)
    hi = np.full(len(model.constraints), np.inf)
    for r, con in enumerate(model.constraints):
        for k, v in con.terms.items():
            a[r, col[k]] = v
        if con.sense in ("<=", "=="):
            hi[r] = con.rhs
        if con.sense in (">=", "=="):
            lo[r] = con.rhs
    lb = np.array([v.lb for v in model.vars.values()], dtype=float)
    ub = np.array([np.inf if v.ub is None else v.ub for v in model.vars.values()], dtype=float)
    integ = np.array([1 if v.integer else 0 for v in model.vars.values()])
    return names, c, a, lo, hi, lb, ub, integ


def solve_highs(model: LinearModel, time_limit_s: float, gap: float, threads: int = 1,
                hint: dict[str, float] | None = None) -> Solution:
    """The `highs` backend. HiGHS through SciPy takes no starting point, so `hint` is ignored; `threads` likewise
    (SciPy's HiGHS runs single-threaded)."""
    names, c, a, lo, hi, lb, ub, integ = _matrices(model, model.objective, model.maximize)
    sign = -1.0 if model.maximize else 1.0
    t0 = time.perf_counter()
    cancel.check()
    cons = LinearConstraint(a, lo, hi) if len(model.constraints) else ()
    with c_stdout_silenced():
        res = milp(c, integrality=integ, bounds=Bounds(lb, ub), constraints=cons,
                   options={"time_limit": max(1.0, time_limit_s), "mip_rel_gap": gap, "disp": False})
    secs = time.perf_counter() - t0
    if res.status == _MILP_INFEASIBLE:
        return Solution("infeasible", None, {}, seconds=secs, backend="highs")
    if res.status == _MILP_UNBOUNDED:
        return Solution("unbounded", None, {}, seconds=secs, backend="highs")
    if res.x is None:
        return Solution("time_limit" if res.status == _MILP_LIMIT else "error", None, {}, seconds=secs,
                        backend="highs")
    obj = sign * float(res.fun)
    bound = sign * float(res.mip_dual_bound) if getattr(res, "mip_dual_bound", None) is not None else obj
    gap_now = float(res.mip_gap) if getattr(res, "mip_gap", None) is not None else 0.0
    status = "optimal" if res.status == _MILP_OPTIMAL else "time_limit"
    values = dict(zip(names, (float(v) for v in res.x)))
    duals = {}
    if not integ.any():  # an LP: read its row duals from an LP solve (milp does not return them)
        got = lp(model, model.objective if model.maximize else {k: -v for k, v in model.objective.items()})
        duals = got[1] if got else {}
    return Solution(status, obj, values, best_bound=bound, gap=0.0 if status == "optimal" else gap_now,
                    seconds=secs, duals=duals, backend="highs")


def lp(model: LinearModel, objective: dict[str, float], return_x: bool = False):
    """The LP relaxation of `model` maximizing `objective`: (value, row duals by name: objective gained per unit of
    a `<=` row's right-hand side), or (value, variable values) with `return_x`; None if not solved."""
    names = list(model.vars)
    col = {n: j for j, n in enumerate(names)}
    c = np.zeros(len(names))
    for k, a in objective.items():
        c[col[k]] = -a
    # sparse rows: a row of a thousand racks has tens of thousands of columns and rows, a few terms each
    ub = ([], [], [], [], [])  # row index, column, value, rhs, name
    eq = ([], [], [], [], [])
    for con in model.constraints:
        sign, part = (1.0, eq) if con.sense == "==" else ((1.0, ub) if con.sense == "<=" else (-1.0, ub))
        r = len(part[3])
        for k, a in con.terms.items():
            part[0].append(r), part[1].append(col[k]), part[2].append(sign * a)
        part[3].append(sign * con.rhs)
        part[4].append(con.name if con.sense != ">=" else (con.name, -1))

    def matrix(part):
        if not part[3]:
            return None
        return coo_matrix((part[2], (part[0], part[1])), shape=(len(part[3]), len(names))).tocsr()

    ub_names = ub[4]
    bounds = [(v.lb, v.ub) for v in model.vars.values()]
    res = linprog(c, A_ub=matrix(ub), b_ub=ub[3] or None, A_eq=matrix(eq), b_eq=eq[3] or None, bounds=bounds,
                  method="highs")
    if res.status != 0:
        return None
    if return_x:
        return -float(res.fun), dict(zip(names, (float(v) for v in res.x)))
    duals = {}
    for nm, mu in zip(ub_names, res.ineqlin.marginals if ub_names else []):
        duals[nm if isinstance(nm, str) else nm[0]] = -float(mu)  # >= 0: objective gained per unit of rhs
    return -float(res.fun), duals


def dense_milp(c: np.ndarray, upper, a: np.ndarray, row_lo, row_hi, options: dict):
    """Minimize c.x over integers 0 <= x <= upper with row_lo <= a.x <= row_hi (the row search's small kernels):
    SciPy's OptimizeResult (x None when nothing was found)."""
    with c_stdout_silenced():
        return milp(c, integrality=np.ones(len(c)), bounds=Bounds(0, upper),
                    constraints=LinearConstraint(a, row_lo, row_hi), options=options)
