"""Time limits and cancellation: every solve, simulation and sweep stops on its limit with its best answer and a
status, and work whose client has gone stops soon after (the running solver is interrupted, not waited for).

The limits asserted here are generous multiples of the configured limit: they check that a limit is honoured at
all (no hang), not how fast anything is (bench/ measures speed)."""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path

import httpx
import pytest

from advisor.cancel import CancelToken, Cancelled, cancellable, check
from advisor.catalog import builtin_catalog, load_catalog, load_workload
from advisor.optimizer.optimize import optimize
from advisor.service import evaluate_configuration
from advisor.simulation.des import SimSettings, build_model, simulate_model
from advisor.solver.backends import solve
from advisor.solver.linear import LinearModel
from api_server import MINI, SLOW_REPORT, Server
from models.config import Configuration

SOLVE_LIMIT_S = 60.0
"""Solver time limit of the cancelled solves: far longer than the test waits."""
CANCEL_AFTER_S = 0.5
HONOURED_S = 20.0
"""A cancelled or limited piece of work must be over well within this (its limit is SOLVE_LIMIT_S or a few s)."""
MINI_CONFIG = {"servers": [{"chassis": "gpu4", "cpu": "cpu-a", "gpu": "gpu-x", "gpus_per_server": 4, "count": 2,
                            "orchestration_cores_per_gpu": 1.0},
                           {"chassis": "cpu1u", "cpu": "cpu-b", "count": 4}]}


def market_split(m: int = 4, n: int = 40, seed: int = 1) -> LinearModel:
    """Cornuejols-Dawande market split: a few equality knapsacks on binaries, notoriously hard for branch and bound
    (both backends run into a 6 s limit on this size)."""
    rng = random.Random(seed)
    lm = LinearModel("market_split")
    xs = [lm.var(f"x{j}", 0, 1, integer=True) for j in range(n)]
    for i in range(m):
        a = [rng.randint(0, 99) for _ in range(n)]
        lm.add(f"split{i}", "split", dict(zip(xs, a)), "==", sum(a) // 2)
    lm.objective = {x: 1.0 for x in xs}
    return lm


def child_pids() -> set[int]:
    out: set[int] = set()
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        try:
            out |= {int(p) for p in (task / "children").read_text().split()}
        except OSError:
            pass
    return out


def _live(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ")[1].split()[0]
    except OSError:
        return False
    return state != "Z"


# ------------------------------------------------------------------------------------------------ solver limits

@pytest.mark.parametrize("backend", ["cbc", "ortools"])
def test_solver_stops_on_its_time_limit_with_a_status(backend):
    t = time.perf_counter()
    sol = solve(market_split(), backend, 2.0)
    assert sol.status == "time_limit"
    assert time.perf_counter() - t < HONOURED_S


@pytest.mark.parametrize("backend", ["cbc", "ortools"])
def test_cancel_interrupts_a_running_solver(backend):
    before = child_pids()
    token = CancelToken()
    timer = threading.Timer(CANCEL_AFTER_S, token.cancel)
    t = time.perf_counter()
    timer.start()
    with pytest.raises(Cancelled), cancellable(token):
        solve(market_split(), backend, SOLVE_LIMIT_S)
    assert time.perf_counter() - t < HONOURED_S  # interrupted: the 60 s limit was not waited out
    if backend == "cbc":  # the CBC process was killed, not left running
        assert not [p for p in child_pids() - before if _live(p)]


def test_cancelled_work_never_starts_a_solve():
    cat = load_catalog(MINI)
    token = CancelToken()
    token.cancel()
    with pytest.raises(Cancelled), cancellable(token):
        optimize(load_workload("agent", cat), cat.racks["r40"], cat, explain=False)
    check()  # outside the block there is no token: nothing to cancel


def test_cancel_hooks_run_once_and_only_while_registered():
    token, calls = CancelToken(), []
    with token.on_cancel(lambda: calls.append("inside")):
        pass
    with token.on_cancel(lambda: calls.append("live")):
        token.cancel()
        token.cancel()
    with token.on_cancel(lambda: calls.append("late")):  # registered after: runs at once
        pass
    assert calls == ["live", "late"]


def test_optimize_on_its_time_limit_returns_its_best_answer_with_gap():
    # swe-agent with 20x the sandboxes and 3x the tool work (tests/test_deadline.py) on liquid-130kw: sandbox
    # memory binds and the mixed-SKU memory model over a large rack is far from proven in 2 s. (On air-40kw the
    # same workload now proves optimal in about 1.5 s, since the routed serving is exact under the engine floor;
    # the binding tail-wait target on liquid-130kw used before that proves optimal within 2 s too.)
    from test_deadline import hard_workload

    from models.workload import Workload

    cat = builtin_catalog()
    wl = Workload.model_validate(hard_workload())
    t = time.perf_counter()
    res = optimize(wl, cat.racks["liquid-130kw"], cat, layout="b", time_limit_s=2.0, explain=False)
    assert time.perf_counter() - t < HONOURED_S
    assert res.status in ("time_limit", "feasible")
    assert res.gap is not None and res.gap > 0
    assert res.bound_tasks_per_hour is not None and res.bound_tasks_per_hour > res.throughput_tasks_per_hour
    assert res.configuration is not None and res.throughput_tasks_per_hour > 0
    ev = evaluate_configuration(res.configuration, wl, cat.racks["liquid-130kw"], cat)
    assert ev.throughput_tasks_per_hour == pytest.approx(res.throughput_tasks_per_hour, rel=1e-6)


# ------------------------------------------------------------------------------------------------ simulation

@pytest.fixture(scope="module")
def sim_model():
    cat = load_catalog(MINI)
    model = build_model(Configuration.model_validate(MINI_CONFIG), load_workload("agent", cat), cat)
    # load (or, the first time on a machine, compile) the compiled run loop outside the timed calls: the limits
    # are on simulating, and compiling is once per installation
    simulate_model(model, SimSettings(agents=4, duration_s=1.0, warmup_s=0.0, replications=1))
    return model


def test_simulation_stops_on_its_wall_clock_limit(sim_model):
    st = SimSettings(agents=64, duration_s=1e8, replications=1, wall_clock_s=0.5, drain=False)
    t = time.perf_counter()
    res = simulate_model(sim_model, st)
    assert time.perf_counter() - t < HONOURED_S
    assert res["truncated"] == 1


def test_simulation_cancelled(sim_model):
    st = SimSettings(agents=64, duration_s=1e8, replications=1, wall_clock_s=SOLVE_LIMIT_S, drain=False)
    token = CancelToken()
    threading.Timer(CANCEL_AFTER_S, token.cancel).start()
    t = time.perf_counter()
    with pytest.raises(Cancelled), cancellable(token):
        simulate_model(sim_model, st)
    assert time.perf_counter() - t < HONOURED_S


# ------------------------------------------------------------------------------------------------ HTTP

def _health(c: httpx.Client) -> dict:
    return c.get("/healthz").json()


def _wait_for(c: httpx.Client, pred, limit_s: float = HONOURED_S) -> dict:
    end = time.monotonic() + limit_s
    h = _health(c)
    while time.monotonic() < end and not pred(h):
        time.sleep(0.05)
        h = _health(c)
    return h


def _post_and_leave(url: str, path: str, body: dict, after_s: float) -> None:
    """Send the request, then close the connection after `after_s` without reading the answer."""
    with httpx.Client(base_url=url, timeout=after_s) as c:
        with pytest.raises(httpx.ReadTimeout):
            c.post(path, json=body)


@pytest.fixture(scope="module", params=["process", "thread"])
def server(tmp_path_factory, request):
    """Both places a solve can run: a cancel reaches a worker process through its pipe, a thread directly."""
    s = Server(tmp_path_factory.mktemp("limits"), workers=1, queue_wait_s=60, report_sweep_budget_s=300,
               time_limit_cap_s=60, solve_in=request.param).start()
    yield s
    s.stop()


def test_disconnect_cancels_the_running_solve(server):
    with server.client() as c:
        _post_and_leave(server.url, "/v1/reports", SLOW_REPORT, after_s=1.5)
        h = _wait_for(c, lambda h: h["busy"] == 0)
        assert h["busy"] == 0 and h["cancelled"] == 1, h
        # the slot is free again: a quick solve gets it at once
        r = c.post("/v1/optimize", json={"workload": "agent", "rack": "r40", "explain": False})
        assert r.status_code == 200


def test_disconnect_while_waiting_gives_up_the_place(server):
    with server.client() as c:
        start = _health(c)
        occupier = threading.Thread(target=_post_and_leave, args=(server.url, "/v1/reports", SLOW_REPORT, 6.0))
        occupier.start()
        _wait_for(c, lambda h: h["busy"] == 1)
        _post_and_leave(server.url, "/v1/optimize", {"workload": "agent", "rack": "r40"}, after_s=1.0)
        h = _wait_for(c, lambda h: h["abandoned"] > start["abandoned"] and h["waiting"] == 0)
        assert h["abandoned"] == start["abandoned"] + 1 and h["waiting"] == 0, h
        occupier.join()
        h = _wait_for(c, lambda h: h["busy"] == 0)
        assert h["busy"] == 0 and h["cancelled"] == start["cancelled"] + 1, h
