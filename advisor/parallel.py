"""Run independent pieces of one request at once (the layouts of a comparison, sweep points, budget re-solves).

Threads, not processes: the work is mostly inside solvers that run in their own process (CBC) or release the GIL
(HiGHS, OR-Tools), and threads share the catalog and the request's clock and cancel token. Each piece runs in a
copy of the caller's context, so context variables (the cancel token, the CBC process list) follow it."""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def run_all(fn: Callable[[T], R], items: Iterable[T], workers: int) -> list[R]:
    """`fn` over `items`, at most `workers` at a time, results in the order of `items`. The first exception
    (in that order) is raised once every piece has ended, so no piece outlives the call."""
    items = list(items)
    if workers <= 1 or len(items) <= 1:
        return [fn(i) for i in items]
    with ThreadPoolExecutor(max_workers=min(workers, len(items)), thread_name_prefix="advisor-solve") as pool:
        futures = [pool.submit(contextvars.copy_context().run, fn, i) for i in items]
        errors = [f.exception() for f in futures]
    for e in errors:
        if e is not None:
            raise e
    return [f.result() for f in futures]
