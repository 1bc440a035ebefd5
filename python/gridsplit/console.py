"""Where every command writes: `out` (tables, progress) and `err` (warnings) as
rich consoles, and `emit_json` for --json output. One module, imported by the
command modules, so that none of them imports the top-level CLI."""

from __future__ import annotations

import json
import os
import sys

import click
from rich.console import Console

# Tables stay readable when piped or logged: rich would otherwise wrap at 80 columns.
_width = None if sys.stdout.isatty() else int(os.environ.get("COLUMNS", "140"))
err = Console(stderr=True, highlight=False, width=_width)
out = Console(highlight=False, width=_width)


def emit_json(obj) -> None:
    click.echo(json.dumps(obj, indent=1, default=str))
