"""What every command module shares: the two consoles, the one way to fail with an exit code, the --catalog and
--quiet options, progress on stderr, and the checks every command makes of its inputs.

Exit codes, the same for every command: 0 ok; 1 infeasible or over budget (the answer says why); 2 bad input
(unknown id, invalid file, unwritable output); 3 partial failure (batch: some scenarios failed); 130 interrupted."""

from __future__ import annotations

import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from collections.abc import Iterator

import typer
from rich.console import Console

out = Console()
err = Console(stderr=True)


def fail(message: str, code: int = 2) -> None:
    err.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


CATALOG_OPT = typer.Option(None, "--catalog", help="Catalog folder instead of the built-in one.")
QUIET_OPT = typer.Option(False, "--quiet", "-q", help="No progress messages on stderr.", metavar="")


def cli_catalog(path: Path | None = None):
    from advisor.catalog import builtin_catalog, load_catalog
    from advisor.errors import InputError

    try:
        return load_catalog(path) if path is not None else builtin_catalog()
    except InputError as e:
        fail(str(e))


def check_sku_ids(cat, gpus: list[str] | None, cpus: list[str] | None) -> None:
    """Unknown GPU or CPU ids in --gpu / --cpu are bad input (exit 2, with close matches), not an infeasible
    answer."""
    from models.catalog import UnknownId

    for flag, ids, table in (("--gpu", gpus, cat.gpus), ("--cpu", cpus, cat.cpus)):
        for i in ids or []:
            try:
                table[i]
            except UnknownId as e:
                fail(f"{flag}: {e}")


def inline_file_refs(configuration: dict[str, Any], workload: str, rack: str) -> dict[str, Any]:
    """The configuration of an answer with a workload or rack that came from a file written into it (the file's
    data), so that the configuration reproduces the answer without the file (its id means nothing elsewhere)."""
    from advisor.catalog import _is_file_ref, read_yaml

    out = dict(configuration)
    for key, ref in (("workload", workload), ("rack", rack)):
        if isinstance(ref, str) and _is_file_ref(ref):
            out[key] = read_yaml(Path(ref))
    return out


@contextmanager
def progress(what: str, quiet: bool) -> Iterator[None]:
    """Say on stderr what is running (every command whose work can take more than about 2 s): a spinner with the elapsed time on a terminal, else one line when it starts
    and one when it ends. Silent when quiet (--quiet, or --json where stderr may be read by a program)."""
    if quiet:
        yield
        return
    t0 = time.perf_counter()
    if err.is_terminal:
        with err.status(f"{what}..."):
            yield
    else:
        err.print(f"{what}...", highlight=False, soft_wrap=True)
        yield
    err.print(f"{what}: done in {time.perf_counter() - t0:.1f} s", highlight=False, soft_wrap=True)
