"""Shared pydantic base: frozen, strict about unknown fields, field docstrings become descriptions."""

from pydantic import BaseModel, ConfigDict


class Frozen(BaseModel):
    """Immutable model that rejects unknown fields and documents itself from attribute docstrings."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


class Sourced(Frozen):
    """A catalog entry: an id plus where its figures come from."""

    id: str
    """Catalog identifier, lower-case with dashes (e.g. `epyc-9965`)."""
    source: str
    """Public source of the figures (URL or document name); `assumption: ...` where a figure is an estimate."""
    notes: str | None = None
    """Free text: which figures are assumptions, how derived values were computed."""
