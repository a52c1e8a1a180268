"""What every command module shares: the two consoles, the one way to fail with an exit code, the --catalog and
--quiet options, progress on stderr, and the checks every command makes of its inputs.

Exit codes, the same for every command: 0 ok; 1 infeasible or over budget (the answer says why); 2 bad input
(unknown id, invalid file, unwritable output); 3 partial failure (batch: some scenarios failed); 70 a bug (main()
prints the traceback); 130 interrupted."""

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


FLAGS = {"gpu_ids": "--gpu", "cpu_ids": "--cpu", "workload": "--workload", "rack": "--rack", "racks": "--racks",
         "time_limit_s": "--time-limit", "layout": "--layout", "a": "--gpu/--cpu", "b": "--gpu/--cpu",
         "existing": "--existing", "allow_removal": "--allow-removal",
         "keep_hardware": "--keep-hardware"}
"""Command-line flag of a request field, to name it in an error."""

BUG_EXIT = 70
"""Exit code of an unexpected error (EX_SOFTWARE in BSD sysexits.h): a bug in rack-advisor, not in the input."""


@contextmanager
def user_errors(what: str = "input") -> Iterator[None]:
    """The one place the CLI maps the domain's errors: InputError (and a request the front end could not build)
    is bad input, exit 2, naming the flag when the error knows its field. Anything else is a bug (see main())."""
    from pydantic import ValidationError

    from advisor.errors import InputError, describe_validation

    try:
        yield
    except InputError as e:
        field = e.loc[1] if e.loc and len(e.loc) > 1 and e.loc[0] == "body" else None
        flag = FLAGS.get(field) if isinstance(field, str) else None
        fail(f"{flag}: {e}" if flag and not str(e).startswith(flag) else str(e))
    except ValidationError as e:
        fail(describe_validation(e, what))


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
