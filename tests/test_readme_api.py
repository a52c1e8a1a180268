"""The README's HTTP API examples, run as written (curl in bash) against a live server on the built-in catalog:
every line answers, with what the README says it answers."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from api_server import ROOT, Server

pytestmark = pytest.mark.skipif(shutil.which("curl") is None, reason="the README's examples use curl")


def readme_api_block() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## HTTP API"):]
    section = section[:section.index("\n## ", 4)]
    m = re.search(r"```bash\n(.*?)```", section, flags=re.S)
    assert m, "the HTTP API section has a bash block"
    return m.group(1)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    # the built-in catalog, as the README uses; the report's sweeps bounded so that the test stays short
    s = Server(tmp_path_factory.mktemp("readme"), catalog=None, workers=2, queue_wait_s=300, time_limit_cap_s=20,
               report_sweep_budget_s=4, report_sweep_time_limit_s=2).start(timeout=180)
    yield s
    s.stop()


def test_readme_http_examples_run_as_written(server, tmp_path):
    block = readme_api_block()
    lines = block.splitlines()
    assert lines[0].startswith("advisor serve --port 8000 &")  # the test's server stands in for it
    script = "\n".join(lines[1:]).replace("localhost:8000", f"127.0.0.1:{server.port}")
    assert "localhost" not in script
    p = subprocess.run(["bash", "-euo", "pipefail", "-c", script], capture_output=True, text=True, timeout=900,
                       cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    commands = len(re.findall(r"^curl ", block, flags=re.M))
    # one answer per command, each as the README says
    for needle in ('"status":"ok"', '"id":"h100-sxm"', '"layout":"b"', '"best_layout"', '"bottleneck"',
                   '"chip_ratio"', "groups:", '"url":"/v1/reports/', '"items":[{"id"', '"next_offset"'):
        assert needle in out, needle
    problems = re.findall(r'"type":"tag:rack-advisor,2026:problem/([a-z-]+)"', out)
    assert problems == ["invalid-number"], problems  # only the example that shows one
    assert commands == 10  # the needles above cover every one of them
    assert "Traceback" not in server.log()
