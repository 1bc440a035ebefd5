"""The `gridsplit` command: one entry point for lab, gateway, bench, netcheck and model.

Every user error surfaces as one line on stderr and a non-zero exit (see errors.py);
tracebacks are reserved for bugs, and GRIDSPLIT_DEBUG=1 shows them.
"""

from __future__ import annotations

import os
import sys

import click

from .bench.cli import bench
from .bench.report import report
from .errors import GridsplitError
from .gateway.cli import gateway
from .launch import run
from .lab.cli import lab
from .model.cli import model
from .netcheck.cli import netcheck


class Group(click.Group):
    """A click group that turns GridsplitError into one clean line."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except GridsplitError as e:
            if os.environ.get("GRIDSPLIT_DEBUG"):
                raise
            click.echo(f"gridsplit: error: {e}", err=True)
            sys.exit(e.exit_code)
        except KeyboardInterrupt:
            click.echo("gridsplit: interrupted", err=True)
            sys.exit(130)


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gridsplit")
def main() -> None:
    """gridsplit: run MPI applications across sites.

    \b
    lab       an emulated multi-site grid on this machine (namespaces, real TCP, real MPI)
    gateway   site gateways (gridsplitd): configs and status
    run       run an MPI job with its cross-site connections split at the gateways
    bench     benchmarks: gather (direct vs split, the paper's evaluation), relay, outage
    report    an HTML report with plots from bench result files
    netcheck  site-to-site TCP diagnosis: RTT/throughput matrices, the wizard gap, tuning advice
    model     pLogP collective-performance prediction and grid advice
    """


main.add_command(lab)
main.add_command(gateway)
main.add_command(run)
main.add_command(netcheck)
main.add_command(model)


main.add_command(bench)
main.add_command(report)
