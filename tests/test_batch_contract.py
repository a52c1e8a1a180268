"""Batch runs that never surprise (issue #19): one run per output folder (a second exits 2 naming the holder),
workers and solvers die with a SIGKILLed coordinator, failed scenarios are listed with their reasons and exit 3, an
unwritable output folder is one `error:` line and exit 2, exports are written whole or not at all."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from advisor.studies.batch import DB_NAME, LOCK_NAME, FolderBusy, FolderLock
from advisor.studies.batch_report import write_atomic

MINI = Path(__file__).parent / "data" / "mini"
ADVISOR = Path(sys.executable).parent / "advisor"
SLOW = {"catalog": str(MINI), "workload": "agent", "rack": "r15", "time_limit_s": 30,
        "scenarios": [{"name": "K", "layouts": ["a", "b", "hybrid"]}],
        "grid": {"rack.power_kw": [9, 10, 11, 12, 13, 14, 15], "workload.tool_share": [0.3, 0.5, 0.7, 0.8, 0.9]}}
"""105 solves on the mini catalog: a batch that runs long enough to be interfered with."""
GONE_WITHIN_S = 10.0


def _scen(tmp_path: Path, data: dict, name: str = "scen.yaml") -> Path:
    f = tmp_path / name
    f.write_text(yaml.safe_dump(data))
    return f


def _batch(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(ADVISOR), "batch", *map(str, args), "--quiet"], capture_output=True, text=True,
                          timeout=kw.pop("timeout", 300), **kw)


def _session_members(sid: int) -> list[int]:
    """Live processes of a session (the batch was started as a session leader, so all its descendants are here,
    forkserver, resource tracker, pool workers and CBC included)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(fields[3]) == sid and fields[0] not in ("Z", "X"):
            out.append(int(d.name))
    return out


def _start_slow(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    f = _scen(tmp_path, SLOW)
    out = tmp_path / "out"
    proc = subprocess.Popen([str(ADVISOR), "batch", str(f), "-o", str(out), "--workers", "2", "--quiet"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    end = time.monotonic() + 120
    while time.monotonic() < end and proc.poll() is None:
        if (out / DB_NAME).exists():
            try:
                with sqlite3.connect(out / DB_NAME, timeout=5) as db:
                    if db.execute("SELECT COUNT(*) FROM results").fetchone()[0] >= 2:
                        return proc, out
            except sqlite3.OperationalError:
                pass
        time.sleep(0.2)
    raise AssertionError(f"the batch did not get going: {proc.stderr.read().decode()[-2000:]}")


def _kill_session(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(10)


def test_a_second_run_on_the_same_folder_exits_2_naming_the_holder(tmp_path):
    proc, out = _start_slow(tmp_path)
    try:
        second = _batch(tmp_path / "scen.yaml", "-o", out, "--workers", "1")
        assert second.returncode == 2, second.stderr
        assert f"pid {proc.pid}" in second.stderr and "in use" in second.stderr
        assert second.stderr.startswith("error:") and "Traceback" not in second.stderr
    finally:
        _kill_session(proc)
    # the kernel dropped the lock with its holder: the folder is usable again at once
    FolderLock(out).release()


def test_folder_lock_is_exclusive_and_released(tmp_path):
    first = FolderLock(tmp_path)
    with pytest.raises(FolderBusy, match=f"pid {os.getpid()}"):
        # flock locks belong to the open file: a second open in the same process is refused too
        FolderLock(tmp_path)
    first.release()
    FolderLock(tmp_path).release()
    assert (tmp_path / LOCK_NAME).exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death check reads /proc")
def test_sigkill_of_the_coordinator_leaves_no_process_behind(tmp_path):
    proc, out = _start_slow(tmp_path)
    try:
        members = _session_members(proc.pid)
        assert len(members) >= 3, members  # coordinator, forkserver, workers (and CBC)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        end = time.monotonic() + GONE_WITHIN_S
        while time.monotonic() < end and _session_members(proc.pid):
            time.sleep(0.2)
        left = _session_members(proc.pid)
        cmds = {p: Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ")[:200] for p in left
                if Path(f"/proc/{p}").exists()}
        assert not left, f"still alive {GONE_WITHIN_S} s after SIGKILL of the coordinator: {cmds}"
    finally:
        _kill_session(proc)


def test_failed_scenarios_are_listed_and_exit_3(tmp_path):
    data = {"catalog": str(MINI), "rack": "r15", "time_limit_s": 30,
            "scenarios": [{"name": "good", "workload": "agent", "layouts": ["b"]},
                          {"name": "typo", "workload": "agnt", "layouts": ["b"]}]}
    p = _batch(_scen(tmp_path, data), "-o", tmp_path / "out", "--workers", "0")
    assert p.returncode == 3, p.stderr
    assert "failed: typo / b: " in p.stderr and "unknown workload id 'agnt'" in p.stderr
    assert "did you mean agent" in p.stderr and "good" not in p.stderr


def test_all_solved_exits_0_and_strict_counts_infeasible(tmp_path):
    data = {"catalog": str(MINI), "workload": "agent", "rack": "r15", "time_limit_s": 30,
            "scenarios": [{"name": "fits", "layouts": ["b"]},
                          {"name": "tiny", "layouts": ["b"], "overrides": {"rack.power_kw": 0.2}}]}
    f = _scen(tmp_path, data)
    p = _batch(f, "-o", tmp_path / "out", "--workers", "0")
    assert p.returncode == 0, p.stderr
    strict = _batch(f, "-o", tmp_path / "out", "--workers", "0", "--strict")  # rerun: nothing solved again
    assert strict.returncode == 3, strict.stderr
    assert "not optimal: tiny / b: infeasible" in strict.stderr and "fits" not in strict.stderr


@pytest.mark.parametrize("kind", ["file", "proc", "readonly"])
def test_an_unwritable_output_folder_is_one_error_line_and_exit_2(tmp_path, kind):
    f = _scen(tmp_path, {"catalog": str(MINI), "workload": "agent", "rack": "r15",
                         "scenarios": [{"name": "x", "layouts": ["b"]}]})
    if kind == "file":
        (tmp_path / "afile").write_text("x")
        out = tmp_path / "afile" / "out"
    elif kind == "proc":
        out = Path("/proc/advisor-out")
    else:
        if os.geteuid() == 0:
            pytest.skip("root writes into a read-only folder (the other cases cover the error path)")
        out = tmp_path / "ro"
        out.mkdir()
        out.chmod(0o555)
    p = _batch(f, "-o", out, "--workers", "0")
    assert p.returncode == 2, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: output folder") and "cannot write" in lines[0], p.stderr


def test_exports_are_written_whole_or_not_at_all(tmp_path, monkeypatch):
    target = tmp_path / "results.json"
    write_atomic(target, "old")

    def boom(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        write_atomic(target, "new" * 1000)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]  # no temporary file left
