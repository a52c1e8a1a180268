"""Security basics: hostile names are escaped in every HTML page (checked in headless Chromium), report ids are
unguessable, the API key is compared in constant time, HTTP responses carry no stack traces, and logs carry no
request secrets."""

from __future__ import annotations

import hmac
import re
import string
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient

import advisor.api.app as api
from advisor import service
from advisor.studies.batch import run_batch
from advisor.api.settings import ApiSettings
from advisor.api.store import ReportStore
from api_server import MINI, Server
from cdp_pipe import Chromium

XSS = "<script>alert(1)</script>"
ATTR = "\"><img src=x onerror=alert(2)>"
KEY = "k3y-" + "Zq8" * 8
WRONG_KEY = "guess-" + "Wv5" * 8
WORKLOAD = yaml.safe_load((MINI / "workloads" / "agent.yaml").read_text())
RACK = yaml.safe_load((MINI / "racks.yaml").read_text())["entries"][0]
REPORT_ID = re.compile(r"^[A-Za-z0-9_-]{22,}$")
"""secrets.token_urlsafe(16): 128 random bits as 22 URL-safe characters."""


def _hostile_workload() -> dict:
    w = {**WORKLOAD, "id": "hostile", "name": XSS + ATTR, "source": ATTR}
    w["classes"] = [{**c, "name": f"{XSS}{i}"} for i, c in enumerate(WORKLOAD["classes"])]
    return w


def _assert_inert(html: str, tmp_path: Path) -> None:
    """No script or injected attribute in the text, and none in the page Chromium builds from it."""
    low = html.lower()
    assert "<script" not in low and "<img src=x" not in low
    assert not re.search(r"<[^>]*\bonerror=", low)  # escaped text may say onerror=, no tag may carry it
    page = tmp_path / "page.html"
    page.write_text(html, encoding="utf-8")
    with Chromium(tmp_path / "profile") as b:
        sid = b.new_page()
        b.navigate(sid, page.as_uri())
        assert b.problems(sid) == []  # no dialog opened, no script error
        assert b.evaluate(sid, "document.scripts.length") == 0
        assert b.evaluate(sid, "document.querySelectorAll('img[onerror], [onerror], [onload]').length") == 0
        assert XSS in b.evaluate(sid, "document.body.innerText")  # shown as text


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("sec"), log_level="info", api_key=KEY, workers=1).start()
    yield s
    s.stop()


def test_report_from_api_with_hostile_inline_names(server, tmp_path):
    body = {"workload": _hostile_workload(), "rack": {**RACK, "id": "hostile-rack", "name": XSS},
            "layout": "hybrid", "sensitivity": False}
    with server.client(headers={"X-API-Key": KEY}) as c:
        r = c.post("/v1/reports", json=body)
        assert r.status_code == 201, r.text
        rid = r.json()["id"]
        page = c.get(f"/v1/reports/{rid}")
    assert page.status_code == 200
    csp = page.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src" not in csp
    assert page.headers["x-content-type-options"] == "nosniff"
    _assert_inert(page.text, tmp_path)


def test_batch_report_escapes_scenario_and_workload_names(tmp_path):
    study = {"catalog": str(MINI), "rack": "r15", "layouts": ["a"], "time_limit_s": 30,
             "scenarios": [{"name": XSS, "workload": _hostile_workload()}]}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(study, allow_unicode=True))
    run_batch(path, tmp_path / "out", workers=0)
    html = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    _assert_inert(html, tmp_path)


def test_report_ids_are_unguessable(tmp_path):
    store = ReportStore(tmp_path / "r.db")
    ids = [store.put({"i": i}, {"i": i}, "<p>x</p>").id for i in range(200)]
    assert len(set(ids)) == len(ids)
    assert all(REPORT_ID.match(i) for i in ids), ids[:3]
    # no shared prefixes beyond chance (not a counter or a timestamp): 200 random 6-bit first characters
    assert len({i[:2] for i in ids}) > 150
    assert store.get(ids[0][:-1]) is None and store.get(ids[0] + "x") is None  # exact match only
    chars = set("".join(ids))
    assert chars <= set(string.ascii_letters + string.digits + "-_") and len(chars) > 50


def test_api_key_compared_in_constant_time(monkeypatch):
    calls = []
    real = hmac.compare_digest

    def spy(a, b):
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(api.hmac, "compare_digest", spy)
    app = api.create_app(ApiSettings(api_key=KEY, catalog=MINI, database=":memory:", solve_in="thread"))
    with TestClient(app) as c:
        assert c.get("/v1/catalog/racks", headers={"X-API-Key": WRONG_KEY}).status_code == 403
        assert c.get("/v1/catalog/racks", headers={"X-API-Key": KEY}).status_code == 200
    assert calls == [(WRONG_KEY.encode(), KEY.encode()), (KEY.encode(), KEY.encode())]


def test_no_stack_trace_in_an_internal_error(monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("secret internal detail /etc/shadow")

    # in a thread, so that the patched function is the one that runs (a worker process imports its own);
    # tests/test_api_workers.py checks the answer when a worker process fails
    monkeypatch.setattr(service, "evaluate_configuration", boom)
    app = api.create_app(ApiSettings(catalog=MINI, database=":memory:", solve_in="thread"))
    with TestClient(app, raise_server_exceptions=False) as c:
        r = c.post("/v1/evaluate", json={"configuration": {"servers": [{"chassis": "cpu1u", "cpu": "cpu-b",
                                                                        "count": 1}]},
                                         "workload": "agent", "rack": "r40"})
    assert r.status_code == 500
    assert r.json()["detail"] == "internal error" and r.json()["status"] == 500
    assert "Traceback" not in r.text and "secret" not in r.text


def test_logs_carry_no_request_secrets(server):
    with server.client() as c:
        assert c.get("/v1/catalog/racks", headers={"X-API-Key": WRONG_KEY}).status_code == 403
        assert c.get("/v1/catalog/racks", headers={"X-API-Key": KEY}).status_code == 200
        assert c.post("/v1/optimize", headers={"X-API-Key": KEY}, content=b"{not json").status_code in (400, 415, 422)
    log = server.log()
    assert "GET /v1/catalog/racks" in log  # the access log is on: it is what is being checked
    assert KEY not in log and WRONG_KEY not in log
    assert "Traceback" not in log
