"""One wall clock for a whole request (CLI optimize/compare/report, API optimize/compare/report, a batch scenario).

A `Deadline` is made once where the request starts and passed down; every optimization, fallback, row search,
polish, certificate and sweep under it reads the same clock, and a part that gets a share of it (`share`, `within`)
never outlives its parent. Loops stop starting new work once it is spent; a solve that is already due gets at least
`MIN_SOLVE_S` (the solvers' own floor: CBC and OR-Tools take whole seconds) so that it can return its best answer so
far. The overrun this allows is bounded by a few such solves; tests/test_deadline.py checks every entry point
against the tolerance max(2 s, 5%)."""

from __future__ import annotations

import time


class Deadline:
    MIN_SOLVE_S = 1.0
    """Least time a due solve gets (the solvers' time limits are whole seconds, at least 1)."""
    WRAP_UP_S = 2.0
    WRAP_UP_SHARE = 0.1
    """A solve is given what is left less min(WRAP_UP_S, WRAP_UP_SHARE x the limit): the time to polish, evaluate
    and explain its answer (on the presets 0.2-0.6 s; rows and a loaded machine take longer) stays within the request's limit."""

    def __init__(self, limit_s: float, parent: Deadline | None = None):
        self.t0 = time.perf_counter()
        self.limit = limit_s if parent is None else min(limit_s, parent.remaining())
        self.end = self.t0 + self.limit

    def remaining(self) -> float:
        return self.end - time.perf_counter()

    def expired(self) -> bool:
        return self.remaining() <= 0

    def no_time(self) -> bool:
        """Too little left to start another solve (it would take MIN_SOLVE_S): optional work is skipped."""
        return self.remaining() < self.MIN_SOLVE_S

    def left(self) -> float:
        """Time for a solve that is due now: what is left less the wrap-up reserve, at least MIN_SOLVE_S."""
        return max(self.MIN_SOLVE_S, self.remaining() - min(self.WRAP_UP_S, self.WRAP_UP_SHARE * self.limit))

    def within(self, limit_s: float | None) -> Deadline:
        """A part of this request with its own limit (if any), ending no later than this one."""
        return Deadline(self.remaining() if limit_s is None else limit_s, parent=self)

    def share(self, parts: int) -> Deadline:
        """One of `parts` equal shares of what is left (the next part gets what this one leaves unused)."""
        return Deadline(self.remaining() / max(1, parts), parent=self)
