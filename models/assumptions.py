"""Modelling assumptions that are not hardware or workload data, with their basis."""

from pydantic import Field

from models.base import Input
from models.tco import CostAssumptions


class ModelAssumptions(Input):
    """Defaults the pipeline model needs beyond the catalogs. Override per run; each says where it comes from."""

    host_os_reserved_memory_gb: float = Field(default=32.0, ge=0)
    """Host memory per server kept for the OS, container runtime, page cache and serving processes, not for
    sandboxes. Assumption: a common kubelet/systemd reservation plus an inference engine's host buffers on
    servers with 0.5-2 TB of memory."""
    operating_load_fraction: float = Field(default=0.8, gt=0, lt=1)
    """Open-arrival operating point as a fraction of sustainable throughput when none is given. Assumption: capacity
    plans commonly target 70-85% peak utilization to keep queueing tails bounded."""
    tail_quantile: float = Field(default=0.95, gt=0.5, lt=1)
    """Quantile used for tail latency figures and SLO checks (p95)."""
    max_closed_loop_agents: int = Field(default=5000, gt=0)
    """Largest agent population the exact closed-network solution is computed for (cost grows as N^2); larger populations are capped and
    flagged. Chosen so one evaluation stays under a second on a 2-core machine."""
    sandbox_limit_tolerance: float = Field(default=0.02, ge=0, lt=1)
    """How far below the capacity bounds the sandbox-limited throughput (the closed loop of as many live tasks as
    the sandboxes hold at loaded task times, docs/model.md 5.3) must lie to become the sustainable throughput. A
    closed loop only approaches its bound, so some shortfall is always there; within this one the capacity figure
    stands (the optimizer's model) and lies at most this far above the loop's. 2% keeps the headline within issue
    #17's 5% of the simulator given the loop's own error of a few percent (docs/validation.md)."""
    tensor_parallel_domain_gpus: int = Field(default=8, gt=0)
    """Largest tensor-parallel degree chosen unless the weights need more (capped further by each chassis's
    scale-up domain): 8, one HGX/OAM baseboard's NVLink/Infinity Fabric domain (NVIDIA HGX and AMD Instinct platform
    specifications); the model scales TP linearly, which holds within such a domain."""
    tool_call_scv_warning: float = Field(default=4.0, gt=0)
    """Squared coefficient of variation of a tool queue's call time above which the evaluator warns that its waits
    rest on an approximate correction for the spread (docs/model.md 6.2, 6.3; docs/validation.md: on swe-agent's
    queue at SCV ~30 the corrected closed loop is within about 5-10% of the simulator, queues near exponential within
    a few percent)."""
    gpu_birth_death_states: int = Field(default=20000, gt=0)
    """States kept when solving the GPU batching station with open arrivals (a geometric tail covers the rest)."""
    io_stream_mbps: float = Field(default=2000.0, gt=0)
    """Bandwidth one tool call's disk I/O reaches, in MB/s: it sets an I/O stage's unloaded time (MB / this) and how
    many calls' I/O a queue's drives serve at once (their bandwidth / this). Assumption: about half of one
    PCIe 4 enterprise NVMe drive's mixed sequential bandwidth (~4,770 MB/s for a PM1733-class drive, see
    catalogs/chassis.yaml), for a single process writing through a container's overlay file system."""
    costs: CostAssumptions = CostAssumptions()
    """Prices, PUE, amortization and idle-power fractions for total cost of ownership (`models.tco`)."""
