"""Solve worker processes for the HTTP API.

Solves are CPU-bound Python (model building, tail-wait curves, evaluation) around the solver's own work. Run in
threads of the server they hold the GIL, and the event loop waits for it on every wake-up: /healthz and catalog
reads then take a solve's GIL slices (p99 142 ms under load, bench/bench_load.py). In processes they do not share
the server's GIL, and at a higher niceness the OS schedules the event loop ahead of them on a busy machine.

Each worker is a spawned process (spawn, not fork: the server has threads) that holds the catalog and runs one job
at a time. The pipe protocol, parent to worker: ("run", job_id, fn, args), ("cancel", job_id), ("stop",); worker to
parent: ("ready",) once, then ("started", job_id) and ("done", job_id, ok, value or exception) per job. A cancel sets the job's
`CancelToken` (advisor/cancel.py), so the job stops at its next check and its CBC process is killed, exactly as in
a thread; the worker lives on. A worker that dies (killed, out of memory) is replaced, and its job fails. A worker
whose server dies sees its pipe close, cancels its job and exits.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import pickle
import queue
import threading
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any
from collections.abc import Callable

from advisor.cancel import CancelToken, cancellable
from advisor.catalog import builtin_catalog, catalog_refs_only, load_catalog

log = logging.getLogger("advisor.api.app")

STOP_WAIT_S = 10.0
"""How long a stopping worker may take to exit before it is terminated."""


class WorkerDied(RuntimeError):
    """The worker process exited before it answered (it is replaced). `started`: whether it had taken the job; a job
    it never took can run elsewhere."""

    def __init__(self, message: str, started: bool):
        super().__init__(message)
        self.started = started


def _transportable(e: BaseException) -> BaseException:
    """The exception itself if it survives pickling, else a RuntimeError with its type and message (the API answers
    500 for both; only user errors, which pickle, are shown to the client)."""
    try:
        pickle.loads(pickle.dumps(e))
        return e
    except Exception:  # noqa: BLE001 - any pickling failure
        return RuntimeError(f"{type(e).__name__}: {e}")


def _worker_main(conn: Connection, catalog_dir: str | None, catalog_blob: bytes | None, nice: int) -> None:
    if nice and hasattr(os, "nice"):  # POSIX only
        os.nice(nice)
    import advisor.api.jobs  # noqa: F401 - the jobs and their request models; imported now, not in the first job's time

    if catalog_blob is not None:
        catalog = pickle.loads(catalog_blob)
    else:
        catalog = load_catalog(Path(catalog_dir)) if catalog_dir else builtin_catalog()
    jobs: queue.Queue = queue.Queue()
    lock = threading.Lock()
    running: dict[str, Any] = {"id": None, "token": None}
    cancelled: set[int] = set()  # ids cancelled before they started

    def listen() -> None:
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):  # the server is gone: nobody reads the answer of the running job
                with lock:
                    if running["token"] is not None:
                        running["token"].cancel()
                jobs.put(None)
                return
            if msg[0] == "run":
                jobs.put(msg)
            elif msg[0] == "cancel":
                with lock:
                    if running["id"] == msg[1]:
                        running["token"].cancel()
                    else:
                        cancelled.add(msg[1])
            else:
                jobs.put(None)
                return

    threading.Thread(target=listen, name="advisor-worker-pipe", daemon=True).start()
    conn.send(("ready",))
    while (msg := jobs.get()) is not None:
        _, job_id, fn, args = msg
        conn.send(("started", job_id))
        token = CancelToken()
        with lock:
            running.update(id=job_id, token=token)
            if job_id in cancelled:
                cancelled.discard(job_id)
                token.cancel()
        try:
            with catalog_refs_only(), cancellable(token):
                out: tuple[bool, Any] = (True, fn(catalog, *args))
        except BaseException as e:  # noqa: BLE001 - every failure goes back to the parent
            out = (False, _transportable(e))
        with lock:
            running.update(id=None, token=None)
        try:
            conn.send(("done", job_id, *out))
        except Exception as e:  # noqa: BLE001 - an answer that does not pickle
            conn.send(("done", job_id, False, RuntimeError(f"answer not transportable: {e}")))


class Worker:
    """The parent's handle of one worker process."""

    def __init__(self, ctx, catalog_dir: str | None, catalog_blob: bytes | None, nice: int):
        self.conn, child = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(target=_worker_main, args=(child, catalog_dir, catalog_blob, nice),
                                name="advisor-solve-worker", daemon=True)
        self.proc.start()
        child.close()
        self.send_lock = threading.Lock()

    def wait_ready(self, timeout_s: float) -> None:
        if not self.conn.poll(timeout_s):
            raise RuntimeError(f"solve worker did not start within {timeout_s:.0f} s")
        msg = self.conn.recv()
        if msg != ("ready",):
            raise RuntimeError(f"solve worker sent {msg!r} instead of ready")

    def _send(self, msg: tuple) -> None:
        with self.send_lock:
            self.conn.send(msg)

    def call(self, job_id: int, fn: Callable, args: tuple) -> tuple[bool, Any]:
        """Run `fn(catalog, *args)` in the worker and wait for its answer (blocking; run it in a thread)."""
        started = False
        try:
            self._send(("run", job_id, fn, args))
            while True:
                msg = self.conn.recv()
                if msg[1] != job_id:
                    continue
                if msg[0] == "started":
                    started = True
                elif msg[0] == "done":
                    return msg[2], msg[3]
        except (EOFError, OSError) as e:
            raise WorkerDied(f"solve worker {self.proc.pid} exited ({'during' if started else 'before'} a job)",
                             started) from e

    def cancel(self, job_id: int) -> None:
        try:
            self._send(("cancel", job_id))
        except (OSError, BrokenPipeError):
            pass  # the worker is gone; call() reports it

    def alive(self) -> bool:
        return self.proc.is_alive()

    def stop(self) -> None:
        try:
            self._send(("stop",))
        except (OSError, BrokenPipeError):
            pass
        self.proc.join(STOP_WAIT_S)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(STOP_WAIT_S)
        self.conn.close()


class WorkerProcesses:
    """`count` workers; `take` and `give` are called from the event loop only (the pool's semaphore guarantees a
    free worker for every slot)."""

    def __init__(self, count: int, catalog_dir: Path | None, catalog: Any | None, nice: int, start_timeout_s: float):
        self.count, self.nice, self.start_timeout_s = count, nice, start_timeout_s
        self.catalog_dir = str(catalog_dir) if catalog_dir else None
        self.catalog_blob = pickle.dumps(catalog) if catalog is not None else None
        self.ctx = mp.get_context("spawn")
        self.idle: list[Worker] = []
        self.replaced = 0
        """Workers that died and were replaced."""

    def _new(self) -> Worker:
        return Worker(self.ctx, self.catalog_dir, self.catalog_blob, self.nice)

    def start(self) -> None:
        """Start every worker and wait until each has loaded the catalog (blocking)."""
        started = [self._new() for _ in range(self.count)]
        for w in started:
            w.wait_ready(self.start_timeout_s)
        self.idle = started

    def take(self) -> Worker:
        return self.idle.pop()

    def give(self, w: Worker) -> None:
        self.idle.append(w)

    def replace(self, w: Worker) -> Worker:
        """A fresh worker in place of a dead one (blocking)."""
        try:
            w.stop()  # joins it, so that its exit code is known
        except Exception:  # noqa: BLE001 - it is gone either way
            pass
        log.error("solve worker %s exited with code %s; starting a new one", w.proc.pid, w.proc.exitcode)
        self.replaced += 1
        nw = self._new()
        nw.wait_ready(self.start_timeout_s)
        return nw

    def stop(self) -> None:
        for w in self.idle:
            w.stop()
        self.idle = []
