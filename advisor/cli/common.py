"""What every command module shares: the two consoles and the one way to fail with an exit code."""

from __future__ import annotations

import typer
from rich.console import Console

out = Console()
err = Console(stderr=True)


def fail(message: str, code: int = 2) -> None:
    err.print(f"[red]error:[/red] {message}", highlight=False)
    raise typer.Exit(code)
