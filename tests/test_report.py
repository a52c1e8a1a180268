"""HTML report: figures from the model, every section and chart present, loads cleanly in headless Chromium, catalog
text is escaped, and the CLI writes it."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
import yaml
from markupsafe import escape

from advisor.catalog import builtin_catalog, load_catalog
from advisor.report.html import SECTIONS, render_report
from api_server import MINI, ROOT
from cdp_pipe import Chromium

ARTIFACTS = ROOT / "test-artifacts"
SCREENSHOT_DOC = ROOT / "docs" / "report-screenshot.png"
CHARTS = ("fig-stage-shares", "fig-gpu-time", "fig-utilization", "fig-layouts", "fig-sens-power", "fig-sens-tools")
XSS = "<script>alert(1)</script>"


@pytest.fixture(scope="module")
def builtin_report():
    """A real-catalog report (the one the screenshot shows), with short sweeps to keep the test quick."""
    req = {"workload": "swe-agent", "rack": "air-40kw", "power_factors": [0.75, 1.0, 1.25],
           "tool_factors": [0.5, 1.0, 2.0], "sweep_time_limit_s": 3, "time_limit_s": 30}
    return render_report(req, builtin_catalog())


def _section(html: str, sid: str) -> str:
    m = re.search(rf'<section id="{sid}">(.*?)</section>', html, re.S)
    assert m, sid
    return m.group(1)


def test_report_figures_come_from_the_model(builtin_report):
    html, data = builtin_report
    g = data["glance"]
    chosen = data["chosen"]
    cmp = data["comparison"]
    assert g["layout"] == cmp["best_layout"] == chosen["layout"]
    assert g["tasks_per_hour"] == chosen["throughput_tasks_per_hour"]
    assert g["ratio_vs_a"] == pytest.approx(cmp["ratio_vs_a"][g["layout"]])
    assert g["kwh_per_1000_tasks"] == pytest.approx(chosen["tco"]["energy_wh_per_task"])
    assert g["tco"]["cost_usd_per_1000_tasks"] == pytest.approx(chosen["tco"]["cost_usd_per_1000_tasks"])
    glance = _section(html, "glance")
    assert f"${g['tco']['cost_usd_per_1000_tasks']:,.2f}" in glance
    # the cost table adds up: capital per hour + energy + space = cost per hour
    t = chosen["tco"]
    assert t["capital_usd_per_hour"] + t["energy_usd_per_hour"] + t["space_usd_per_hour"] == \
        pytest.approx(t["cost_usd_per_hour"])
    assert f"${t['cost_usd_per_hour']:,.2f}" in _section(html, "bom")
    assert f"{g['tasks_per_hour']:,.0f}" in glance
    assert f"{g['kwh_per_1000_tasks']:,.1f} kWh" in glance
    assert f"{g['ratio_vs_a']:.2f}x" in glance
    # bill of materials: every server group with its catalog power
    bom = _section(html, "bom")
    for s in chosen["servers"]:
        assert s["chassis"] in bom and f"{s['power_w_each']:,.0f} W" in bom
    # sweeps: the 1.0x point is the comparison itself
    one = next(p for p in data["sensitivity"]["power"]["points"] if p["factor"] == 1.0)
    assert one["throughput"] == {r["layout"]: r["throughput_tasks_per_hour"] for r in cmp["results"]}
    # sources: every catalog entry the layouts use is listed with its source
    listed = {(s["kind"], s["id"]) for s in data["sources"]}
    for r in cmp["results"]:
        for s in r["servers"]:
            assert ("chassis", s["chassis"]) in listed and ("cpu", s["cpu"]) in listed
            if s["gpu"]:
                assert ("gpu", s["gpu"]) in listed
    assert all(s["source"] for s in data["sources"])


def test_report_says_where_the_layout_belongs_and_why_hybrid_ties_b(builtin_report):
    """#20 items 4 and 5: the layouts section states the layout the stage shares call for with the tool share at
    which the choice flips, and, when hybrid ties B, why (the sentence the comparison carries)."""
    html, data = builtin_report
    cmp = data["comparison"]
    layouts = _section(html, "layouts")
    fit = cmp["layout_fit"]
    assert fit is not None and fit["flip_tool_share"] is not None
    assert f"Layout {fit['calls_for'].upper()} fits this workload" in fit["sentence"]
    assert f"{fit['flip_tool_share']:.0%}" in fit["sentence"] and str(escape(fit["sentence"])) in layouts
    res = {r["layout"]: r["throughput_tasks_per_hour"] for r in cmp["results"]}
    if abs(res["hybrid"] - res["b"]) <= 1e-6 * res["b"]:
        assert cmp["hybrid_note"] and cmp["hybrid_note"].startswith("Hybrid equals B")
        assert str(escape(cmp["hybrid_note"])) in layouts
    else:
        assert str(escape(cmp["hybrid_note"] or "")) in layouts


def test_report_in_headless_chromium(builtin_report, tmp_path):
    html, data = builtin_report
    ARTIFACTS.mkdir(exist_ok=True)
    page = ARTIFACTS / "report.html"
    page.write_text(html, encoding="utf-8")
    assert "<script" not in html.lower()  # the report runs no code at all
    with Chromium(tmp_path / "profile", log_path=tmp_path / "chromium.log") as b:
        sid = b.new_page()
        b.navigate(sid, page.as_uri())
        assert b.problems(sid) == []
        assert all(u.startswith(("file:", "data:", "about:")) for u in b.requested_urls(sid)), b.requested_urls(sid)
        sections = b.evaluate(sid, "[...document.querySelectorAll('section')].map(s => s.id)")
        assert sections == list(SECTIONS)
        charts = b.evaluate(sid, "Object.fromEntries([...document.querySelectorAll('figure.chart')]"
                                 ".map(f => [f.id, f.querySelectorAll('svg path').length]))")
        for c in CHARTS:
            assert charts.get(c, 0) > 10, (c, charts)
        racks = b.evaluate(sid, "document.querySelectorAll('svg.rack-svg .rk-item').length")
        servers = sum(s["count"] for s in data["chosen"]["servers"])
        assert racks == servers + 1  # + the reserved block
        widths = b.evaluate(sid, "[...document.querySelectorAll('figure.chart svg')].map(s => s.getBoundingClientRect().width)")
        assert all(w > 200 for w in widths)
        shot = ARTIFACTS / "report.png"
        w, h = b.screenshot(sid, shot)
        assert shot.stat().st_size > 50_000 and h > 3000
        if not SCREENSHOT_DOC.exists() or os.environ.get("ADVISOR_UPDATE_SCREENSHOT"):
            SCREENSHOT_DOC.parent.mkdir(exist_ok=True)
            shutil.copyfile(shot, SCREENSHOT_DOC)
        for paper in ((8.27, 11.69), (8.5, 11.0)):  # A4, Letter
            pdf = b.pdf(sid, paper)
            assert pdf.startswith(b"%PDF") and pdf.count(b"/Type /Page") >= 3


def _hostile_catalog(tmp_path: Path) -> Path:
    folder = tmp_path / "catalog"
    shutil.copytree(MINI, folder)
    ch = yaml.safe_load((folder / "chassis.yaml").read_text())
    for e in ch["entries"]:
        e["name"] = XSS
        e["source"] = "javascript:alert(2) see https://example.com/spec?a=1&b=<i>x</i>"
    (folder / "chassis.yaml").write_text(yaml.safe_dump(ch))
    wl = yaml.safe_load((folder / "workloads" / "agent.yaml").read_text())
    wl["name"] = XSS
    wl["classes"][0]["name"] = XSS
    (folder / "workloads" / "agent.yaml").write_text(yaml.safe_dump(wl))
    return folder


def test_catalog_text_is_escaped(tmp_path):
    cat = load_catalog(_hostile_catalog(tmp_path))
    html, data = render_report({"workload": "agent", "rack": "r40", "sensitivity": False}, cat)
    assert "<script" not in html.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert 'href="javascript' not in html.lower() and "<i>x" not in html
    assert 'href="https://example.com/spec?a=1&amp;b=' in html
    page = tmp_path / "hostile.html"
    page.write_text(html, encoding="utf-8")
    with Chromium(tmp_path / "profile") as b:
        sid = b.new_page()
        b.navigate(sid, page.as_uri())
        assert b.problems(sid) == []  # no dialog, no error
        assert b.evaluate(sid, "document.scripts.length") == 0
        assert XSS in b.evaluate(sid, "document.body.innerText")


def test_infeasible_report_still_renders(tmp_path):
    tiny = {"id": "tiny", "name": "tiny", "source": "test", "power_kw": 1, "air_cooling_kw": 1,
            "liquid_cooling_kw": 0, "height_u": 10}
    html, data = render_report({"workload": "agent", "rack": tiny, "sensitivity": False}, load_catalog(MINI))
    assert data["glance"]["tasks_per_hour"] == 0
    assert "No layout" in _section(html, "glance")
    for sid in SECTIONS:
        _section(html, sid)


def test_cli_report(tmp_path):
    from typer.testing import CliRunner

    from advisor.cli.main import app

    out = tmp_path / "r.html"
    res = CliRunner().invoke(app, ["report", "--workload", "agent", "--rack", "r40", "--layout", "b",
                                   "--no-sensitivity", "--catalog", str(MINI), "-o", str(out),
                                   "--json", str(tmp_path / "r.json")])
    assert res.exit_code == 0, res.output
    html = out.read_text()
    assert '<section id="glance">' in html and "B (balanced)" in html
    assert (tmp_path / "r.json").exists()
    bad = CliRunner().invoke(app, ["report", "--workload", "agent", "--rack", "r40", "--layout", "a", "--compare",
                                   "--catalog", str(MINI), "-o", str(out)])
    assert bad.exit_code == 2


VISIBLE_TEXT = """(() => { document.querySelectorAll('.ids').forEach(e => e.remove());
  return document.body.innerText; })()"""
"""The text a reader sees: closed <details> (the sources) are not rendered, and the id columns are removed first."""
INTERNAL = [
    (re.compile(r"\b(?:cooling_air|cooling_liquid|power_feed|gpu_serving|gpu_compute|tool_cores|sandbox_memory)\b"),
     "a constraint group id"),
    (re.compile(r"\b(?:power|space|weight|cooling_air|power_feed)_r\d+\b"), "a per-rack constraint id"),
    (re.compile(r"\b(?:cpu|slo|memory|disk|io):[\w-]+"), "a pool id"),
    (re.compile(r"\bmodels\.\w+\.\w+\(|<function |object at 0x"), "a raw function repr"),
    (re.compile(r"\bbest layout (?:a|b|hybrid)\b"), "the raw compare summary"),
    (re.compile(r"[\w-]+@d\d+\b"), "a serving key"),
    (re.compile(r"(?<![\d.,])\d+\.\d{3,} ?(?:cores|calls|kW|W\b|U\b|kg|tasks|s\b|GB|MB|%)"),
     "a measured figure with 3 or more decimals"),
]


@pytest.fixture(scope="module")
def rl_report():
    req = {"workload": "rl-rollout", "rack": "air-40kw", "power_factors": [1.0, 1.25], "tool_factors": [1.0, 2.0],
           "sweep_time_limit_s": 3, "time_limit_s": 30}
    return render_report(req, builtin_catalog())


@pytest.mark.parametrize("which", ["builtin_report", "rl_report"])
def test_no_internal_id_in_the_visible_report(which, request, tmp_path):
    """People's names everywhere a reader looks (ids only in the id columns), one set of totals, each risk once, a
    short title, the sources collapsed; the page as Chromium renders it is saved as a test artefact."""
    html, data = request.getfixturevalue(which)
    cat = builtin_catalog()
    ARTIFACTS.mkdir(exist_ok=True)
    page = ARTIFACTS / f"report-{which}.html"
    page.write_text(html, encoding="utf-8")
    with Chromium(tmp_path / "profile", log_path=tmp_path / "chromium.log") as b:
        sid = b.new_page()
        b.navigate(sid, page.as_uri())
        w, h = b.screenshot(sid, ARTIFACTS / f"report-{which}.png")
        assert h > 2000
        title = b.evaluate(sid, "document.querySelector('h1').innerText")
        closed = b.evaluate(sid, "[...document.querySelectorAll('details')].filter(d => !d.open).length")
        text = b.evaluate(sid, VISIBLE_TEXT)
    assert len(title) <= 80 and "(" not in title, title
    assert closed >= 1 and data["sources"][0]["source"][:60] not in text  # the sources are collapsed
    for pattern, what in INTERNAL:
        hits = pattern.findall(text)
        assert not hits, f"{what} in the visible report: {hits[:5]}"
    ids = {e.id for t in (cat.cpus, cat.gpus, cat.chassis) for e in t}
    leaked = sorted(i for i in ids if re.search(rf"(?<![\w.-]){re.escape(i)}(?![\w-])", text))
    assert not leaked, f"catalog ids in the visible report: {leaked}"
    risks = [re.sub(r"^(?:Model|Optimizer) warning: ", "", r) for r in data["operations"]["risks"]]
    assert len(risks) == len(set(risks)), risks  # a warning both the evaluator and the optimizer raise is listed once
    # space is shown one way everywhere: "<used> of <height> U", the same figures in the glance and the budgets
    assert not re.findall(r"\d+ ?/ ?\d+ U\b", text), "space written as 'a / b U' somewhere"
    spaces = set(re.findall(r"(\d+) (?:U )?of (\d+) U", text))
    assert len(spaces) == 1, spaces
    g = data["glance"]
    assert spaces == {(str(g["space_u"]), str(g["space_budget_u"]))}


def test_skipped_sweep_points_are_said_and_not_concluded_from(tmp_path, monkeypatch):
    """A sweep budget that runs out leaves points skipped: the caption concludes nothing about them and the CLI
    says so on stderr (a user who reads only the terminal must not miss it)."""
    from typer.testing import CliRunner

    import advisor.requests
    from advisor.cli.main import app

    class TinySweepBudget(advisor.requests.ReportRequest):
        sweep_budget_s: float = 1e-6

    monkeypatch.setattr(advisor.requests, "ReportRequest", TinySweepBudget)
    out = tmp_path / "r.html"
    res = CliRunner().invoke(app, ["report", "--workload", "agent", "--rack", "r40", "--catalog", str(MINI),
                                   "-o", str(out), "--json", str(tmp_path / "r.json")])
    assert res.exit_code == 0, res.output
    assert "sensitivity sweep point(s) not computed within the sweep time budget" in res.stderr
    html = out.read_text()
    fig = re.search(r'<figure class="chart" id="fig-sens-power">(.*?)</figure>', html, re.S).group(1)
    assert "The best layout is the same at every point." not in fig
    assert "were not computed within the sweep time budget, so nothing is concluded about them" in fig
