"""SQLite persistence of rendered reports (WAL mode; one short-lived connection per operation, so any thread may
call it)."""

from __future__ import annotations

import json
import secrets
import sqlite3
from contextlib import closing
from dataclasses import dataclass
from datetime import datetime, timedelta, UTC
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
    """Reports by id. With max_count and/or max_age_days, every put first deletes the reports beyond them (the
    oldest first), so the database stays bounded without a separate clean-up job."""

    def __init__(self, path: Path | str, max_count: int | None = None, max_age_days: float | None = None):
        self.path = Path(path)
        self.max_count, self.max_age_days = max_count, max_age_days
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
        db.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
        db.execute("PRAGMA synchronous=NORMAL")
        return db

    def put(self, request: dict[str, Any], result: dict[str, Any], html: str) -> StoredReport:
        rid = secrets.token_urlsafe(16)
        created = datetime.now(UTC).isoformat(timespec="seconds")
        with closing(self._connect()) as db, db:
            db.execute("BEGIN IMMEDIATE")
            self._prune(db, keep=(self.max_count - 1) if self.max_count else None)
            db.execute("INSERT INTO reports (id, created, request_json, result_json, html) VALUES (?, ?, ?, ?, ?)",
                       (rid, created, json.dumps(request), json.dumps(result), html))
            db.execute("COMMIT")
        return StoredReport(rid, created, request, result, html)

    def _prune(self, db: sqlite3.Connection, keep: int | None) -> None:
        if self.max_age_days is not None:
            cutoff = (datetime.now(UTC) - timedelta(days=self.max_age_days)).isoformat(timespec="seconds")
            db.execute("DELETE FROM reports WHERE created < ?", (cutoff,))
        if keep is not None:
            db.execute("DELETE FROM reports WHERE rowid NOT IN "
                       "(SELECT rowid FROM reports ORDER BY created DESC, rowid DESC LIMIT ?)", (max(keep, 0),))

    def delete(self, rid: str) -> bool:
        """Delete one report; False when there was none with this id."""
        with closing(self._connect()) as db:
            return db.execute("DELETE FROM reports WHERE id = ?", (rid,)).rowcount > 0

    def list(self, limit: int, offset: int = 0) -> tuple[int, list[tuple[str, str]]]:
        """Total count and (id, created) of one page, newest first."""
        with closing(self._connect()) as db:
            total = int(db.execute("SELECT COUNT(*) FROM reports").fetchone()[0])
            rows = db.execute("SELECT id, created FROM reports ORDER BY created DESC, rowid DESC LIMIT ? OFFSET ?",
                              (limit, offset)).fetchall()
        return total, [(r[0], r[1]) for r in rows]

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
