"""The error contract: the domain raises one input-error type (models.errors.InputError), each front end maps it
once, and anything else is a bug (CLI exit 70, HTTP 500, a batch row marked as an internal error)."""

from __future__ import annotations

import sys

import pytest
from fastapi.testclient import TestClient

import advisor.cli.main as cli
from advisor import service
from advisor.api.app import create_app
from advisor.api.settings import ApiSettings
from advisor.catalog import load_catalog, load_rack, load_workload
from advisor.errors import InputError as AdvisorInputError
from advisor.requests import OptimizeRequest
from api_server import MINI
from models.catalog import UnknownId
from models.config import Configuration
from models.errors import InputError
from models.pipeline import evaluate

CPU_ONLY = {"servers": [{"chassis": "cpu1u", "cpu": "cpu-b", "count": 1}]}


def test_one_input_error_type():
    assert AdvisorInputError is InputError
    e = UnknownId("gpu", "gpu-xx", ["gpu-x", "gpu-y"])
    assert isinstance(e, InputError) and isinstance(e, KeyError) and e.suggestions == ["gpu-x", "gpu-y"]


def test_the_domain_raises_input_error_for_user_mistakes():
    cat = load_catalog(MINI)
    w, r = load_workload("agent", cat), load_rack("r40", cat)
    bad = Configuration.model_validate({"servers": [{"chassis": "cpu1u", "cpu": "no-such-cpu", "count": 1}]})
    with pytest.raises(InputError, match=r"servers\[0\]\.cpu: unknown cpu id 'no-such-cpu'"):
        evaluate(bad, w, r, cat)
    with pytest.raises(InputError, match=r"gpu_ids.*|unknown gpu id 'gpu-xx'") as ei:
        service.optimize(OptimizeRequest(workload="agent", rack="r40", gpu_ids=["gpu-xx"]), cat)
    assert ei.value.loc == ("body", "gpu_ids", 0) and ei.value.suggestions


def test_cli_a_bug_is_exit_70_with_a_traceback(monkeypatch, capsys):
    def boom(*a, **k):
        raise RuntimeError("an internal inconsistency")

    monkeypatch.setattr(service, "optimize", boom)
    monkeypatch.setattr(sys, "argv", ["advisor", "optimize", "-w", "agent", "-r", "r40", "--catalog", MINI, "-q"])
    with pytest.raises(SystemExit) as ei:
        cli.main()
    assert ei.value.code == 70
    e = capsys.readouterr().err
    assert "RuntimeError: an internal inconsistency" in e and "bug in rack-advisor" in e


def test_cli_input_error_is_exit_2_not_70(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["advisor", "optimize", "-w", "agent", "-r", "r40", "--catalog", MINI,
                                      "--gpu", "gpu-xx", "-q"])
    with pytest.raises(SystemExit) as ei:
        cli.main()
    assert ei.value.code == 2
    assert "--gpu: unknown gpu id 'gpu-xx'" in capsys.readouterr().err


def test_api_a_stray_value_error_is_500_not_422(monkeypatch):
    """Before the contract, the API turned any ValueError into a 422, so a bug reached the user as their fault."""
    def boom(*a, **k):
        raise ValueError("not the user's fault")

    monkeypatch.setattr(service, "evaluate_configuration", boom)
    app = create_app(ApiSettings(catalog=MINI, database=":memory:", solve_in="thread"))
    with TestClient(app, raise_server_exceptions=False) as c:
        r = c.post("/v1/evaluate", json={"configuration": CPU_ONLY, "workload": "agent", "rack": "r40"})
        assert r.status_code == 500 and "not the user's fault" not in r.text
        monkeypatch.setattr(service, "evaluate_configuration",
                            lambda *a, **k: (_ for _ in ()).throw(InputError("bad figure", loc=("body", "rack"))))
        r = c.post("/v1/evaluate", json={"configuration": CPU_ONLY, "workload": "agent", "rack": "r40"})
        assert r.status_code == 422 and r.json()["errors"][0]["loc"] == ["body", "rack"]


def test_batch_rows_tell_a_bug_from_bad_input(monkeypatch):
    from advisor.studies import batch
    from advisor.studies.scenarios import Scenario, resolve

    r = resolve(Scenario(name="s", workload="agent", rack="r40", catalog=str(MINI), layouts=["b"]))
    inputs, cat_json = r.inputs("b"), r.catalog_json

    monkeypatch.setattr(service, "optimize", lambda *a, **k: (_ for _ in ()).throw(InputError("no prices")))
    row = batch.solve_job(inputs, cat_json)
    assert row["status"] == "error" and row["error"] == "no prices"
    monkeypatch.setattr(service, "optimize", lambda *a, **k: (_ for _ in ()).throw(ZeroDivisionError("x")))
    row = batch.solve_job(inputs, cat_json)
    assert row["status"] == "error" and row["error"].startswith("internal error (a bug in rack-advisor")
    assert "ZeroDivisionError" in row["error"]
