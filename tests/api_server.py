"""Start a real `advisor serve` (uvicorn) in a subprocess on a free loopback port, for the API tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
MINI = ROOT / "tests" / "data" / "mini"
SLOW_REPORT = {"workload": "agent", "rack": "r40", "racks": 4, "sensitivity": True,
               "power_factors": [0.5, 0.6, 0.75, 0.9, 1.0, 1.1, 1.25, 1.4, 1.5],
               "tool_factors": [0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0],
               "sweep_budget_s": 300, "sweep_time_limit_s": 30, "time_limit_s": 30}
"""A report on MINI whose sensitivity sweeps run far longer than any test waits (3 layouts x 18 sweep points on a
4-rack row; 162 s measured once on this machine): work to cancel or to kill."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


START_TIMEOUT_S = 180.0
"""A start that waits for the server's /healthz: generous, since on a shared 2-core machine under load one start
took more than 60 s (a server that never answers still fails the test, only later)."""


class Server:
    def __init__(self, workdir: Path, log_level: str = "warning", **settings):
        self.workdir, self.log_level = workdir, log_level
        self.settings = {"database": str(workdir / "advisor.db"), "catalog": str(MINI), **settings}
        self.settings = {k: v for k, v in self.settings.items() if v is not None}  # catalog=None: the built-in one
        self.proc: subprocess.Popen | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = START_TIMEOUT_S) -> Server:
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("ADVISOR_")}
        env.update({f"ADVISOR_{k.upper()}": str(v) for k, v in self.settings.items()})
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        log = open(self.workdir / f"server-{self.port}.log", "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from advisor.cli.main import main; main()", "serve", "--host", "127.0.0.1",
             "--port", str(self.port), "--log-level", self.log_level],
            cwd=self.workdir, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: "
                                   + (self.workdir / f"server-{self.port}.log").read_text())
            try:
                if httpx.get(self.url + "/healthz", timeout=1.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("server did not answer /healthz in time")

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None

    def log(self) -> str:
        return (self.workdir / f"server-{self.port}.log").read_text(errors="replace")

    def client(self, **kw) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=kw.pop("timeout", 120.0), **kw)


class KeepAlive:
    """One HTTP/1.1 connection to a server, never reopened behind the caller's back (http.client would): each
    request says whether it went over the same socket as the one before, and whether the server asked to close."""

    def __init__(self, server: Server, timeout: float = 120.0):
        import http.client

        self.conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout)
        self.conn.connect()
        self.port = self.conn.sock.getsockname()[1]

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        if self.conn.sock is None:
            raise ConnectionError("the connection was closed")
        if self.conn.sock.getsockname()[1] != self.port:
            raise ConnectionError("not the same connection")
        self.conn.request(method, path, body=body, headers=headers or {})
        r = self.conn.getresponse()
        data = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data

    def close(self) -> None:
        self.conn.close()
