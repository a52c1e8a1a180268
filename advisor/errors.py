"""User-facing errors: a message that names the file, entry and field, never a traceback. The error type itself
lives in models.errors (the domain raises it); this module re-exports it beside the validation formatter."""

from pydantic import ValidationError

from models.errors import InputError

__all__ = ["InputError", "describe_validation"]


def describe_validation(err: ValidationError, where: str, prefix: str = "") -> str:
    lines = [f"{where}: {err.error_count()} problem(s)"]
    for e in err.errors():
        loc = prefix + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e["loc"])
        loc = loc.lstrip(".") or "(top level)"
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown field"
        lines.append(f"  {loc}: {msg}")
    return "\n".join(lines)
