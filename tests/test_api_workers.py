"""The API's solve worker processes (advisor/api/workers.py): solves run in niced processes, a worker that dies is
replaced (its request answers 500, the next one is served), and stopping or killing the server stops its workers."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from advisor.api.problems import PROBLEM_MEDIA_TYPE, TYPE_PREFIX
from advisor.api.settings import ApiSettings
from api_server import SLOW_REPORT, KeepAlive, Server

QUICK = {"workload": "agent", "rack": "r40", "explain": False}
WAIT_S = 30.0


def workers_of(pid: int) -> list[int]:
    """The server's solve worker processes: its children started by multiprocessing's spawn."""
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            try:
                cmd = Path(f"/proc/{child}/cmdline").read_bytes()
            except FileNotFoundError:
                continue
            if b"spawn_main" in cmd:
                out.append(int(child))
    return sorted(out)


def nice_of(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[16])  # field 19 of proc(5); the split starts at field 3


WORKING_TICKS = 20
"""CPU time (clock ticks, 1/100 s) a worker must use before the test counts it as running its job."""


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime: fields 14 and 15


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_for(c: httpx.Client, pred, limit_s: float = WAIT_S) -> dict:
    end = time.monotonic() + limit_s
    h = c.get("/healthz").json()
    while time.monotonic() < end and not pred(h):
        time.sleep(0.05)
        h = c.get("/healthz").json()
    return h


@pytest.fixture()
def server(tmp_path):
    s = Server(tmp_path, log_level="info", workers=1, queue_wait_s=60, report_sweep_budget_s=300,
               time_limit_cap_s=60).start()
    yield s
    s.stop()


def test_solves_run_in_niced_worker_processes(tmp_path):
    s = Server(tmp_path, workers=2).start()
    try:
        with s.client() as c:
            assert c.get("/healthz").json()["solve_in"] == "process"
            assert c.post("/v1/optimize", json=QUICK).status_code == 200
        kids = workers_of(s.proc.pid)
        assert len(kids) == 2
        want = min(19, nice_of(s.proc.pid) + ApiSettings().worker_nice)
        assert [nice_of(k) for k in kids] == [want, want]
    finally:
        s.stop()
    assert not any(alive(k) for k in kids), "stopping the server leaves no worker behind"


@pytest.mark.slow  # waits out a worker's death and replacement; the fast tier keeps the other worker tests
def test_a_worker_that_dies_is_replaced(server):
    with server.client() as c:
        (first,) = workers_of(server.proc.pid)
        got: dict = {}
        conn = KeepAlive(server)
        t = threading.Thread(target=lambda: got.update(r=conn.request(
            "POST", "/v1/reports", json.dumps(SLOW_REPORT).encode(), {"Content-Type": "application/json"})))
        t.start()
        assert wait_for(c, lambda h: h["busy"] == 1)["busy"] == 1
        # killed once it has taken the job (it uses CPU): a worker that dies before that is replaced, and the job
        # runs there (the next test)
        base = cpu_ticks(first)
        end = time.monotonic() + WAIT_S
        while cpu_ticks(first) < base + WORKING_TICKS and time.monotonic() < end:
            time.sleep(0.05)
        os.kill(first, signal.SIGKILL)
        t.join(WAIT_S)
        status, headers, body = got["r"]
        assert status == 500 and headers["content-type"] == PROBLEM_MEDIA_TYPE
        assert json.loads(body) == {"type": TYPE_PREFIX + "internal", "title": "Internal error", "status": 500,
                                    "detail": "internal error", "errors": []}
        # the 500 leaves the keep-alive connection usable (it used to be reset)
        assert conn.request("GET", "/healthz")[0] == 200
        conn.close()
        h = wait_for(c, lambda h: h["busy"] == 0)
        assert h["busy"] == 0 and h["workers_replaced"] == 1, h
        (second,) = workers_of(server.proc.pid)
        assert second != first
        r = c.post("/v1/optimize", json=QUICK)
        assert r.status_code == 200 and r.json()["status"] == "optimal"
    assert "exited with code -9" in server.log()


@pytest.mark.slow  # waits out a worker's death and replacement; the fast tier keeps the other worker tests
def test_a_worker_that_died_while_idle_is_replaced_before_its_next_job(server):
    with server.client() as c:
        assert c.post("/v1/optimize", json=QUICK).status_code == 200
        (first,) = workers_of(server.proc.pid)
        os.kill(first, signal.SIGKILL)
        end = time.monotonic() + WAIT_S
        while alive(first) and time.monotonic() < end:
            time.sleep(0.05)
        r = c.post("/v1/optimize", json=QUICK)
        assert r.status_code == 200, server.log()
        assert c.get("/healthz").json()["workers_replaced"] == 1


def test_workers_exit_when_their_server_dies(tmp_path):
    s = Server(tmp_path, workers=1, queue_wait_s=60, report_sweep_budget_s=300, time_limit_cap_s=60).start()
    try:
        (worker,) = workers_of(s.proc.pid)

        def post() -> None:
            try:
                s.client().post("/v1/reports", json=SLOW_REPORT)
            except httpx.HTTPError:
                pass  # the server is killed under it

        t = threading.Thread(target=post, daemon=True)
        t.start()
        with s.client() as c:
            assert wait_for(c, lambda h: h["busy"] == 1)["busy"] == 1
        base = cpu_ticks(worker)
        end = time.monotonic() + WAIT_S
        while cpu_ticks(worker) < base + WORKING_TICKS and time.monotonic() < end:
            time.sleep(0.05)
        os.kill(s.proc.pid, signal.SIGKILL)
        s.proc.wait(timeout=WAIT_S)
        end = time.monotonic() + WAIT_S
        while alive(worker) and time.monotonic() < end:
            time.sleep(0.1)
        assert not alive(worker), "an orphaned worker cancels its job and exits"
    finally:
        s.stop()
