"""Whole-request bounds of the HTTP API (issue #19): report retention (delete, paginated list, max count and max age
enforced on write), report links never built from the Host header, an empty API key refused at startup, HEAD on
/healthz, /docs served without a CDN, and the OpenAPI surface a client generator sees."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timedelta, UTC

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from advisor.api.app import create_app
from advisor.api.settings import ApiSettings
from advisor.api.store import ReportStore
from api_server import MINI, ROOT

QUICK_REPORT = {"workload": "agent", "rack": "r40", "layout": "a", "sensitivity": False, "time_limit_s": 10}


def _app(tmp_path, **kw):
    return create_app(ApiSettings(catalog=MINI, database=tmp_path / "r.db", solve_in="thread", **kw))


def test_store_keeps_at_most_max_count_newest_first(tmp_path):
    st = ReportStore(tmp_path / "r.db", max_count=3)
    ids = [st.put({"n": i}, {"n": i}, f"<p>{i}</p>").id for i in range(5)]
    assert st.count() == 3
    total, rows = st.list(limit=10)
    assert total == 3 and [r[0] for r in rows] == ids[:1:-1]  # the three newest, newest first
    assert st.get(ids[0]) is None and st.get(ids[4]) is not None
    assert st.list(limit=2, offset=2)[1] == [rows[2]]


def test_store_deletes_reports_older_than_max_age_on_write(tmp_path):
    st = ReportStore(tmp_path / "r.db", max_age_days=30)
    old = st.put({}, {}, "old").id
    import sqlite3
    from contextlib import closing

    stale = (datetime.now(UTC) - timedelta(days=31)).isoformat(timespec="seconds")
    with closing(sqlite3.connect(tmp_path / "r.db")) as db, db:
        db.execute("UPDATE reports SET created = ? WHERE id = ?", (stale, old))
    assert st.get(old) is not None  # enforced on write, not on read
    new = st.put({}, {}, "new").id
    assert st.get(old) is None and st.get(new) is not None
    assert st.delete(new) and not st.delete(new) and st.count() == 0


def test_report_links_relative_or_from_the_configured_base_never_the_host_header(tmp_path):
    with TestClient(_app(tmp_path)) as c:
        r = c.post("/v1/reports", json=QUICK_REPORT, headers={"Host": "evil.example"})
        assert r.status_code == 201, r.text
        rid = r.json()["id"]
        assert r.json()["url"] == f"/v1/reports/{rid}" and r.json()["json_url"] == f"/v1/reports/{rid}.json"
        assert c.get(r.json()["url"]).status_code == 200
        page = c.get("/v1/reports", params={"limit": 1}).json()
        assert page["total"] == 1 and page["items"][0]["id"] == rid and page["next_offset"] is None
        stored = c.get(r.json()["json_url"]).json()
        assert stored["request"]["workload"] == "agent" and stored["request"]["layout"] == "a"
        assert c.delete(f"/v1/reports/{rid}").status_code == 204
        gone = c.get(f"/v1/reports/{rid}.json")
        assert gone.status_code == 404 and gone.headers["content-type"] == "application/problem+json"
        assert c.delete(f"/v1/reports/{rid}").status_code == 404
    with TestClient(_app(tmp_path / "b", public_base_url="https://advisor.example.com/base/")) as c:
        r = c.post("/v1/reports", json=QUICK_REPORT, headers={"Host": "evil.example"})
        rid = r.json()["id"]
        assert r.json()["url"] == f"https://advisor.example.com/base/v1/reports/{rid}"
        assert "evil" not in r.text


def test_report_list_pages_and_max_count_on_write(tmp_path):
    with TestClient(_app(tmp_path, report_max_count=2)) as c:
        ids = [c.post("/v1/reports", json=QUICK_REPORT).json()["id"] for _ in range(3)]
        page = c.get("/v1/reports", params={"limit": 1}).json()
        assert page["total"] == 2 and [i["id"] for i in page["items"]] == [ids[2]] and page["next_offset"] == 1
        page2 = c.get("/v1/reports", params={"limit": 1, "offset": 1}).json()
        assert [i["id"] for i in page2["items"]] == [ids[1]] and page2["next_offset"] is None
        assert c.get(f"/v1/reports/{ids[0]}").status_code == 404
        bad = c.get("/v1/reports", params={"limit": 0})
        assert bad.status_code == 422 and bad.json()["errors"][0]["loc"] == ["query", "limit"]


@pytest.mark.parametrize("key", ["", "   "])
def test_an_empty_api_key_is_a_startup_error(tmp_path, key):
    with pytest.raises(ValidationError, match="set but empty"):
        ApiSettings(api_key=key)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADVISOR_")}
    env.update(ADVISOR_API_KEY=key, ADVISOR_DATABASE=str(tmp_path / "r.db"), PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-c", "from advisor.cli.main import main; main()", "serve", "--port", "0"], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert "error:" in p.stderr and "api_key" in p.stderr and "Traceback" not in p.stderr


def test_head_healthz_and_docs_without_a_cdn(tmp_path):
    with TestClient(_app(tmp_path)) as c:
        h = c.head("/healthz")
        assert h.status_code == 200 and h.content == b""
        docs = c.get("/docs").text
        assert "cdn" not in docs.lower() and "https://" not in docs
        for asset in ("swagger-ui-bundle.js", "swagger-ui.css"):
            assert f"/docs-static/{asset}" in docs
            r = c.get(f"/docs-static/{asset}")
            assert r.status_code == 200 and len(r.content) > 10_000


def test_operation_ids_are_clean(tmp_path):
    spec = _app(tmp_path).openapi()
    ids = {op["operationId"] for ops in spec["paths"].values() for op in ops.values()}
    assert {"evaluate", "optimize", "compare", "chipVsRack", "export", "createReport", "listReports",
            "getReportJson", "getReportHtml", "deleteReport", "health", "listRacks", "getRacks"} <= ids
    assert all(i.isidentifier() and "_" not in i for i in ids), ids
    stored = spec["paths"]["/v1/reports/{report_id}.json"]["get"]["responses"]["200"]["content"]
    ref = stored["application/json"]["schema"]["$ref"]
    assert spec["components"]["schemas"][ref.rsplit("/", 1)[1]]["properties"]["request"]["$ref"].endswith(
        "/ReportRequest")
    export = spec["paths"]["/v1/export"]["post"]["responses"]["200"]["content"]
    assert export["application/json"]["schema"]["$ref"].endswith("/ExportOut")
    assert "application/yaml" in export and "text/plain" in export
