"""User-facing errors: a message that names the file, entry and field, never a traceback."""

from pydantic import ValidationError


class InputError(Exception):
    """Bad input the user can fix; the message says where and what."""


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
