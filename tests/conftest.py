"""Shared fixtures: the hand-made mini catalog, the built-in catalog, repository paths."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from advisor.catalog import builtin_catalog, load_catalog

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent
MINI_DIR = TESTS_DIR / "data" / "mini"
EXAMPLES_DIR = REPO_ROOT / "examples"


@pytest.fixture(scope="session")
def mini_catalog():
    return load_catalog(MINI_DIR)


@pytest.fixture(scope="session")
def builtin():
    return builtin_catalog()


@pytest.fixture
def mini_copy(tmp_path: Path) -> Path:
    """A writable copy of the mini catalog folder, for tests that break it."""
    dst = tmp_path / "mini"
    shutil.copytree(MINI_DIR, dst)
    return dst


@pytest.hookimpl(tryfirst=True)  # before `-m "not slow"` deselects
def pytest_collection_modifyitems(config, items):
    """Tests listed in tiers.MOVED_TO_SLOW join the slow tier (the README's command deselects them)."""
    from tiers import MOVED_TO_SLOW

    for item in items:
        if item.nodeid in MOVED_TO_SLOW:
            item.add_marker(pytest.mark.slow)
