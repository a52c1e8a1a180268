"""Property-based fuzzing of the HTTP API with schemathesis, from the app's own OpenAPI schema, against a real
uvicorn server on loopback (mini catalog).

Schemathesis generates valid and invalid requests (all its generation modes and phases) for every operation and
checks each answer: never a 5xx, status codes and content types as documented, bodies conforming to the documented
response schema. On top, every rejection must say what is wrong (a 4xx body with a `detail`, and for 422 one that
names the field). A share of the generated solve requests has its catalog references replaced with real ids of the
mini catalog (the schema cannot know them), so that the fuzzer reaches the solvers and not only validation.

Excluded schemathesis check: `positive_data_acceptance` (a schema-valid request may still name an id that is not in
the catalog, which is a correct 422).
"""

from __future__ import annotations

import json
import re
import zlib
from collections import Counter
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.config import SchemathesisConfig

from advisor.api.app import create_app
from advisor.api.problems import TYPE_PREFIX
from advisor.api.settings import ApiSettings
from api_server import Server

MAX_EXAMPLES = 40
"""Per operation and phase; with the coverage and explicit phases about 2,000 requests in all."""
MIN_REQUESTS = 1000
"""The issue's floor for requests across endpoints in one CI run."""
REPAIR_SHARE = 3
"""One request body in this many keeps the fuzzer's own strings for catalog references; the rest get real ids."""
MINI_IDS = {"workload": ["agent"], "rack": ["r40", "r15"], "gpu_ids": ["gpu-x", "gpu-y"], "cpu_ids": ["cpu-a", "cpu-b"]}
REPORT_REPAIR_SHARE = 4
"""Of the report requests that would be repaired, one in this many is (the others test validation only)."""
REPORT_SWEEP_SHARE = 4
"""One repaired report request in this many keeps its sensitivity sweeps (a report costs seconds with them)."""
MINI_SERVERS = [{"chassis": "gpu4", "cpu": "cpu-a", "gpu": "gpu-x", "gpus_per_server": 4},
                {"chassis": "cpu1u", "cpu": "cpu-b"},
                {"chassis": "gpu8", "cpu": "cpu-a", "gpu": "gpu-y", "gpus_per_server": 8}]
MAX_FUZZ_COUNT = 4
"""Servers per group in repaired configurations (any count is valid; a few keep the rack's budgets in play)."""
MAX_FUZZ_RACKS = 4
"""Rows of racks in repaired requests (the schema allows 64; each solve is then slow without finding more)."""

pytestmark = pytest.mark.slow
"""The whole campaign is the slow tier (`python -m pytest -m slow`, run by .ci/run): about 2,000 requests against
a real server. The fast tier covers the API with tests/test_api.py and the loaders' fuzzing in test_fuzz_loaders."""

SPEC = create_app(ApiSettings()).openapi()
SCHEMA = schemathesis.openapi.from_dict(
    SPEC,
    config=SchemathesisConfig.from_dict({"generation": {"mode": "all"}}))
SEEN: Counter = Counter()


def _property_names(node: Any) -> set[str]:
    out: set[str] = set()
    if isinstance(node, dict):
        out |= set(node.get("properties", {}) if isinstance(node.get("properties"), dict) else ())
        for v in node.values():
            out |= _property_names(v)
    elif isinstance(node, list):
        for v in node:
            out |= _property_names(v)
    return out


FIELD_NAMES = _property_names(SPEC["components"]["schemas"])
"""Every field name the API documents: a 422 message past validation must name one of them (or a catalog id)."""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("fuzz"), workers=2, queue_wait_s=60, time_limit_cap_s=5,
               report_sweep_budget_s=2, report_sweep_time_limit_s=1).start()
    yield s
    s.stop()
    log = next(s.workdir.glob("server-*.log")).read_text()
    assert "Traceback" not in log, log[-4000:]


def _repair(body: Any, path: str) -> Any:
    """Real catalog ids in place of the fuzzer's strings (deterministically for a given body)."""
    if not isinstance(body, dict) or zlib.crc32(json.dumps(body, sort_keys=True, default=str).encode()) \
            % REPAIR_SHARE == 0:
        return body
    pick = zlib.crc32(repr(sorted(body)).encode())
    if path == "/v1/reports" and pick % REPORT_REPAIR_SHARE:
        return body  # a rendered report costs seconds: most report requests test validation only
    out = dict(body)
    for key, ids in MINI_IDS.items():
        if isinstance(out.get(key), str):
            out[key] = ids[pick % len(ids)]
        elif isinstance(out.get(key), list):
            out[key] = ids[: 1 + pick % len(ids)]
    if isinstance(out.get("racks"), int) and out["racks"] > MAX_FUZZ_RACKS:
        out["racks"] = 1 + out["racks"] % MAX_FUZZ_RACKS
    for key, fine in (("time_limit_s", 2.0), ("alert_headroom", 0.5)):  # the fuzzer favours 5e-324 here
        if key in out and pick % 4:
            out[key] = fine
    if path == "/v1/export":  # many optional parts, each easy to get wrong: keep a few, fill the rest in
        out.update(workload="agent", rack=MINI_IDS["rack"][pick % 2])
        if pick % 2:  # the mini catalog's GPU vendor has no device plugin for k8s/slurm: that 422 is right
            out["format"] = "prometheus"
        for i, key in enumerate(("configuration", "settings", "assumptions")):
            if (pick >> i) % 2:
                out.pop(key, None)
    if path == "/v1/reports" and (pick // REPORT_REPAIR_SHARE) % REPORT_SWEEP_SHARE:
        out.update(sensitivity=False, racks=1)  # a report's sweeps are most of its time (and were fuzzed above)
    cfg = out.get("configuration")
    if isinstance(cfg, dict) and isinstance(cfg.get("servers"), list):
        servers = []
        for i, g in enumerate(cfg["servers"][:len(MINI_SERVERS)]):
            count = g.get("count") if isinstance(g, dict) else None
            count = 1 + count % MAX_FUZZ_COUNT if isinstance(count, int) and not isinstance(count, bool) else 1
            servers.append({**MINI_SERVERS[(pick + i) % len(MINI_SERVERS)], "count": count})
        out["configuration"] = {**cfg, "servers": servers, "workload": "agent", "rack": "r40"}
        if pick % 2:  # the fuzzer's queues rarely match the workload's classes: half the time, the default queue
            out["configuration"].pop("queues", None)
    return out


def _names_the_problem(status: int, body: Any) -> bool:
    """An RFC 9457 problem document (advisor/problems.py); a 422 names each field at fault with its path, and an
    input error raised past validation names a documented field or a catalog id."""
    if not isinstance(body, dict) or not body.get("detail") or body.get("status") != status \
            or not str(body.get("type", "")).startswith(TYPE_PREFIX) or not body.get("title"):
        return False
    if status != 422:
        return True
    errors = body.get("errors")
    if not errors or not all(isinstance(e, dict) and e.get("loc") and e.get("msg") for e in errors):
        return False
    named = {str(p) for e in errors for p in e["loc"]} | set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", body["detail"]))
    # or a path into the body: the edge's number and depth checks run before the schema, so a field the schema does
    # not know (schemathesis sends keys like "") is named by its path, e.g. ["body", ""]
    return (bool(named & FIELD_NAMES) or "unknown" in named or any(e["loc"] == ["body"] for e in errors)
            or all(len(e["loc"]) >= 2 and e["loc"][0] == "body" for e in errors))


@SCHEMA.parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_api_fuzz(case, server):
    if isinstance(case.body, dict):
        case.body = _repair(case.body, case.path)
    r = case.call_and_validate(base_url=server.url, timeout=120,
                               excluded_checks=[schemathesis.checks.positive_data_acceptance])
    SEEN[(case.method, case.path, r.status_code // 100)] += 1
    if 400 <= r.status_code < 500 and r.status_code != 405:
        assert _names_the_problem(r.status_code, r.json()), (r.status_code, r.text[:500])


def test_fuzz_volume_and_reach():
    """Runs after the fuzz (file order): enough requests, and the solvers were reached, not only validation."""
    assert not [k for k in SEEN if k[2] == 5], SEEN
    for path in ("/v1/evaluate", "/v1/optimize", "/v1/compare", "/v1/export", "/v1/reports"):
        if any(k[1] == path for k in SEEN):  # (all of them in a full run)
            assert SEEN[("POST", path, 2)] > 0, (path, {k: v for k, v in SEEN.items() if k[1] == path})
    assert sum(SEEN.values()) >= MIN_REQUESTS, sum(SEEN.values())
