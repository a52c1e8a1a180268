"""Optimizer settings: defaults with their basis (override per request)."""

from typing import Literal

from pydantic import Field

from models.assumptions import ModelAssumptions
from models.base import Input


class OptimizerSettings(Input):
    """How the optimizer searches, and the rules that define the GPU-first layout."""

    layout_a_orchestration_cores_per_gpu: float = Field(default=2.0, ge=0)
    """GPU-first rule of thumb: cores per GPU reserved for the serving engine, the rest of the host for tools.
    Assumption: vLLM and SGLang run one engine worker process per GPU plus an API server and tokenizer."""
    time_limit_s: float = Field(default=60.0, gt=0)
    """Wall-clock limit per solve."""
    mip_gap: float = Field(default=1e-6, ge=0, lt=1)
    """Relative optimality gap at which a solve stops."""
    throughput_tie_tolerance: float = Field(default=1e-7, ge=0, lt=1e-2)
    """When breaking ties by power and cost, keep throughput within this relative distance of the optimum."""
    slo_iterations: int = Field(default=5, gt=0)
    """Solves allowed to settle per-queue utilization caps for a tool-wait target (and to add sandbox memory)."""
    coupling_nodes: int = Field(default=48, gt=0)
    """Most MILP solves of the branch and bound over routing utilization bands when sandbox memory couples mixed
    GPU or CPU SKUs (advisor/optimizer/optimize.py `_solve_coupled`). Each node halves one band; a node whose relaxation
    bound is below the best evaluated answer is closed. On the enumeration-checked random instances the proof
    closes within a few nodes; when the cap (or the time limit) stops it first, the answer is `feasible` with the
    proven bound and gap."""
    certificate_min_gain: float = Field(default=1e-6, ge=0)
    """A neighbour of the answer (advisor/optimizer/certificate.py) beats it when it improves the objective by more than this
    (relative): the MILP's own gap, so that solver tolerance never swaps answers."""
    certificate_time_share: float = Field(default=0.1, ge=0, lt=1)
    """Share of the time limit kept for the certificate (the search stops that much earlier); the certificate also
    gets whatever the search leaves unused. When time runs out its `complete` says so."""
    certificate_steps: int = Field(default=10, ge=0)
    """Better neighbours adopted one after another at most (each step evaluates all neighbours again)."""
    row_pattern_iterations: int = Field(default=200, gt=0)
    """Column-generation rounds for a row of identical racks (advisor/optimizer/rows.py). Each adds one rack pattern;
    the built-in presets converge in 10-60 rounds, and the bound is valid at any round, so the cap only costs gap."""
    row_pattern_enumeration_limit: int = Field(default=20000, gt=0)
    """Most rack patterns enumerated to close a row's remaining gap exactly (patterns within the gap in reduced cost);
    beyond it the gap is reported as is. 20,000 columns keep the integer master to seconds with CBC."""
    slo_curve_exact_servers: int = Field(default=16, ge=1)
    """Tool-queue sizes (servers) up to which the tail-wait capacity curve has a breakpoint at every integer, so it is
    exact (advisor/optimizer/slo_curve.py). Small queues are where pooling bends the curve most; above this the segments grow
    while the secant stays within `slo_curve_tolerance`."""
    slo_curve_tolerance: float = Field(default=1e-3, gt=0, lt=0.1)
    """Largest relative understatement of a queue's tail-wait capacity between breakpoints above the exact range. The
    curve's segments shorten as sqrt(tolerance); 0.1% is well below the closed form's own accuracy (median 1.2% on
    throughput, docs/validation.md) and keeps a 2,000-server queue to about 50 segments per core-speed level."""
    dinkelbach_iterations: int = Field(default=12, gt=0)
    """Solves allowed for the cost-per-task ratio (Dinkelbach's method converges superlinearly; 3-6 are typical)."""
    layout_fit_scale_span: float = Field(default=1024.0, gt=1)
    """Where each layout belongs (advisor/optimizer/layout_fit.py): the tool work of every CPU stage is scaled by
    factors from 1/span to span around the workload's own to find the tool share at which GPU-first's answer stops
    being GPU-bound. 1,024 puts a tool share of a few tenths of a percent at one end and well over 90% at the other
    for every built-in preset (their own tool shares run from ~1% for batch-generation to ~60% for rl-rollout on
    B200; arXiv 2511.00739 reports tool processing up to 90.6% of end-to-end latency), so a flip inside the
    published range is found."""
    layout_fit_share_tolerance: float = Field(default=1e-3, gt=0, lt=0.1)
    """Bisection on the tool-work scale stops when the flip's tool share is known to this absolute fraction (0.1
    percentage point: the answer quotes it to whole percent)."""
    explain_time_share: float = Field(default=0.5, gt=0, le=1)
    """Most of what the search leaves on the clock that the "+10% of each budget" re-solves may take (they run side
    by side, each to this share's end). They explain the answer; the certificate, the operating point and the
    failure figures that follow are part of it, so they keep the rest. A re-solve that does not finish in time
    leaves its sentence out (a row of a thousand racks is re-solved whole, which seldom fits)."""
    answer_detail: Literal["full", "throughput"] = "full"
    """How much of an answer to derive. "full": the throughput optimum, then least power, least cost and the
    option ranks among its ties (a canonical answer), its failure figures and, for owned servers, the migration
    plan. "throughput": the throughput optimum and its label only (the first stage's proven status, bound and gap
    are the same), the certificate only where that label is not already proven; for sensitivity sweeps, whose
    points are read for their tasks/h and status (a sweep point costs about half the solves this way)."""
    concurrent_solves: int = Field(default=2, ge=1, le=64)
    """Independent solves run at once where a request has several (the layouts of a comparison, sweep points, the
    +10% budget re-solves). The solvers run in their own processes (CBC) or release the GIL (HiGHS, OR-Tools), so
    two at once use both cores of a 2-core machine; 1 runs them one after another."""
    assumptions: ModelAssumptions = ModelAssumptions()
    """Pipeline-model assumptions used to evaluate options."""
