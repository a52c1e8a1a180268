"""Configurations with a stage that has no capacity (GPUs without orchestration cores, a tool queue without cores):
the closed loop completes nothing, infinite utilizations are null in JSON as the schema says, and the answer
reads back. Found by tests/test_fuzz_api.py: a closed loop of one agent skipped the GPU stage it could not serve
and reported 15 tasks/h through it, and an infinite utilization broke the response schema."""

from __future__ import annotations

import json
import math

import jsonschema
import pytest

from advisor.catalog import load_catalog
from advisor.service import evaluate_configuration
from api_server import MINI
from models.config import Configuration
from models.pipeline import Evaluation

NO_ORCHESTRATION = {"servers": [{"chassis": "gpu4", "cpu": "cpu-a", "gpu": "gpu-x", "gpus_per_server": 4, "count": 1},
                                {"chassis": "cpu1u", "cpu": "cpu-b", "count": 1},
                                {"chassis": "gpu8", "cpu": "cpu-a", "gpu": "gpu-y", "gpus_per_server": 8, "count": 2}],
                    "rack": "r40", "workload": "agent"}
"""The fuzzer's configuration: no orchestration cores are given, so the GPUs serve nothing."""


@pytest.fixture(scope="module")
def mini():
    return load_catalog(MINI)


def _evaluate(mini, **operating_point) -> Evaluation:
    cfg = Configuration.model_validate({**NO_ORCHESTRATION, "operating_point": operating_point})
    return evaluate_configuration(cfg, None, None, mini)


def _schema_valid(ev: Evaluation) -> dict:
    doc = json.loads(ev.model_dump_json())
    jsonschema.validate(doc, Evaluation.model_json_schema(mode="serialization"))
    return doc


@pytest.mark.parametrize("agents", [1, 64])
def test_closed_loop_through_a_stage_without_capacity_completes_nothing(mini, agents):
    ev = _evaluate(mini, agents=agents)
    assert ev.throughput_tasks_per_hour == 0.0
    assert ev.closed_loop is not None and ev.closed_loop.throughput_tasks_per_hour == 0.0
    assert ev.arrival_rate_tasks_per_hour == 0.0
    assert any("completes no tasks" in w and "GPU serving" in w for w in ev.warnings), ev.warnings
    assert all(math.isfinite(u) for u in ev.utilization.values())
    _schema_valid(ev)


def test_infinite_utilization_is_null_in_json_and_reads_back(mini):
    ev = _evaluate(mini, arrival_rate_per_hour=100.0)
    assert ev.utilization["gpu"] == math.inf
    doc = _schema_valid(ev)
    assert doc["utilization"]["gpu"] is None
    assert Evaluation.model_validate_json(ev.model_dump_json()).utilization["gpu"] == math.inf


def test_a_tool_queue_without_cores(mini):
    cfg = {"servers": [{"chassis": "gpu8", "cpu": "cpu-a", "gpu": "gpu-y", "gpus_per_server": 8, "count": 1,
                        "orchestration_cores_per_gpu": 8.0}], "rack": "r40", "workload": "agent"}
    for op in ({"agents": 8}, {"arrival_rate_per_hour": 100.0}):
        ev = evaluate_configuration(Configuration.model_validate({**cfg, "operating_point": op}), None, None, mini)
        assert ev.throughput_tasks_per_hour == 0.0, ev.bounds
        _schema_valid(ev)
        if "agents" in op:
            assert any("completes no tasks" in w and "tool queue" in w for w in ev.warnings), ev.warnings
