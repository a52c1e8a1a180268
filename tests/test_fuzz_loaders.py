"""Loader fuzzing: Hypothesis-mutated catalogs, workloads, racks, configurations and scenario files (wrong types,
NaN and infinities, huge numbers, empty lists, unicode, deep nesting, YAML aliases) through the file loaders, the
CLI and the HTTP API. Each input is accepted (and then evaluated without a crash) or rejected with an `InputError`
/ exit code 2 / HTTP 422 whose message says where; never another exception, a hang or unbounded memory.

Also: YAML is read with a safe loader only (no Python objects), and no string in an HTTP request makes the server
read a file, inside or outside the catalog folders.
"""

from __future__ import annotations

import copy
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from advisor.catalog import MAX_YAML_DEPTH, MAX_YAML_NODES, load_catalog, load_rack, load_workload, parse_yaml
from advisor.cli.main import app as cli_app
from advisor.errors import InputError
from advisor.studies.scenarios import load_scenarios, resolve
from advisor.service import evaluate_configuration
from api_server import MINI, Server
from models.catalog import UnknownId

EXAMPLES = int(os.environ.get("ADVISOR_FUZZ_EXAMPLES", "60"))
"""Hypothesis examples per loader (each is a file write plus a load, some an evaluation). CI runs the default,
derandomized (the same examples every run); set ADVISOR_FUZZ_EXAMPLES for a longer, random campaign."""
CAMPAIGN = "ADVISOR_FUZZ_EXAMPLES" in os.environ
CONFIG = {"servers": [{"chassis": "gpu4", "cpu": "cpu-a", "gpu": "gpu-x", "gpus_per_server": 4, "count": 2,
                       "orchestration_cores_per_gpu": 1.0},
                      {"chassis": "cpu1u", "cpu": "cpu-b", "count": 4}]}
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=not CAMPAIGN,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                       HealthCheck.data_too_large])
HOSTILE = st.one_of(
    st.sampled_from([math.nan, math.inf, -math.inf, 1e308, -1e308, 10 ** 30, 0, -1, 0.0, 1e-320, "", [], {}, None,
                     True, "<script>alert('x')</script>", "../../etc/passwd", "\u202e\u0000\ufffd", "1e3", "NaN"]),
    st.integers(-10 ** 20, 10 ** 20), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.recursive(st.none() | st.integers(), lambda c: st.lists(c, max_size=3) | st.dictionaries(
        st.text(max_size=4), c, max_size=3), max_leaves=8),
)


def _slots(data: Any, path: tuple = ()) -> list[tuple]:
    """Paths of every value in nested dicts/lists (the root excluded)."""
    out = []
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for k, v in items:
        out.append(path + (k,))
        out += _slots(v, path + (k,))
    return out


def _parent(data: Any, path: tuple) -> Any:
    for k in path[:-1]:
        data = data[k]
    return data


@st.composite
def mutated(draw, base: Any) -> Any:
    """`base` with 1-3 mutations: a value replaced by a hostile one, a key deleted, an unknown key added, a list
    emptied, or a value nested deeply."""
    data = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        slots = _slots(data)
        if not slots:
            break
        path = draw(st.sampled_from(slots))
        parent, key = _parent(data, path), path[-1]
        action = draw(st.sampled_from(["replace", "replace", "replace", "delete", "add", "empty", "nest"]))
        if action == "replace":
            parent[key] = draw(HOSTILE)
        elif action == "delete":
            del parent[key]
        elif action == "add" and isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=8))] = draw(HOSTILE)
        elif action == "empty" and isinstance(parent[key], (list, dict)):
            parent[key] = type(parent[key])()
        elif action == "nest":
            v = parent[key]
            for _ in range(draw(st.integers(1, 3 * MAX_YAML_DEPTH))):
                v = [v]
            parent[key] = v
    return data


def _yaml(data: Any) -> str:
    return yaml.safe_dump(data, allow_unicode=True, sort_keys=False)


def _accepted_or_clear(fn, where: str | tuple[str, ...]):
    """fn() returns, or raises an InputError/UnknownId whose message names `where` (the file, the configuration or
    the scenario: any one of several when a tuple)."""
    names = (where,) if isinstance(where, str) else where
    assert all(names), "an empty `where` would accept any message"
    try:
        return fn()
    except (InputError, UnknownId) as e:
        msg = str(e)
        assert msg.strip(), "an error without a message"
        assert any(n in msg for n in names), (names, msg)
        return None


EVAL_NAMES = ("configuration", "unknown")
"""An evaluation error names the configuration (`configuration 'x': ...`) or the unknown catalog id."""

MINI_DATA = {p.name: yaml.safe_load(p.read_text()) for p in MINI.glob("*.yaml")}
WORKLOAD = yaml.safe_load((MINI / "workloads" / "agent.yaml").read_text())
RACK = MINI_DATA["racks.yaml"]["entries"][0]


# ------------------------------------------------------------------------------------------------ YAML itself

@FUZZ
@given(st.text(max_size=300))
def test_any_text_parses_or_is_rejected(text):
    _accepted_or_clear(lambda: parse_yaml(text, "fuzz.yaml"), "fuzz.yaml")


@pytest.mark.parametrize("text, why", [
    # billion laughs: ~50 bytes per level, 9^9 values once expanded
    ("a: &a [1,1,1,1,1,1,1,1,1]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{','.join('*' + chr(97 + i) for _ in range(9))}]\n" for i in range(8)),
     "aliases"),
    ("x: &x [*x]\n", "recursive"),
    ("[" * 10_000 + "]" * 10_000, "nested"),
    ("!!python/object/apply:os.system ['echo pwned > /tmp/advisor-pwned']", "python"),
    ("!!python/name:os.system", "python"),
])
def test_yaml_bombs_and_object_tags_are_refused(text, why):
    with pytest.raises(InputError) as e:
        parse_yaml(text, "bomb.yaml")
    assert "bomb.yaml" in str(e.value)
    assert not Path("/tmp/advisor-pwned").exists()


def test_alias_expansion_is_counted_not_refused_outright():
    # shared anchors are legitimate YAML: within the expanded-size bound they load
    n = MAX_YAML_NODES // 20
    text = f"base: &b {{power_kw: 40}}\nlist: [{', '.join(['*b'] * n)}]\n"
    assert len(parse_yaml(text, "ok.yaml")["list"]) == n


# ------------------------------------------------------------------------------------------------ catalog folders

@pytest.mark.slow
@FUZZ
@given(st.sampled_from(sorted(MINI_DATA)), st.data())
def test_mutated_catalog_loads_or_names_the_file(name, data):
    bad = data.draw(mutated(MINI_DATA[name]))
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "cat"
        shutil.copytree(MINI, folder)
        (folder / name).write_text(_yaml(bad), encoding="utf-8")
        cat = _accepted_or_clear(lambda: load_catalog(folder), str(folder))
    if cat is not None:  # accepted: the model copes with whatever values passed validation
        _accepted_or_clear(lambda: evaluate_configuration(CONFIG, "agent", "r40", cat), EVAL_NAMES)


@pytest.fixture(scope="module")
def mini():
    return load_catalog(MINI)


@pytest.mark.slow
@FUZZ
@given(st.data())
def test_mutated_workload_file_loads_or_names_the_file(mini, data):
    bad = data.draw(mutated(WORKLOAD))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "wl.yaml"
        path.write_text(_yaml(bad), encoding="utf-8")
        w = _accepted_or_clear(lambda: load_workload(str(path), mini), str(path))
    if w is not None:
        _accepted_or_clear(lambda: evaluate_configuration(CONFIG, w, "r40", mini), EVAL_NAMES)


@pytest.mark.slow
@FUZZ
@given(st.data())
def test_mutated_rack_and_configuration_files(mini, data):
    rack, cfg = data.draw(mutated(RACK)), data.draw(mutated(CONFIG))
    with tempfile.TemporaryDirectory() as tmp:
        rp, cp = Path(tmp) / "rack.yaml", Path(tmp) / "cfg.yaml"
        rp.write_text(_yaml(rack), encoding="utf-8")
        cp.write_text(_yaml(cfg), encoding="utf-8")
        r = _accepted_or_clear(lambda: load_rack(str(rp), mini), str(rp))
        _accepted_or_clear(lambda: evaluate_configuration(str(cp), "agent", r or "r40", mini), (str(cp), *EVAL_NAMES))


SCENARIO = {"catalog": str(MINI), "workload": "agent", "rack": "r15", "time_limit_s": 30, "layouts": ["a", "hybrid"],
            "scenarios": [{"name": "base"}, {"name": "more", "racks": 2, "overrides": {"rack.power_kw": 30}}]}


@FUZZ
@given(st.data())
def test_mutated_scenario_file_loads_or_names_the_file(data):
    bad = data.draw(mutated(SCENARIO))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "study.yaml"
        path.write_text(_yaml(bad), encoding="utf-8")
        scen = _accepted_or_clear(lambda: load_scenarios(path), str(path))
        for s in scen or []:
            _accepted_or_clear(lambda s=s: resolve(s), f"scenario {s.name!r}")


# ------------------------------------------------------------------------------------------------ CLI

@settings(max_examples=EXAMPLES // 2, deadline=None, derandomize=not CAMPAIGN,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_cli_evaluate_with_mutated_files_exits_cleanly(data):
    # the built-in catalog: a mutated copy of its rack profile and a configuration of its entries
    rack = data.draw(mutated({"id": "r", "name": "r", "power_kw": 40, "air_cooling_kw": 40, "liquid_cooling_kw": 0,
                              "height_u": 42, "reserved_u": 2, "source": "fuzz"}))
    cfg = data.draw(mutated({"servers": [{"chassis": "dgx-h100", "cpu": "xeon-8480c", "gpu": "h100-sxm",
                                          "gpus_per_server": 8, "count": 2}]}))
    with tempfile.TemporaryDirectory() as tmp:
        rp, cp = Path(tmp) / "rack.yaml", Path(tmp) / "cfg.yaml"
        rp.write_text(_yaml(rack), encoding="utf-8")
        cp.write_text(_yaml(cfg), encoding="utf-8")
        res = CliRunner().invoke(cli_app, ["evaluate", str(cp), "--workload", "swe-agent", "--rack", str(rp),
                                           "--json"])
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert res.exit_code in (0, 2), (res.exit_code, res.output[-2000:])
    if res.exit_code == 2:
        assert "error:" in res.output and "Traceback" not in res.output


# ------------------------------------------------------------------------------------------------ HTTP API

@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("loaders"), workers=2).start()
    yield s
    s.stop()
    log = next(s.workdir.glob("server-*.log")).read_text()
    assert "Traceback" not in log, log[-4000:]


@pytest.fixture(scope="module")
def client(server):
    with server.client() as c:
        yield c


@pytest.mark.slow
@FUZZ
@given(st.data())
def test_api_inline_workload_and_rack(client, data):
    body = {"configuration": data.draw(mutated(CONFIG)), "workload": data.draw(mutated(WORKLOAD)),
            "rack": data.draw(mutated({k: v for k, v in RACK.items()}))}
    try:
        r = client.post("/v1/evaluate", json=body)
    except ValueError:  # NaN / inf cannot be sent as JSON at all: the client refuses, nothing reaches the server
        return
    # 400 for structure refused at the edge (nesting deeper than the server's max_json_depth), 422 for values
    assert r.status_code in (200, 400, 422), (r.status_code, r.text[:500])
    if r.status_code != 200:
        doc = r.json()
        assert doc["detail"] and doc["errors"] and all(e["loc"] and e["msg"] for e in doc["errors"])
        assert r.status_code == 422 or doc["type"].endswith("/too-deep"), doc


@pytest.fixture(scope="module")
def outside_file(tmp_path_factory) -> Path:
    """A valid workload file outside every catalog folder: if the server read files named in requests, it would
    accept this one."""
    p = tmp_path_factory.mktemp("outside") / "agent.yaml"
    p.write_text((MINI / "workloads" / "agent.yaml").read_text())
    return p


def _refs(outside: Path) -> list[str]:
    rel = Path("..") / ".." / ".." / outside.relative_to("/")
    return [str(outside), str(rel), "../../../../../../etc/passwd", "/etc/passwd", "workloads/agent.yaml",
            str(MINI / "workloads" / "agent.yaml"), "..\\..\\agent.yaml", "agent.yaml", "file:///etc/passwd"]


@pytest.mark.parametrize("field", ["workload", "rack"])
def test_api_never_reads_files_named_in_requests(client, outside_file, field):
    for ref in _refs(outside_file):
        body = {"workload": "agent", "rack": "r40", field: ref}
        r = client.post("/v1/optimize", json={**body, "explain": False})
        assert r.status_code == 422, (ref, r.status_code, r.text[:300])
        detail = r.json()["detail"]
        assert field in detail and ("file path" in detail or "unknown" in detail), (ref, detail)
        r = client.post("/v1/evaluate", json={"configuration": {**CONFIG, field: ref}})
        assert r.status_code == 422, (ref, r.status_code, r.text[:300])


def test_api_catalog_and_report_paths_do_not_traverse(client):
    for path in ("/v1/catalog/workloads/..%2F..%2Fetc%2Fpasswd", "/v1/catalog/racks/%2Fetc%2Fpasswd",
                 "/v1/reports/..%2F..%2Fadvisor.db", "/v1/reports/..%2Fadvisor.db.json"):
        r = client.get(path)
        assert r.status_code == 404, (path, r.status_code)
        assert "root:" not in r.text and "SQLite" not in r.text
