"""The points of a bench sweep and their physics: the collectives, one run's identity
(Point), where its ranks go, the physical lower bound of one repetition, and the run
order. Shared by the sweep (sweep.py) and the grids it runs on (the lab, grid.py;
real hosts, hosts.py); nothing here runs anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import GridsplitError
from ..tcpbound import GOODPUT
from ..topology import Topology
from .options import ALL_NODES

MODES = ("direct", "split")


@dataclass(frozen=True)
class Op:
    prog: str
    args: tuple[str, ...] = ()
    pair: bool = False  # two ranks only, one per site


OPS = {
    "gather": Op("gather"),
    "scatter": Op("coll", ("-o", "scatter")),
    "bcast": Op("coll", ("-o", "bcast")),
    "alltoall": Op("coll", ("-o", "alltoall")),
    # ring neighbour exchange in rank order (root first, then the senders): a 1-D domain
    # decomposition whose ring crosses each site boundary twice (mpi/README.md)
    "halo": Op("coll", ("-o", "halo")),
    "pingpong": Op("pingpong", pair=True),
}


@dataclass(frozen=True)
class Point:
    """One measured run; `key` identifies it in a result file (for resume)."""

    op: str
    impl: str
    nodes: int
    size: int
    repeat: int
    mode: str
    strategy: str | None
    congestion: str | None
    lan: bool | None = None
    # [gateways] wan_streams: 0 = auto (gateway.wan_streams), else a count.
    streams: int | None = None
    # Which connections the ranks split: "policy" (the topology's split policy) or "all".
    split: str | None = None
    # [gateways] lan_pacing: "auto", "on" or "off" (None: a direct run).
    pacing: str | None = None
    # `bench ab`: the side's label and the gridsplitd it runs (None: this checkout's build).
    ab: str | None = None
    gridsplitd: str | None = None
    # `bench ab`: [gateways] encryption of the side ("noise" or "insecure"; None: the topology's).
    encryption: str | None = None
    # `bench ab`: [gateways] wan_pacing of the side ("full", "shared", "adaptive"; None: the topology's).
    wan_pacing: str | None = None
    # `bench ab`: [gateways] wan_quickack of the side (None: the topology's).
    wan_quickack: bool | None = None
    # `bench ab`: [gateways] lan_rto_min_us of the side (the LAN timers; None: the topology's).
    lan_rto: int | None = None

    @property
    def variant(self) -> dict[str, Any] | None:
        """The gateway settings of a split run, as result rows record them (row_key reads them back)."""
        if self.mode != "split":
            return None
        v = {"strategy": self.strategy, "congestion": self.congestion, "lan_tuning": self.lan,
             "lan_pacing": self.pacing, "wan_streams": self.streams, "split": self.split}
        return ({**v, "ab": self.ab, "gridsplitd": self.gridsplitd, "encryption": self.encryption,
                 "wan_pacing": self.wan_pacing, "wan_quickack": self.wan_quickack,
                 **({"lan_rto_min_us": self.lan_rto} if self.lan_rto is not None else {})} if self.ab else v)

    @property
    def key(self) -> tuple:
        return (self.op, self.impl, self.nodes, self.size, self.repeat, self.mode, self.strategy, self.congestion,
                self.lan, self.streams, self.split, self.ab, self.encryption, self.pacing, self.wan_pacing,
                self.wan_quickack, self.lan_rto)


# -- placement and physics -----------------------------------------------------


def placement(sites: list[str], nodes: list, op: str, n: int, where: str, more: str) -> tuple[Any, list]:
    """The root (first node of the second site) and the `n` senders of the first site,
    or, for n = ALL_NODES, every other node of every site. `nodes` are the grid's nodes
    in order (lab Hosts or real hosts, anything with a `site`); `where` names the grid
    and `more` says how to get more nodes, for the messages.

    The first is Alter and Glück §10.2's layout: senders in bordeaux, the gather root in sophia.
    """
    if len(sites) < 2:
        raise GridsplitError(f"{where} has one site; cross-site benchmarks need two")
    a, b = sites[0], sites[1]
    if n == ALL_NODES and not OPS[op].pair:
        root = next(h for h in nodes if h.site == b)
        return root, [h for h in nodes if h != root]
    senders = [h for h in nodes if h.site == a]
    roots = [h for h in nodes if h.site == b]
    if OPS[op].pair:
        n = 1
    if n > len(senders):
        raise GridsplitError(f"--nodes {n}: site {a} of {where} has {len(senders)} nodes; {more}")
    return roots[0], senders[:n]


def bound_per_rep(topo: Topology, op: str, root, senders: list, size: int) -> float:
    """The physical lower bound of one repetition, in seconds.

    For gather (timed at the root from the start of the barrier, as in seed
    000): the senders cannot leave the barrier before hearing that the root
    entered it (one one-way delay); their data then needs another one-way
    delay plus the time for n·m bytes to cross the narrowest point where their
    flows converge (root NIC, WAN, uplinks, or the senders' NICs together) at
    its payload rate. Protocol round trips (rendezvous, slow start) are not
    physics and are not in it. For pingpong it bounds half a round trip; the
    other collectives get the same form as gather, as a reference line.
    """
    rtt = max(topo.rtt_ms(root.site, s.site) for s in senders) / 1e3
    path = min(topo.bottleneck_mbps(s, root) for s in senders)
    if OPS[op].pair:
        return rtt / 2 + size * 8 / (path * 1e6 * GOODPUT)
    agg = min(path, root.nic_mbps, sum(s.nic_mbps for s in senders)) * 1e6 * GOODPUT
    return rtt + len(senders) * size * 8 / agg


def measured_period(op: str, res: dict[str, Any]) -> float | None:
    """Measured time comparable with reps x bound_per_rep, or None for ops without a sound bound."""
    if op == "gather":
        return res["total_s"]
    if OPS[op].pair:
        return res["median_s"] * res["reps"]
    return None


def effective_reps(requested: int, budget_s: float, bound: float, min_reps: int = 5) -> int:
    """Cap reps so that the point's ideal duration stays within the budget (0: no cap)."""
    if budget_s <= 0 or bound * requested <= budget_s:
        return requested
    return max(min(min_reps, requested), int(budget_s / bound))




def plan(op: str, impls: list[str], nodes: list[int], sizes: list[int], modes: list[str], repeat: int,
         strategies: list[str | None], ccs: list[str | None], lans: tuple[bool | None, ...] = (None,),
         streams: tuple[int | None, ...] = (None,), splits: tuple[str | None, ...] = (None,),
         pacings: tuple[str | None, ...] = (None,)) -> list[Point]:
    """Every point in run order: direct and the first split variant side by side; other variants after."""
    variants = [(s, c, i, k, x, q) for s in strategies for c in ccs for i in lans for k in streams for x in splits
                for q in pacings]
    if OPS[op].pair:
        nodes = [1]
    pts = []
    for k in range(repeat):
        for impl in impls:
            for n in nodes:
                for m in sizes:
                    for mode in modes:
                        v = variants[0] if mode == "split" else (None,) * 6
                        pts.append(Point(op, impl, n, m, k, mode, *v))
        if "split" in modes:
            for v in variants[1:]:
                for impl in impls:
                    for n in nodes:
                        for m in sizes:
                            pts.append(Point(op, impl, n, m, k, "split", *v))
    return pts
