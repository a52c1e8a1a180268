"""The catalog as an in-memory lookup (loading from files lives in advisor.catalog)."""

import difflib
from typing import Generic, TypeVar

from pydantic import BaseModel, ConfigDict

from models.errors import InputError
from models.hardware import Chassis, CpuSku, GpuSku, Rack, RackSystem, Switch
from models.workload import ServedModel, Workload

T = TypeVar("T")


class UnknownId(InputError, KeyError):
    """An id that is not in the catalog, with close matches to suggest (an input error; a KeyError too, for lookups)."""

    def __init__(self, kind: str, key: str, known: list[str]):
        self.kind, self.key = kind, key
        self.suggestions = difflib.get_close_matches(key, known, n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(self.suggestions)}?" if self.suggestions else ""
        super().__init__(f"unknown {kind} id {key!r}{hint}", suggestions=self.suggestions)

    def __str__(self) -> str:
        return self.args[0]

    def __reduce__(self):
        # pickled across the API's worker processes: rebuilt from its fields, not from __init__'s arguments
        return _rebuild_unknown_id, (self.kind, self.key, self.suggestions, self.args[0])


def _rebuild_unknown_id(kind: str, key: str, suggestions: list[str], message: str) -> UnknownId:
    e = UnknownId.__new__(UnknownId)
    InputError.__init__(e, message, suggestions=suggestions)
    e.kind, e.key = kind, key
    return e


class Table(Generic[T]):
    """Entries of one kind by id."""

    def __init__(self, kind: str, entries: list[T]):
        self.kind = kind
        self.entries: dict[str, T] = {}
        for e in entries:
            if e.id in self.entries:  # type: ignore[attr-defined]
                raise InputError(f"duplicate {kind} id {e.id!r}")  # type: ignore[attr-defined]
            self.entries[e.id] = e  # type: ignore[attr-defined]

    def __getitem__(self, key: str) -> T:
        try:
            return self.entries[key]
        except KeyError:
            raise UnknownId(self.kind, key, list(self.entries)) from None

    def __contains__(self, key: str) -> bool:
        return key in self.entries

    def __iter__(self):
        return iter(self.entries.values())

    def __len__(self) -> int:
        return len(self.entries)


class Catalog(BaseModel):
    """Every catalog table the model and optimizer look things up in."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    cpus: Table[CpuSku]
    gpus: Table[GpuSku]
    chassis: Table[Chassis]
    """Chassis, and every rack-scale system as one whole-unit chassis (`RackSystem.as_chassis`) under its own id."""
    racks: Table[Rack]
    served_models: Table[ServedModel]
    workloads: Table[Workload]
    systems: Table[RackSystem]
    switches: Table[Switch]

    @classmethod
    def build(cls, cpus=(), gpus=(), chassis=(), racks=(), served_models=(), workloads=(), systems=(),
              switches=()) -> "Catalog":
        chassis, systems = list(chassis), list(systems)
        trays = {c.id: c for c in chassis}
        for s in systems:
            if s.compute_tray not in trays:
                raise InputError(f"system {s.id!r}: compute_tray: {UnknownId('chassis', s.compute_tray, list(trays))}")
            if s.id in trays:
                raise InputError(f"system {s.id!r}: id is also a chassis id")
        chassis += [s.as_chassis(trays[s.compute_tray]) for s in systems]
        return cls(
            cpus=Table("cpu", list(cpus)),
            gpus=Table("gpu", list(gpus)),
            chassis=Table("chassis", chassis),
            racks=Table("rack", list(racks)),
            served_models=Table("served model", list(served_models)),
            workloads=Table("workload", list(workloads)),
            systems=Table("system", systems),
            switches=Table("switch", list(switches)),
        )
