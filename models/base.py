"""Shared pydantic base: frozen, strict about unknown fields, field docstrings become descriptions."""

import math
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, PlainSerializer, model_validator

MAX_INPUT_MAGNITUDE = 1e15
"""Largest absolute number any input field accepts, in its own unit. Real figures stay far below it (the largest are
prices in USD and rates in tasks per hour, under 1e9); beyond it a figure is a typo, and products of a few such
figures would overflow double precision and reach the answers as infinities."""
MIN_INPUT_MAGNITUDE = 1e-9
"""Smallest absolute value a non-zero input number may have. Real figures stay far above it (the smallest are
fractions and coefficients of variation, above 1e-4); below it a figure is a typo or a denormal, and dividing by it
overflows (found by tests/test_fuzz_loaders.py: kv_bytes_per_token 1e-320)."""


def _unbounded_out(v: float) -> float | None:
    return None if math.isinf(v) else v


Unbounded = Annotated[float, BeforeValidator(lambda v: math.inf if v is None else v),
                      PlainSerializer(_unbounded_out, return_type=float | None, when_used="json")]
"""An output figure that is infinite when there is load but no capacity (the utilization of a pool with no cores or
no serving capacity). JSON has no infinity: it is written as null, which its schema allows and documents, and read
back as inf."""


class Frozen(BaseModel):
    """Immutable model that rejects unknown fields and documents itself from attribute docstrings."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


class BoundedNumbers(BaseModel):
    """Rejects any number beyond MAX_INPUT_MAGNITUDE, or non-zero below MIN_INPUT_MAGNITUDE, anywhere in the input,
    naming its path."""

    @model_validator(mode="before")
    @classmethod
    def _bounded_numbers(cls, data: Any) -> Any:
        bad = _first_out_of_range(data, "")
        if bad is not None:
            where, value = bad
            if abs(value) > MAX_INPUT_MAGNITUDE:
                why = f"is beyond +/-{MAX_INPUT_MAGNITUDE:.0e}, the largest figure accepted"
            else:
                why = f"is closer to 0 than {MIN_INPUT_MAGNITUDE:.0e}, the smallest non-zero figure accepted"
            raise ValueError(f"{where or 'value'}: {value:.3g} {why}")
        return data


class Input(Frozen, BoundedNumbers):
    """A model read from users (catalog entries, workloads, configurations, settings): NaN and infinities are
    rejected, naming the field (output models may carry inf, e.g. the utilization of a pool with no capacity), and
    types are strict: `0` is not `false` and `"40"` is not 40, as the JSON schema says (an int is still a float)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True, allow_inf_nan=False,
                              strict=True)


def _first_out_of_range(node: Any, path: str) -> tuple[str, float] | None:
    """Path and value of the first number out of the accepted magnitudes in raw input (nested dicts and lists)."""
    if isinstance(node, bool):
        return None
    if isinstance(node, (int, float)):
        try:
            a = abs(node)
            return (path, float(node)) if a > MAX_INPUT_MAGNITUDE or 0 < a < MIN_INPUT_MAGNITUDE else None
        except OverflowError:  # an int too large for a float
            return path, float("inf")
    if isinstance(node, dict):
        items = node.items()
    elif isinstance(node, (list, tuple)):
        items = ((f"[{i}]", v) for i, v in enumerate(node))
    else:
        return None
    for k, v in items:
        sub = f"{path}{k}" if str(k).startswith("[") else (f"{path}.{k}" if path else str(k))
        found = _first_out_of_range(v, sub)
        if found is not None:
            return found
    return None


class Sourced(Input):
    """A catalog entry: an id plus where its figures come from."""

    id: str
    """Catalog identifier, lower-case with dashes (e.g. `epyc-9965`)."""
    source: str
    """Public source of the figures (URL or document name); `assumption: ...` where a figure is an estimate."""
    notes: str | None = None
    """Free text: which figures are assumptions, how derived values were computed."""
