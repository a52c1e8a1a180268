"""Test tiers: the README's `python -m pytest` runs the fast tier (`-m 'not slow'` in pyproject); `.ci/run` then
runs the slow tier (`python -m pytest -m slow`). Large sweeps keep a small instance in the fast tier and move the
rest of their cases to the slow tier, so every oracle still runs on every fast run."""

from __future__ import annotations

from collections.abc import Iterable

import pytest


def tiered(cases: Iterable, fast: int) -> list:
    """Parametrize cases with the first `fast` in the fast tier and the others marked slow (test ids unchanged).
    Tuples stand for several argument names, as in `pytest.mark.parametrize`."""
    out = []
    for i, c in enumerate(cases):
        if i < fast:
            out.append(c)
        else:
            out.append(pytest.param(*(c if isinstance(c, tuple) else (c,)), marks=pytest.mark.slow))
    return out
