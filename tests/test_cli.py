"""The `advisor` command line, through typer's CliRunner and once as the installed console script."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from advisor.cli.main import app
from advisor.service import evaluate_configuration
from conftest import EXAMPLES_DIR, REPO_ROOT

H100_EXAMPLE = EXAMPLES_DIR / "gpu-first-h100-air40.yaml"
HYBRID_EXAMPLE = EXAMPLES_DIR / "hybrid-rl-liquid130.yaml"
EVAL_KEYS = {"throughput_tasks_per_hour", "bottleneck", "gpu_idle_fraction", "utilization", "stage_shares",
             "p50_task_seconds", "p95_task_seconds", "power_w", "space_u"}
# Wide terminal so rich does not wrap error messages in the middle of the assertions' substrings.
ENV = {"COLUMNS": "200", "NO_COLOR": "1"}


@pytest.fixture
def runner():
    return CliRunner()


def run(runner, *args):
    return runner.invoke(app, [str(a) for a in args], env=ENV)


def assert_clean_failure(result, *needles, max_lines: int = 4):
    """Nonzero exit, no traceback, a short message on stderr naming what is wrong."""
    assert result.exit_code != 0
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    err = result.stderr
    assert "Traceback" not in err and "Traceback" not in result.stdout
    assert err.strip().startswith("error:")
    assert len(err.strip().splitlines()) <= max_lines, err
    flat = " ".join(err.split())
    for n in needles:
        assert n in flat, f"{n!r} not in {flat!r}"
    return flat


# ----------------------------------------------------------------------------------------------------------------
# catalog
# ----------------------------------------------------------------------------------------------------------------


def test_catalog_gpus_json(runner, builtin):
    r = run(runner, "catalog", "gpus", "--json")
    assert r.exit_code == 0, r.output
    entries = json.loads(r.stdout)
    assert isinstance(entries, list) and entries
    for e in entries:
        assert e["id"] and isinstance(e["id"], str)
        assert e["source"] and isinstance(e["source"], str)
    assert [e["id"] for e in entries] == [g.id for g in builtin.gpus]
    assert "h100-sxm" in {e["id"] for e in entries}


@pytest.mark.parametrize("kind", ["cpus", "chassis", "racks", "workloads", "served_models"])
def test_catalog_other_tables_json(runner, builtin, kind):
    r = run(runner, "catalog", kind, "--json")
    assert r.exit_code == 0, r.output
    entries = json.loads(r.stdout)
    assert [e["id"] for e in entries] == [e.id for e in getattr(builtin, kind)]
    assert all(e["source"] for e in entries)


def test_catalog_table_lists_ids(runner, builtin):
    r = run(runner, "catalog", "gpus")
    assert r.exit_code == 0, r.output
    for g in builtin.gpus:
        assert g.id in r.stdout


def test_catalog_unknown_kind_fails(runner):
    r = run(runner, "catalog", "tpus")
    assert r.exit_code != 0


# ----------------------------------------------------------------------------------------------------------------
# evaluate
# ----------------------------------------------------------------------------------------------------------------


def test_evaluate_example_json(runner):
    r = run(runner, "evaluate", H100_EXAMPLE, "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert EVAL_KEYS <= set(data)
    assert data["workload"] == "rl-rollout" and data["rack_profile"] == "air-40kw"
    assert data["throughput_tasks_per_hour"] > 0
    assert data["bottleneck"] in {b["name"] for b in data["bounds"]}
    assert data["throughput_tasks_per_hour"] == min(
        b["tasks_per_hour"] for b in data["bounds"] if b["name"] == data["bottleneck"])
    assert sum(data["stage_shares"].values()) == pytest.approx(1.0, abs=1e-9)
    assert 0 <= data["gpu_idle_fraction"] <= 1
    assert data["p50_task_seconds"] <= data["p95_task_seconds"]
    # 4 DGX H100 at 10,200 W each plus the rack profile's reserved power; 4 x 8U plus reserved U.
    from advisor.catalog import builtin_catalog

    rack = builtin_catalog().racks["air-40kw"]
    assert data["power_w"] == pytest.approx(4 * 10_200 + rack.reserved_power_w)
    assert data["space_u"] == 4 * 8 + rack.reserved_u
    # The CLI prints what the service computes.
    ev = evaluate_configuration(H100_EXAMPLE)
    assert data["throughput_tasks_per_hour"] == pytest.approx(ev.throughput_tasks_per_hour, rel=1e-12)


def test_evaluate_hybrid_example_json(runner):
    r = run(runner, "evaluate", HYBRID_EXAMPLE, "--json")
    # exit 1 is "over a rack budget", named on stderr (since #16's rack weight the example is 20 kg over 1,500 kg)
    assert r.exit_code == 0 or (r.exit_code == 1 and "over budget: rack 0:" in r.stderr), r.output
    data = json.loads(r.stdout)
    assert EVAL_KEYS <= set(data)
    assert data["workload"] == "rl-rollout" and data["rack_profile"] == "liquid-130kw"
    assert {q["name"] for q in data["queues"]} == {"finished", "capped"}


def test_evaluate_text_output(runner):
    r = run(runner, "evaluate", H100_EXAMPLE)
    assert r.exit_code == 0, r.output
    assert r.stdout.strip()


def test_flags_override_workload_and_rack(runner):
    r = run(runner, "evaluate", H100_EXAMPLE, "--workload", "model-eval", "--rack", "air-60kw", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["workload"] == "model-eval"
    assert data["rack_profile"] == "air-60kw"
    expected = evaluate_configuration(H100_EXAMPLE, "model-eval", "air-60kw")
    default = evaluate_configuration(H100_EXAMPLE)
    assert data["throughput_tasks_per_hour"] == pytest.approx(expected.throughput_tasks_per_hour, rel=1e-12)
    assert expected.throughput_tasks_per_hour != pytest.approx(default.throughput_tasks_per_hour, rel=1e-6)
    from advisor.catalog import builtin_catalog

    rack = builtin_catalog().racks["air-60kw"]
    # 4 DGX H100 x 12 NIC ports fill one sn5600's 48 server ports: its 1.8 kW counts with the reserved gear
    sw = builtin_catalog().switches[rack.tor_switch]
    assert data["racks"][0]["switches"] == 1
    assert data["power_w"] == pytest.approx(4 * 10_200 + rack.reserved_power_w + sw.power_w)
    assert [ru["power_budget_w"] for ru in data["racks"]] == [rack.power_kw * 1000]


def test_workload_flag_accepts_a_file(runner, tmp_path):
    wl = tmp_path / "my-workload.yaml"
    shutil.copy(REPO_ROOT / "catalogs" / "workloads" / "model-eval.yaml", wl)
    r = run(runner, "evaluate", H100_EXAMPLE, "-w", wl, "--json")
    assert r.exit_code == 0, r.output
    expected = evaluate_configuration(H100_EXAMPLE, "model-eval")
    assert json.loads(r.stdout)["throughput_tasks_per_hour"] == pytest.approx(expected.throughput_tasks_per_hour)


# ----------------------------------------------------------------------------------------------------------------
# Bad input: nonzero exit, short message naming the field, no traceback
# ----------------------------------------------------------------------------------------------------------------


def write_config(tmp_path: Path, old: str, new: str, name: str = "cfg.yaml") -> Path:
    text = H100_EXAMPLE.read_text()
    assert old in text
    p = tmp_path / name
    p.write_text(text.replace(old, new))
    return p


def test_unknown_gpu_id_suggests_close_name(runner, tmp_path):
    cfg = write_config(tmp_path, "gpu: h100-sxm", "gpu: h100-sxn")
    r = run(runner, "evaluate", cfg)
    flat = assert_clean_failure(r, "h100-sxn", "did you mean h100-sxm")
    # The message must say where in the configuration the bad id is.
    assert "servers[0].gpu" in flat


def test_unknown_cpu_id_suggests_close_name(runner, tmp_path):
    cfg = write_config(tmp_path, "cpu: xeon-8480c", "cpu: xeon-8480")
    r = run(runner, "evaluate", cfg)
    flat = assert_clean_failure(r, "'xeon-8480'", "xeon-8480c")
    assert "servers[0].cpu" in flat


def test_unknown_workload_flag_suggests(runner):
    r = run(runner, "evaluate", H100_EXAMPLE, "--workload", "swe-agnet")
    assert_clean_failure(r, "swe-agnet", "swe-agent")


def test_unknown_field_in_config(runner, tmp_path):
    cfg = write_config(tmp_path, "count: 4,", "count: 4, colour: red,")
    r = run(runner, "evaluate", cfg)
    assert_clean_failure(r, "cfg.yaml", "servers[0].colour", "unknown field")


def test_unknown_top_level_field_in_config(runner, tmp_path):
    cfg = write_config(tmp_path, "rack: air-40kw", "rack: air-40kw\nracks_count: 2")
    r = run(runner, "evaluate", cfg)
    assert_clean_failure(r, "cfg.yaml", "racks_count", "unknown field")


def test_workload_shares_not_summing_to_one(runner, tmp_path):
    src = (REPO_ROOT / "catalogs" / "workloads" / "swe-agent.yaml").read_text()
    assert "share: 0.3" in src
    wl = tmp_path / "bad-workload.yaml"
    wl.write_text(src.replace("share: 0.3", "share: 0.2", 1))  # 0.7 + 0.2 = 0.9
    r = run(runner, "evaluate", H100_EXAMPLE, "--workload", wl)
    assert_clean_failure(r, "bad-workload.yaml", "share", "0.9")


def test_missing_config_file(runner, tmp_path):
    missing = tmp_path / "nope.yaml"
    r = run(runner, "evaluate", missing)
    assert_clean_failure(r, "nope.yaml", "no such file")


def test_missing_workload_file(runner, tmp_path):
    r = run(runner, "evaluate", H100_EXAMPLE, "--workload", tmp_path / "gone.yaml")
    assert_clean_failure(r, "gone.yaml", "no such file")


def test_gpu_count_not_offered_by_chassis(runner, tmp_path):
    cfg = write_config(tmp_path, "gpus_per_server: 8", "gpus_per_server: 4")
    r = run(runner, "evaluate", cfg)
    assert_clean_failure(r, "servers[0].gpus_per_server", "4")


def test_invalid_yaml_config(runner, tmp_path):
    p = tmp_path / "broken.yaml"
    p.write_text("servers: [ {chassis: dgx-h100\n")
    r = run(runner, "evaluate", p)
    # The parser's excerpt with a caret is allowed (it shows the line and column), but no traceback.
    assert_clean_failure(r, "broken.yaml", "not valid YAML", "line 1, column 12", max_lines=10)


# ----------------------------------------------------------------------------------------------------------------
# The installed console script, run from a directory that is not the repository
# ----------------------------------------------------------------------------------------------------------------


def installed_advisor() -> str:
    exe = Path(sys.executable).with_name("advisor")
    found = str(exe) if exe.exists() else shutil.which("advisor")
    if not found:
        pytest.fail("the `advisor` console script is not installed next to this Python")
    return found


def test_installed_script_finds_packaged_catalogs(tmp_path):
    exe = installed_advisor()
    env = {**os.environ, **ENV}
    env.pop("PYTHONPATH", None)
    r = subprocess.run([exe, "catalog", "gpus", "--json"], cwd=tmp_path, capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    entries = json.loads(r.stdout)
    assert {"h100-sxm", "b200"} <= {e["id"] for e in entries}
    assert all(e["source"] for e in entries)
    # and evaluates a configuration given by absolute path, presets resolved from the packaged catalogs
    cfg = tmp_path / "cfg.yaml"
    shutil.copy(H100_EXAMPLE, cfg)
    r = subprocess.run([exe, "evaluate", "cfg.yaml", "--json"], cwd=tmp_path, capture_output=True, text=True,
                       env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert EVAL_KEYS <= set(data)
    assert data["throughput_tasks_per_hour"] == pytest.approx(
        evaluate_configuration(H100_EXAMPLE).throughput_tasks_per_hour, rel=1e-12)


def test_installed_script_bad_input_exit_code(tmp_path):
    r = subprocess.run([installed_advisor(), "evaluate", "missing.yaml"], cwd=tmp_path, capture_output=True,
                       text=True, env={**os.environ, **ENV}, timeout=120)
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    assert "missing.yaml" in r.stderr


def test_compare_says_where_the_layout_belongs_and_why_hybrid_ties_b(runner):
    """#20 items 4 and 5 in the CLI: the compare output carries the layout-fit sentence and, on a tie, the reason."""
    r = run(runner, "compare", "--workload", "swe-agent", "--rack", "legacy-air-15kw", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    fit, note = data["layout_fit"], data["hybrid_note"]
    assert fit["calls_for"] in ("a", "b") and 0 < fit["flip_tool_share"] < 1
    assert note.startswith("Hybrid equals B") and "tool-wait target binds" in note and "slo:" not in note
    text = run(runner, "compare", "--workload", "swe-agent", "--rack", "legacy-air-15kw")
    flat = " ".join(text.stdout.split())
    assert " ".join(fit["sentence"].split()) in flat and " ".join(note.split()) in flat


def test_compare_keep_hardware_on_owned_servers(runner):
    """--keep-hardware: the owned servers as they are, only cores and queues re-planned; the hybrid win is said."""
    owned = str(Path(__file__).resolve().parents[1] / "examples" / "owned-b200-mixed-air40.yaml")
    r = run(runner, "compare", "-w", "interactive-rl-mix", "-r", "air-40kw", "--existing", owned, "--keep-hardware",
            "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["best_layout"] == "hybrid" and data["hybrid_note"].startswith("Hybrid beats B")
    bad = run(runner, "compare", "-w", "interactive-rl-mix", "-r", "air-40kw", "--keep-hardware")
    assert bad.exit_code == 2 and "keep_hardware needs existing" in bad.output, bad.output
