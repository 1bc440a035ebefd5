"""Option parsers shared by the `gridsplit bench` commands: comma lists, node and
stream counts, choices, and the ranks' extra environment (--rank-env)."""

from __future__ import annotations

import re

import click

from ..errors import GridsplitError
from ..inventory import load_inventory
from ..topology import SPLIT_SPEC
from ..units import parse_size

# `--nodes all`: every node of the lab runs a rank (all sites, not one sender site).
ALL_NODES = 0


def csv(kind):
    def conv(ctx, param, value):
        if value is None:
            return None
        try:
            return [kind(v.strip()) for v in value.split(",") if v.strip()]
        except (ValueError, GridsplitError) as e:
            raise click.BadParameter(str(e)) from None
    return conv


def count(v: str) -> int:
    """A node count as the user typed it ("all": every node of every site takes
    part); int()'s own message names Python, not the flag."""
    if v == "all":
        return ALL_NODES
    try:
        n = int(v)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"{v!r} is not a node count (give whole numbers of 1 or more, e.g. 4,12,20)")
    return n


def message_size(v: str) -> int:
    """A --sizes entry: bytes per rank (K/M/G suffixes), at least one."""
    n = parse_size(v)
    if n < 1:
        raise ValueError(f"{v!r}: a message of at least 1 byte (e.g. 1K,100K,1M)")
    return n


def streams(v: str) -> int:
    """A --wan-streams entry: "auto" (0) or 1..16 connections per WAN link."""
    if v == "auto":
        return 0
    if not v.isdigit() or not 1 <= int(v) <= 16:
        raise ValueError(f"{v!r} is not auto or a number of connections 1..16")
    return int(v)


def split_spec(v: str) -> str:
    """A split choice (topology.SPLIT_SPEC): policy, all, none, root, or site pairs joined by '+'."""
    if not SPLIT_SPEC.match(v):
        raise ValueError(f"{v!r} is not policy, all, none, root or site pairs joined by '+' (e.g. east-west+east-north)")
    return v


def choice_list(allowed):
    def check(v: str) -> str:
        if v not in allowed:
            raise ValueError(f"{v!r} is not one of {', '.join(allowed)}")
        return v
    return check


# What the gateways' steering needs in a split rank's environment: a sweep may
# not override it, or split mode would silently stop splitting.
RESERVED_ENV = ("LD_PRELOAD", "GRIDSPLIT_")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def rank_env(ctx, param, values) -> dict[str, str]:
    env: dict[str, str] = {}
    for item in values:
        name, eq, value = item.partition("=")
        if not eq or not ENV_NAME.fullmatch(name):
            raise click.BadParameter(f"{item!r} is not NAME=VALUE (e.g. OMPI_MCA_btl_tcp_eager_limit=131072)")
        if name.startswith(RESERVED_ENV):
            raise click.BadParameter(f"{name} is set by split mode itself (gateway steering); choose another variable")
        env[name] = value
    return env


def env_str(env: dict[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(env.items())) or "(none)"


# -- options every lab benchmark takes, declared once ------------------------------

def lab_topology(f):
    """--topology and --scale: the grid the lab is brought up (or reused) for."""
    f = click.option("--scale", type=float, default=None,
                     help="Override the topology's rate scale (see `lab up --scale`).")(f)
    return click.option("--topology", "-t", default="paper", show_default=True, metavar="NAME|FILE",
                        help="Preset or topology file; the lab is brought up (or reused) for it.")(f)


def reps_budget(f):
    """--reps and --budget: repetitions of the collective per run, capped by a time budget."""
    f = click.option("--budget", default=15.0, show_default=True, type=click.FloatRange(0),
                     help="Cap reps so a run's ideal duration stays under this many seconds (0: never cap). "
                          "The reps actually run are recorded.")(f)
    return click.option("--reps", "-r", default=200, show_default=True, type=click.IntRange(1, 100000),
                        help="Repetitions per run (Alter and Glück: 200 gathers).")(f)


report = click.option("--report/--no-report", "make_report", default=True, show_default=True,
                      help="Write the HTML report next to the result file at the end.")


hosts_file = click.option("--hosts", "hosts_file", metavar="FILE", default=None,
                          help="Run on real hosts over ssh, listed per site in a TOML file (netcheck's format with the "
                               "bench's keys: topology, [mpi], [gateways], gateway per site; docs/bench.md) instead "
                               "of the lab.")


def inventory_for(ctx: click.Context, hosts_file: str | None):
    """The --hosts inventory, or None for the lab; --topology and --scale name the lab's grid and are refused
    with it (the hosts file names its topology)."""
    if hosts_file is None:
        return None
    for name in ("topology", "scale"):
        if ctx.get_parameter_source(name) not in (None, click.core.ParameterSource.DEFAULT):
            raise GridsplitError(f"--hosts and --{name} exclude each other: the hosts file names its topology "
                                 '(topology = "FILE")')
    return load_inventory(hosts_file)
