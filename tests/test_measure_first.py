"""The README's measure-first walkthrough runs as written: traces -> fit -> optimize -> report, on the installed CLI,
and the report names the stage shares the answer depends on most."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

from api_server import ROOT

MARK = "<!-- measure-first:"


def _walkthrough() -> list[list[str]]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    i = text.index(MARK)
    block = re.search(r"```bash\n(.*?)```", text[i:], re.S)
    assert block, "the measure-first block is missing from the README"
    cmds = [shlex.split(line) for line in block.group(1).splitlines() if line.strip()]
    assert [c[:2] for c in cmds] == [["advisor", "fit"], ["advisor", "optimize"], ["advisor", "report"]]
    return cmds


def test_readme_measure_first_walkthrough(tmp_path):
    cli = Path(sys.executable).with_name("advisor")
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    outputs = []
    for cmd in _walkthrough():
        r = subprocess.run([str(cli), *cmd[1:]], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                           env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
        assert r.returncode == 0, (cmd, r.stdout[-2000:], r.stderr[-2000:])
        outputs.append(r.stdout)
    fit_out, opt_out, _ = outputs
    assert (tmp_path / "my-workload.yaml").exists()
    assert "test-heavy/generate" in fit_out and "19.5%" in fit_out  # the share and CI the README quotes
    assert "3,228" in opt_out  # the README's tasks/h for this run
    html = (tmp_path / "my-report.html").read_text(encoding="utf-8")
    assert "Which stage shares the answer depends on" in html
    assert "generate (test-heavy)" in html


def test_stage_sensitivity_is_computed(tmp_path):
    """The report's stage ranking comes from re-evaluating the answer: the named stage changes throughput by the
    amount shown, and a stage the throughput does not depend on is not named."""
    from advisor.catalog import builtin_catalog
    from advisor.report.html import render_report

    _, data = render_report({"workload": "swe-agent", "rack": "air-40kw", "sensitivity": False,
                             "time_limit_s": 30, "sweep_time_limit_s": 5}, builtin_catalog())
    s = data["stage_sensitivity"]
    rows = s["stages"]
    assert [abs(r["change"]) for r in rows] == sorted((abs(r["change"]) for r in rows), reverse=True)
    for r in rows:
        assert abs(r["tasks_per_hour"] / s["base_tasks_per_hour"] - 1 - r["change"]) < 1e-12
        assert abs(r["elasticity"] * s["step"] - r["change"]) < 1e-12
    assert s["key"] and all(r["change"] != 0 for r in s["key"])
    # the GPU-bound swe-agent rack: the LLM stages decide it, a pure wait does not
    assert s["key"][0]["stage"].endswith("/generate") and s["key"][0]["change"] < 0
    wait = next(r for r in rows if r["stage"] == "test-heavy/tool_external_wait")
    assert wait["change"] == 0 and wait not in s["key"]
    assert s["top"]["stage"] == s["key"][0]["stage"]
    json.dumps(s)
