"""Cooperative cancellation: long work (solves, simulations, sweeps) stops soon after nobody waits for its answer.

The HTTP API gives each request's work a `CancelToken` (`cancellable(token)`) and cancels it when the client
disconnects. Work checks the token at its natural steps (`check()`: before every solver call, every sweep point,
every stretch of simulated time), and a solver already running is interrupted through `on_cancel` hooks (CBC's
process is killed, OR-Tools' SCIP is asked to stop). The work then raises `Cancelled`; nothing is stored.

Outside a `cancellable` block (the CLI, batch workers) `check()` does nothing: time limits still bound the work.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class Cancelled(Exception):
    """The work was cancelled (its client went away); its partial result is discarded."""


class CancelToken:
    """Set once, from any thread; hooks registered while the token is live run when it is set."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._hooks: dict[int, Callable[[], None]] = {}
        self._next = 0

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def cancel(self) -> None:
        with self._lock:
            if self._event.is_set():
                return
            self._event.set()
            hooks = list(self._hooks.values())
        for hook in hooks:
            hook()

    @contextmanager
    def on_cancel(self, hook: Callable[[], None]) -> Iterator[None]:
        """Run `hook` if the token is cancelled while the block runs (at once if it already is)."""
        with self._lock:
            key, self._next = self._next, self._next + 1
            self._hooks[key] = hook
            already = self._event.is_set()
        if already:
            hook()
        try:
            yield
        finally:
            with self._lock:
                self._hooks.pop(key, None)


_CURRENT: contextvars.ContextVar[CancelToken | None] = contextvars.ContextVar("advisor_cancel_token", default=None)


@contextmanager
def cancellable(token: CancelToken) -> Iterator[CancelToken]:
    """Make `token` the current one for the work inside the block (in this thread / context)."""
    reset = _CURRENT.set(token)
    try:
        yield token
    finally:
        _CURRENT.reset(reset)


def current() -> CancelToken | None:
    return _CURRENT.get()


def check() -> None:
    """Raise `Cancelled` when the current work has been cancelled."""
    token = _CURRENT.get()
    if token is not None and token.cancelled:
        raise Cancelled()


@contextmanager
def interrupt_on_cancel(hook: Callable[[], None]) -> Iterator[None]:
    """Call `hook` (from the cancelling thread) if the current work is cancelled while the block runs."""
    token = _CURRENT.get()
    if token is None:
        yield
        return
    with token.on_cancel(hook):
        yield
