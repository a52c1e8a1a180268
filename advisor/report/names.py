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
    "sandboxes": "live tasks the sandboxes hold (at loaded task times)",
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


_POOL_ID = re.compile(r"\b(?P<kind>cpu|memory|disk|io|slo):(?P<q>[A-Za-z0-9_.-]+)")
_GROUP_ID = re.compile(r"\b(?P<g>[a-z]+(?:_[a-z]+)+)(?:_r(?P<rack>\d+))?\b")
_SERVING_KEY = re.compile(r"(?P<gpu>[A-Za-z0-9.-]+)@d(?P<d>\d+)")


class Names:
    """Name lookups bound to one catalog (the report template's `names`), and `text`, which rewrites the ids in a
    sentence the model or the optimizer wrote (`binding: cooling_air`, `GPU b200@d8`) in people's words."""

    def __init__(self, cat: Catalog):
        self.cat = cat
        ids = {e.id: e.name for table in (self.cat.chassis, self.cat.cpus, self.cat.gpus) for e in table}
        self._ids = ids
        # longest first, so `hgx-b200-sp5-10u` is one match and not `b200` inside it
        alts = "|".join(re.escape(i) for i in sorted(ids, key=len, reverse=True))
        self._sku_re = re.compile(rf"(?<![\w.@/-])({alts})(?![\w@-])") if ids else None

    def text(self, s: str) -> str:
        """People's words for the ids in one sentence."""
        s = re.sub(r"\bqueue shared\b", "shared queue", s)
        s = _SERVING_KEY.sub(lambda m: f"{self._ids.get(m['gpu'], m['gpu'])} ({m['d']}-GPU serving domain)", s)
        s = _POOL_ID.sub(lambda m: pool(f"{m['kind']}:{m['q']}"), s)

        def grp(m: re.Match) -> str:
            base = m["g"]
            if base not in GROUPS:
                return m[0]
            return GROUPS[base].title + (f" (rack {int(m['rack']) + 1})" if m["rack"] is not None else "")
        s = _GROUP_ID.sub(grp, s)
        s = re.sub(r"\b(power|space|weight)_r(\d+)\b", lambda m: f"{GROUPS[m[1]].title} (rack {int(m[2]) + 1})", s)
        if self._sku_re is not None:
            s = self._sku_re.sub(lambda m: self._ids[m[1]], s)
        return s

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
