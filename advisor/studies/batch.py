"""Batch optimizer: solve many scenarios x layouts in worker processes (or on a Dask cluster), into SQLite.

Each (scenario, layout) is one solve with a canonical input hash (see advisor.studies.scenarios). Results go to
OUT/results.sqlite, table `results`, one row per scenario x layout, written by the coordinating process only, each
finished solve committed in its own transaction (WAL journal, synchronous=FULL). So:
- a rerun skips every (scenario, layout) whose row already holds the same hash, and copies the answer for a new name
  whose hash is already solved; identical inputs in one run are solved once;
- Ctrl-C, SIGTERM or kill -9 lose no committed row and leave no half-written one (SQLite's journal), and a rerun
  continues where the last stopped;
- an exception inside one solve is recorded as status `error` with its reason and the batch goes on; a worker process
  that dies (segfault, os._exit, OOM) breaks the local pool: the pool is rebuilt and the solves that were in flight
  are retried, one at a time, and one that kills its worker again is recorded as an error.
Errors are not retried on a rerun unless `retry_errors` is set; scenarios that cannot be resolved (bad override
value, unknown id) are recorded as errors on every run.

The executor is the only thing that differs between local and cluster runs: a `ProcessPoolExecutor` (forkserver,
`workers` processes, default os.cpu_count()), the calling process (`workers=0`), or a Dask distributed Client's
concurrent.futures executor (`scheduler="tcp://host:8786"`, a Client or a LocalCluster); the Dask workers need
rack-advisor installed. Exports: results.csv, results.json and report.html (templates/batch.html.j2).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import socket
import sys
import sqlite3
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import closing
from dataclasses import dataclass, field
from datetime import datetime, UTC
from pathlib import Path
from typing import Any

from advisor.errors import InputError
from advisor.studies.batch_report import export_all
from advisor.studies.results import BUSY_TIMEOUT_S, COLUMN_NAMES, DB_NAME, write_rows, connect, read_rows  # noqa: F401 - read_rows, COLUMN_NAMES: part of the batch API
from advisor.studies.scenarios import Resolved, Scenario, canonical_json, resolve, sha256_of

LAYOUT_WORK = {"hybrid": 3, "b": 2, "a": 1}
"""Relative solve work by layout, for dispatching the heaviest solves first: a hybrid solve searches several queue
partitions (a tail-wait or memory model each), B one, A one small model after its GPU-first stage. On the built-in
grid (`bench/bench_batch.py --builtin --per-solve`) hybrid solves took 0.5-26 s, B 0.2-5.7 s, A 0.1-0.5 s."""


def expected_work(job: Job) -> tuple[int, int, float]:
    """Sort key, larger first: layout, then racks (a row adds its pattern search), then the time limit (what the
    solve may use). Longest-processing-time-first dispatch: a heavy solve started last would leave the other
    workers idle while it runs."""
    inp = job.inputs or {}
    return LAYOUT_WORK.get(job.layout, 0), int(inp.get("racks", 1)), float(inp.get("time_limit_s", 0.0))


MAX_CRASH_RETRIES = 1
"""A solve in flight when a worker process died is retried alone this many times before it is recorded as a crash."""

RESULT_FIELDS = ("status", "throughput", "predicted", "power_w", "space_u", "capital_usd", "cost_usd_per_hour",
                 "cost_usd_per_1000_tasks", "energy_wh_per_task", "gap", "bottleneck",
                 "binding_json", "configuration_json", "message", "solve_seconds", "started", "finished", "worker",
                 "error")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


# ----------------------------------------------------------------------------------------------------------------
# The solve (runs in a worker)

_CATALOGS: dict[str, Any] = {}


def _catalog(digest: str, data: dict):
    cat = _CATALOGS.get(digest)
    if cat is None:
        from models.catalog import Catalog
        from models.hardware import Chassis, CpuSku, GpuSku

        cat = Catalog.build(cpus=[CpuSku.model_validate(d) for d in data["cpus"]],
                            gpus=[GpuSku.model_validate(d) for d in data["gpus"]],
                            chassis=[Chassis.model_validate(d) for d in data["chassis"]])
        _CATALOGS.clear() if len(_CATALOGS) > 16 else None
        _CATALOGS[digest] = cat
    return cat


def solve_job(inputs: dict, catalog_json: dict) -> dict:
    """One optimize() call from resolved inputs; never raises for a bad scenario (the error becomes the row)."""
    started, t0 = _now(), time.perf_counter()
    worker = f"{socket.gethostname()}:{os.getpid()}"
    try:
        from advisor import service
        from advisor.optimizer.settings import OptimizerSettings
        from advisor.requests import OptimizeRequest
        from models.config import Configuration

        cat = _catalog(inputs["catalog_sha256"], catalog_json)
        req = OptimizeRequest.model_validate(dict(
            workload=inputs["workload"], rack=inputs["rack"], layout=inputs["layout"], racks=inputs["racks"],
            solver=inputs["solver"], time_limit_s=inputs["time_limit_s"], objective=inputs["objective"],
            required_tasks_per_hour=inputs["required_tasks_per_hour"],
            capital_budget_usd=inputs["capital_budget_usd"], gpu_ids=inputs["gpu_ids"], cpu_ids=inputs["cpu_ids"],
            explain=False, allow_removal=inputs.get("allow_removal", False),
            keep_hardware=inputs.get("keep_hardware", False),
            existing=Configuration.model_validate(inputs["existing"]) if inputs.get("existing") else None))
        res = service.optimize(req, cat, settings=OptimizerSettings.model_validate(inputs["settings"]))
        return dict(
            status=res.status, throughput=res.throughput_tasks_per_hour, predicted=res.predicted_tasks_per_hour,
            power_w=res.power_w, space_u=res.space_u,
            **_tco_fields(res.tco), gap=res.gap,
            bottleneck=res.bottleneck, binding_json=json.dumps(res.binding_constraints),
            configuration_json=json.dumps(res.configuration), message=res.message,
            solve_seconds=time.perf_counter() - t0, started=started, finished=_now(), worker=worker, error=None)
    except InputError as e:  # a bad scenario is a failed row, not the end of the batch
        return _error_fields(str(e), started, time.perf_counter() - t0, worker)
    except Exception as e:  # noqa: BLE001 - a bug fails its row too (finished work is kept), marked as a bug
        tb = traceback.extract_tb(e.__traceback__)
        at = f" (at {Path(tb[-1].filename).name}:{tb[-1].lineno})" if tb else ""
        return _error_fields(f"internal error (a bug in rack-advisor, please report it): {type(e).__name__}: {e}{at}",
                             started, time.perf_counter() - t0, worker)


def _tco_fields(t) -> dict:
    """Cost columns of a result row from its `models.tco.Tco` (None where unknown)."""
    return dict(capital_usd=t.capital_usd if t else None, cost_usd_per_hour=t.cost_usd_per_hour if t else None,
                cost_usd_per_1000_tasks=t.cost_usd_per_1000_tasks if t else None,
                energy_wh_per_task=t.energy_wh_per_task if t else None)


def _error_fields(reason: str, started: str | None = None, seconds: float | None = None,
                  worker: str | None = None) -> dict:
    return dict(status="error", throughput=None, predicted=None, power_w=None, space_u=None, **_tco_fields(None),
                gap=None, bottleneck=None, binding_json=None, configuration_json=None, message=None,
                solve_seconds=seconds, started=started or _now(), finished=_now(), worker=worker, error=reason)


PARENT_POLL_S = 0.5
"""How often a worker checks that its coordinator is still there (a worker outlives it by at most this, plus the
time to exit)."""


def _proc_start_ticks(pid: int) -> int | None:
    """Start time of a live process (clock ticks since boot, /proc/PID/stat field 22); None when it is gone or a
    zombie. Compared, not just looked up, so that a reused pid is not taken for the coordinator."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else int(fields[19])


def die_with(coordinator_pid: int) -> None:
    """Exit this process as soon as the coordinator is gone (killed with SIGKILL included, which runs no clean-up in
    it): a daemon thread polls the coordinator's /proc entry and calls os._exit. Solver processes this one starts
    die with it (advisor/solver/backends.py asks the kernel for that). Linux only (/proc); elsewhere a no-op."""
    if not sys.platform.startswith("linux"):
        return
    start = _proc_start_ticks(coordinator_pid)
    if start is None:
        os._exit(1)

    def watch() -> None:
        while _proc_start_ticks(coordinator_pid) == start:
            time.sleep(PARENT_POLL_S)
        os._exit(1)

    import threading

    threading.Thread(target=watch, name="advisor-coordinator-watch", daemon=True).start()


def _worker_init(coordinator_pid: int | None = None) -> None:
    # The coordinator handles Ctrl-C; a worker (and its CBC child) keeps going until it is shut down, or until the
    # coordinator is gone.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if coordinator_pid is not None:
        die_with(coordinator_pid)


# ----------------------------------------------------------------------------------------------------------------
# Jobs and the database


@dataclass
class Job:
    scenario: str
    layout: str
    hash: str
    scenario_hash: str | None
    base: str | None
    sample: int | None
    overrides_json: str
    inputs: dict | None
    catalog_json: dict | None
    error: str | None = None
    """Set when the scenario could not be resolved."""

    def meta(self) -> dict:
        return dict(scenario=self.scenario, layout=self.layout, hash=self.hash, scenario_hash=self.scenario_hash,
                    base=self.base, sample=self.sample, overrides_json=self.overrides_json,
                    inputs_json=canonical_json(self.inputs) if self.inputs is not None else None)


def make_jobs(scenarios: Iterable[Scenario]) -> list[Job]:
    jobs = []
    for s in scenarios:
        over = canonical_json(s.overrides)
        try:
            r: Resolved | None = resolve(s)
            err = None
        except InputError as e:
            r, err = None, str(e)
        for lay in s.layouts:
            if r is None:
                h = sha256_of({"unresolved": s.model_dump(mode="json"), "layout": lay})
                jobs.append(Job(s.name, lay, h, None, s.base, s.sample, over, None, None, err))
            else:
                jobs.append(Job(s.name, lay, r.input_hash(lay), r.scenario_hash, s.base, s.sample, over,
                                r.inputs(lay), r.catalog_json))
    return jobs


# ----------------------------------------------------------------------------------------------------------------
# Executors


class _Inline:
    """Runs each job in the calling process when submitted (workers=0)."""

    def submit(self, fn, *args) -> Future:
        f: Future = Future()
        try:
            f.set_result(fn(*args))
        except BaseException as e:  # noqa: BLE001
            f.set_exception(e)
        return f

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        pass


def _local_pool(workers: int) -> ProcessPoolExecutor:
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["advisor.studies.batch", "advisor.optimizer.optimize"])
    return ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_worker_init,
                               initargs=(os.getpid(),))


def _dask_client(scheduler: Any):
    try:
        from distributed import Client
    except ImportError:
        raise InputError("--scheduler needs Dask: pip install 'dask[distributed]'") from None
    if isinstance(scheduler, Client):
        return scheduler, False
    return Client(scheduler), True


@dataclass
class RunStats:
    rows: int = 0
    """scenario x layout rows asked for."""
    skipped: int = 0
    """Already in the database with the same inputs."""
    copied: int = 0
    """Inputs already solved under another name (or duplicated in this run): answer copied, no solve."""
    solved: int = 0
    """Solves run (unique hashes)."""
    written: int = 0
    """Rows written this run (solved, copied or unresolved)."""
    errors: int = 0
    """Rows of this run's scenarios whose status is error (after the run)."""
    interrupted: bool = False
    seconds: float = 0.0
    statuses: dict[str, int] = field(default_factory=dict)

    def line(self, where: str = "") -> str:
        rate = self.solved / self.seconds * 60 if self.seconds > 0 else 0.0
        st = ", ".join(f"{v} {k}" for k, v in sorted(self.statuses.items()))
        head = "interrupted" if self.interrupted else "done"
        return (f"{head}: {self.rows} rows ({st or 'none'}); {self.solved} solved, {self.skipped} already done, "
                f"{self.copied} copied from equal inputs; {self.seconds:.1f} s ({rate:.1f} solves/min)"
                + (f" -> {where}" if where else ""))


def _progress(total: int, enabled: bool):
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)
    from rich.text import Text

    class Rate(ProgressColumn):
        def render(self, task) -> Text:  # noqa: ANN001
            speed = task.finished_speed or task.speed
            return Text(f"{speed * 60:,.1f}/min" if speed else "-/min", style="progress.data.speed")

    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), Rate(),
                    TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                    console=Console(stderr=True), disable=not enabled, transient=False)


class Runner:
    """Solves scenarios into one results database; keeps its executor open across `run` calls (what-if studies
    call it point after point)."""

    def __init__(self, out_dir: Path | str | None = None, workers: int | None = None, scheduler: Any = None,
                 progress: bool = False, retry_errors: bool = False,
                 solve_fn: Callable[[dict, dict], dict] = solve_job):
        self._tmp = None
        if out_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="advisor-batch-")
            out_dir = self._tmp.name
        self.out_dir = Path(out_dir)
        self._lock = None
        try:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            if self._tmp is None:
                self._lock = FolderLock(self.out_dir)
            self.db_path = self.out_dir / DB_NAME
            self._db = connect(self.db_path)
        except OSError as e:
            if self._lock is not None:
                self._lock.release()
            raise InputError(f"output folder {self.out_dir}: cannot write there ({e.strerror or e})") from None
        except BaseException:
            if self._lock is not None:
                self._lock.release()
            raise
        self.workers = (os.cpu_count() or 1) if workers is None else workers
        self.scheduler = scheduler
        self.progress = progress
        self.retry_errors = retry_errors
        self.solve_fn = solve_fn
        self._executor = None
        self._client = None
        self._own_client = False

    # -- executor
    def _get_executor(self):
        if self._executor is None:
            if self.scheduler is not None:
                self._client, self._own_client = _dask_client(self.scheduler)
                self._executor = self._client.get_executor()
            elif self.workers <= 0:
                self._executor = _Inline()
            else:
                self._executor = _local_pool(self.workers)
        return self._executor

    def _slots(self) -> int:
        if self.scheduler is not None:
            try:
                return max(1, sum(self._client.nthreads().values())) * 2
            except Exception:  # noqa: BLE001
                return 4
        return max(1, self.workers)

    def _reset_pool(self) -> None:
        if isinstance(self._executor, ProcessPoolExecutor):
            self._executor.shutdown(wait=False, cancel_futures=True)
        self._executor = None

    def close(self) -> None:
        if self._executor is not None:
            if isinstance(self._executor, ProcessPoolExecutor):
                self._executor.shutdown(wait=True, cancel_futures=True)
            elif self.scheduler is not None:
                self._executor.shutdown(wait=False)
            self._executor = None
        if self._client is not None and self._own_client:
            self._client.close()
        self._client = None
        self._db.close()
        if self._lock is not None:
            self._lock.release()
            self._lock = None
        if self._tmp is not None:
            self._tmp.cleanup()

    def _abort(self) -> None:
        """After Ctrl-C: stop the local workers now (their unfinished solves are simply not recorded)."""
        ex = self._executor
        if isinstance(ex, ProcessPoolExecutor):
            procs = list(getattr(ex, "_processes", {}).values())
            ex.shutdown(wait=False, cancel_futures=True)
            for p in procs:
                try:
                    p.kill()
                    p.join(2)
                except Exception:  # noqa: BLE001
                    pass
            self._executor = None

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- running
    def run(self, scenarios: Iterable[Scenario] | list[Job], description: str = "solving") -> RunStats:
        t0 = time.perf_counter()
        items = list(scenarios)
        jobs = items if items and isinstance(items[0], Job) else make_jobs(items)  # type: ignore[arg-type]
        stats = RunStats(rows=len(jobs))
        existing = {(r[0], r[1]): (r[2], r[3]) for r in
                    self._db.execute("SELECT scenario, layout, hash, status FROM results")}
        by_hash: dict[str, str] = {}
        for (sc, lay), (h, status) in existing.items():
            if status != "error" or not self.retry_errors:
                by_hash.setdefault(h, f"{sc}\x00{lay}")
        todo: dict[str, list[Job]] = {}
        unresolved, copies = [], []
        for j in jobs:
            if j.error is not None:
                unresolved.append(j)
                continue
            have = existing.get((j.scenario, j.layout))
            if have and have[0] == j.hash and (have[1] != "error" or not self.retry_errors):
                stats.skipped += 1
            elif j.hash in by_hash:
                copies.append(j)
            else:
                todo.setdefault(j.hash, []).append(j)
        stats.copied = len(copies) + sum(len(v) - 1 for v in todo.values())
        if unresolved:
            write_rows(self._db, [{**j.meta(), **_error_fields(f"InputError: {j.error}")} for j in unresolved])
            stats.written += len(unresolved)
        if copies:
            self._copy(copies)
            stats.written += len(copies)
        try:
            self._solve_all(todo, stats, description)
        except KeyboardInterrupt:
            stats.interrupted = True
            self._abort()
        stats.seconds = time.perf_counter() - t0
        names = {(j.scenario, j.layout) for j in jobs}
        for sc, lay, status in self._db.execute("SELECT scenario, layout, status FROM results"):
            if (sc, lay) in names:
                stats.statuses[status] = stats.statuses.get(status, 0) + 1
        stats.errors = stats.statuses.get("error", 0)
        return stats

    def _copy(self, jobs: list[Job]) -> None:
        self._db.row_factory = sqlite3.Row
        try:
            rows = []
            for j in jobs:
                src = self._db.execute("SELECT * FROM results WHERE hash = ? ORDER BY status = 'error' LIMIT 1",
                                       (j.hash,)).fetchone()
                rows.append({**{k: src[k] for k in RESULT_FIELDS}, **j.meta()})
        finally:
            self._db.row_factory = None
        write_rows(self._db, rows)

    def _solve_all(self, todo: dict[str, list[Job]], stats: RunStats, description: str) -> None:
        if not todo:
            return
        queue = list(todo)
        if self._slots() > 1:  # one slot runs them in any order in the same time; keep the scenarios' order there
            queue.sort(key=lambda h: expected_work(todo[h][0]), reverse=True)
        crashes: dict[str, int] = {}
        isolate: list[str] = []  # hashes to retry alone after a worker died with them in flight
        total_rows = sum(len(v) for v in todo.values())
        prev_term = None
        if threading_is_main():
            def on_term(signum, frame):  # noqa: ANN001
                raise KeyboardInterrupt
            prev_term = signal.signal(signal.SIGTERM, on_term)
        try:
            with _progress(total_rows, self.progress) as bar:
                task = bar.add_task(description, total=total_rows)
                inflight: dict[Future, str] = {}
                while queue or isolate or inflight:
                    ex = self._get_executor()
                    if isolate:  # after a worker died: one solve at a time until the suspects are cleared
                        if not inflight:
                            h = isolate.pop(0)
                            inflight[self._submit(ex, todo[h][0])] = h
                    else:
                        while queue and len(inflight) < self._slots():
                            h = queue.pop(0)
                            inflight[self._submit(ex, todo[h][0])] = h
                    if not inflight:
                        continue
                    done, _ = wait(list(inflight), return_when=FIRST_COMPLETED)
                    broken = False
                    for f in done:
                        h = inflight.pop(f)
                        try:
                            fields = f.result()
                        except BrokenProcessPool:
                            broken = True
                            crashes[h] = crashes.get(h, 0) + 1
                            if crashes[h] > MAX_CRASH_RETRIES:
                                fields = _error_fields("worker process died while solving this scenario "
                                                       f"({crashes[h]} times); see the worker's stderr")
                            else:
                                isolate.append(h)
                                continue
                        except Exception as e:  # noqa: BLE001 - e.g. Dask KilledWorker
                            fields = _error_fields(f"executor: {type(e).__name__}: {e}")
                        write_rows(self._db, [{**j.meta(), **fields} for j in todo[h]])
                        stats.solved += 1
                        stats.written += len(todo[h])
                        bar.advance(task, len(todo[h]))
                    if broken:
                        for f, h in list(inflight.items()):  # every other solve in flight died with the pool
                            crashes[h] = crashes.get(h, 0) + 1
                            isolate.append(h)
                        inflight.clear()
                        self._reset_pool()
        finally:
            if prev_term is not None:
                signal.signal(signal.SIGTERM, prev_term)

    def _submit(self, ex, job: Job) -> Future:
        return ex.submit(self.solve_fn, job.inputs, job.catalog_json)


LOCK_NAME = ".advisor.lock"


class FolderBusy(InputError):
    """Another run holds the output folder."""


class FolderLock:
    """An exclusive lock on an output folder (flock on OUT/.advisor.lock), so that two runs never solve the same
    scenarios twice or race on the exports. The holder writes its pid, host and start time into the file, which a
    refused run quotes. The kernel releases the lock when the holder exits, SIGKILL included: a stale lock file
    never blocks. POSIX only; elsewhere no lock is taken."""

    def __init__(self, folder: Path):
        self.path = folder / LOCK_NAME
        self.fd: int | None = None
        try:
            import fcntl
        except ImportError:  # Windows
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 4096).decode("utf-8", "replace").strip() or "another process"
            os.close(fd)
            raise FolderBusy(f"output folder {folder} is in use by {holder}; wait for it to finish or give "
                             "another --out") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()} since {_now()}".encode())
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            import fcntl

            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


def threading_is_main() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


# ----------------------------------------------------------------------------------------------------------------
# Public entry point


@dataclass
class BatchSummary:
    stats: RunStats
    out_dir: Path
    db: Path
    exports: dict[str, Path]
    failed: list[tuple[str, str, str]] = field(default_factory=list)
    """(scenario, layout, reason) of every row of this run's scenarios whose status is error."""
    not_optimal: list[tuple[str, str, str]] = field(default_factory=list)
    """(scenario, layout, status) of every other row that is not `optimal` (infeasible, time_limit, ...)."""

    @property
    def line(self) -> str:
        return self.stats.line(str(self.db))


def _outcomes(db_path: Path, names: list[str]) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]]:
    order = {n: i for i, n in enumerate(names)}
    failed, other = [], []
    with closing(sqlite3.connect(db_path)) as db:
        for sc, lay, status, error in db.execute("SELECT scenario, layout, status, error FROM results"):
            if sc not in order:
                continue
            if status == "error":
                failed.append((sc, lay, (error or "unknown error").strip().splitlines()[-1]))
            elif status != "optimal":
                other.append((sc, lay, status))
    key = lambda t: (order[t[0]], t[1])  # noqa: E731
    return sorted(failed, key=key), sorted(other, key=key)


def run_batch(scenarios: Iterable[Scenario] | str | Path, out_dir: Path | str, workers: int | None = None,
              scheduler: Any = None, progress: bool = False, retry_errors: bool = False, export: bool = True,
              solve_fn: Callable[[dict, dict], dict] = solve_job) -> BatchSummary:
    """Solve every scenario x layout into OUT/results.sqlite (skipping what is done), then export CSV/JSON/HTML."""
    if isinstance(scenarios, (str, Path)):
        from advisor.studies.scenarios import load_scenarios

        scenarios = load_scenarios(scenarios)
    scenarios = list(scenarios)
    out = Path(out_dir)
    with Runner(out, workers=workers, scheduler=scheduler, progress=progress, retry_errors=retry_errors,
                solve_fn=solve_fn) as runner:
        jobs = make_jobs(scenarios)
        if jobs and all(j.error is not None for j in jobs):
            raise InputError(f"no scenario could be resolved; the first: {jobs[0].error}")
        stats = runner.run(jobs, description="batch")
        exports = {}
        if export and not stats.interrupted:  # under the folder's lock, so that runs never race on the exports
            try:
                exports = export_all(out, [s.name for s in scenarios])
            except OSError as e:
                raise InputError(f"output folder {out}: cannot write the exports ({e.strerror or e})") from None
    failed, not_optimal = _outcomes(out / DB_NAME, [s.name for s in scenarios])
    return BatchSummary(stats, out, out / DB_NAME, exports, failed, not_optimal)
