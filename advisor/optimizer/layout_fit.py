"""Where each layout belongs: which layout a workload's stage shares call for, and the tool share of task time at
which that choice flips (the article's threshold: GPU-first suffices for offline generation and evaluation, a
balanced rack pays for agentic work).

GPU-first (A) reserves a rule-of-thumb share of host cores for the serving engine and gives the rest to tools; B
sizes host cores, CPU SKU and tool queues with the GPUs. B pays over A when A's answer is bound by something other
than what drives its GPUs (the GPU pool, or the host cores reserved for the engine): then moving power, cores or
SKUs toward the tools buys tasks/h; while the GPUs bind, B can only match A. On A's own answer the GPU-side bounds do
not depend on tool work, and every tool-side bound (tool cores, the tail-wait target, sandbox memory and disk through
the task time) falls as tool work grows, so the binding side flips once as the tool work of every CPU stage is scaled
by a common factor. A bisection on that factor, with the evaluator, finds the flip and reports the tool share of
task time there: the evaluator's time on tool cores over the task time at the operating point
(`resource_shares['cpu']`), the stage share the article asks a team to measure first."""

from __future__ import annotations

import math
from typing import Literal

from advisor.optimizer.settings import OptimizerSettings
from models.base import Frozen
from models.catalog import Catalog
from models.config import Configuration
from models.hardware import Rack
from models.pipeline import evaluate
from models.workload import CpuStage, Workload

FACTOR_RTOL = 1e-6
"""The bisection also stops when its bracket on the tool-work factor is this narrow (relative): where the tool share
jumps at the flip (the operating point follows the sustainable throughput, which a bound taking over can lower
abruptly, e.g. the sandboxes' loop of docs/model.md 5.3), the shares never come within their tolerance."""

GPU_SIDE = ("gpu", "orchestration")
"""Bound kinds on the GPU side: the GPU pool and the host cores that drive it (models/pipeline.py, `Bound.kind`)."""


class LayoutFit(Frozen):
    """Which layout the workload's stage shares call for, on the GPU-first answer's hardware."""

    tool_share: float
    """The workload's share of task time on tool cores (evaluator, A's answer at its operating point)."""
    flip_tool_share: float | None
    """Tool share at which A's answer stops being GPU-bound (B starts to pay); None when no flip lies within the
    scanned range (`scale_span`): the side that binds then binds throughout."""
    scale_at_flip: float | None
    """Factor on every CPU stage's tool work at the flip (1 = the workload as given)."""
    calls_for: Literal["a", "b"]
    """`a` when A's answer is GPU-bound (GPU-first suffices), `b` when tools or their sandboxes bind (B pays)."""
    bottleneck_a: str
    """The bound that binds A's answer for the workload as given."""
    sentence: str
    """The finding in one sentence, for the compare output and the report."""


def scale_tool_work(workload: Workload, factor: float) -> Workload:
    """The workload with every CPU stage's core-seconds multiplied by `factor` (counts, GPU and delay stages kept)."""
    classes = [c.model_copy(update={"stages": [s.model_copy(update={"core_seconds": s.core_seconds * factor})
                                               if isinstance(s, CpuStage) else s for s in c.stages]})
               for c in workload.classes]
    return workload.model_copy(update={"classes": classes})


def _pct(x: float) -> str:
    return f"{x:.1%}" if x < 0.01 else f"{x:.0%}"


def _probe(cfg: Configuration, w: Workload, rack: Rack, catalog: Catalog, s: OptimizerSettings,
           factor: float) -> tuple[bool, float, str]:
    ev = evaluate(cfg, scale_tool_work(w, factor), rack, catalog, s.assumptions)
    return ev.bottleneck_kind in GPU_SIDE, ev.resource_shares.get("cpu", 0.0), ev.bottleneck


def layout_fit(configuration_a: dict | None, workload: Workload, rack: Rack, catalog: Catalog,
               settings: OptimizerSettings | None = None) -> LayoutFit | None:
    """Where the workload belongs, on layout A's answer (`OptimizeResult.configuration`); None without one or
    without tool stages (nothing to scale: the GPUs or their engine decide)."""
    s = settings or OptimizerSettings()
    if not configuration_a or not configuration_a.get("servers"):
        return None
    if not any(isinstance(st, CpuStage) for c in workload.classes for st in c.stages):
        return None
    cfg = Configuration.model_validate(configuration_a)
    gpu_side, share, bottleneck = _probe(cfg, workload, rack, catalog, s, 1.0)
    lo, hi = 1.0 / s.layout_fit_scale_span, s.layout_fit_scale_span
    g_lo, sh_lo, _ = _probe(cfg, workload, rack, catalog, s, lo)
    g_hi, sh_hi, _ = _probe(cfg, workload, rack, catalog, s, hi)
    flip = scale = None
    if g_lo and not g_hi:
        while sh_hi - sh_lo > s.layout_fit_share_tolerance and hi > lo * (1 + FACTOR_RTOL):
            mid = math.sqrt(lo * hi)
            g_mid, sh_mid, _ = _probe(cfg, workload, rack, catalog, s, mid)
            if g_mid:
                lo, sh_lo = mid, sh_mid
            else:
                hi, sh_hi = mid, sh_mid
        flip, scale = (sh_lo + sh_hi) / 2.0, math.sqrt(lo * hi)
    calls_for: Literal["a", "b"] = "a" if gpu_side else "b"
    here = f"tools take {_pct(share)} of task time on GPU-first's answer"
    if flip is not None:
        side = "below" if calls_for == "a" else "above"
        sentence = (f"Layout {calls_for.upper()} fits this workload: {here}, {side} the {_pct(flip)} at which that "
                    f"answer stops being GPU-bound (tool work x{scale:.2g}); below it GPU-first (A) suffices, above "
                    "it a balanced rack (B) pays.")
    elif calls_for == "a":
        sentence = (f"Layout A fits this workload: {here}, and its GPUs bind even at {hi:g}x the tool work, so "
                    "GPU-first suffices at any tool share this model reaches on that hardware.")
    else:
        sentence = (f"Layout B fits this workload: {here}, and GPU-first's answer is bound by {bottleneck} even at "
                    f"1/{s.layout_fit_scale_span:g} of the tool work, so no tool share makes GPU-first enough there.")
    return LayoutFit(tool_share=share, flip_tool_share=flip, scale_at_flip=scale, calls_for=calls_for,
                     bottleneck_a=bottleneck, sentence=sentence)
