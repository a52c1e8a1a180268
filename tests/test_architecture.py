"""The house rules of the source tree: `models/` never imports `advisor/`, and `advisor/` has no import cycles.

Read from the source (ast), so an import inside a function counts as much as one at the top of a module."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _modules(pkg: str) -> dict[str, Path]:
    mods = {}
    for p in (ROOT / pkg).rglob("*.py"):
        name = ".".join(p.relative_to(ROOT).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = p
    return mods


def _imports(path: Path) -> set[str]:
    """Every module name an import statement in this file can bind (`from a.b import c` gives a.b and a.b.c)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def _graph() -> dict[str, set[str]]:
    mods = _modules("advisor")
    return {m: {t for t in _imports(p) if t in mods and t != m} for m, p in mods.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_models_never_import_advisor():
    offenders = {name: sorted(t for t in _imports(p) if t == "advisor" or t.startswith("advisor."))
                 for name, p in _modules("models").items()}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_advisor_has_no_import_cycles():
    assert _cycles(_graph()) == []


def test_cycle_finder_finds_a_cycle():
    # the checker itself must be able to fail
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_every_subpackage_says_what_it_holds():
    for init in (ROOT / "advisor").rglob("__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc, f"{init.relative_to(ROOT)} has no docstring saying what the package holds"


def test_tests_moved_to_the_slow_tier_exist():
    """A stale entry in tiers.MOVED_TO_SLOW (a renamed test) would silently put nothing in the slow tier."""
    import re

    from tiers import MOVED_TO_SLOW

    root = Path(__file__).resolve().parents[1]
    for node in MOVED_TO_SLOW:
        path, name = node.split("::")
        func = re.sub(r"\[.*\]$", "", name)
        assert re.search(rf"^def {func}\(", (root / path).read_text(), re.M), node
