"""Shared pydantic base: frozen, strict about unknown fields, field docstrings become descriptions."""

from pydantic import BaseModel, ConfigDict


class Frozen(BaseModel):
    """Immutable model that rejects unknown fields and documents itself from attribute docstrings."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


class Input(Frozen):
    """A model read from users (catalog entries, workloads, configurations, settings): NaN and infinities are
    rejected, naming the field (output models may carry inf, e.g. the utilization of a pool with no capacity)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True, allow_inf_nan=False)


class Sourced(Input):
    """A catalog entry: an id plus where its figures come from."""

    id: str
    """Catalog identifier, lower-case with dashes (e.g. `epyc-9965`)."""
    source: str
    """Public source of the figures (URL or document name); `assumption: ...` where a figure is an estimate."""
    notes: str | None = None
    """Free text: which figures are assumptions, how derived values were computed."""
