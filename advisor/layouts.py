"""The layout vocabulary, defined once: which layouts exist, what people call them, how charts colour them, and
which one of several answers is "best".

A (GPU-first): the power budget goes to accelerators and the CPUs get a rule-of-thumb share; B (balanced): host
cores, CPU SKU and tool queues are sized with the GPUs; hybrid (tiered): isolated inference-heavy and tool-heavy
queues. Each layout relaxes the one before it, so on the same input hybrid >= B >= A."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, get_args

Layout = Literal["a", "b", "hybrid"]
LAYOUTS: tuple[str, ...] = get_args(Layout)
"""In the order each relaxes the one before."""
LAYOUT_NAMES = {"a": "A (GPU-first)", "b": "B (balanced)", "hybrid": "Hybrid (tiered)"}
LAYOUT_COLORS = {"a": "#c44e52", "b": "#dd8452", "hybrid": "#4c72b0"}

TIE_RTOL = 1e-6
"""Throughputs closer than this (relative to the best), or than a solve's reported gap, are a tie: no layout is
called better than another on a difference the solver does not resolve. Basis: the optimizer's default mip_gap
(advisor.optimizer.settings.OptimizerSettings.mip_gap, 1e-6)."""


@dataclass(frozen=True)
class Outcome:
    """What ranking needs of one layout's answer."""

    layout: str
    throughput: float
    power_w: float = 0.0
    gap: float | None = None


def tied_layouts(outcomes: Iterable[Outcome]) -> list[str]:
    """Layouts whose throughput ties the best one's (within TIE_RTOL or its own reported gap), in layout order."""
    outs = [o for o in outcomes if o.throughput is not None]
    if not outs:
        return []
    top = max(o.throughput for o in outs)
    if top <= 0:
        return []
    tied = [o.layout for o in outs if top - o.throughput <= max(TIE_RTOL, o.gap or 0.0) * top]
    return sorted(tied, key=_order)


def best_layout(outcomes: Iterable[Outcome]) -> str | None:
    """Most throughput; among ties (tied_layouts) the least power, then the simplest layout (A before B before
    hybrid). None when nothing delivers throughput."""
    outs = {o.layout: o for o in outcomes if o.throughput is not None}
    tied = tied_layouts(outs.values())
    if not tied:
        return None
    return min(tied, key=lambda k: (outs[k].power_w or 0.0, _order(k)))


def _order(layout: str) -> int:
    return LAYOUTS.index(layout) if layout in LAYOUTS else len(LAYOUTS)
