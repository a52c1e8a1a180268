"""Operations artifacts: valid for the real tools (kubernetes-validate's published schemas, Slurm's slurmctld parser,
promtool), numbers equal to the optimizer's allocation and the report's thresholds, hostile names sanitized, and the
CLI, API and report paths."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
import threading
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from advisor.catalog import builtin_catalog, load_catalog, load_workload, load_rack
from advisor.export import ExportSettings, export, plan_for
from advisor.export.k8s import node_labels
from advisor.export.names import DNS1123_LABEL, dns_label
from advisor.export.plan import GPU_DEVICES
from advisor.export.slurm import FILES, node_names, split_bundle
from advisor.operations import operating_thresholds
from advisor.optimizer.optimize import optimize
from api_server import MINI, Server
from models.assumptions import ModelAssumptions
from models.config import Configuration

K8S_VERSION = "1.30.0"
"""Oldest Kubernetes minor still in upstream support when this was written; the schemas ship in the package."""
SETTINGS = ExportSettings(gpu_devices={"T": GPU_DEVICES["NVIDIA"]})
"""The mini catalog's made-up GPU vendor `T` gets NVIDIA's device plugin and device files."""
HOSTILE_QUEUE = 'q "1" Straße ☃'
HOSTILE_CLASS = "it's a \"class\" with spaces/ü"
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
QUALIFIED_NAME = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
# KubeletConfiguration (kubelet.config.k8s.io/v1beta1) fields the export writes, with their Go types, from
# staging/src/k8s.io/kubelet/config/v1beta1/types.go (not in the published core schemas).
KUBELET_FIELDS = {"apiVersion": str, "kind": str, "cpuManagerPolicy": str, "cpuManagerPolicyOptions": dict,
                  "reservedSystemCPUs": str, "topologyManagerPolicy": str, "topologyManagerScope": str,
                  "systemReserved": dict, "registerWithTaints": list}
CPUSET = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")
QUANTITY = re.compile(r"^\d+(\.\d+)?(m|Mi|Gi|Ki)?$")


@pytest.fixture(scope="module")
def mini():
    return load_catalog(MINI)


@pytest.fixture(scope="module")
def hybrid(mini):
    w, r = load_workload("agent", mini), load_rack("r40", mini)
    return optimize(w, r, mini, layout="hybrid", explain=False), w, r


def _hostile(mini):
    """The mini workload with a hostile class name, and a configuration with two isolated, hostile queues split
    over CPU nodes and the GPU servers' host cores."""
    w = load_workload("agent", mini)
    classes = [c.model_copy(update={"name": HOSTILE_CLASS}) if c.name == "test" else c for c in w.classes]
    w = w.model_copy(update={"classes": classes})
    cfg = Configuration.model_validate({
        "name": "hostile", "servers": [
            {"chassis": "gpu4", "cpu": "cpu-a", "gpu": "gpu-x", "gpus_per_server": 4, "count": 2,
             "orchestration_cores_per_gpu": 1.25, "queue_cores": {"edit": 20.0, HOSTILE_QUEUE: 7.0}},
            {"chassis": "cpu1u", "cpu": "cpu-b", "count": 5, "queue_cores": {"edit": 48.5, HOSTILE_QUEUE: 79.5}}],
        "queues": [{"name": "edit", "classes": ["edit"]}, {"name": HOSTILE_QUEUE, "classes": [HOSTILE_CLASS]}]})
    return cfg, w, load_rack("r40", mini)


def _docs(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d is not None]


# -------------------------------------------------------------------------------------------------------- names

@pytest.mark.parametrize("name", [HOSTILE_QUEUE, HOSTILE_CLASS, "UPPER_case.dots", "-x-", "☃☃", "a" * 200, "ok-1"])
def test_dns_label(name):
    s = dns_label(name)
    assert DNS1123_LABEL.match(s) and len(s) <= 63
    assert (s == name) == bool(DNS1123_LABEL.match(name) and len(name) <= 63)
    assert dns_label(name + "!") != s  # a different original never lands on the same id


# ------------------------------------------------------------------------------------------------------- numbers

def test_plan_equals_optimizer_allocation(hybrid, mini):
    res, w, r = hybrid
    plan = plan_for(res, w, mini, settings=SETTINGS)
    cfg = Configuration.model_validate(res.configuration)
    for g, sg in zip(plan.groups, cfg.servers):
        assert g.count == sg.count
        assert g.orchestration_cores == pytest.approx(sg.orchestration_cores_per_gpu * sg.gpus_per_server)
        assert g.orchestration_cores_whole == -(-g.orchestration_cores // 1) or g.orchestration_cores == 0
        assert g.orchestration_cores_whole + sum(g.queue_cores_whole.values()) <= g.cores
        for q, c in sg.queue_cores.items():
            assert abs(g.queue_cores_whole[q] - c) < 1
    for q, fig in zip(plan.queues, res.evaluation.queues):
        assert q.cores == pytest.approx(fig.cores)
        assert q.memory_gb == pytest.approx(fig.sandbox_memory_gb)
    assert plan.inference_cores == pytest.approx(sum(s.count * s.orchestration_cores_per_gpu * s.gpus_per_server
                                                     for s in cfg.servers))
    assert plan.thresholds == operating_thresholds(res.evaluation, w, ModelAssumptions(), 0.5)


# ------------------------------------------------------------------------------------------------------ kubernetes

def _check_k8s(text: str, plan) -> list[dict]:
    docs = _docs(text)
    for d in docs:
        kubernetes_validate.validate(d, K8S_VERSION, strict=True)  # raises ValidationError
        md = d["metadata"]
        assert DNS1123_LABEL.match(md["name"]), md["name"]
        if "namespace" in md:
            assert DNS1123_LABEL.match(md["namespace"])
        for k, v in {**md.get("labels", {})}.items():
            assert QUALIFIED_NAME.match(k) and LABEL_VALUE.match(v) and len(v) <= 63, (k, v)
    for d in docs:
        if d["kind"] == "Namespace":
            sel = d["metadata"]["annotations"]["scheduler.alpha.kubernetes.io/node-selector"]
            k, v = sel.split("=")
            assert QUALIFIED_NAME.match(k) and LABEL_VALUE.match(v)
        if d["kind"] == "ConfigMap":
            _check_kubelet(yaml.safe_load(d["data"]["kubelet-config.yaml"]))
            for kv in d["data"]["node-labels"].split(","):
                k, v = kv.split("=")
                assert QUALIFIED_NAME.match(k) and len(k.split("/")[-1]) <= 63 and LABEL_VALUE.match(v), kv
    return docs


def _check_kubelet(kc: dict) -> None:
    assert kc["apiVersion"] == "kubelet.config.k8s.io/v1beta1" and kc["kind"] == "KubeletConfiguration"
    for k, v in kc.items():
        assert k in KUBELET_FIELDS, f"unknown KubeletConfiguration field {k}"
        assert isinstance(v, KUBELET_FIELDS[k]), (k, v)
    assert kc["cpuManagerPolicy"] in ("none", "static")
    assert kc["topologyManagerPolicy"] in ("none", "best-effort", "restricted", "single-numa-node")
    if kc["cpuManagerPolicy"] == "static":  # the static policy needs a non-zero CPU reservation
        assert CPUSET.match(kc["reservedSystemCPUs"])
        assert kc["topologyManagerScope"] in ("container", "pod")
        assert all(isinstance(v, str) for v in kc["cpuManagerPolicyOptions"].values())
    assert all(QUANTITY.match(v) for v in kc["systemReserved"].values())
    for t in kc["registerWithTaints"]:
        kubernetes_validate.validate({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"},
                                      "spec": {"taints": [t]}}, K8S_VERSION, strict=True)


def test_k8s_valid_and_carries_the_allocation(hybrid, mini):
    res, w, r = hybrid
    plan = plan_for(res, w, mini, settings=SETTINGS)
    docs = _check_k8s(export("k8s", res, w, mini, settings=SETTINGS).text, plan)
    by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    for q in plan.queues:
        hard = by[("ResourceQuota", f"ra-tool-{q.id}")]["spec"]["hard"]
        assert int(hard["requests.cpu"]) == q.cores_whole == sum(g.count * g.queue_cores_whole[q.name]
                                                                  for g in plan.groups)
        assert hard["limits.memory"] == f"{int(q.memory_gb * 1024)}Mi"
    inf = by[("ResourceQuota", "ra-inference")]["spec"]["hard"]
    assert int(inf["requests.cpu"]) == plan.inference_cores_whole
    assert int(inf["requests.nvidia.com/gpu"]) == plan.gpus == sum(s.count * s.gpus_per_server for s in res.servers)
    for g in plan.groups:
        cm = by[("ConfigMap", f"ra-{g.id}-kubelet")]
        assert int(cm["data"]["nodes"]) == g.count
        kc = yaml.safe_load(cm["data"]["kubelet-config.yaml"])
        assert kc["cpuManagerPolicy"] == ("static" if g.role == "gpu" else "none")


def test_k8s_hostile_names(mini):
    cfg, w, r = _hostile(mini)
    plan = plan_for(cfg, w, mini, rack=r, settings=SETTINGS)
    text = export("k8s", cfg, w, mini, rack=r, settings=SETTINGS).text
    docs = _check_k8s(text, plan)
    ns = [d for d in docs if d["kind"] == "Namespace" and d["metadata"]["labels"]["rack-advisor.io/role"] == "tool-queue"]
    assert sorted(d["metadata"]["annotations"]["rack-advisor.io/queue"] for d in ns) == sorted(["edit", HOSTILE_QUEUE])
    hq = plan.queue(HOSTILE_QUEUE)
    assert hq.cores == pytest.approx(2 * 7.0 + 5 * 79.5) and hq.cores_whole == 2 * 7 + 5 * 79
    for g in plan.groups:
        assert f"q.rack-advisor.io/{hq.id}" in node_labels(plan, g)


def test_bad_input_is_a_clear_error(hybrid, mini):
    res, w, r = hybrid
    with pytest.raises(ValueError, match="GPU vendor 'T'"):
        export("k8s", res, w, mini)  # default settings know no vendor T
    with pytest.raises(ValueError, match="unknown export format"):
        export("nomad", res, w, mini, settings=SETTINGS)


# ----------------------------------------------------------------------------------------------------------- slurm

SLURMCTLD = shutil.which("slurmctld") or (Path("/usr/sbin/slurmctld") if Path("/usr/sbin/slurmctld").exists() else None)
SLURMCTLD_WAIT_S = 60
"""Seconds slurmctld gets to parse the configuration and start (it takes under a second here)."""
SLURM_BASE = """ClusterName=ratest
SlurmctldHost=localhost
AuthType=auth/none
CredType=cred/none
SlurmUser=root
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmctldPort={port}
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
GresTypes=gpu
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
Include {d}/rack-advisor.conf
"""


def slurm_parse(bundle: str, d: Path) -> str:
    """Start the real slurmctld in the foreground on the bundle (plus the global keys it names), with the null auth
    plugins, and stop it once it is running: it parses slurm.conf and gres.conf, builds every node and partition and
    exits with `fatal` on an unknown key, a bad value or a partition naming an unknown node."""
    from api_server import free_port

    files = split_bundle(bundle)
    (d / "state").mkdir(parents=True)
    # FUTURE nodes are not resolved in DNS (made-up host names would cost the parser minutes of retries)
    (d / "rack-advisor.conf").write_text(files["slurm.conf"].replace("State=UNKNOWN", "State=FUTURE"))
    (d / "gres.conf").write_text(files["gres.conf"])
    (d / "slurm.conf").write_text(SLURM_BASE.format(d=d, port=free_port()))
    proc = subprocess.Popen([str(SLURMCTLD), "-D", "-c", "-i", "-f", str(d / "slurm.conf")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    done = threading.Event()

    def read() -> None:  # in a thread, so a silent slurmctld cannot block the test past the deadline
        for line in proc.stdout:
            lines.append(line)
            if "fatal" in line or "Parse error" in line or "Running as primary controller" in line:
                break
        done.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        done.wait(SLURMCTLD_WAIT_S)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    log = "".join(lines)
    assert "Running as primary controller" in log, log
    return log


needs_slurm = pytest.mark.skipif(SLURMCTLD is None, reason="slurmctld not installed (Debian package slurmctld)")


@needs_slurm
def test_slurm_parses_and_carries_the_allocation(hybrid, mini, tmp_path):
    res, w, r = hybrid
    plan = plan_for(res, w, mini, settings=SETTINGS)
    bundle = export("slurm", res, w, mini, settings=SETTINGS).text
    files = split_bundle(bundle)
    assert tuple(files) == FILES
    slurm_parse(bundle, tmp_path / "slurm")
    conf = files["slurm.conf"]
    for g in plan.groups:
        line = next(x for x in conf.splitlines() if x.startswith(f"NodeName={node_names(plan, g)} "))
        lo, hi = re.search(r"\[(\d+)-(\d+)\]", line).groups()
        assert int(hi) - int(lo) + 1 == g.count
        kv = dict(t.split("=", 1) for t in line.split())
        assert int(kv["CPUs"]) == g.cores * g.threads_per_core
        if g.role == "gpu":
            assert int(kv["CoreSpecCount"]) == g.orchestration_cores_whole and kv["Gres"] == f"gpu:{g.gpus_per_server}"
    for q in plan.queues:
        cpus = sum(int(m) for m in re.findall(rf"PartitionName=ra-{q.id}\S* Nodes=\S+ MaxCPUsPerNode=(\d+)", conf))
        assert cpus  # every queue has a partition
        total = re.search(rf"name=ra-{q.id} set GrpTRES=cpu=(\d+)", files["qos.sh"]).group(1)
        assert int(total) == sum(g.count * g.queue_cores_whole[q.name] * g.threads_per_core for g in plan.groups)


@needs_slurm
def test_slurm_hostile_names_and_a_broken_bundle_fails(mini, tmp_path):
    cfg, w, r = _hostile(mini)
    bundle = export("slurm", cfg, w, mini, rack=r, settings=SETTINGS).text
    slurm_parse(bundle, tmp_path / "ok")
    assert HOSTILE_QUEUE not in "".join(x for x in bundle.splitlines(keepends=True) if not x.startswith("#"))
    with pytest.raises(AssertionError, match="unrecognized key: Bogus"):  # the harness really parses
        slurm_parse(bundle.replace("OverSubscribe=NO", "OverSubscribe=NO Bogus=1", 1), tmp_path / "bad")


# ------------------------------------------------------------------------------------------------------ prometheus

PROMTOOL = shutil.which("promtool")


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (Debian package prometheus; .ci/run installs it)")
@pytest.mark.parametrize("case", ["optimized", "hostile"])
def test_prometheus_rules_pass_promtool(case, hybrid, mini, tmp_path):
    if case == "optimized":
        res, w, r = hybrid
        src, rack = res, None
    else:
        src, w, rack = _hostile(mini)
    plan = plan_for(src, w, mini, rack=rack, settings=SETTINGS)
    text = export("prometheus", src, w, mini, rack=rack, settings=SETTINGS).text
    f = tmp_path / "rules.yaml"
    f.write_text(text)
    out = subprocess.run([PROMTOOL, "check", "rules", str(f)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    rules = yaml.safe_load(text)["groups"][0]["rules"]
    t = plan.thresholds
    for q in t.queues:
        qid = plan.queue(q.queue).id
        mine = {x["alert"]: x for x in rules if x["labels"].get("queue") == qid}
        assert mine["ToolCallWaitHigh"]["expr"].endswith(f"> {q.wait_alert_s:.6g}")
        assert mine["ToolQueueCpuUtilizationHigh"]["expr"].endswith(f"> {q.utilization_alert:.6g}")
        assert mine["ToolQueueRunQueueDepthHigh"]["expr"].endswith(f"> {q.run_queue_depth_per_core_alert:.6g}")
        assert mine["ToolQueueIowaitHigh"]["expr"].endswith(f"> {q.iowait_share_alert:.6g}")
        assert "agent_tool_call_wait_seconds_bucket" in mine["ToolCallWaitHigh"]["expr"]
        assert "must export it" in mine["SandboxStartSlow"]["annotations"]["metric_source"]
        for x in mine.values():
            assert x["annotations"]["model_expected"] and x["annotations"]["model_basis"]
    gpu = {x["alert"]: x for x in rules if "Gpu" in x["alert"]}
    assert gpu["GpuServingNearSaturation"]["expr"].endswith(f"> {t.gpu.utilization_alert:.6g}")
    assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in gpu["GpuIdleOnCpuTools"]["expr"]


# ------------------------------------------------------------------------------------------------------- CLI / API

def test_cli_round_trip(tmp_path):
    from typer.testing import CliRunner

    from advisor.cli.main import app

    settings = tmp_path / "export.yaml"
    settings.write_text(yaml.safe_dump({"gpu_devices": {"T": GPU_DEVICES["NVIDIA"].model_dump()}}))
    best = tmp_path / "best.yaml"
    run = CliRunner().invoke
    # `advisor optimize --save-config` reads the built-in catalog; save the mini catalog's answer the same way
    cat = load_catalog(MINI)
    w, r = load_workload("agent", cat), load_rack("r40", cat)
    opt = optimize(w, r, cat, layout="b", explain=False)
    best.write_text(yaml.safe_dump(opt.configuration, sort_keys=False))
    out = tmp_path / "k8s.yaml"
    res = run(app, ["export", str(best), "--format", "k8s", "--catalog", str(MINI), "--settings", str(settings),
                    "-o", str(out)])
    assert res.exit_code == 0, res.output
    from_file = out.read_text()
    res = run(app, ["export", "--format", "k8s", "-w", "agent", "-r", "r40", "--layout", "b", "--catalog", str(MINI),
                    "--settings", str(settings)])
    assert res.exit_code == 0, res.output
    assert from_file == export("k8s", opt, w, cat, settings=ExportSettings.model_validate(
        yaml.safe_load(settings.read_text()))).text
    assert from_file in res.stdout  # solving first gives the same manifests as the saved configuration
    bad = run(app, ["export", str(best), "--format", "k8s", "--catalog", str(MINI)])
    assert bad.exit_code == 2 and "GPU vendor" in bad.output
    none = run(app, ["export", "--format", "slurm", "--catalog", str(MINI)])
    assert none.exit_code == 2


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("api-export"), workers=2, queue_wait_s=5.0).start()
    yield s
    s.stop()


def test_api_export(server, hybrid, mini):
    res, w, r = hybrid
    st = SETTINGS.model_dump(mode="json")
    with server.client() as c:
        k = c.post("/v1/export", json={"format": "k8s", "workload": "agent", "rack": "r40", "settings": st})
        assert k.status_code == 200, k.text
        assert k.headers["content-type"].startswith("application/yaml")
        assert 'filename="rack-advisor-k8s.yaml"' in k.headers["content-disposition"]
        assert k.text == export("k8s", res, w, mini, settings=SETTINGS).text
        cfg, hw, hr = _hostile(mini)
        body = {"format": "slurm", "configuration": cfg.model_dump(mode="json"),
                "workload": hw.model_dump(mode="json"), "rack": "r40", "settings": st}
        s = c.post("/v1/export", json=body)
        assert s.status_code == 200 and s.headers["content-type"].startswith("text/plain")
        assert s.text == export("slurm", cfg, hw, mini, rack=hr, settings=SETTINGS).text
        assert c.post("/v1/export", json={**body, "format": "nomad"}).status_code == 422
        e = c.post("/v1/export", json={"format": "k8s", "workload": "agent", "rack": "r40"})
        assert e.status_code == 422 and "GPU vendor" in e.json()["detail"]
        assert "/v1/export" in c.get("/openapi.json").json()["paths"]


# ---------------------------------------------------------------------------------------------------------- report

def test_report_offers_the_artifacts(tmp_path):
    from advisor.report.html import render_report
    from cdp_pipe import Chromium

    html, data = render_report({"workload": "swe-agent", "rack": "air-40kw", "sensitivity": False,
                                "time_limit_s": 30}, builtin_catalog())
    links = re.findall(r'<a class="export" download="([^"]+)" href="data:([^;]+);charset=utf-8;base64,([^"]+)"', html)
    assert [x[0] for x in links] == ["rack-advisor-k8s.yaml", "rack-advisor-slurm.conf",
                                     "rack-advisor-alerts.rules.yaml"]
    k8s = base64.b64decode(links[0][2]).decode()
    assert any(d["kind"] == "ResourceQuota" for d in _docs(k8s))
    page = tmp_path / "report.html"
    page.write_text(html, encoding="utf-8")
    with Chromium(tmp_path / "profile") as b:
        sid = b.new_page()
        b.navigate(sid, page.as_uri())
        assert b.problems(sid) == []
        got = b.evaluate(sid, "[...document.querySelectorAll('#operate a[download]')]"
                              ".map(a => [a.download, a.href.length])")
        assert [g[0] for g in got] == [x[0] for x in links] and all(n > 500 for _, n in got)
