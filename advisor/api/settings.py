"""HTTP API settings: defaults, overridable with `ADVISOR_*` environment variables (or a `.env` file)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

APP_DIR = "rack-advisor"


def user_data_dir() -> Path:
    """Per-user data folder: $XDG_DATA_HOME or ~/.local/share on Linux, the platform's usual place elsewhere."""
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Application Support"
    else:
        base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / APP_DIR


def default_database() -> Path:
    return user_data_dir() / "advisor.db"


class ApiSettings(BaseSettings):
    """Settings of `advisor serve` (env prefix `ADVISOR_`, e.g. `ADVISOR_PORT=9000`)."""

    model_config = SettingsConfigDict(env_prefix="ADVISOR_", env_file=".env", extra="ignore",
                                      use_attribute_docstrings=True)

    host: str = "127.0.0.1"
    """Address to listen on (loopback by default; put a TLS proxy in front before exposing it)."""
    port: int = Field(default=8000, ge=0, le=65535)
    """TCP port."""
    database: Path = Field(default_factory=default_database)
    """SQLite file that keeps rendered reports (`ADVISOR_DATABASE`)."""
    catalog: Path | None = None
    """Catalog folder to serve instead of the built-in one (`ADVISOR_CATALOG`)."""
    workers: int = Field(default=2, ge=1, le=64)
    """Solves (evaluate, optimize, compare, report) run at the same time; more requests wait for a slot."""
    solve_in: Literal["process", "thread"] = "process"
    """Where solves run: `process`, a pool of `workers` worker processes, each holding the catalog; or `thread`,
    threads of the server. In threads a solve's Python work holds the server's GIL, and /healthz and catalog reads
    wait for it (bench/bench_load.py measured /healthz p99 142 ms under load in threads)."""
    worker_nice: int = Field(default=10, ge=0, le=19)
    """Niceness added to the solve worker processes, so that on a busy machine the OS runs the server's event loop
    (health checks, catalog reads, report pages) ahead of solves. 10 is the niceness `nice` uses by default."""
    worker_start_timeout_s: float = Field(default=120.0, gt=0)
    """How long a worker process may take to start and load the catalog."""
    time_limit_cap_s: float = Field(default=60.0, gt=0)
    """Largest solver time limit a request may ask for; larger requests are cut to it."""
    max_body_bytes: int = Field(default=1_000_000, gt=0)
    """Largest request body accepted (413 above)."""
    api_key: SecretStr | None = None
    """When set, every endpoint but /healthz needs header `X-API-Key` with this value."""
    queue_wait_s: float = Field(default=10.0, ge=0)
    """How long a request may wait for a solve slot before it is answered 503 with Retry-After."""
    report_sweep_time_limit_s: float = Field(default=5.0, gt=0)
    """Solver time limit per point of a report's sensitivity sweeps."""
    report_sweep_budget_s: float = Field(default=20.0, gt=0)
    """Wall-clock budget for a report's sensitivity sweeps."""
