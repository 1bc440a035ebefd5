"""`gridsplit bench ...`: the benchmark commands, gathered in one group."""

from __future__ import annotations

import click

from .ab import ab
from .app import app_cmd
from .outage import outage
from .relay import relay
from .scale import scale
from .sweep import iter_ops


@click.group()
def bench() -> None:
    """Benchmarks, measured side by side in one run, with result files."""


for _cmd in iter_ops():
    bench.add_command(_cmd)
bench.add_command(relay)
bench.add_command(outage)
bench.add_command(scale)
bench.add_command(ab)
bench.add_command(app_cmd)
