"""The HTTP API's one error shape: RFC 9457 problem details (`application/problem+json`), and the checks a request
body passes at the edge, before any route or worker sees it (JSON syntax, nesting depth, duplicate keys, non-finite
and out-of-range numbers).

Every 4xx and 5xx answer is a `Problem`: `type` (a tag URI naming the kind of problem, listed in PROBLEM_TYPES),
`title` (the same for every problem of a type), `status`, `detail` (this occurrence, in words) and `errors`, one
`{loc, msg}` per field at fault, `loc` being the field's path (`["body", "configuration", "servers", 0, "count"]`).
No problem echoes a raw input value back: a message names the field and the limit it broke, never what was sent
(catalog ids in "unknown id ... did you mean" messages excepted: they are matched against the catalog first).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field

from models.base import MAX_INPUT_MAGNITUDE, MIN_INPUT_MAGNITUDE

PROBLEM_MEDIA_TYPE = "application/problem+json"
TYPE_PREFIX = "tag:rack-advisor,2026:problem/"
PROBLEM_TYPES: dict[str, str] = {
    "invalid-json": "Request body is not valid JSON",
    "too-deep": "Request body nests too deeply",
    "invalid-number": "A number in the request is not accepted",
    "duplicate-key": "A JSON object in the request repeats a key",
    "validation": "Request fields are invalid",
    "invalid-input": "The input cannot be used",
    "unknown-id": "Unknown catalog id",
    "unsupported-media-type": "Request body must be JSON",
    "body-too-large": "Request body too large",
    "body-timeout": "Request body not received in time",
    "unauthorized": "API key required",
    "forbidden": "API key not accepted",
    "not-found": "Not found",
    "method-not-allowed": "Method not allowed",
    "busy": "All solve workers are busy",
    "client-closed": "Client closed the request",
    "internal": "Internal error",
    "http": "HTTP error",
}
"""Problem types (the part after TYPE_PREFIX) and their titles."""


class FieldError(BaseModel):
    """One field at fault."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    loc: list[str | int]
    """Path of the field: where it is (`body`, `path`, `query`, `header`) then its keys and list indices."""
    msg: str
    """What is wrong with it (never its value)."""


class Problem(BaseModel):
    """RFC 9457 problem details: the body of every 4xx and 5xx answer (media type `application/problem+json`)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    type: str
    """A tag URI naming the kind of problem (`tag:rack-advisor,2026:problem/validation`, ...); the README lists
    them."""
    title: str
    """Short summary of the problem type (the same for every occurrence)."""
    status: int
    """The HTTP status code."""
    detail: str
    """This occurrence, in words."""
    errors: list[FieldError] = Field(default_factory=list)
    """Each field at fault with its path; empty when the problem is not about a field (busy, not found, ...)."""
    suggestions: list[str] | None = None
    """Close matches for an unknown catalog id."""


MAX_MESSAGE_CHARS = 2000
"""Longest detail or msg in a problem: messages quote catalog ids and field names, and a hostile request could make
them as long as its body (a 1 MB id); past this they are cut."""
MAX_LOC_KEY_CHARS = 200
"""Longest key in a `loc` path (keys come from the request; a real field name is under 40 characters)."""


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def problem(status: int, kind: str, detail: str, errors: Iterable[tuple[list, str]] = (),
            suggestions: list[str] | None = None) -> Problem:
    errs = [FieldError(loc=[_cut(p, MAX_LOC_KEY_CHARS) if isinstance(p, str) else p for p in loc],
                       msg=_cut(msg, MAX_MESSAGE_CHARS)) for loc, msg in errors]
    return Problem(type=TYPE_PREFIX + kind, title=PROBLEM_TYPES[kind], status=status,
                   detail=_cut(detail, MAX_MESSAGE_CHARS), errors=errs, suggestions=suggestions)


def problem_bytes(p: Problem) -> bytes:
    return p.model_dump_json(exclude_none=True).encode()


def loc_text(loc: list) -> str:
    """`configuration.servers[0].count` for ["body", "configuration", "servers", 0, "count"]."""
    parts = loc[1:] if loc and loc[0] in ("body", "query", "path", "header") else loc
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or (loc[0] if loc else "body")


# ------------------------------------------------------------------------------------------------ body edge checks

class BodyProblem(Exception):
    """A request body refused at the edge, as a problem document."""

    def __init__(self, p: Problem):
        super().__init__(p.detail)
        self.problem = p


_CONSTANT = object()
"""What NaN, Infinity and -Infinity parse to at the edge (JSON has no such numbers)."""


class _Obj(dict):
    """A parsed JSON object that remembers the keys it saw more than once."""

    dups: list[str]


def _pairs(pairs: list[tuple[str, Any]]) -> _Obj:
    o = _Obj(pairs)
    o.dups = [k for k in o if sum(1 for p in pairs if p[0] == k) > 1] if len(o) < len(pairs) else []
    return o


_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{},:]', re.S)


def _too_deep_at(body: bytes, max_depth: int) -> list | None:
    """Path (keys and indices) to where the nesting first goes deeper than max_depth, or None. A byte count bounds
    the depth first, so that ordinary bodies are not tokenized."""
    if body.count(b"[") + body.count(b"{") <= max_depth:
        return None
    path: list = []
    kinds: list[str] = []
    last_string: str | None = None
    for m in _TOKEN.finditer(body):
        t = m.group()
        if t in (b"{", b"["):
            if len(kinds) >= max_depth:
                return path
            kinds.append(t.decode())
            path.append(0 if t == b"[" else None)
        elif t in (b"}", b"]"):
            if kinds:
                kinds.pop()
                path.pop()
        elif t == b",":
            if kinds and kinds[-1] == "[":
                path[-1] += 1
        elif t == b":":
            if kinds and kinds[-1] == "{":
                path[-1] = last_string
        else:
            try:
                last_string = json.loads(t)
            except ValueError:
                last_string = "?"
    return None


def _walk(node: Any, loc: list, out: list[tuple[list, str, str]]) -> None:
    """Non-finite, out-of-range numbers and duplicate keys anywhere in a parsed body: (loc, msg, kind)."""
    if node is _CONSTANT:
        out.append((loc, "not a number JSON allows (non-finite constant): give a finite number", "invalid-number"))
    elif isinstance(node, bool) or node is None or isinstance(node, str):
        return
    elif isinstance(node, float) and not math.isfinite(node):
        out.append((loc, "number too large: it overflows to infinity", "invalid-number"))
    elif isinstance(node, (int, float)):
        try:
            a = abs(node)
            big, small = a > MAX_INPUT_MAGNITUDE, 0 < a < MIN_INPUT_MAGNITUDE
        except OverflowError:
            big, small = True, False
        if big:
            out.append((loc, f"beyond +/-{MAX_INPUT_MAGNITUDE:.0e}, the largest figure accepted", "invalid-number"))
        elif small:
            out.append((loc, f"closer to 0 than {MIN_INPUT_MAGNITUDE:.0e}, the smallest non-zero figure accepted",
                        "invalid-number"))
    elif isinstance(node, dict):
        for k in getattr(node, "dups", ()):
            out.append((loc + [k], "key given more than once in one object", "duplicate-key"))
        for k, v in node.items():
            _walk(v, loc + [k], out)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            _walk(v, loc + [i], out)


MAX_ERRORS = 20
"""Field errors listed in one problem at most (the detail says how many there were)."""


def check_json_body(body: bytes, max_depth: int) -> None:
    """Raise BodyProblem unless `body` is JSON that nests at most max_depth levels, with finite numbers within the
    accepted magnitudes (models/base.py) and no repeated key in an object."""
    at = _too_deep_at(body, max_depth)
    if at is not None:
        loc = ["body"] + [p if p is not None else "?" for p in at]
        raise BodyProblem(problem(400, "too-deep", f"{loc_text(loc)}: nesting deeper than {max_depth} levels "
                                                   f"(the most any request needs is far less)",
                                  [(loc, f"nested deeper than {max_depth} levels")]))
    try:
        data = json.loads(body, parse_constant=lambda _: _CONSTANT, object_pairs_hook=_pairs)
    except RecursionError:  # max_depth above the interpreter's limit
        raise BodyProblem(problem(400, "too-deep", "body nests too deeply",
                                  [(["body"], "nested too deeply")])) from None
    except UnicodeDecodeError:
        raise BodyProblem(problem(400, "invalid-json", "body is not UTF-8 text",
                                  [(["body"], "not UTF-8")])) from None
    except ValueError as e:  # json.JSONDecodeError, or an integer with more digits than Python converts
        where = f"line {e.lineno} column {e.colno}: {e.msg}" if isinstance(e, json.JSONDecodeError) \
            else "an integer has too many digits"
        raise BodyProblem(problem(400, "invalid-json", f"body is not valid JSON ({where})",
                                  [(["body"], f"invalid JSON at {where}")])) from None
    found: list[tuple[list, str, str]] = []
    _walk(data, ["body"], found)
    if found:
        kinds = {k for _, _, k in found}
        kind = kinds.pop() if len(kinds) == 1 else "validation"
        names = ", ".join(loc_text(loc) for loc, _, _ in found[:MAX_ERRORS])
        more = f" (and {len(found) - MAX_ERRORS} more)" if len(found) > MAX_ERRORS else ""
        raise BodyProblem(problem(422, kind, f"{len(found)} field(s) not accepted: {names}{more}",
                                  [(loc, msg) for loc, msg, _ in found[:MAX_ERRORS]]))


def is_json_media_type(content_type: str | None) -> bool:
    if not content_type:
        return False
    mt = content_type.split(";", 1)[0].strip().lower()
    return mt == "application/json" or (mt.startswith("application/") and mt.endswith("+json"))
