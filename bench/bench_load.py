"""Load test of the HTTP API (a script, not a test): a real `advisor serve` on loopback, concurrent clients, a prober.

    python bench/bench_load.py                                # 10,000 requests, built-in catalog (~13 min, 2 cores)
    python bench/bench_load.py --quick                        # ~1 min (stops at 60 s or 2,000 requests)
    python bench/bench_load.py --catalog tests/data/mini      # the small test catalog: cheaper solves
    python bench/bench_load.py --requests 10000 --json load.json

What it does:
  server   `advisor serve` in a subprocess on a free 127.0.0.1 port, its database in a temporary folder, the built-in
           catalog unless --catalog is given (ADVISOR_WORKERS, ADVISOR_SOLVE_IN, ADVISOR_TIME_LIMIT_CAP_S, ADVISOR_QUEUE_WAIT_S and
           ADVISOR_REPORT_SWEEP_BUDGET_S are set from the options below and printed).
  clients  --clients threads, each with its own keep-alive httpx client, draw operations from a fixed mix weighted
           towards cheap calls: catalog lists and entries, evaluate (configurations taken from optimize answers at
           start-up), small optimizes (explain false), an occasional compare, and reports without sensitivity
           sweeps, each followed by GETs of its HTML and JSON. Every request has a timeout; clients stop taking new
           requests at --requests or at --duration-s, whichever comes first.
  prober   a separate process (so the bench's own threads do not delay it) GETs /healthz every --health-interval-s
           on a fixed schedule, from 5 s before the clients start (an idle baseline) to the end; its latencies are
           reported idle, for the whole load and for the probes that found solves running (`busy` > 0).
  memory   the RSS and thread count of the server and its solve worker processes (/proc/<pid>/status VmRSS,
           Threads, summed) every --rss-every requests; the
           least-squares slope of RSS over the second half of the run (after warm-up) in MiB per 1,000 requests;
           "no growth trend" only below --growth-threshold.
Requests in flight at the cap finish (each within its timeout), so the wall time can exceed --duration-s a little.

2xx answers count as ok; 429, and 503 with Retry-After (no solve slot within the server's queue wait), count as
back-pressure, the server's intended answer under overload (the client waits Retry-After, capped, and goes on);
any other status, a malformed body or an exception (timeout included) counts as an error (target 0). Latency
percentiles are over ok answers, nearest-rank, in ms as seen by the client.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]

DEFAULT_REQUESTS = 10_000
"""The memory run: enough requests for a per-request leak of a few hundred bytes to show above allocator noise."""
DEFAULT_DURATION_S = 1800.0
"""Cap of a full run: 10,000 requests take ~13 min on a shared 2-core machine, so 30 min only stops a stuck run."""
QUICK_REQUESTS = 2_000
QUICK_DURATION_S = 60.0
"""--quick: about one minute, whichever of the two comes first."""
DEFAULT_CLIENTS = 16
"""Concurrent clients: 8x the default solve workers (2), so solve requests queue and back-pressure can show."""
SERVER_WORKERS = 2
"""ApiSettings.workers default: solves at the same time (one per core here)."""
TIME_LIMIT_CAP_S = 10.0
"""Server cap on any solve's time limit: bounds a slow solve under contention (the answers used solve in < 1 s)."""
QUEUE_WAIT_S = 10.0
"""ApiSettings.queue_wait_s default: longest wait for a solve slot before 503 + Retry-After."""
REPORT_SWEEP_BUDGET_S = 5.0
"""Reports are requested without sensitivity sweeps; this only bounds them if a request ever asked for them."""
SOLVE_TIME_LIMIT_S = 5.0
"""time_limit_s of the bench's optimize / compare / report requests: small, the cases chosen are optimal well
inside it; the limit only matters when the machine is overloaded."""
REQUEST_TIMEOUT_S = 90.0
"""Client timeout of every request: queue wait (10 s) + a compare's or report's three layouts at the 10 s cap
(30 s) plus their evaluations, with about 2x margin for a shared machine. Nothing legitimate should reach it."""
BACKOFF_CAP_S = 2.0
"""A client told to Retry-After waits that long but at most this, so one overloaded moment does not idle it."""
HEALTH_INTERVAL_S = 0.1
"""Prober period: 10 probes/s gives ~7,500 probes in a full run, enough for a stable p99."""
HEALTH_TIMEOUT_S = 5.0
"""Prober request timeout: 100x the 50 ms target; a probe that reaches it is an error."""
IDLE_PROBE_S = 5.0
"""The prober runs this long before the clients start: an idle baseline (50 probes) to read the loaded figures
against on a shared machine."""
HEALTH_P99_TARGET_MS = 50.0
"""Issue #8's target for /healthz p99 while solves run."""
RSS_EVERY = 100
"""Sample the server RSS every this many completed requests (100 samples in a 10,000-request run)."""
GROWTH_THRESHOLD_MIB_PER_1K = 0.5
"""Slope under which the run shows no growth trend: 0.5 KiB per request, i.e. < 5 MiB over 10,000 requests, about
the size of the allocator's own steps; a leak that keeps each answer (evaluations are KBs) would show far above."""
MIN_TREND_SAMPLES = 5
"""Fewest second-half RSS samples for a slope worth printing."""
SERVER_START_TIMEOUT_S = 60.0
"""The built-in catalog loads in a few seconds; this is a generous bound on a loaded machine."""
ERROR_SAMPLES = 10
"""Error descriptions kept for the report (the count is exact; the messages are examples)."""
KIB_PER_MIB = 1024
POLL_S = 0.1
"""How often the main thread checks whether the clients are done (the run's wall time is this precise)."""
PROGRESS_EVERY_S = 30.0
"""A progress line this often, so a long run shows it is alive."""

OPERATIONS = {  # operation -> weight (per mille of operations; a report operation makes 3 requests)
    "catalog_list": 300,
    "catalog_get": 310,
    "evaluate": 280,
    "optimize": 80,
    "compare": 20,
    "report": 10,
}
"""The mix: ~60% catalog reads (no solve slot), ~30% evaluates (~50 ms of Python each), the rest solves; reports
(seconds each even without sweeps) are rare so that 10,000 requests finish in minutes on 2 cores."""
CATALOG_KINDS = ("cpus", "gpus", "chassis", "racks", "workloads", "served_models")
SOLVE_PAIRS = {  # catalog -> (workload, rack) pairs the solves use
    "builtin": [("swe-agent", "air-40kw"), ("rl-rollout", "air-40kw")],
    "mini": [("agent", "r40"), ("agent", "r15")],
}
"""Small cases (one rack, optimal in well under a second alone); an unknown --catalog uses its first workload and
its first two racks."""


# ----------------------------------------------------------------------------------------------------- the server

def revision() -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"], capture_output=True,
                              text=True, timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_status(pid: int) -> tuple[int, int] | None:
    """(VmRSS in KiB, thread count) of a process, from /proc/<pid>/status; None when it cannot be read."""
    try:
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                      if ":" in line)
        return int(fields["VmRSS"].split()[0]), int(fields["Threads"])
    except (OSError, ValueError, KeyError):
        return None


WORKER_MARK = b"spawn_main"
"""The solve worker processes (advisor/api/workers.py) are the server's children started by multiprocessing's spawn."""


def worker_pids(pid: int) -> list[int]:
    out = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            for child in (task / "children").read_text().split():
                try:
                    if WORKER_MARK in Path(f"/proc/{child}/cmdline").read_bytes():
                        out.append(int(child))
                except OSError:
                    continue
    except OSError:
        pass
    return sorted(out)


def tree_status(pid: int) -> tuple[int, int] | None:
    """(RSS in KiB, thread count) of the server process plus its solve workers (a CBC process a worker runs for a
    moment is left out: it is not the server's memory); None when the server cannot be read."""
    st = proc_status(pid)
    if st is None:
        return None
    kib, threads = st
    for w in worker_pids(pid):
        ws = proc_status(w)
        if ws is not None:
            kib, threads = kib + ws[0], threads + ws[1]
    return kib, threads


class Server:
    """`advisor serve` in a subprocess (the same process is uvicorn: one worker, so its pid is the one to sample,
    with its solve worker processes)."""

    def __init__(self, workdir: Path, catalog: Path | None, workers: int, queue_wait_s: float, solve_in: str):
        self.workdir, self.port = workdir, free_port()
        self.settings = {"database": str(workdir / "advisor.db"), "workers": workers, "solve_in": solve_in,
                         "time_limit_cap_s": TIME_LIMIT_CAP_S, "queue_wait_s": queue_wait_s,
                         "report_sweep_budget_s": REPORT_SWEEP_BUDGET_S}
        if catalog is not None:
            self.settings["catalog"] = str(catalog)
        self.log_path = workdir / "server.log"
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> float:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ADVISOR_")}
        env.update({f"ADVISOR_{k.upper()}": str(v) for k, v in self.settings.items()})
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        t0 = time.monotonic()
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", "from advisor.cli.main import main; main()", "serve", "--host", "127.0.0.1",
                 "--port", str(self.port), "--log-level", "warning"],
                cwd=self.workdir, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        while time.monotonic() < t0 + SERVER_START_TIMEOUT_S:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: {self.log_path.read_text()}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1.0).status_code == 200:
                    return time.monotonic() - t0
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

    def log_problems(self) -> list[str]:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return [ln for ln in text.splitlines() if "Traceback" in ln or "ERROR" in ln or "unhandled" in ln]


# ----------------------------------------------------------------------------------------------------- the prober

def probe_loop(url: str, interval_s: float, stop, out) -> None:
    """In its own process: GET /healthz on a fixed schedule (a slow probe does not push the next ones back) and
    put [(monotonic end, latency s, status or None, busy, error)] on `out` when `stop` is set."""
    rows = []
    with httpx.Client(base_url=url, timeout=HEALTH_TIMEOUT_S) as c:
        nxt = time.monotonic()
        while not stop.is_set():
            t0 = time.monotonic()
            try:
                r = c.get("/healthz")
                busy = r.json().get("busy", 0) if r.status_code == 200 else 0
                rows.append((time.monotonic(), time.monotonic() - t0, r.status_code, busy, None))
            except Exception as e:  # noqa: BLE001 - any failure of a probe is an error to count
                rows.append((time.monotonic(), time.monotonic() - t0, None, 0, repr(e)))
            nxt += interval_s
            time.sleep(max(0.0, nxt - time.monotonic()))
    out.put(rows)


# ----------------------------------------------------------------------------------------------------- the clients

@dataclass
class Sample:
    endpoint: str
    latency_s: float
    outcome: str
    """ok, backpressure or error."""


@dataclass
class Run:
    budget: int
    deadline: float
    pid: int
    rss_every: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    issued: int = 0
    done: int = 0
    samples: list[Sample] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    error_count: int = 0
    backpressure_count: int = 0
    rss: list[tuple[int, int, int]] = field(default_factory=list)
    """(requests done, RSS KiB, threads) of the server and its solve workers."""

    def sample_rss(self, n: int) -> None:
        st = tree_status(self.pid)
        if st is not None:
            with self.lock:
                self.rss.append((n, *st))

    def take(self) -> bool:
        """A ticket for one request: False once the request budget or the time is used up."""
        with self.lock:
            if self.issued >= self.budget or time.monotonic() >= self.deadline:
                return False
            self.issued += 1
            return True

    def record(self, s: Sample, detail: str | None = None) -> None:
        with self.lock:
            self.samples.append(s)
            self.done += 1
            self.backpressure_count += s.outcome == "backpressure"
            if s.outcome == "error":
                self.error_count += 1
                if len(self.errors) < ERROR_SAMPLES:
                    self.errors.append(f"{s.endpoint}: {detail}")
            sample = self.done % self.rss_every == 0
            n = self.done
        if sample:
            self.sample_rss(n)


def call(run: Run, c: httpx.Client, endpoint: str, method: str, path: str, body: dict | None = None,
         check=None) -> httpx.Response | None:
    """One request, timed and classified; the response when it is ok (and `check(response)` holds), else None."""
    t0 = time.perf_counter()
    try:
        r = c.request(method, path, json=body)
    except httpx.HTTPError as e:
        run.record(Sample(endpoint, time.perf_counter() - t0, "error"), repr(e))
        return None
    dt = time.perf_counter() - t0
    if r.status_code == 429 or (r.status_code == 503 and "retry-after" in r.headers):
        run.record(Sample(endpoint, dt, "backpressure"))
        try:
            wait = float(r.headers.get("retry-after", BACKOFF_CAP_S))
        except ValueError:
            wait = BACKOFF_CAP_S
        time.sleep(min(wait, BACKOFF_CAP_S))
        return None
    if not 200 <= r.status_code < 300:
        run.record(Sample(endpoint, dt, "error"), f"{r.status_code} {r.text[:200]}")
        return None
    if check is not None:
        try:
            good = check(r)
        except ValueError as e:  # JSON decode errors are ValueErrors
            run.record(Sample(endpoint, dt, "error"), f"bad body: {e!r}")
            return None
        if not good:
            run.record(Sample(endpoint, dt, "error"), f"unexpected body: {r.text[:200]}")
            return None
    run.record(Sample(endpoint, dt, "ok"))
    return r


@dataclass
class Inputs:
    ids: dict[str, list[str]]
    pairs: list[tuple[str, str]]
    configurations: list[tuple[str, str, dict]]
    """(workload, rack, configuration) from optimize answers."""


def _solve_body(w: str, r: str, **extra) -> dict:
    return {"workload": w, "rack": r, "time_limit_s": SOLVE_TIME_LIMIT_S, **extra}


def operation(run: Run, c: httpx.Client, rng: random.Random, op: str, inp: Inputs) -> None:
    if op == "catalog_list":
        kind = rng.choice(CATALOG_KINDS)
        call(run, c, "GET /v1/catalog/{kind}", "GET", f"/v1/catalog/{kind}",
             check=lambda r, k=kind: len(r.json()) == len(inp.ids[k]))
    elif op == "catalog_get":
        kind = rng.choice(CATALOG_KINDS)
        eid = rng.choice(inp.ids[kind])
        call(run, c, "GET /v1/catalog/{kind}/{id}", "GET", f"/v1/catalog/{kind}/{eid}",
             check=lambda r, e=eid: r.json()["id"] == e)
    elif op == "evaluate":
        w, rk, cfg = rng.choice(inp.configurations)
        call(run, c, "POST /v1/evaluate", "POST", "/v1/evaluate",
             {"configuration": cfg, "workload": w, "rack": rk},
             check=lambda r: r.json()["throughput_tasks_per_hour"] > 0)
    elif op == "optimize":
        w, rk = rng.choice(inp.pairs)
        call(run, c, "POST /v1/optimize", "POST", "/v1/optimize", _solve_body(w, rk, layout="hybrid", explain=False),
             check=lambda r: r.json()["status"] in ("optimal", "feasible", "time_limit"))
    elif op == "compare":
        w, rk = rng.choice(inp.pairs)
        call(run, c, "POST /v1/compare", "POST", "/v1/compare", _solve_body(w, rk, explain=False),
             check=lambda r: isinstance(r.json(), dict))
    elif op == "report":
        w, rk = rng.choice(inp.pairs)
        r = call(run, c, "POST /v1/reports", "POST", "/v1/reports", _solve_body(w, rk, sensitivity=False),
                 check=lambda r: "id" in r.json())
        if r is None:
            return
        rid = r.json()["id"]
        if run.take():
            call(run, c, "GET /v1/reports/{id}", "GET", f"/v1/reports/{rid}",
                 check=lambda r: r.text.lstrip().lower().startswith("<!doctype html"))
        if run.take():
            call(run, c, "GET /v1/reports/{id}.json", "GET", f"/v1/reports/{rid}.json",
                 check=lambda r, i=rid: r.json()["id"] == i)
    else:
        raise ValueError(op)


def client_loop(run: Run, url: str, seed: str, inp: Inputs) -> None:
    rng = random.Random(seed)
    ops, weights = list(OPERATIONS), list(OPERATIONS.values())
    with httpx.Client(base_url=url, timeout=REQUEST_TIMEOUT_S) as c:
        while run.take():
            operation(run, c, rng, rng.choices(ops, weights)[0], inp)


def prepare(url: str, catalog_label: str) -> Inputs:
    """Catalog ids, the solve pairs and one configuration per pair (from an optimize answer); not counted."""
    with httpx.Client(base_url=url, timeout=REQUEST_TIMEOUT_S) as c:
        ids = {k: [e["id"] for e in c.get(f"/v1/catalog/{k}").raise_for_status().json()] for k in CATALOG_KINDS}
        pairs = [p for p in SOLVE_PAIRS.get(catalog_label, []) if p[0] in ids["workloads"] and p[1] in ids["racks"]]
        if not pairs:
            pairs = [(ids["workloads"][0], rk) for rk in ids["racks"][:2]]
        configs = []
        for w, rk in pairs:
            res = c.post("/v1/optimize", json=_solve_body(w, rk, layout="hybrid", explain=False)).raise_for_status()
            if res.json().get("configuration", {}).get("servers"):
                configs.append((w, rk, res.json()["configuration"]))
        if not configs:
            raise RuntimeError(f"no optimize answer with servers for {pairs}")
    return Inputs(ids, pairs, configs)


# ----------------------------------------------------------------------------------------------------- figures

def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return None
    v = sorted(values)
    return v[max(0, math.ceil(q / 100 * len(v)) - 1)]


def slope(points: list[tuple[float, float]]) -> float | None:
    n = len(points)
    if n < 2:
        return None
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else None


def _ms(s: float | None) -> float | None:
    return None if s is None else round(s * 1000, 1)


def endpoint_stats(samples: list[Sample]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for name in sorted({s.endpoint for s in samples}, key=lambda e: (e.split()[1], e)):
        mine = [s for s in samples if s.endpoint == name]
        ok = [s.latency_s for s in mine if s.outcome == "ok"]
        out[name] = {"count": len(mine), "ok": len(ok),
                     "backpressure": sum(s.outcome == "backpressure" for s in mine),
                     "errors": sum(s.outcome == "error" for s in mine),
                     "p50_ms": _ms(percentile(ok, 50)), "p99_ms": _ms(percentile(ok, 99)),
                     "max_ms": _ms(max(ok) if ok else None)}
    return out


def health_stats(rows: list[tuple], busy_only: bool) -> dict:
    mine = [r for r in rows if not busy_only or r[3] > 0]
    ok = [r[1] for r in mine if r[2] == 200]
    return {"count": len(mine), "ok": len(ok), "backpressure": 0, "errors": len(mine) - len(ok),
            "p50_ms": _ms(percentile(ok, 50)), "p99_ms": _ms(percentile(ok, 99)),
            "max_ms": _ms(max(ok) if ok else None)}


def print_table(rows: dict[str, dict]) -> None:
    def f(v) -> str:
        return "-" if v is None else f"{v:,.1f}"

    print(f"\n{'endpoint':<36} {'count':>7} {'ok':>7} {'429/503':>7} {'errors':>6} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'max ms':>8}")
    for name, s in rows.items():
        print(f"{name:<36} {s['count']:>7,} {s['ok']:>7,} {s['backpressure']:>7,} {s['errors']:>6,} "
              f"{f(s['p50_ms']):>8} {f(s['p99_ms']):>8} {f(s['max_ms']):>8}")


def memory_stats(rss: list[tuple[int, int, int]], total: int, threshold: float) -> dict:
    second = [(n / 1000, kib / KIB_PER_MIB) for n, kib, _ in rss if n >= total / 2]
    m = slope(second) if len(second) >= MIN_TREND_SAMPLES else None
    return {"start_mib": round(rss[0][1] / KIB_PER_MIB, 1), "end_mib": round(rss[-1][1] / KIB_PER_MIB, 1),
            "peak_mib": round(max(k for _, k, _ in rss) / KIB_PER_MIB, 1), "samples": len(rss),
            "threads_start": rss[0][2], "threads_end": rss[-1][2], "threads_max": max(t for _, _, t in rss),
            "second_half_samples": len(second), "slope_mib_per_1k": None if m is None else round(m, 3),
            "threshold_mib_per_1k": threshold,
            "trend": None if m is None else ("no growth trend" if m < threshold else "GROWS"),
            "series": [{"requests": n, "rss_kib": k, "threads": t} for n, k, t in rss]}


# ----------------------------------------------------------------------------------------------------- main

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=None, help=f"Total requests (default {DEFAULT_REQUESTS:,}; "
                    f"--quick {QUICK_REQUESTS:,}); /healthz probes are not counted.")
    ap.add_argument("--duration-s", type=float, default=None,
                    help=f"Stop taking new requests after this (default {DEFAULT_DURATION_S:g}; --quick "
                         f"{QUICK_DURATION_S:g}).")
    ap.add_argument("--quick", action="store_true", help="About one minute.")
    ap.add_argument("--clients", type=int, default=DEFAULT_CLIENTS)
    ap.add_argument("--catalog", type=Path, default=None, help="Catalog folder to serve (default: built-in).")
    ap.add_argument("--workers", type=int, default=SERVER_WORKERS, help="Server solve workers (ADVISOR_WORKERS).")
    ap.add_argument("--queue-wait-s", type=float, default=QUEUE_WAIT_S, help="ADVISOR_QUEUE_WAIT_S.")
    ap.add_argument("--solve-in", choices=("process", "thread"), default="process",
                    help="ADVISOR_SOLVE_IN: solves in worker processes (default) or server threads.")
    ap.add_argument("--health-interval-s", type=float, default=HEALTH_INTERVAL_S)
    ap.add_argument("--rss-every", type=int, default=RSS_EVERY, help="Sample the server RSS every N requests.")
    ap.add_argument("--growth-threshold", type=float, default=GROWTH_THRESHOLD_MIB_PER_1K,
                    help="MiB per 1,000 requests below which the RSS shows no growth trend.")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None, help="Write the figures to this file.")
    a = ap.parse_args()
    budget = a.requests or (QUICK_REQUESTS if a.quick else DEFAULT_REQUESTS)
    duration = a.duration_s or (QUICK_DURATION_S if a.quick else DEFAULT_DURATION_S)
    catalog = a.catalog.resolve() if a.catalog else None
    rev = revision()
    label = "builtin" if catalog is None else ("mini" if catalog == (ROOT / "tests/data/mini").resolve() else "custom")

    with tempfile.TemporaryDirectory(prefix="bench-load-") as tmp:
        srv = Server(Path(tmp), catalog, a.workers, a.queue_wait_s, a.solve_in)
        print(f"revision {rev} | catalog: {'built-in' if catalog is None else catalog} | "
              f"server: advisor serve on {srv.url}, "
              f"database in {tmp} | settings: " + ", ".join(f"{k}={v}" for k, v in srv.settings.items()
                                                            if k not in ("database", "catalog")), flush=True)
        startup_s = srv.start()
        pid = srv.proc.pid
        try:
            inp = prepare(srv.url, label)
            print(f"started in {startup_s:.1f} s (pid {pid}); solve pairs {inp.pairs}; {a.clients} clients, "
                  f"{budget:,} requests or {duration:g} s; /healthz every {a.health_interval_s:g} s; RSS every "
                  f"{a.rss_every} requests; mix per mille of operations {OPERATIONS}", flush=True)
            ctx = mp.get_context("spawn")
            stop, out = ctx.Event(), ctx.Queue()
            prober = ctx.Process(target=probe_loop, args=(srv.url, a.health_interval_s, stop, out), daemon=True)
            prober.start()
            time.sleep(IDLE_PROBE_S)
            t0 = time.monotonic()
            run = Run(budget=budget, deadline=t0 + duration, pid=pid, rss_every=a.rss_every)
            run.sample_rss(0)
            threads = [threading.Thread(target=client_loop, args=(run, srv.url, f"{a.seed}-{i}", inp), daemon=True)
                       for i in range(a.clients)]
            for t in threads:
                t.start()
            last = t0
            while any(t.is_alive() for t in threads):
                time.sleep(POLL_S)
                if time.monotonic() - last >= PROGRESS_EVERY_S:
                    last = time.monotonic()
                    print(f"  {last - t0:6.0f} s  {run.done:,} requests  {run.backpressure_count} 429/503  "
                          f"{run.error_count} errors  RSS "
                          f"{(tree_status(pid) or (0, 0))[0] / KIB_PER_MIB:.0f} MiB", flush=True)
                if time.monotonic() > run.deadline + REQUEST_TIMEOUT_S:
                    print("clients still busy a request timeout after the cap; stopping without them", flush=True)
                    break
            wall = time.monotonic() - t0
            run.sample_rss(run.done)
            with run.lock:
                samples, total, errors, rss = list(run.samples), run.done, list(run.errors), list(run.rss)
            stop.set()
            probes = out.get(timeout=HEALTH_TIMEOUT_S * 2)
            prober.join(timeout=HEALTH_TIMEOUT_S)
            alive = srv.proc.poll() is None
        finally:
            srv.stop()
        log_problems = srv.log_problems()

    rows = endpoint_stats(samples)
    idle = [p for p in probes if p[0] < t0]
    during = [p for p in probes if t0 <= p[0] <= t0 + wall]
    rows["GET /healthz (prober, idle, before)"] = health_stats(idle, busy_only=False)
    rows["GET /healthz (prober, under load)"] = health_stats(during, busy_only=False)
    rows["GET /healthz (while solves run)"] = health_stats(during, busy_only=True)
    mem = memory_stats(rss, total, a.growth_threshold)
    ok = sum(s.outcome == "ok" for s in samples)
    bp = sum(s.outcome == "backpressure" for s in samples)
    err = sum(s.outcome == "error" for s in samples)
    busy_p99 = rows["GET /healthz (while solves run)"]["p99_ms"]

    print_table(rows)
    print(f"\ntotal {total:,} requests in {wall:.1f} s = {total / wall:,.1f} requests/s; ok {ok:,}, 429/503 {bp:,}, "
          f"errors {err:,} (target 0)")
    print(f"/healthz p99 while solves run: {busy_p99} ms (target < {HEALTH_P99_TARGET_MS:g} ms: "
          f"{'met' if busy_p99 is not None and busy_p99 < HEALTH_P99_TARGET_MS else 'MISSED'})")
    trend = mem["trend"] or f"too few samples for a trend (< {MIN_TREND_SAMPLES} in the second half)"
    m = "-" if mem["slope_mib_per_1k"] is None else mem["slope_mib_per_1k"]
    print(f"server + worker RSS: {mem['start_mib']} MiB at start, {mem['end_mib']} MiB at end, peak {mem['peak_mib']} MiB; "
          f"slope over the second half ({mem['second_half_samples']} samples): {m} MiB per "
          f"1,000 requests (threshold {a.growth_threshold:g}): {trend}; threads {mem['threads_start']} at "
          f"start, {mem['threads_end']} at end, max {mem['threads_max']}")
    print(f"server {'still running' if alive else 'EXITED'} at the end; server log error lines: {len(log_problems)}")
    for line in errors:
        print(f"  error: {line}")
    for line in log_problems[:ERROR_SAMPLES]:
        print(f"  server log: {line}")

    if a.json:
        a.json.write_text(json.dumps({
            "revision": rev, "catalog": "built-in" if catalog is None else str(catalog), "clients": a.clients,
            "server_settings": {k: v for k, v in srv.settings.items() if k != "database"},
            "mix_per_mille": OPERATIONS, "requests": total, "wall_s": round(wall, 2),
            "requests_per_s": round(total / wall, 2), "ok": ok, "backpressure": bp, "errors": err,
            "error_samples": errors, "endpoints": rows, "healthz_p99_target_ms": HEALTH_P99_TARGET_MS,
            "memory": mem, "server_alive_at_end": alive, "server_log_error_lines": log_problems[:ERROR_SAMPLES],
        }, indent=2))
        print(f"figures written to {a.json}")
    return 0 if err == 0 and alive else 1


if __name__ == "__main__":
    sys.exit(main())
