"""A client generated from the server's own /openapi.json by a real generator (openapi-python-client) calls every
endpoint of a live server: clean operation names, typed answers (stored reports and exports included), and the
problem document as the typed error of every operation."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from api_server import Server

pytest.importorskip("openapi_python_client")
PACKAGE = "advisor_client"
CONFIG = {"servers": [{"chassis": "cpu1u", "cpu": "cpu-b", "count": 1},
                      {"chassis": "gpu4", "cpu": "cpu-a", "gpu": "gpu-x", "gpus_per_server": 4, "count": 1,
                       "orchestration_cores_per_gpu": 1.0}]}
QUICK_REPORT = {"workload": "agent", "rack": "r40", "layout": "a", "sensitivity": False, "time_limit_s": 10}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("client"), workers=1, queue_wait_s=60, time_limit_cap_s=10).start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def generated(server, tmp_path_factory):
    d = tmp_path_factory.mktemp("gen")
    (d / "openapi.json").write_text(httpx.get(server.url + "/openapi.json").text)
    exe = Path(sys.executable).parent / "openapi-python-client"
    p = subprocess.run([str(exe), "generate", "--path", str(d / "openapi.json"), "--output-path", str(d / PACKAGE),
                        "--meta", "none"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    sys.path.insert(0, str(d))
    try:
        pkg = importlib.import_module(PACKAGE)
        yield pkg, d / PACKAGE
    finally:
        sys.path.remove(str(d))
        for name in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
            del sys.modules[name]


def _op(name: str):
    for tag in ("health", "catalog", "solve", "export", "reports"):
        try:
            return importlib.import_module(f"{PACKAGE}.api.{tag}.{name}")
        except ModuleNotFoundError:
            continue
    raise AssertionError(f"no generated operation {name}")


def test_generated_client_calls_every_endpoint(server, generated):
    pkg, root = generated
    models = importlib.import_module(f"{PACKAGE}.models")
    ops = {p.stem for p in (root / "api").glob("*/*.py") if p.stem != "__init__"}
    assert all(o.isidentifier() and "_ep_" not in o and "_v1_" not in o for o in ops), ops  # clean names
    called: set[str] = set()

    def call(name: str, **kw):
        called.add(name)
        return _op(name).sync_detailed(client=c, **kw)

    # JSON answers throughout (the export is otherwise its YAML or text artifact, as curl users want it)
    c = pkg.Client(base_url=server.url, timeout=httpx.Timeout(120.0), raise_on_unexpected_status=True,
                   headers={"Accept": "application/json"})
    with c:
        h = call("health")
        assert h.status_code == 200 and isinstance(h.parsed, models.Health) and h.parsed.status == "ok"
        assert call("health_head").status_code == 200
        for kind in ("cpus", "gpus", "chassis", "racks", "workloads", "served_models", "systems", "switches"):
            camel = "".join(w.title() for w in kind.split("_"))
            listed = call(f"list_{kind}")
            assert listed.status_code == 200 and listed.parsed is not None, kind
            if kind in ("systems", "switches") and not listed.parsed:  # optional tables: the mini catalog has none
                first = "none"
            else:
                assert listed.parsed, kind
                first = listed.parsed[0].id
                one = call(f"get_{kind}", entry_id=first)
                assert one.status_code == 200 and one.parsed.id == first
            missing = call(f"get_{kind}", entry_id=first + "x")
            assert missing.status_code == 404 and isinstance(missing.parsed, models.Problem), camel
            assert missing.parsed.errors[0].loc == ["path", "entry_id"]

        ev = call("evaluate", body=models.EvaluateRequest.from_dict(
            {"configuration": CONFIG, "workload": "agent", "rack": "r40"}))
        assert ev.status_code == 200 and isinstance(ev.parsed, models.Evaluation)
        assert ev.parsed.throughput_tasks_per_hour > 0
        opt = call("optimize", body=models.OptimizeRequest.from_dict(
            {"workload": "agent", "rack": "r40", "layout": "b", "explain": False}))
        assert opt.status_code == 200 and isinstance(opt.parsed, models.OptimizeResult)
        assert opt.parsed.status == "optimal"
        bad = call("optimize", body=models.OptimizeRequest.from_dict({"workload": "agnt", "rack": "r40"}))
        assert bad.status_code == 422 and isinstance(bad.parsed, models.Problem)
        assert bad.parsed.errors[0].loc == ["body", "workload"] and bad.parsed.suggestions == ["agent"]
        cmp = call("compare", body=models.CompareRequest.from_dict({"workload": "agent", "rack": "r40"}))
        assert cmp.status_code == 200 and isinstance(cmp.parsed, models.LayoutComparison)
        assert [r.layout for r in cmp.parsed.results] == ["a", "b", "hybrid"]
        cvr = call("chip_vs_rack", body=models.ChipVsRackRequest.from_dict(
            {"kind": "gpu", "a": "gpu-x", "b": "gpu-y", "workload": "agent", "rack": "r40"}))
        assert cvr.status_code == 200 and isinstance(cvr.parsed, models.ChipVsRack)
        assert cvr.parsed.chip_ratio > 0
        exp = call("export", body=models.ExportRequest.from_dict(
            {"format": "prometheus", "configuration": CONFIG, "workload": "agent", "rack": "r40"}))
        assert exp.status_code == 200 and isinstance(exp.parsed, models.ExportOut)  # JSON asked for
        assert exp.parsed.format_ == "prometheus" and "groups:" in exp.parsed.text

        made = call("create_report", body=models.ReportRequest.from_dict(QUICK_REPORT))
        assert made.status_code == 201 and isinstance(made.parsed, models.ReportCreated)
        rid = made.parsed.id
        page = call("list_reports", limit=10)
        assert page.status_code == 200 and rid in [i.id for i in page.parsed.items]
        stored = call("get_report_json", report_id=rid)
        assert stored.status_code == 200 and isinstance(stored.parsed, models.StoredReportOut)
        assert isinstance(stored.parsed.request, models.ReportRequest) and stored.parsed.request.layout == "a"
        html = call("get_report_html", report_id=rid)
        assert html.status_code == 200 and b"<html" in html.content.lower()
        assert call("delete_report", report_id=rid).status_code == 204
        gone = call("get_report_json", report_id=rid)
        assert gone.status_code == 404 and isinstance(gone.parsed, models.Problem)
    assert called == ops, ops - called
    assert json.loads(httpx.get(server.url + "/openapi.json").text)["paths"]  # the server still answers
