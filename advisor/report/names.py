"""People's names for the ids the model and the optimizer use: budgets, pools, queues, stages and catalog SKUs.

The report shows these names in its visible text and keeps the ids in its details columns and in the JSON data
(tests/test_report.py fails when an id leaks into the visible text)."""

from __future__ import annotations

import re
from collections.abc import Iterable

from advisor.optimizer.groups import GROUPS
from models.catalog import Catalog

POOL_TITLES = {
    "gpu": "GPU serving",
    "orchestration": "inference-engine host cores",
    "cpu": "tool cores",
    "memory": "sandbox memory",
    "disk": "sandbox disk",
    "io": "sandbox I/O bandwidth",
    "slo": "tool-wait target",
    "none": "nothing (no configuration)",
}
"""Titles of the evaluator's bounds (`models.pipeline.Bound.name`: `gpu`, `orchestration` or `<kind>:<queue>`)."""

_RACK_SUFFIX = re.compile(r"^(?P<base>.+)_r(?P<rack>\d+)$")


def queue_name(q: str) -> str:
    """`shared` -> `shared queue`; a class's own queue -> `queue of <class>`."""
    return "shared queue" if q == "shared" else f"queue of {q}"


def pool(name: str) -> str:
    """A bound or bottleneck id (`cpu:shared`, `slo:shared`, `gpu`) in words."""
    kind, _, q = name.partition(":")
    title = POOL_TITLES.get(kind, kind.replace("_", " "))
    return f"{title}, {queue_name(q)}" if q else title


def group(name: str) -> str:
    """A constraint group (`cooling_air`, `tool_cores:shared`) in words."""
    base, _, q = name.partition(":")
    g = GROUPS.get(base)
    title = g.title if g else base.replace("_", " ")
    return f"{title}, {queue_name(q)}" if q else title


def budgets(names: Iterable[str]) -> str:
    """A list of constraint groups in words ('none' when empty)."""
    return ", ".join(group(n) for n in names) or "none"


def constraint(name: str, group_name: str, racks: int) -> str:
    """One constraint row (`power_r0` of group `power`): the group's title, with the rack when there are several."""
    m = _RACK_SUFFIX.match(name)
    title = group(group_name)
    return f"{title}, rack {int(m['rack']) + 1}" if m and racks > 1 else title


def stage(name: str) -> str:
    """A stage or `class/stage` key (`test-heavy/run_tests`) in words: `run tests (test-heavy)`."""
    cls, _, st = name.rpartition("/")
    words = st.replace("_", " ")
    return f"{words} ({cls})" if cls else words


class Names:
    """Name lookups bound to one catalog (the report template's `names`)."""

    def __init__(self, cat: Catalog):
        self.cat = cat

    def sku(self, sku_id: str | None) -> str:
        if not sku_id:
            return ""
        for table in (self.cat.gpus, self.cat.cpus, self.cat.chassis):
            if sku_id in table:
                return table[sku_id].name
        return sku_id

    pool = staticmethod(pool)
    group = staticmethod(group)
    budgets = staticmethod(budgets)
    constraint = staticmethod(constraint)
    stage = staticmethod(stage)
    queue = staticmethod(queue_name)
