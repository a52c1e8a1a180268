"""Seeded synthetic traces from a workload profile: one span per stage occurrence, written as JSONL or CSV.

Span fields (the format `advisor fit` reads):
    task_id, class, stage, resource (gpu | cpu | delay), start, end (seconds),
    tokens_in (all input tokens, cached included), tokens_cached, tokens_out (gpu spans),
    cores (cpu spans: cores the call held), sandbox_memory_gb (the task's sandbox, on every span).

How a task is drawn: class by share; per-stage counts and order exactly as the simulator (advisor.simulation.des:
gamma counts with stochastic rounding, repeating stages interleaved turn by turn). Tasks run unloaded (no
contention), back to back within the task, tasks starting as a Poisson stream (one per `spacing_s` on average).
- gpu span: duration = stage_gpu_latency_s on the reference GPU x G, G ~ gamma(mean 1, cv = stage cv); output
  tokens = round(output_tokens x G) (decode dominates a call); new and cached input tokens are the stage's means
  x an independent gamma factor of cv 0.3.
- cpu span: duration = core_seconds / (parallelism x per_core_perf of the measuring CPU) x G; cores = parallelism.
- delay span: gamma with the stage's mean and cv.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

from advisor.simulation.des import stage_blocks as _blocks
from models.hardware import CpuSku, GpuSku
from models.performance import gpu_serving, stage_gpu_latency_s
from models.assumptions import ModelAssumptions
from models.workload import CpuStage, GpuStage, IoStage, Workload
from models.errors import InputError

IO_STREAM_MBPS = ModelAssumptions().io_stream_mbps
"""Bandwidth of one I/O stage's stream in generated traces (the model's default; a fitted workload reads the
measured I/O time back as a delay, since spans carry no MB)."""

FIELDS = ("task_id", "class", "stage", "resource", "start", "end", "tokens_in", "tokens_cached", "tokens_out",
          "cores", "sandbox_memory_gb")
INPUT_TOKEN_CV = 0.3


def _gamma(rng, mean: float, cv: float) -> float:
    if cv <= 0:
        return mean
    k = 1.0 / (cv * cv)
    return float(rng.gamma(k, mean / k))


def _count(rng, mean: float, cv: float) -> int:
    x = _gamma(rng, mean, cv)
    n = int(x)
    return n + (1 if rng.random() < x - n else 0)


def generate_spans(workload: Workload, tasks: int, seed: int, gpu: GpuSku, cpu: CpuSku,
                   spacing_s: float = 10.0) -> list[dict]:
    """Spans of `tasks` tasks drawn from the workload (see the module docstring)."""
    if tasks < 1:
        raise InputError("tasks must be >= 1")
    rng = np.random.default_rng(seed)
    serving = gpu_serving(workload, gpu)
    sm = workload.served_model
    shares = np.array([c.share for c in workload.classes])
    cum = np.cumsum(shares)
    cum[-1] = 1.0
    spans: list[dict] = []
    t_start = 0.0
    for tid in range(1, tasks + 1):
        t_start += rng.exponential(spacing_s)
        c = workload.classes[int(np.searchsorted(cum, rng.random(), side="right"))]
        counts = [_count(rng, s.count, s.count_cv) for s in c.stages]
        t = t_start
        for block in _blocks(c.stages):
            for turn in range(max(counts[i] for i in block)):
                for i in block:
                    if counts[i] <= turn:
                        continue
                    s = c.stages[i]
                    row = {"task_id": f"t{tid}", "class": c.name, "stage": s.name, "resource": s.resource}
                    if isinstance(s, GpuStage):
                        g = _gamma(rng, 1.0, s.cv)
                        dur = stage_gpu_latency_s(s, sm, serving) * g
                        f_in = _gamma(rng, 1.0, INPUT_TOKEN_CV)
                        new = round(s.new_input_tokens * f_in)
                        cached = round(s.cached_input_tokens * f_in)
                        row.update(tokens_in=new + cached, tokens_cached=cached,
                                   tokens_out=max(1, round(s.output_tokens * g)))
                    elif isinstance(s, CpuStage):
                        dur = _gamma(rng, s.core_seconds / (s.parallelism * cpu.per_core_perf), s.cv)
                        row["cores"] = s.parallelism
                    elif isinstance(s, IoStage):  # unloaded: the I/O at one stream's bandwidth
                        dur = _gamma(rng, s.io_mb / IO_STREAM_MBPS, s.cv)
                    else:
                        dur = _gamma(rng, s.seconds, s.cv)
                    row["start"] = round(t, 6)
                    t += dur
                    row["end"] = round(t, 6)
                    row["sandbox_memory_gb"] = c.sandbox_memory_gb
                    spans.append(row)
    return spans


def write_spans(spans: list[dict], path: Path) -> None:
    """JSONL unless the file name ends in .csv."""
    path = Path(path)
    if path.suffix.lower() == ".csv":
        with path.open("w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=FIELDS)
            w.writeheader()
            for r in spans:
                w.writerow({k: r.get(k, "") for k in FIELDS})
    else:
        with path.open("w", encoding="utf-8") as f:
            for r in spans:
                f.write(json.dumps(r) + "\n")
