"""The collective-communication models of Barchet-Estefanel and Mounié (Tables 1-3), segment search and selection.

Pure functions of pLogP parameters (plogp.PLogP), the number of processes P,
the message size m (bytes per rank, as in the seed) and, for segmented
algorithms, the segment size s (k = ceil(m / s) segments). Each formula cites
its table and line; names match the algorithms of mpi/collalgo.c, which runs
exactly these communication patterns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from ..errors import GridsplitError
from .plogp import PLogP

OPS = ("bcast", "scatter", "gather", "alltoall")


def floor_log2(P: int) -> int:
    return P.bit_length() - 1 if P >= 1 else 0


def ceil_log2(P: int) -> int:
    return (P - 1).bit_length() if P >= 1 else 0


def segments(m: int, s: int) -> int:
    """k of the seed: the number of segments of size s in a message of m bytes."""
    if s <= 0:
        raise ValueError("segment size must be positive")
    return max(1, -(-m // s))


# --------------------------------------------------------------------------
# Broadcast, Barchet-Estefanel and Mounié Table 1 (in the order of the table's lines)
# --------------------------------------------------------------------------

def bcast_flat(p: PLogP, P: int, m: int, s: int | None = None) -> float:
    # Table 1 line 1, "Arbre Plat": (P-1) g(m) + L
    return (P - 1) * p.g(m) + p.L if P > 1 else 0.0


def bcast_flat_rdv(p: PLogP, P: int, m: int, s: int | None = None) -> float:
    # Table 1 line 2, "Arbre Plat Rendez-vous": (P-1) g(m) + 2 g(1) + 3 L
    return (P - 1) * p.g(m) + 2 * p.g(1) + 3 * p.L if P > 1 else 0.0


def bcast_seg_flat(p: PLogP, P: int, m: int, s: int) -> float:
    # Table 1 line 3, "Arbre Plat Segmenté": (P-1) (g(s) k) + L
    return (P - 1) * (p.g(s) * segments(m, s)) + p.L if P > 1 else 0.0


def bcast_chain(p: PLogP, P: int, m: int, s: int | None = None) -> float:
    # Table 1 line 4, "Chaîne": (P-1) (g(m) + L)
    return (P - 1) * (p.g(m) + p.L)


def bcast_chain_rdv(p: PLogP, P: int, m: int, s: int | None = None) -> float:
    # Table 1 line 5, "Chaîne Rendez-vous": (P-1) (g(m) + 2 g(1) + 3 L)
    return (P - 1) * (p.g(m) + 2 * p.g(1) + 3 * p.L)


def bcast_seg_chain(p: PLogP, P: int, m: int, s: int) -> float:
    # Table 1 line 6, "Chaîne Segmentée (Pipeline)": (P-1) (g(s) + L) + g(s) (k-1)
    return (P - 1) * (p.g(s) + p.L) + p.g(s) * (segments(m, s) - 1) if P > 1 else 0.0


def bcast_binary(p: PLogP, P: int, m: int, s: int | None = None) -> float:
    # Table 1 line 7, "Arbre Binaire": <= ceil(log2 P) (2 g(m) + L) (the seed's bound, used as the estimate)
    return ceil_log2(P) * (2 * p.g(m) + p.L)


def bcast_binomial(p: PLogP, P: int, m: int, s: int | None = None) -> float:
    # Table 1 line 8, "Arbre Binomial": floor(log2 P) g(m) + ceil(log2 P) L
    return floor_log2(P) * p.g(m) + ceil_log2(P) * p.L


def bcast_binomial_rdv(p: PLogP, P: int, m: int, s: int | None = None) -> float:
    # Table 1 line 9, "Arbre Binomial Rendez-vous": floor(log2 P) g(m) + ceil(log2 P) (2 g(1) + 3 L)
    return floor_log2(P) * p.g(m) + ceil_log2(P) * (2 * p.g(1) + 3 * p.L)


def bcast_seg_binomial(p: PLogP, P: int, m: int, s: int) -> float:
    # Table 1 line 10, "Arbre Binomial Segmenté": floor(log2 P) g(s) k + ceil(log2 P) L
    return floor_log2(P) * p.g(s) * segments(m, s) + ceil_log2(P) * p.L


# --------------------------------------------------------------------------
# Scatter and gather, Barchet-Estefanel and Mounié Table 2 (gather is the scatter's mirror, §4)
# --------------------------------------------------------------------------

def scatter_flat(p: PLogP, P: int, m: int, s: int | None = None) -> float:
    # Table 2 line 1, "Arbre Plat": (P-1) g(m) + L
    return (P - 1) * p.g(m) + p.L if P > 1 else 0.0


def scatter_chain(p: PLogP, P: int, m: int, s: int | None = None) -> float:
    # Table 2 line 2, "Chaîne": sum_{j=1}^{P-1} g(j m) + (P-1) L
    return sum(p.g(j * m) for j in range(1, P)) + (P - 1) * p.L


def scatter_binomial(p: PLogP, P: int, m: int, s: int | None = None) -> float:
    # Table 2 line 3, "Arbre Binomial": sum_{j=0}^{ceil(log2 P)-1} g(2^j m) + ceil(log2 P) L
    h = ceil_log2(P)
    return sum(p.g((2 ** j) * m) for j in range(h)) + h * p.L


gather_flat, gather_chain, gather_binomial = scatter_flat, scatter_chain, scatter_binomial


# --------------------------------------------------------------------------
# All-to-all, Barchet-Estefanel and Mounié Table 3 and the gamma interpolation of §5.1
# --------------------------------------------------------------------------

def alltoall_upper(p: PLogP, P: int, m: int) -> float:
    # Table 3 line 1, "Limite Supérieure": (P-1) os(m) + (P-1) or(m) + L
    return (P - 1) * p.os(m) + (P - 1) * p.or_at(m) + p.L if P > 1 else 0.0


def alltoall_lower(p: PLogP, P: int, m: int) -> float:
    # Table 3 line 2, "Limite Inférieure": (P-1) g(m) + L
    return (P - 1) * p.g(m) + p.L if P > 1 else 0.0


def alltoall_bounds(p: PLogP, P: int, m: int) -> tuple[float, float]:
    """Table 3's bounds, ordered. Over TCP an eager send returns once the kernel has the
    bytes, so os(m) + or(m) can be below g(m) and the "upper" formula below the "lower"
    one; the interpolation is kept between the smaller and the larger of the two."""
    a, b = alltoall_lower(p, P, m), alltoall_upper(p, P, m)
    return min(a, b), max(a, b)


def alltoall(p: PLogP, P: int, m: int, gamma: float) -> float:
    # §5.1: T = LimInférieure + (LimSupérieure - LimInférieure) x gamma
    lo, up = alltoall_bounds(p, P, m)
    return lo + (up - lo) * gamma


def fit_gamma(points: list[tuple[float, float, float]]) -> float:
    """gamma minimising the squared relative error of lo + gamma (up - lo) against measured T.

    `points` are (lower, upper, measured). Relative error, so that the many
    small-message points and the few large ones weigh alike (Barchet-Estefanel and Mounié §5.1 fits
    it by eye on one figure; a least-squares fit is the reproducible version).
    """
    num = den = 0.0
    for lo, up, t in points:
        if t <= 0:
            continue
        d = (up - lo) / t
        num += d * (t - lo) / t
        den += d * d
    if den == 0:
        raise GridsplitError("cannot fit gamma: the all-to-all bounds coincide on every measured point")
    return num / den


# --------------------------------------------------------------------------
# Registry, segment search, selection
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class Algorithm:
    name: str
    op: str
    cite: str
    fn: Callable[..., float]
    segmented: bool = False


def _reg(*algos: Algorithm) -> dict[str, Algorithm]:
    return {a.name: a for a in algos}


ALGORITHMS: dict[str, Algorithm] = _reg(
    Algorithm("bcast_flat", "bcast", "Table 1 l.1", bcast_flat),
    Algorithm("bcast_flat_rdv", "bcast", "Table 1 l.2", bcast_flat_rdv),
    Algorithm("bcast_seg_flat", "bcast", "Table 1 l.3", bcast_seg_flat, True),
    Algorithm("bcast_chain", "bcast", "Table 1 l.4", bcast_chain),
    Algorithm("bcast_chain_rdv", "bcast", "Table 1 l.5", bcast_chain_rdv),
    Algorithm("bcast_seg_chain", "bcast", "Table 1 l.6", bcast_seg_chain, True),
    Algorithm("bcast_binary", "bcast", "Table 1 l.7", bcast_binary),
    Algorithm("bcast_binomial", "bcast", "Table 1 l.8", bcast_binomial),
    Algorithm("bcast_binomial_rdv", "bcast", "Table 1 l.9", bcast_binomial_rdv),
    Algorithm("bcast_seg_binomial", "bcast", "Table 1 l.10", bcast_seg_binomial, True),
    Algorithm("scatter_flat", "scatter", "Table 2 l.1", scatter_flat),
    Algorithm("scatter_chain", "scatter", "Table 2 l.2", scatter_chain),
    Algorithm("scatter_binomial", "scatter", "Table 2 l.3", scatter_binomial),
    Algorithm("gather_flat", "gather", "Table 2 l.1 (mirror)", gather_flat),
    Algorithm("gather_chain", "gather", "Table 2 l.2 (mirror)", gather_chain),
    Algorithm("gather_binomial", "gather", "Table 2 l.3 (mirror)", gather_binomial),
)
ALLTOALL_ALGOS = ("alltoall_direct", "alltoall_rotated")


def algorithms_of(op: str) -> list[str]:
    if op == "alltoall":
        return list(ALLTOALL_ALGOS)
    if op not in OPS:
        raise GridsplitError(f"unknown operation {op!r}; choose one of {', '.join(OPS)}")
    return [a for a, v in ALGORITHMS.items() if v.op == op]


def best_segment(fn: Callable[..., float], p: PLogP, P: int, m: int, min_seg: int = 1) -> tuple[int, float]:
    """Barchet-Estefanel and Mounié §3: the best s among m/2^i, i in [0, log2 m], then local hill climbing.

    The climb starts from the best power-of-two fraction with a step of half
    that segment, moves while a neighbour is better and halves the step when
    none is (Kielmann et al.'s heuristic, as the seed suggests).
    """
    if m <= 1:
        return max(m, 1), fn(p, P, m, max(m, 1))
    lo = max(1, min(min_seg, m))
    cands = sorted({max(lo, m >> i) for i in range(m.bit_length())})
    best_s = min(cands, key=lambda s: (fn(p, P, m, s), -s))
    best_t = fn(p, P, m, best_s)
    step = max(best_s // 2, 1)
    while step >= 1:
        moved = False
        for s in (best_s + step, best_s - step):
            if lo <= s <= m:
                t = fn(p, P, m, s)
                if t < best_t - 1e-15:
                    best_s, best_t, moved = s, t, True
                    break
        if not moved:
            step //= 2
    return best_s, best_t


@dataclass(frozen=True)
class Prediction:
    algo: str
    seconds: float
    segment: int | None = None


def predict(algo: str, p: PLogP, P: int, m: int, segment: int | None = None, gamma: float | None = None,
            min_seg: int = 1) -> Prediction:
    """The model's time for one algorithm; segmented ones get the searched segment unless given."""
    if P < 1:
        raise GridsplitError(f"P={P}: need at least one process")
    if algo in ALLTOALL_ALGOS:
        if gamma is None:
            raise GridsplitError("all-to-all needs gamma (fitted by `gridsplit model validate`)")
        return Prediction(algo, alltoall(p, P, m, gamma))
    a = ALGORITHMS.get(algo)
    if a is None:
        raise GridsplitError(f"unknown algorithm {algo!r}; known: {', '.join([*ALGORITHMS, *ALLTOALL_ALGOS])}")
    if a.segmented:
        if segment is None:
            s, t = best_segment(a.fn, p, P, m, min_seg)
            return Prediction(algo, t, s)
        return Prediction(algo, a.fn(p, P, m, segment), segment)
    return Prediction(algo, a.fn(p, P, m))


def select(op: str, p: PLogP, P: int, m: int, algos: list[str] | None = None, gamma: float | None = None,
           min_seg: int = 1) -> list[Prediction]:
    """Every algorithm of `op`, fastest predicted first: the selector of Barchet-Estefanel and Mounié §4.1 / Fig. 7."""
    names = algos or algorithms_of(op)
    return sorted((predict(a, p, P, m, gamma=gamma, min_seg=min_seg) for a in names), key=lambda x: x.seconds)


def op_of(algo: str) -> str:
    return algo.split("_", 1)[0]


def rel_error(pred: float, meas: float) -> float:
    """|predicted - measured| / measured."""
    return abs(pred - meas) / meas if meas > 0 else math.inf
