"""The lab as the grid a bench runs on: its placement, physics, MPI launcher and probe,
behind the interface the real-host grid (hosts.py) offers too, so that one run of a
sweep (sweep.run_point) or of an app (app.run_one) is the same code on both.

A grid has: `kind`, `topo`, `sites` and `nodes` (in placement order), `where`
and `more` (for messages), `bound()`, `program()`, `split_env()`, `gateways()`,
`probe()`, `mpirun()`, `prepare()` (before each point: the lab restarts its
gateways for another variant) and `meta()` (what the result file's meta row records).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console

from .. import sysdeps
from ..errors import GridsplitError
from ..lab import realize
from ..lab.gateways import gateway_binary
from ..lab.mpi import RANK_ENV, mpirun, split_env
from ..lab.names import LabNames
from ..lab.sh import list_netns
from ..topology import Host
from ..topology_file import load_topology
from .measure import Probe, tracers
from .points import Point, bound_per_rep


class LabGrid:
    kind = "lab"
    rank_env = RANK_ENV  # what every rank gets before --rank-env (lab.mpi.RANK_ENV: yield when idle)

    def __init__(self, state: realize.LabState, names: LabNames, trace, sirq):
        self.state, self.names, self.trace, self.sirq = state, names, trace, sirq
        self.topo = state.topo
        self.sites = [s.name for s in self.topo.sites]
        self.nodes = list(self.topo.nodes())
        self.where = f"the lab ({self.topo.name})"
        self.more = "bring the lab up with more `--nodes` or lower --nodes"
        g = self.topo.gateways
        self.built = sysdeps.built("gridsplitd")
        self.variant = (g.strategy, g.congestion, g.lan_tuning, g.wan_streams, gateway_binary(state.data),
                        g.encryption, g.lan_pacing, g.wan_pacing, g.wan_quickack, g.lan_rto_min_us)

    def bound(self, op: str, root: Host, senders: list[Host], size: int) -> float:
        return bound_per_rep(self.topo, op, root, senders, size)

    def program(self, impl: str, prog: str) -> str:
        return sysdeps.mpi_program(impl, prog)

    def split_env(self, split: str = "policy", root: Host | None = None) -> dict[str, str]:
        return split_env(self.state, split, root)

    def gateways(self, sites: set[str]) -> list[Host]:
        return [h for h in self.topo.hosts() if h.role == "gateway" and h.site in sites]

    def probe(self, watched: dict[str, Host], mode: str) -> Probe:
        # Gateways carry traffic in split mode only; their softirq is traced then.
        return Probe(self.state, watched, self.trace, self.sirq if mode == "split" else None, mode == "split")

    def mpirun(self, impl: str, hosts: list[Host], prog: list[str], env: dict[str, str], timeout: float,
               on_result: Callable[[], None] | None, expect_lines: int = 0, n: int | None = None,
               wdir: str | None = None) -> subprocess.CompletedProcess:
        """One job, rank i on hosts[i % len(hosts)] (n ranks, default one per host); the lab's
        ranks start in this process's directory (app_dir), so `wdir` is not needed here."""
        return mpirun(self.state, impl, n or len(hosts), hosts, prog, env=env, capture=True, timeout=timeout,
                      keep_partial=True, expect_lines=expect_lines, on_result=on_result)

    @contextmanager
    def app_dir(self, work: Path, hosts: list[Host], in_work: bool, wrapper: Path) -> Iterator[tuple[None, list[str]]]:
        """Where an app's ranks run (`work` when `in_work`, else here) and the rank wrapper's command
        prefix, writing each rank's CPU into work/.rankcpu (one filesystem: nothing to copy)."""
        old = os.getcwd()
        os.chdir(work if in_work else old)
        try:
            yield None, [sys.executable, str(wrapper), str(work / ".rankcpu")]
        finally:
            os.chdir(old)

    def prepare(self, p: Point, say: Callable[[str], None]) -> None:
        """Restart the gateways when a split point wants other settings than they run with."""
        want = (p.strategy, p.congestion, p.lan, p.streams, p.gridsplitd or self.built,
                p.encryption or self.topo.gateways.encryption, p.pacing or self.topo.gateways.lan_pacing,
                p.wan_pacing or self.topo.gateways.wan_pacing,
                self.topo.gateways.wan_quickack if p.wan_quickack is None else p.wan_quickack,
                self.topo.gateways.lan_rto_min_us if p.lan_rto is None else p.lan_rto)
        if p.mode != "split" or want == self.variant:
            return
        say(f"[dim]·[/dim] restarting gateways: strategy {p.strategy}, WAN congestion control {p.congestion}, "
            f"LAN tuning {'on' if p.lan else 'off'}, LAN pacing {want[6]}, WAN streams {p.streams or 'auto'}"
            f"{'' if want[4] == self.built else ', gridsplitd ' + want[4]}, WAN encryption {want[5]}, WAN pacing {want[7]}"
            f"{', WAN quick ACKs' if want[8] else ''}{f', LAN minimum RTO {want[9]} µs' if want[9] else ''}")
        self.state = realize.restart_gateways(self.state, gridsplitd=p.gridsplitd, strategy=p.strategy,
                                              congestion=p.congestion, lan_tuning=p.lan, wan_streams=p.streams,
                                              encryption=want[5], lan_pacing=want[6], wan_pacing=want[7],
                                              wan_quickack=want[8], lan_rto_min_us=want[9])
        self.variant = want

    def meta(self) -> dict[str, Any]:
        st = self.state
        return {"topology": self.topo.to_dict(),
                "lab": {"prefix": st.data.get("prefix"), "nodes": st.data.get("nodes"), **st.emulation},
                "other_labs": sorted({ns.split("-")[0] for ns in list_netns() if not self.names.owns_ns(ns)})}


@contextmanager
def lab_grid(topology: str, scale: float | None, nodes: int | None, modes: set[str],
             con: Console) -> Iterator[LabGrid]:
    """The lab brought up (or reused) for `topology` with `nodes` nodes (None: its own counts),
    with the retransmission trace (and in split mode the gateways' softirq clock) running."""
    names = LabNames.from_env()
    state = ensure_lab(names, topology, nodes, scale, con)
    if "split" in modes and not state.data.get("gateways"):
        raise GridsplitError("split mode needs gateways, and this lab has none running")
    with tracers(names, "split" in modes, con) as (trace, sirq):
        yield LabGrid(state, names, trace, sirq)


def ensure_lab(names: LabNames, topology: str, nodes: int | None, scale: float | None,
               con: Console) -> realize.LabState:
    """Reuse the running lab if it is this topology with enough nodes (None: the
    topology's own counts), else rebuild it."""
    # With the count asked for (0: every node), so that one the topology cannot take is refused
    # here, before a running lab is taken down.
    asked = nodes
    want = load_topology(topology, asked or None, scale)
    if nodes is None:
        nodes = want.sites[0].nodes
    try:
        state = realize.load_state(names)
    except GridsplitError:
        state = None
    if state is not None:
        a = state.topo.sites[0]
        # A lab brought up with `--scale auto` keeps the scale this machine could hold.
        same_scale = state.topo.scale == want.scale or (scale is None and state.data.get("scale_auto"))
        if (state.data.get("topology_spec") == topology and a.nodes >= nodes and same_scale
                and state.data.get("gateways")):
            con.print(f"[dim]·[/dim] reusing the running lab {state.topo.name!r} ({a.nodes} nodes on {a.name})")
            return state
        con.print(f"[dim]·[/dim] the running lab ({state.topo.name}, {a.nodes} nodes) does not fit; rebuilding it")
        realize.down(names)
    con.print(f"[dim]·[/dim] bringing up lab {topology!r} with {nodes} nodes")
    return realize.up(topology, asked, names, progress=lambda m: con.print(f"[dim]  ·[/dim] {m}"), scale=scale)
