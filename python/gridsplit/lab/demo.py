"""The demo's first cross-site measurement: one gather, direct and split, side by side.

`make demo` runs this after `lab up` and `lab check`. It is deliberately small
(the full sweep is `gridsplit bench gather`'s job): the same MPI gather from
every sender to the root, once node to node and once through the gateways, with
the TCP counters of the senders (and gateways) around each run.
"""

from __future__ import annotations

import json
import sys

import click
from rich.console import Console
from rich.table import Table

from .. import sysdeps
from ..errors import GridsplitError
from . import counters as C
from .mpi import mpirun, split_env
from .names import LabNames
from .realize import load_state

KEYS = ("TCPFastRetrans", "TCPTimeouts", "RetransSegs")


@click.command()
@click.option("--impl", type=click.Choice(["mpich", "openmpi"]), default="openmpi", show_default=True)
@click.option("--size", default="100K", show_default=True)
@click.option("--reps", default=50, show_default=True)
def main(impl: str, size: str, reps: int) -> None:
    con = Console(highlight=False, width=None if sys.stdout.isatty() else 120)
    try:
        state = load_state(LabNames.from_env())
        topo = state.topo
        roots = [h for h in topo.nodes() if h.site != topo.sites[0].name][:1]
        senders = [h for h in topo.nodes() if h.site == topo.sites[0].name]
        if not roots or not senders:
            raise GridsplitError("the demo needs nodes on two sites")
        hosts = roots + senders
        prog = [sysdeps.mpi_program(impl, "gather"), "-s", size, "-r", str(reps), "--check"]
        watch = [h for h in topo.hosts() if h.role == "gateway"] + senders
        rows = {}
        for mode in ("direct", "split"):
            con.print(f"· {reps} gathers of {size} from {len(senders)} {topo.sites[0].name} nodes to {roots[0].name}, {mode}")
            before = C.snapshot_many([state.ns(h) for h in watch])
            cp = mpirun(state, impl, len(hosts), hosts, prog, env=split_env(state) if mode == "split" else None,
                        capture=True, timeout=600)
            after = C.snapshot_many([state.ns(h) for h in watch])
            if cp.returncode != 0:
                raise GridsplitError(f"{mode} run failed ({cp.returncode}): {cp.stderr.strip()[-300:]}")
            res = json.loads([l for l in cp.stdout.splitlines() if l.startswith("{")][-1])
            d = {h: C.delta(before[state.ns(h)], after[state.ns(h)]) for h in watch}
            nodes = {k: sum(d[h].get(k, 0) for h in senders) for k in KEYS}
            gws = {k: sum(d[h].get(k, 0) for h in watch if h.role == "gateway") for k in KEYS}
            rows[mode] = (res, nodes, gws)
        t = Table("mode", "total", "median gather", "verified", *[f"senders {k}" for k in KEYS], "gateways RetransSegs",
                  title=f"{impl}, topology {topo.name}")
        for mode, (res, nodes, gws) in rows.items():
            t.add_row(mode, f"{res['total_s']:.2f} s", f"{res['median_s'] * 1000:.1f} ms", str(res["verified"]),
                      *[str(nodes[k]) for k in KEYS], str(gws["RetransSegs"]) if mode == "split" else "-")
        con.print(t)
        ratio = rows["split"][0]["total_s"] / rows["direct"][0]["total_s"]
        con.print(f"split/direct time ratio: [bold]{ratio:.2f}[/bold] (MPI5000 reported 0.3-0.7 for 100 KB-1 MB with 4-8 nodes)")
    except GridsplitError as e:
        click.echo(f"gridsplit demo: error: {e}", err=True)
        sys.exit(e.exit_code)


if __name__ == "__main__":
    main()
