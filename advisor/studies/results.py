"""The batch results store: one SQLite table `results`, one row per scenario x layout (see advisor.studies.batch).

WAL journal, synchronous=FULL, each finished solve committed in its own transaction, so an interrupted batch loses
no finished row and leaves no half-written one."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from contextlib import closing
from pathlib import Path

DB_NAME = "results.sqlite"
SCHEMA_VERSION = 2
"""2 added the TCO columns; an older results file gains them when opened (its rows keep NULL there)."""
BUSY_TIMEOUT_S = 30.0
COLUMNS = (
    ("scenario", "TEXT NOT NULL"), ("layout", "TEXT NOT NULL"), ("hash", "TEXT NOT NULL"),
    ("scenario_hash", "TEXT"), ("base", "TEXT"), ("sample", "INTEGER"), ("overrides_json", "TEXT"),
    ("inputs_json", "TEXT"), ("status", "TEXT NOT NULL"), ("throughput", "REAL"), ("predicted", "REAL"),
    ("power_w", "REAL"), ("space_u", "INTEGER"), ("capital_usd", "REAL"), ("cost_usd_per_hour", "REAL"),
    ("cost_usd_per_1000_tasks", "REAL"), ("energy_wh_per_task", "REAL"), ("gap", "REAL"), ("bottleneck", "TEXT"),
    ("binding_json", "TEXT"), ("configuration_json", "TEXT"), ("message", "TEXT"), ("solve_seconds", "REAL"),
    ("started", "TEXT"), ("finished", "TEXT"), ("worker", "TEXT"), ("error", "TEXT"),
)
COLUMN_NAMES = tuple(c for c, _ in COLUMNS)


def connect(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    db.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute(f"CREATE TABLE IF NOT EXISTS results ({', '.join(f'{c} {t}' for c, t in COLUMNS)}, "
               "PRIMARY KEY (scenario, layout))")
    have = {r[1] for r in db.execute("PRAGMA table_info(results)")}
    for c, t in COLUMNS:
        if c not in have:  # a results file from an older version: add the column, keep every finished row
            db.execute(f"ALTER TABLE results ADD COLUMN {c} {t.replace(' NOT NULL', '')}")
    db.execute("CREATE INDEX IF NOT EXISTS results_hash ON results(hash)")
    db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
    return db


def write_rows(db: sqlite3.Connection, rows: list[dict]) -> None:
    """All rows in one transaction: either every row of a finished solve is there, or none is."""
    sql = (f"INSERT OR REPLACE INTO results ({', '.join(COLUMN_NAMES)}) "
           f"VALUES ({', '.join('?' for _ in COLUMN_NAMES)})")
    db.execute("BEGIN IMMEDIATE")
    try:
        db.executemany(sql, [tuple(r.get(c) for c in COLUMN_NAMES) for r in rows])
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def read_rows(path: Path | str, scenarios: Iterable[str] | None = None) -> list[dict]:
    path = Path(path)
    if path.is_dir():
        path = path / DB_NAME
    if not path.exists():
        return []
    with closing(sqlite3.connect(path, timeout=BUSY_TIMEOUT_S)) as db:
        db.row_factory = sqlite3.Row
        rows = [dict(r) for r in db.execute("SELECT * FROM results ORDER BY rowid")]
    if scenarios is not None:
        want = set(scenarios)
        rows = [r for r in rows if r["scenario"] in want]
    return rows
