"""SQLite persistence of rendered reports (WAL mode; one short-lived connection per operation, so any thread may
call it)."""

from __future__ import annotations

import json
import secrets
import sqlite3
from contextlib import closing
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
BUSY_TIMEOUT_S = 30.0
"""How long a writer waits for another writer's lock before giving up."""


@dataclass(frozen=True)
class StoredReport:
    id: str
    created: str
    """UTC, ISO 8601."""
    request: dict[str, Any]
    result: dict[str, Any]
    html: str


class ReportStore:
    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with closing(self._connect()) as db, db:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(
                "CREATE TABLE IF NOT EXISTS reports ("
                " id TEXT PRIMARY KEY,"
                " created TEXT NOT NULL,"
                " request_json TEXT NOT NULL,"
                " result_json TEXT NOT NULL,"
                " html TEXT NOT NULL)"
            )
            db.execute("CREATE INDEX IF NOT EXISTS reports_created ON reports(created)")
            db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        db.execute("PRAGMA busy_timeout=%d" % int(BUSY_TIMEOUT_S * 1000))
        db.execute("PRAGMA synchronous=NORMAL")
        return db

    def put(self, request: dict[str, Any], result: dict[str, Any], html: str) -> StoredReport:
        rid = secrets.token_urlsafe(16)
        created = datetime.now(timezone.utc).isoformat(timespec="seconds")
        with closing(self._connect()) as db:
            db.execute("INSERT INTO reports (id, created, request_json, result_json, html) VALUES (?, ?, ?, ?, ?)",
                       (rid, created, json.dumps(request), json.dumps(result), html))
        return StoredReport(rid, created, request, result, html)

    def get(self, rid: str) -> StoredReport | None:
        with closing(self._connect()) as db:
            row = db.execute("SELECT id, created, request_json, result_json, html FROM reports WHERE id = ?",
                             (rid,)).fetchone()
        if row is None:
            return None
        return StoredReport(row[0], row[1], json.loads(row[2]), json.loads(row[3]), row[4])

    def get_html(self, rid: str) -> str | None:
        with closing(self._connect()) as db:
            row = db.execute("SELECT html FROM reports WHERE id = ?", (rid,)).fetchone()
        return row[0] if row else None

    def count(self) -> int:
        with closing(self._connect()) as db:
            return int(db.execute("SELECT COUNT(*) FROM reports").fetchone()[0])
