"""A minimal Chrome DevTools Protocol client over `--remote-debugging-pipe` (no websocket library, no port).

Chromium reads NUL-terminated JSON commands on fd 3 and writes responses and events on fd 4.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import queue
import shutil
import subprocess
import threading
import time
from pathlib import Path

CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "chromium", "chromium-browser")


def find_chromium() -> str | None:
    for c in CHROMIUM_CANDIDATES:
        p = c if os.path.isabs(c) else shutil.which(c)
        if p and os.path.exists(p):
            return p
    return None


class CdpError(RuntimeError):
    pass


class Chromium:
    def __init__(self, user_data_dir: Path, binary: str | None = None, log_path: Path | None = None):
        binary = binary or find_chromium()
        if not binary:
            raise FileNotFoundError("chromium not found (Debian package `chromium`)")
        cmd_r, self._cmd_w = os.pipe()
        self._evt_r, evt_w = os.pipe()
        # Move the child's ends above 100 first, so dup2 onto 3 and 4 never clobbers one of them (and always
        # yields inheritable descriptors).
        hi_r, hi_w = fcntl.fcntl(cmd_r, fcntl.F_DUPFD, 100), fcntl.fcntl(evt_w, fcntl.F_DUPFD, 100)
        os.close(cmd_r)
        os.close(evt_w)

        def child_fds() -> None:
            os.dup2(hi_r, 3)
            os.dup2(hi_w, 4)

        self._log = open(log_path or os.devnull, "wb")
        self.proc = subprocess.Popen(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--hide-scrollbars",
             "--mute-audio", "--disable-dev-shm-usage", f"--user-data-dir={user_data_dir}",
             "--remote-debugging-pipe", "--enable-logging=stderr", "--v=0", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log, close_fds=False, preexec_fn=child_fds)
        os.close(hi_r)
        os.close(hi_w)
        self._next_id = 0
        self._lock = threading.Lock()
        self._responses: dict[int, queue.Queue] = {}
        self.events: list[dict] = []
        self._event_cv = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        buf = b""
        while True:
            try:
                chunk = os.read(self._evt_r, 1 << 16)
            except OSError:
                break
            if not chunk:
                break
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                msg = json.loads(raw)
                if "id" in msg:
                    q = self._responses.get(msg["id"])
                    if q is not None:
                        q.put(msg)
                else:
                    with self._event_cv:
                        self.events.append(msg)
                        self._event_cv.notify_all()

    def send(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 30.0) -> dict:
        with self._lock:
            self._next_id += 1
            mid = self._next_id
            q: queue.Queue = queue.Queue()
            self._responses[mid] = q
            msg = {"id": mid, "method": method, "params": params or {}}
            if session:
                msg["sessionId"] = session
            os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        try:
            resp = q.get(timeout=timeout)
        except queue.Empty:
            raise CdpError(f"{method}: no answer in {timeout} s") from None
        finally:
            self._responses.pop(mid, None)
        if "error" in resp:
            raise CdpError(f"{method}: {resp['error']}")
        return resp.get("result", {})

    def wait_event(self, method: str, session: str | None = None, timeout: float = 30.0) -> dict:
        end = time.monotonic() + timeout
        seen = 0
        with self._event_cv:
            while True:
                for e in self.events[seen:]:
                    if e.get("method") == method and (session is None or e.get("sessionId") == session):
                        return e
                seen = len(self.events)
                left = end - time.monotonic()
                if left <= 0:
                    raise CdpError(f"no {method} event in {timeout} s")
                self._event_cv.wait(left)

    def new_page(self) -> str:
        """Open a tab, attach to it and enable the domains the tests read; returns the session id."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        sid = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable", session=sid)
        return sid

    def navigate(self, sid: str, url: str, timeout: float = 60.0) -> None:
        start = len(self.events)
        self.send("Page.navigate", {"url": url}, session=sid)
        end = time.monotonic() + timeout
        with self._event_cv:
            while not any(e.get("method") == "Page.loadEventFired" and e.get("sessionId") == sid
                          for e in self.events[start:]):
                left = end - time.monotonic()
                if left <= 0:
                    raise CdpError(f"{url} did not load in {timeout} s")
                self._event_cv.wait(left)

    def evaluate(self, sid: str, expression: str):
        r = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=sid)
        if "exceptionDetails" in r:
            raise CdpError(f"evaluate failed: {r['exceptionDetails']}")
        return r["result"].get("value")

    def problems(self, sid: str) -> list[str]:
        """Console errors and warnings, uncaught exceptions, error log entries and dialogs of one page."""
        out = []
        for e in self.events:
            if e.get("sessionId") != sid:
                continue
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.exceptionThrown":
                out.append(f"exception: {p.get('exceptionDetails', {}).get('text')}")
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "warning", "assert"):
                out.append(f"console.{p.get('type')}: {[a.get('value') for a in p.get('args', [])]}")
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") in ("error", "warning"):
                out.append(f"log {p['entry']['level']}: {p['entry'].get('text')}")
            elif m == "Page.javascriptDialogOpening":
                out.append(f"dialog: {p.get('message')}")
        return out

    def requested_urls(self, sid: str) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.events
                if e.get("sessionId") == sid and e.get("method") == "Network.requestWillBeSent"]

    def screenshot(self, sid: str, path: Path, width: int = 1200) -> tuple[int, int]:
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": 800, "deviceScaleFactor": 1, "mobile": False}, session=sid)
        height = int(self.evaluate(sid, "Math.ceil(document.documentElement.scrollHeight)"))
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}, session=sid)
        data = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True},
                         session=sid, timeout=60)["data"]
        path.write_bytes(base64.b64decode(data))
        return width, height

    def pdf(self, sid: str, paper_in: tuple[float, float]) -> bytes:
        data = self.send("Page.printToPDF", {"paperWidth": paper_in[0], "paperHeight": paper_in[1],
                                             "printBackground": True, "preferCSSPageSize": False},
                         session=sid, timeout=60)["data"]
        return base64.b64decode(data)

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=5)
        except (CdpError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        for fd in (self._cmd_w, self._evt_r):
            try:
                os.close(fd)
            except OSError:
                pass
        self._log.close()

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
