"""Backends: translate a LinearModel to a real solver and read the answer back."""

from __future__ import annotations

import contextvars
import math
import os
import re
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable

import pulp
from pulp.apis import coin_api

from advisor import cancel
from advisor.solver.highs import solve_highs
from advisor.solver.linear import LinearModel, Solution
from models.errors import InputError

_CBC_PROCS: contextvars.ContextVar[list[subprocess.Popen] | None] = contextvars.ContextVar("cbc_procs", default=None)


class _TrackedPopen(subprocess.Popen):
    """The Popen PuLP starts CBC with, recorded so that a cancelled request can kill its solver process (PuLP
    offers no hook; CBC's own time limit still bounds every other solve)."""

    def __init__(self, *args, **kwargs):
        if _PDEATHSIG is not None and kwargs.get("preexec_fn") is None:
            kwargs["preexec_fn"] = _PDEATHSIG  # CBC dies with the worker that started it, even on SIGKILL
        super().__init__(*args, **kwargs)
        procs = _CBC_PROCS.get()
        if procs is not None:
            procs.append(self)
            token = cancel.current()
            if token is not None and token.cancelled:  # cancelled between the check and the start
                self.kill()


def _linux_pdeathsig() -> Callable[[], None] | None:
    """A preexec_fn that has the kernel SIGKILL the child when the thread that started it dies (prctl
    PR_SET_PDEATHSIG), so that a solver never outlives a killed batch worker or API worker. Linux only."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes
    import signal

    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    pr_set_pdeathsig = 1

    def preexec() -> None:
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)

    return preexec


_PDEATHSIG = _linux_pdeathsig()


def _track_cbc_processes() -> None:
    """Let PuLP start CBC through _TrackedPopen. PuLP has no hook for the process it starts, so its coin_api
    module's `subprocess` is replaced, once, by a namespace whose Popen records the process (everything else is the
    real module). Done on the first CBC solve rather than at import, so importing advisor changes nothing in PuLP;
    thread-safe because the processes are recorded in a context variable per solve, not in the replacement."""
    if getattr(coin_api.subprocess, "Popen", None) is not _TrackedPopen:
        coin_api.subprocess = types.SimpleNamespace(**{**vars(subprocess), "Popen": _TrackedPopen})


def _kill_all(procs: list[subprocess.Popen]) -> Callable[[], None]:
    def kill() -> None:
        for proc in list(procs):
            if proc.poll() is None:
                proc.kill()
    return kill


def _gap(obj: float | None, bound: float | None) -> float | None:
    if obj is None or bound is None or not math.isfinite(bound):
        return None
    return abs(bound - obj) / max(1e-9, abs(obj)) if abs(obj) > 1e-9 else (0.0 if abs(bound) < 1e-9 else None)


def to_pulp(model: LinearModel) -> tuple[pulp.LpProblem, dict[str, pulp.LpVariable], dict[str, pulp.LpConstraint]]:
    prob = pulp.LpProblem(model.name, pulp.LpMaximize if model.maximize else pulp.LpMinimize)
    v = {
        n: pulp.LpVariable(n, lowBound=x.lb, upBound=x.ub, cat=pulp.LpInteger if x.integer else pulp.LpContinuous)
        for n, x in model.vars.items()
    }
    prob += pulp.lpSum(c * v[n] for n, c in model.objective.items()), "objective"
    cons = {}
    for c in model.constraints:
        expr = pulp.lpSum(a * v[n] for n, a in c.terms.items())
        if c.sense == "<=":
            con = expr <= c.rhs
        elif c.sense == ">=":
            con = expr >= c.rhs
        else:
            con = expr == c.rhs
        prob.addConstraint(con, c.name)
        cons[c.name] = con
    return prob, v, cons


_BEST_POSSIBLE = re.compile(r"best possible (-?[0-9.eE+]+)")


def _cbc_log_facts(path: str, maximize: bool) -> tuple[float | None, bool]:
    """Best bound and whether CBC stopped on its time limit, read from its log (PuLP exposes neither)."""
    try:
        text = open(path, encoding="utf-8", errors="replace").read()
    except OSError:
        return None, False
    found = _BEST_POSSIBLE.findall(text)
    bound = None
    if "Result - Optimal solution found" in text and "within gap" not in text:
        found = []  # proven optimal: the progress lines' bounds are stale; the caller uses the objective
    if found:
        raw = float(found[-1])
        bound = -raw if maximize else raw  # CBC minimizes the negated objective of a maximization
    return bound, "Stopped on time limit" in text


def solve_cbc(model: LinearModel, time_limit_s: float, gap: float, threads: int = 1,
              hint: dict[str, float] | None = None) -> Solution:
    _track_cbc_processes()
    prob, v, cons = to_pulp(model)
    for name, val in (hint or {}).items():
        if name in v:
            v[name].setInitialValue(val)
    is_mip = any(x.integer for x in model.vars.values())
    fd, log_path = tempfile.mkstemp(prefix="cbc-", suffix=".log")
    os.close(fd)
    # One thread: no `-threads` flag. `-threads 1` selects CBC's threaded branch and bound with one worker, which
    # in the bundled build stalls for 10 s at the end of about 1 solve in 50-100, even on a 9-variable model
    # (measured: bench/bench_cbc_threads.py); without the flag CBC runs its serial code.
    solver = pulp.PULP_CBC_CMD(msg=False, timeLimit=max(1, math.floor(time_limit_s)), gapRel=gap,
                               threads=threads if threads > 1 else None, logPath=log_path, warmStart=bool(hint))
    t0 = time.perf_counter()
    procs: list[subprocess.Popen] = []
    reset = _CBC_PROCS.set(procs)
    try:
        with cancel.interrupt_on_cancel(_kill_all(procs)):
            prob.solve(solver)
        log_bound, stopped = _cbc_log_facts(log_path, model.maximize)
    except pulp.PulpSolverError:
        cancel.check()  # a killed CBC is a cancellation, not a solver error
        raise
    finally:
        _CBC_PROCS.reset(reset)
        os.unlink(log_path)
    secs = time.perf_counter() - t0
    status = pulp.LpStatus[prob.status]
    sol_status = prob.sol_status
    values = {n: (var.value() if var.value() is not None else 0.0) for n, var in v.items()}
    obj = pulp.value(prob.objective) if sol_status in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible) else None
    if status == "Infeasible" or sol_status == pulp.LpSolutionInfeasible:
        return Solution("infeasible", None, {}, seconds=secs, backend="cbc")
    if status == "Unbounded":
        return Solution("unbounded", None, {}, seconds=secs, backend="cbc")
    if stopped and obj is not None:
        st = "time_limit"
    elif sol_status == pulp.LpSolutionOptimal:
        st = "optimal"
    elif sol_status == pulp.LpSolutionIntegerFeasible:
        st = "time_limit" if (stopped or secs >= time_limit_s * 0.95) else "feasible"
    else:
        return Solution("time_limit" if (stopped or secs >= time_limit_s * 0.95) else "error", None, {},
                        seconds=secs, backend="cbc")
    duals = {}
    if not is_mip:
        duals = {n: (c.pi if c.pi is not None else 0.0) for n, c in cons.items()}
    bound = (log_bound if log_bound is not None else obj) if is_mip else obj
    return _finish(Solution(st, obj, values, best_bound=bound, gap=0.0 if st == "optimal" else _gap(obj, bound),
                            seconds=secs, duals=duals, backend="cbc"), is_mip)


def solve_ortools(model: LinearModel, time_limit_s: float, gap: float, threads: int = 1,
                  hint: dict[str, float] | None = None) -> Solution:
    from ortools.linear_solver import pywraplp

    is_mip = any(x.integer for x in model.vars.values())
    s = pywraplp.Solver.CreateSolver("SCIP" if is_mip else "GLOP")
    if s is None:
        return Solution("error", None, {}, backend="ortools")
    inf = s.infinity()
    v = {n: (s.IntVar if x.integer else s.NumVar)(x.lb, inf if x.ub is None else x.ub, n) for n, x in model.vars.items()}
    cons = {}
    for c in model.constraints:
        lo, hi = (-inf, c.rhs) if c.sense == "<=" else ((c.rhs, inf) if c.sense == ">=" else (c.rhs, c.rhs))
        ct = s.Constraint(lo, hi, c.name)
        for n, a in c.terms.items():
            ct.SetCoefficient(v[n], a)
        cons[c.name] = ct
    obj = s.Objective()
    for n, a in model.objective.items():
        obj.SetCoefficient(v[n], a)
    obj.SetMaximization() if model.maximize else obj.SetMinimization()
    if hint:
        names = [n for n in hint if n in v]
        s.SetHint([v[n] for n in names], [hint[n] for n in names])
    s.SetTimeLimit(int(max(1.0, time_limit_s) * 1000))
    s.SetNumThreads(threads)
    params = pywraplp.MPSolverParameters()
    if is_mip:
        params.SetDoubleParam(pywraplp.MPSolverParameters.RELATIVE_MIP_GAP, gap)
    t0 = time.perf_counter()
    cancel.check()
    with cancel.interrupt_on_cancel(s.InterruptSolve):
        rc = s.Solve(params)
    secs = time.perf_counter() - t0
    if rc == pywraplp.Solver.INFEASIBLE:
        return Solution("infeasible", None, {}, seconds=secs, backend="ortools")
    if rc == pywraplp.Solver.UNBOUNDED:
        return Solution("unbounded", None, {}, seconds=secs, backend="ortools")
    if rc not in (pywraplp.Solver.OPTIMAL, pywraplp.Solver.FEASIBLE):
        return Solution("time_limit" if secs >= time_limit_s * 0.95 else "error", None, {}, seconds=secs,
                        backend="ortools")
    values = {n: x.solution_value() for n, x in v.items()}
    objective = obj.Value()
    bound = obj.BestBound() if is_mip else objective
    if rc == pywraplp.Solver.OPTIMAL:
        st = "optimal"
    else:
        st = "time_limit" if secs >= time_limit_s * 0.95 else "feasible"
    duals = {n: c.dual_value() for n, c in cons.items()} if not is_mip else {}
    return _finish(Solution(st, objective, values, best_bound=bound,
                            gap=0.0 if st == "optimal" else _gap(objective, bound), seconds=secs, duals=duals,
                            backend="ortools"), is_mip)


OPTIMAL_GAP = 1e-6
"""A MIP counts as optimal when its proven gap is at most this (the default requested gap); a solve asked to stop
at a looser gap, and stopping there, is reported as `feasible` with its gap."""


def _finish(sol: Solution, is_mip: bool) -> Solution:
    if is_mip and sol.status == "optimal" and sol.best_bound is not None:
        g = _gap(sol.objective, sol.best_bound)
        if g is not None:
            sol.gap = g
            if g > OPTIMAL_GAP:
                sol.status = "feasible"
    return sol


BACKENDS: dict[str, Callable[..., Solution]] = {"cbc": solve_cbc, "ortools": solve_ortools, "highs": solve_highs}


def solve(model: LinearModel, backend: str = "cbc", time_limit_s: float = 60.0, gap: float = 1e-6,
          hint: dict[str, float] | None = None) -> Solution:
    """Solve; `hint` is a feasible starting point (variable name to value) the solver may begin from. Raises
    `advisor.cancel.Cancelled` when the current work is cancelled (before, during or right after the solve)."""
    try:
        fn = BACKENDS[backend]
    except KeyError:
        raise InputError(f"unknown solver {backend!r}; choose one of {', '.join(BACKENDS)}") from None
    cancel.check()
    sol = fn(model, time_limit_s, gap, hint=hint)
    cancel.check()  # an interrupted solve's answer is not used
    return sol
