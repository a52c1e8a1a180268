"""The one error type for input a user can fix: raised by the domain (models/ and advisor/), mapped once by each
front end (HTTP 422, CLI exit 2, a failed batch row). Any other exception is a bug: HTTP 500, CLI exit 70."""

from __future__ import annotations


class InputError(ValueError):
    """Bad input the user can fix; the message says where and what. `loc`, when known, is the path of the field at
    fault in the request (the HTTP API reports it); `suggestions` are close matches for an unknown id.

    A ValueError, so that pydantic validators and callers that wrap a lower-level message keep working."""

    def __init__(self, message: str, loc: tuple | list | None = None, suggestions: list[str] | None = None):
        super().__init__(message)
        self.loc = tuple(loc) if loc is not None else None
        self.suggestions = suggestions

    def __str__(self) -> str:
        return self.args[0] if self.args else ""

    def __reduce__(self):  # crosses the API's worker processes with its loc and suggestions
        return (type(self), (str(self), self.loc, self.suggestions))
