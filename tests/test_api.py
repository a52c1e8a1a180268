"""HTTP API against a real uvicorn server (subprocess, loopback, free port) on the mini test catalog."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from advisor.catalog import load_catalog
from advisor.optimizer.optimize import optimize
from advisor.service import evaluate_configuration
from api_server import MINI, Server

MAX_BODY = 50_000
CONFIG = {"servers": [{"chassis": "gpu4", "cpu": "cpu-a", "gpu": "gpu-x", "gpus_per_server": 4, "count": 2,
                       "orchestration_cores_per_gpu": 1.0},
                      {"chassis": "cpu1u", "cpu": "cpu-b", "count": 4}]}
SMALL_REPORT = {"workload": "agent", "rack": "r40", "power_factors": [0.75, 1.0], "tool_factors": [1.0, 2.0],
                "time_limit_s": 20}


@pytest.fixture(scope="module")
def catalog():
    return load_catalog(MINI)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("api"), workers=2, queue_wait_s=1.0, max_body_bytes=MAX_BODY).start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    with server.client() as c:
        yield c


def test_healthz_openapi_docs(client):
    h = client.get("/healthz")
    assert h.status_code == 200 and h.json()["status"] == "ok" and h.json()["workers"] == 2
    spec = client.get("/openapi.json").json()
    for path in ("/v1/evaluate", "/v1/optimize", "/v1/compare", "/v1/reports", "/v1/reports/{report_id}",
                 "/v1/reports/{report_id}.json", "/v1/catalog/cpus", "/v1/catalog/gpus/{entry_id}", "/healthz"):
        assert path in spec["paths"], path
    # typed responses: the optimize response is the OptimizeResult schema
    ok = spec["paths"]["/v1/optimize"]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert ok["$ref"].endswith("/OptimizeResult")
    docs = client.get("/docs")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()


@pytest.mark.parametrize("kind,attr", [("cpus", "cpus"), ("gpus", "gpus"), ("chassis", "chassis"),
                                       ("racks", "racks"), ("workloads", "workloads"),
                                       ("served_models", "served_models")])
def test_catalog_lists_and_entries(client, catalog, kind, attr):
    r = client.get(f"/v1/catalog/{kind}")
    assert r.status_code == 200
    ids = [e["id"] for e in r.json()]
    assert ids == [e.id for e in getattr(catalog, attr)]
    one = client.get(f"/v1/catalog/{kind}/{ids[0]}")
    assert one.status_code == 200 and one.json()["id"] == ids[0] and one.json()["source"]


def test_catalog_unknown_id_404_with_suggestion(client):
    r = client.get("/v1/catalog/racks/r4")
    assert r.status_code == 404
    assert "r40" in r.json()["suggestions"] and "did you mean" in r.json()["detail"]
    assert client.get("/v1/catalog/nonsense").status_code == 404


def test_evaluate_by_name_and_inline_rack(client, catalog):
    expected = evaluate_configuration(CONFIG, "agent", "r40", catalog)
    r = client.post("/v1/evaluate", json={"configuration": CONFIG, "workload": "agent", "rack": "r40"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["throughput_tasks_per_hour"] == pytest.approx(expected.throughput_tasks_per_hour)
    assert body["bottleneck"] == expected.bottleneck
    rack = client.get("/v1/catalog/racks/r40").json()
    r2 = client.post("/v1/evaluate", json={"configuration": CONFIG, "workload": "agent", "rack": rack})
    assert r2.status_code == 200
    assert r2.json()["throughput_tasks_per_hour"] == pytest.approx(expected.throughput_tasks_per_hour)


def test_evaluate_service_error_is_422_with_message(client):
    bad = {"servers": [{"chassis": "gpu4", "cpu": "cpu-a", "gpu": "gpu-x", "gpus_per_server": 3, "count": 1}]}
    r = client.post("/v1/evaluate", json={"configuration": bad, "workload": "agent", "rack": "r40"})
    assert r.status_code == 422
    assert "gpus_per_server" in r.json()["detail"] and "Traceback" not in r.text
    r = client.post("/v1/optimize", json={"workload": "agentx", "rack": "r40"})
    assert r.status_code == 422 and "did you mean agent" in r.json()["detail"]


def test_validation_422_has_field_paths(client):
    r = client.post("/v1/optimize", json={"workload": "agent", "rack": "r40", "racks": 0, "layout": "q"})
    assert r.status_code == 422
    locs = [tuple(e["loc"]) for e in r.json()["detail"]]
    assert ("body", "racks") in locs and ("body", "layout") in locs
    cfg = {"servers": [{"chassis": "gpu4", "cpu": "cpu-a", "count": 0}]}
    r = client.post("/v1/evaluate", json={"configuration": cfg, "workload": "agent", "rack": "r40"})
    assert r.status_code == 422
    assert ("body", "configuration", "servers", 0, "count") in [tuple(e["loc"]) for e in r.json()["detail"]]
    r = client.post("/v1/compare", json={"workload": "agent", "rack": "r40", "typo": 1})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "typo"]
    r = client.post("/v1/reports", json={"workload": "agent", "rack": "r40", "layout": "a", "compare": True})
    assert r.status_code == 422


def test_optimize_matches_in_process(client, catalog):
    w, rk = catalog.workloads["agent"], catalog.racks["r40"]
    expected = optimize(w, rk, catalog, layout="a", explain=False)
    r = client.post("/v1/optimize", json={"workload": "agent", "rack": "r40", "layout": "a", "explain": False,
                                          "time_limit_s": 1e6})  # capped by the server
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == expected.status
    assert body["throughput_tasks_per_hour"] == pytest.approx(expected.throughput_tasks_per_hour)
    assert body["evaluation"]["bottleneck"] == expected.bottleneck


def test_optimize_infeasible_is_200(client):
    tiny = {"id": "tiny", "name": "tiny", "source": "test", "power_kw": 1, "air_cooling_kw": 1,
            "liquid_cooling_kw": 0, "height_u": 10}
    r = client.post("/v1/optimize", json={"workload": "agent", "rack": tiny})
    assert r.status_code == 200
    assert r.json()["status"] == "infeasible" and r.json()["infeasibility"]


def test_compare(client, catalog):
    r = client.post("/v1/compare", json={"workload": "agent", "rack": "r40"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert [x["layout"] for x in body["results"]] == ["a", "b", "hybrid"]
    assert body["ratio_vs_a"]["a"] == pytest.approx(1.0)
    best = max(body["results"], key=lambda x: (x["throughput_tasks_per_hour"], -x["power_w"]))
    assert body["best_layout"] == best["layout"]


def test_body_limit_413(client):
    big = {"workload": "agent", "rack": "r40", "gpu_ids": ["x" * 100] * (MAX_BODY // 50)}
    r = client.post("/v1/optimize", json=big)
    assert r.status_code == 413 and "larger than" in r.json()["detail"]

    def chunks():  # no Content-Length: chunked transfer; the streamed size is checked
        for _ in range(MAX_BODY // 1000 + 5):
            yield b" " * 1000

    r = client.post("/v1/optimize", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413


def test_concurrency_bounded_and_health_stays_up(server):
    n = 12
    health: list[tuple[int, float]] = []
    stop = threading.Event()

    def poll():
        with server.client(timeout=10) as c:
            while not stop.is_set():
                t = time.perf_counter()
                health.append((c.get("/healthz").status_code, time.perf_counter() - t))
                time.sleep(0.05)

    def call(i):
        with server.client() as c:
            return c.post("/v1/optimize", json={"workload": "agent", "rack": "r40",
                                                "layout": ["a", "b", "hybrid"][i % 3]})

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        with ThreadPoolExecutor(n) as ex:
            answers = list(ex.map(call, range(n)))
    finally:
        stop.set()
        poller.join()
    assert len(answers) == n
    codes = [a.status_code for a in answers]
    assert set(codes) <= {200, 503}, codes
    assert codes.count(200) >= 2
    for a in answers:
        if a.status_code == 503:
            assert int(a.headers["Retry-After"]) >= 1
        else:
            assert a.json()["status"] in ("optimal", "feasible", "time_limit")
    assert health and all(code == 200 for code, _ in health)
    assert max(dt for _, dt in health) < 2.0


def test_api_key_required_when_set(tmp_path):
    s = Server(tmp_path, api_key="s3cret-key").start()
    try:
        with s.client() as c:
            assert c.get("/healthz").status_code == 200
            r = c.get("/v1/catalog/racks")
            assert r.status_code == 401 and "X-API-Key" in r.json()["detail"]
            assert c.get("/v1/catalog/racks", headers={"X-API-Key": "wrong"}).status_code == 403
            assert c.get("/openapi.json").status_code == 401
            assert c.post("/v1/optimize", json={}).status_code == 401
            ok = c.get("/v1/catalog/racks", headers={"X-API-Key": "s3cret-key"})
            assert ok.status_code == 200
            spec = c.get("/openapi.json", headers={"X-API-Key": "s3cret-key"}).json()
            assert spec["components"]["securitySchemes"]["APIKeyHeader"]["name"] == "X-API-Key"
    finally:
        s.stop()


def test_reports_persist_across_restart(tmp_path):
    s = Server(tmp_path, workers=1).start()
    try:
        with s.client() as c:
            r = c.post("/v1/reports", json=SMALL_REPORT)
            assert r.status_code == 201, r.text
            created = r.json()
            rid = created["id"]
            assert created["url"].endswith(f"/v1/reports/{rid}")
            html = c.get(f"/v1/reports/{rid}")
            assert html.status_code == 200 and html.headers["content-type"].startswith("text/html")
            assert "default-src 'none'" in html.headers["content-security-policy"]
            for sec in ("glance", "bom", "time", "layouts", "why", "operate", "sources"):
                assert f'<section id="{sec}">' in html.text
            data = c.get(f"/v1/reports/{rid}.json").json()
            assert data["request"]["workload"] == "agent"
            tph = data["result"]["glance"]["tasks_per_hour"]
            assert tph > 0 and f"{tph:,.0f}" in html.text
            assert c.get("/v1/reports/nope").status_code == 404
            assert c.get("/v1/reports/nope.json").status_code == 404
    finally:
        s.stop()
    s2 = Server(tmp_path, workers=1).start()  # same database file
    try:
        with s2.client() as c:
            again = c.get(f"/v1/reports/{rid}")
            assert again.status_code == 200 and again.text == html.text
            assert c.get(f"/v1/reports/{rid}.json").json()["result"] == data["result"]
    finally:
        s2.stop()


def test_report_bad_input_is_422(client):
    r = client.post("/v1/reports", json={"workload": "nope", "rack": "r40", "sensitivity": False})
    assert r.status_code == 422 and "unknown workload" in r.json()["detail"]
    r = client.post("/v1/reports", json={"workload": "agent", "rack": "r40", "power_factors": [-1, 1]})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][:2] == ["body", "power_factors"]
