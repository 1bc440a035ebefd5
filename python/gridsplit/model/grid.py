"""The two-level grid model: pLogP with LAN parameters inside a site, WAN or split parameters across.

The layout is the one of the MPI5000 evaluation (Alter and Glück §10.2) and of
`gridsplit bench gather`: rank 0 (the root) alone on one site, ranks 1..n on
another. Every message between the sites crosses the WAN either directly
(`wan` parameters) or through the two gateways (`split` parameters, measured
with libgridsplit.so preloaded, so they include both relays); messages inside
the remote site use `lan` parameters. Each formula is the Barchet-Estefanel and Mounié one
(Tables 1-3) with the parameters of the hop it describes:

* flat broadcast (Table 1 l.1): every message crosses, n g_X(m) + L_X;
* flat gather (Table 2 l.1) with its n senders on other hosts: L_X + g_X(m) +
  (n-1) w_X(m). The root's gap between messages from *different* senders is the
  wire's, w_X(m) = min(g_X(m), m / B_X) with B_X the stream bandwidth: g_X(m)
  of a rendezvous-size message holds a handshake round trip, which one sender's
  back-to-back sends pay one after the other but n senders pay at the same time
  (on a LAN that round trip is microseconds and the seed's (P-1) g(m) + L is
  the same number; across a 10 ms WAN it is a whole round trip per sender);
* chain broadcast (Table 1 l.4) per hop: (g_X(m) + L_X) + (n-1)(g_lan(m) + L_lan);
* segmented chain (Table 1 l.6) per hop: sum over hops of (g_h(s) + L_h), plus
  (k-1) times the slowest hop's g_h(s), which sets the pipeline's pace;
* all-to-all (Table 3): the bounds of the busiest rank, each rank's (P-1)
  terms taken with the parameters of the path to each peer, and gamma fitted
  on the two-site measurements;
* two-level (hierarchical) gather and broadcast, the MagPIe scheme the seed's
  introduction discusses: one WAN message carrying the site's data
  (g_X(n m) + L_X) plus the best single-site algorithm among the n remote
  ranks. Not a pattern the MPI5000 gather runs: offered by `advise` as the
  algorithm to use when it wins.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .collectives import best_segment, segments, select
from .plogp import ParamSet, PLogP

GRID_ALGOS = ("gather_flat", "bcast_flat", "bcast_chain", "bcast_seg_chain", "alltoall_rotated")


def _hops(lan: PLogP, x: PLogP, n: int) -> list[PLogP]:
    return [x] + [lan] * (n - 1)


def wire_gap(x: PLogP, m: int) -> float:
    """The gap at a receiver between m-byte messages of different senders: the
    stream bandwidth's, never more than the one-sender gap g_X(m). Parameters whose
    last two gaps are equal give no bandwidth; the one-sender gap is used then."""
    bw = x.bandwidth_Bps()
    return x.g(m) if not math.isfinite(bw) else min(x.g(m), m / bw)


def gather_parts(x: PLogP, n: int, m: int) -> tuple[float, float]:
    """(A, B) of the flat gather T = A + B: the first message whole, then the
    other n-1 at the wire's gap (the module's docstring says why)."""
    return x.L + x.g(m), (n - 1) * wire_gap(x, m)


def gather_flat(lan: PLogP, x: PLogP, n: int, m: int) -> float:
    return sum(gather_parts(x, n, m))


def fit_kappa(points: list[tuple[float, float, float]]) -> float:
    """kappa minimising the squared relative error of A + kappa * B against measured T.

    `points` are (A, B, T) with B the (n-1) later senders' part of the flat
    gather (gather_parts): convergence is what a lone sender never meets.
    This is Clement and Steed's congestion factor (T = l + b gamma / W), which
    Barchet-Estefanel and Mounié §5 cites: n senders converging on one root port lose packets that
    pLogP, measured one pair at a time, never sees (the MPI5000 phenomenon).
    """
    num = sum(b * (t - lat) / (t * t) for lat, b, t in points if t > 0)
    den = sum(b * b / (t * t) for lat, b, t in points if t > 0)
    return num / den if den > 0 else 1.0


def gather_congested(lan: PLogP, x: PLogP, n: int, m: int, kappa: float) -> float:
    a, b = gather_parts(x, n, m)
    return a + kappa * b


def bench_gather(lan: PLogP, x: PLogP, n: int, m: int, kappa: float = 1.0) -> float:
    """One iteration of `gridsplit bench gather` (mpi/gather.c) as the root times it:
    a barrier, then the flat gather.

    The root's clock starts before the barrier (Alter and Glück's listing). Whatever the
    barrier's algorithm, no sender leaves it before a message from the root's
    site has reached it, one cross-site latency after the root entered, and its
    data takes another to come back: x.L + gather_congested(). The barrier's
    own gaps and LAN rounds are left out, as small next to a WAN latency.
    """
    return x.L + gather_congested(lan, x, n, m, kappa)


def bcast_flat(lan: PLogP, x: PLogP, n: int, m: int) -> float:
    return n * x.g(m) + x.L


def bcast_chain(lan: PLogP, x: PLogP, n: int, m: int) -> float:
    return sum(h.g(m) + h.L for h in _hops(lan, x, n))


def bcast_seg_chain_s(lan: PLogP, x: PLogP, n: int, m: int, s: int) -> float:
    hops = _hops(lan, x, n)
    return sum(h.g(s) + h.L for h in hops) + (segments(m, s) - 1) * max(h.g(s) for h in hops)


def bcast_seg_chain(lan: PLogP, x: PLogP, n: int, m: int, min_seg: int = 1) -> tuple[float, int]:
    s, t = best_segment(lambda _p, _P, mm, ss: bcast_seg_chain_s(lan, x, n, mm, ss), lan, n + 1, m, min_seg)
    return t, s


def alltoall_bounds(lan: PLogP, x: PLogP, n: int, m: int) -> tuple[float, float]:
    """(lower, upper) of Table 3 for the busiest rank of the two-site layout."""
    if n < 1:
        return 0.0, 0.0
    root_lo = n * x.g(m) + x.L
    root_up = n * (x.os(m) + x.or_at(m)) + x.L
    far_lo = (n - 1) * lan.g(m) + x.g(m) + x.L
    far_up = (n - 1) * (lan.os(m) + lan.or_at(m)) + x.os(m) + x.or_at(m) + x.L
    lo, up = max(root_lo, far_lo), max(root_up, far_up)
    return min(lo, up), max(lo, up)  # ordered, as collectives.alltoall_bounds


def alltoall(lan: PLogP, x: PLogP, n: int, m: int, gamma: float) -> float:
    lo, up = alltoall_bounds(lan, x, n, m)
    return lo + gamma * (up - lo)


@dataclass(frozen=True)
class GridPrediction:
    algo: str
    seconds: float
    segment: int | None = None
    detail: str = ""


def predict(algo: str, lan: PLogP, x: PLogP, n: int, m: int, gamma: float | None = None,
            segment: int | None = None, min_seg: int = 1) -> GridPrediction:
    if algo == "gather_flat":
        return GridPrediction(algo, gather_flat(lan, x, n, m))
    if algo == "bcast_flat":
        return GridPrediction(algo, bcast_flat(lan, x, n, m))
    if algo == "bcast_chain":
        return GridPrediction(algo, bcast_chain(lan, x, n, m))
    if algo == "bcast_seg_chain":
        if segment is not None:
            return GridPrediction(algo, bcast_seg_chain_s(lan, x, n, m, segment), segment)
        t, s = bcast_seg_chain(lan, x, n, m, min_seg)
        return GridPrediction(algo, t, s)
    if algo in ("alltoall_rotated", "alltoall_direct"):
        return GridPrediction(algo, alltoall(lan, x, n, m, gamma if gamma is not None else 0.0))
    if algo == "gather_two_level":
        local = select("gather", lan, n, m)[0] if n > 1 else None
        t = (local.seconds if local else 0.0) + x.g(n * m) + x.L
        return GridPrediction(algo, t, None, f"{local.algo} inside the site, then one {n * m}-byte message" if local else "one message")
    if algo == "bcast_two_level":
        local = select("bcast", lan, n, m, min_seg=min_seg)[0] if n > 1 else None
        t = x.g(m) + x.L + (local.seconds if local else 0.0)
        return GridPrediction(algo, t, local.segment if local else None,
                              f"one message across, then {local.algo} inside the site" if local else "one message")
    raise ValueError(f"no grid model for {algo}")


def paths(ps: ParamSet, mode: str) -> tuple[PLogP, PLogP]:
    """(lan, cross-site) parameters for mode 'direct' or 'split'."""
    return ps.path("lan"), ps.path("wan" if mode == "direct" else "split")
