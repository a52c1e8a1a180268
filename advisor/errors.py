"""User-facing errors: a message that names the file, entry and field, never a traceback."""

from pydantic import ValidationError


class InputError(Exception):
    """Bad input the user can fix; the message says where and what. `loc`, when known, is the path of the field at
    fault in the request (the HTTP API reports it); `suggestions` are close matches for an unknown id."""

    def __init__(self, message: str, loc: tuple | list | None = None, suggestions: list[str] | None = None):
        super().__init__(message)
        self.loc = tuple(loc) if loc is not None else None
        self.suggestions = suggestions

    def __reduce__(self):  # crosses the API's worker processes with its loc and suggestions
        return (type(self), (self.args[0] if self.args else "", self.loc, self.suggestions))


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
