"""The HTTP API's error contract against a real uvicorn server (issue #19): hostile bodies sent to every POST
endpoint are refused at the edge with a 4xx RFC 9457 problem document naming the field, never a 5xx, and the same
keep-alive connection keeps working afterwards."""

from __future__ import annotations

import json
import socket

import pytest

from advisor.api.problems import PROBLEM_MEDIA_TYPE, TYPE_PREFIX
from api_server import KeepAlive, Server

CONFIG = {"servers": [{"chassis": "cpu1u", "cpu": "cpu-b", "count": 1}]}
VALID = {
    "/v1/evaluate": {"configuration": CONFIG, "workload": "agent", "rack": "r40"},
    "/v1/optimize": {"workload": "agent", "rack": "r40", "explain": False},
    "/v1/compare": {"workload": "agent", "rack": "r40"},
    "/v1/chip-vs-rack": {"kind": "gpu", "a": "gpu-x", "b": "gpu-y", "workload": "agent", "rack": "r40"},
    "/v1/export": {"format": "prometheus", "configuration": CONFIG, "workload": "agent", "rack": "r40"},
    "/v1/reports": {"workload": "agent", "rack": "r40", "sensitivity": False},
}
"""A valid body per POST endpoint, into which the hostile parts go."""
NUMBER_FIELD = {"/v1/evaluate": ("configuration", "servers", 0, "count")}
"""Where a hostile number goes: the endpoint's own numeric field; else time_limit_s."""
RACK = {"id": "rk", "name": "rk", "source": "test", "power_kw": 40, "air_cooling_kw": 40, "liquid_cooling_kw": 0,
        "height_u": 42}
NON_FINITE = ["1e999", "-1e999", "NaN", "Infinity", "-Infinity"]
DEPTHS = [100, 600, 900, 10_000]
MAX_BODY = 1_000_000
BIG_BODY = 50_000_000


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("contract"), workers=1, queue_wait_s=60, time_limit_cap_s=5,
               max_body_bytes=MAX_BODY, body_read_timeout_s=2).start()
    yield s
    s.stop()
    assert "Traceback" not in s.log(), s.log()[-4000:]


@pytest.fixture(scope="module")
def post_paths(server):
    with server.client() as c:
        spec = c.get("/openapi.json").json()
    paths = sorted(p for p, ops in spec["paths"].items() if "post" in ops)
    assert set(paths) == set(VALID), "every POST endpoint has a valid body here"
    return paths


def _set(body: dict, path: tuple, raw: str) -> str:
    """The body as JSON text with the value at `path` replaced by raw JSON text (which json.dumps cannot write)."""
    marker = "__HOSTILE__"
    data = json.loads(json.dumps(body))
    node = data
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = marker
    return json.dumps(data).replace(f'"{marker}"', raw)


def assert_problem(status: int, headers: dict, raw: bytes, loc_prefix: list | None) -> dict:
    assert 400 <= status < 500, (status, raw[:500])
    assert headers["content-type"].startswith(PROBLEM_MEDIA_TYPE), headers
    doc = json.loads(raw)
    assert doc["type"].startswith(TYPE_PREFIX) and doc["title"] and doc["status"] == status and doc["detail"]
    assert doc["errors"] and all(e["loc"] and e["msg"] for e in doc["errors"]), doc
    if loc_prefix is not None:
        assert any(e["loc"][:len(loc_prefix)] == loc_prefix for e in doc["errors"]), (loc_prefix, doc)
    return doc


def still_alive(conn: KeepAlive, headers: dict) -> None:
    """The same connection serves the next request, unless the server said it would close it."""
    if headers.get("connection", "").lower() == "close":
        return
    status, _, _ = conn.request("GET", "/healthz")
    assert status == 200


JSON = {"Content-Type": "application/json"}


@pytest.mark.parametrize("raw", NON_FINITE)
def test_non_finite_numbers_are_422_naming_the_field(server, post_paths, raw):
    conn = KeepAlive(server)
    try:
        for path in post_paths:
            field = NUMBER_FIELD.get(path, ("time_limit_s",))
            for where, body in ((field, _set(VALID[path], field, raw)),
                                (("rack", "power_kw"), _set({**VALID[path], "rack": RACK}, ("rack", "power_kw"), raw))):
                status, headers, data = conn.request("POST", path, body.encode(), JSON)
                doc = assert_problem(status, headers, data, ["body", *where])
                assert status == 422 and raw.lstrip("-") not in data.decode(), doc  # the value is not echoed
                still_alive(conn, headers)
    finally:
        conn.close()


@pytest.mark.parametrize("value", ["1e16", "-2e300", "1e-300", str(10**40)])
def test_out_of_range_numbers_are_422(server, post_paths, value):
    conn = KeepAlive(server)
    try:
        for path in post_paths:
            field = NUMBER_FIELD.get(path, ("time_limit_s",))
            status, headers, data = conn.request("POST", path, _set(VALID[path], field, value).encode(), JSON)
            assert status == 422
            assert_problem(status, headers, data, ["body", *field])
            still_alive(conn, headers)
    finally:
        conn.close()


@pytest.mark.parametrize("depth", DEPTHS)
def test_deep_nesting_is_400_naming_the_field(server, post_paths, depth):
    conn = KeepAlive(server)
    try:
        for path in post_paths:
            body = _set(VALID[path], ("workload",), "[" * depth + "]" * depth)
            status, headers, data = conn.request("POST", path, body.encode(), JSON)
            assert status == 400
            assert_problem(status, headers, data, ["body", "workload"])
            still_alive(conn, headers)
            # objects as deep as arrays, inside an inline rack
            deep = '{"a":' * depth + "1" + "}" * depth
            status, headers, data = conn.request("POST", path, _set({**VALID[path], "rack": RACK},
                                                                    ("rack", "notes"), deep).encode(), JSON)
            assert status == 400
            assert_problem(status, headers, data, ["body", "rack", "notes", "a"])
            still_alive(conn, headers)
    finally:
        conn.close()


def test_duplicate_keys_are_422(server, post_paths):
    conn = KeepAlive(server)
    try:
        for path in post_paths:
            body = json.dumps(VALID[path])[:-1] + ', "workload": "agent"}'
            status, headers, data = conn.request("POST", path, body.encode(), JSON)
            assert status == 422
            assert_problem(status, headers, data, ["body", "workload"])
            still_alive(conn, headers)
    finally:
        conn.close()


@pytest.mark.parametrize("ctype", [None, "text/plain", "application/x-www-form-urlencoded",
                                   "multipart/form-data; boundary=x", "application/xml"])
def test_wrong_content_types_are_415(server, post_paths, ctype):
    conn = KeepAlive(server)
    try:
        for path in post_paths:
            headers = {"Content-Type": ctype} if ctype else {}
            status, h, data = conn.request("POST", path, json.dumps(VALID[path]).encode(), headers)
            assert status == 415
            assert_problem(status, h, data, ["header", "content-type"])
            still_alive(conn, h)
    finally:
        conn.close()


def test_invalid_json_and_wrong_types_name_the_field(server, post_paths):
    conn = KeepAlive(server)
    try:
        for path in post_paths:
            for body, status_want, loc in ((b"{not json", 400, ["body"]), (b"\xff\xfe{", 400, ["body"]),
                                           (json.dumps({**VALID[path], "typo": 1}).encode(), 422, ["body", "typo"]),
                                           (json.dumps({**VALID[path], "workload": 7}).encode(), 422,
                                            ["body", "workload"])):
                status, headers, data = conn.request("POST", path, body, JSON)
                assert status == status_want, data
                assert_problem(status, headers, data, loc)
                still_alive(conn, headers)
    finally:
        conn.close()


def _raw_exchange(server, head: bytes, body_parts, read_limit: int = 65536) -> tuple[int, dict, bytes]:
    """Send a request over a raw socket, stopping when the server answers (it answers before reading a too-large
    body), and read its answer."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
        s.sendall(head)
        for part in body_parts:
            try:
                s.sendall(part)
            except (BrokenPipeError, ConnectionResetError):
                break
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(read_limit)
            if not chunk:
                break
            data += chunk
        head_raw, _, rest = data.partition(b"\r\n\r\n")
        lines = head_raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:])}
        need = int(headers.get("content-length", "0"))
        while len(rest) < need:
            chunk = s.recv(read_limit)
            if not chunk:
                break
            rest += chunk
    return status, headers, rest


def test_a_50_mb_body_is_413_before_it_is_read(server, post_paths):
    for path in post_paths:
        head = (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Content-Length: {BIG_BODY}\r\n\r\n").encode()
        status, headers, data = _raw_exchange(server, head, [b" " * 65536])  # the server answers on the header
        assert status == 413
        assert_problem(status, headers, data, ["body"])
        assert headers.get("connection") == "close"
        # streamed (chunked, no Content-Length): refused once the limit is passed, without reading 50 MB
        head = (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                "Transfer-Encoding: chunked\r\n\r\n").encode()
        chunk = b"%x\r\n%s\r\n" % (1 << 20, b" " * (1 << 20))
        status, headers, data = _raw_exchange(server, head, (chunk for _ in range(BIG_BODY >> 20)))
        assert status == 413
        assert_problem(status, headers, data, ["body"])
    conn = KeepAlive(server)  # and the server serves the next client as usual
    assert conn.request("GET", "/healthz")[0] == 200
    conn.close()


def test_a_stalled_body_is_408_within_the_read_timeout(server):
    head = (b"POST /v1/optimize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000\r\n\r\n{\"workload\": ")
    status, headers, data = _raw_exchange(server, head, [])  # never sends the rest
    assert status == 408
    assert_problem(status, headers, data, ["body"])
    assert headers.get("connection") == "close"


def test_valid_requests_still_answer_on_the_same_connection(server, post_paths):
    conn = KeepAlive(server)
    try:
        for path in ("/v1/optimize", "/v1/evaluate", "/v1/export"):
            status, headers, data = conn.request("POST", path, json.dumps(VALID[path]).encode(), JSON)
            assert status == 200, data[:500]
        status, headers, data = conn.request("POST", "/v1/optimize", b'{"workload": "agnt", "rack": "r40"}', JSON)
        doc = assert_problem(status, headers, data, ["body", "workload"])
        assert doc["suggestions"] == ["agent"] and doc["type"] == TYPE_PREFIX + "unknown-id"
        assert conn.request("GET", "/healthz")[0] == 200
    finally:
        conn.close()


def test_not_found_and_method_not_allowed_are_problems(server):
    conn = KeepAlive(server)
    try:
        for method, path, want, loc in (("GET", "/v1/nope", 404, ["path"]),
                                        ("GET", "/v1/reports/nope.json", 404, ["path"]),
                                        ("GET", "/v1/catalog/racks/r4", 404, ["path", "entry_id"]),
                                        ("PUT", "/v1/optimize", 405, None),
                                        ("DELETE", "/v1/reports/nope", 404, ["path"])):
            status, headers, data = conn.request(method, path)
            assert status == want
            if loc is None:
                doc = json.loads(data)
                assert headers["content-type"].startswith(PROBLEM_MEDIA_TYPE) and doc["status"] == want
            else:
                assert_problem(status, headers, data, loc)
            still_alive(conn, headers)
    finally:
        conn.close()


def test_openapi_documents_the_problem_shape(server):
    with server.client() as c:
        spec = c.get("/openapi.json").json()
    problem = spec["components"]["schemas"]["Problem"]
    assert {"type", "title", "status", "detail", "errors"} <= set(problem["properties"])
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            for code, resp in op["responses"].items():
                if code[0] in "45":
                    assert list(resp["content"]) == [PROBLEM_MEDIA_TYPE], (path, method, code)
        if path.startswith("/v1/") and "post" in ops:
            assert {"400", "413", "415", "422", "500"} <= set(ops["post"]["responses"]), path


def test_a_huge_unknown_id_is_not_reflected(server):
    conn = KeepAlive(server)
    try:
        body = json.dumps({"workload": "w" * 500_000, "rack": "r40", "explain": False, "time_limit_s": 2}).encode()
        status, headers, data = conn.request("POST", "/v1/optimize", body, JSON)
        assert status == 422 and len(data) < 10_000
        assert_problem(status, headers, data, ["body", "workload"])
        still_alive(conn, headers)
    finally:
        conn.close()
