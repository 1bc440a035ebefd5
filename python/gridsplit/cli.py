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


# click >= 8.2 raises this usage error for a group called with no command (earlier: help, exit 0).
_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


class Group(click.Group):
    """A click group that turns GridsplitError, and click's own usage errors, into one clean line."""

    def main(self, args=None, prog_name=None, **extra):
        # Click's standalone mode prints a usage error as four lines (usage, a hint, a blank,
        # the error); the project's rule is one line that says what is wrong and where the fix
        # is. So click runs with standalone_mode=False and the exits are made here as click makes them.
        try:
            rv = super().main(args, prog_name, standalone_mode=False, **extra)
        except _NO_ARGS_IS_HELP as e:  # a group given no command: its help, as click prints it
            e.show()
            sys.exit(e.exit_code)
        except click.UsageError as e:
            path = e.ctx.command_path if e.ctx else "gridsplit"
            click.echo(f"gridsplit: error: {e.format_message()} (see `{path} --help`)", err=True)
            sys.exit(e.exit_code)
        except click.ClickException as e:
            e.show()
            sys.exit(e.exit_code)
        except click.Abort:
            click.echo("gridsplit: aborted", err=True)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)

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
