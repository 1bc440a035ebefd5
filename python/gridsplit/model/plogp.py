"""pLogP parameters of one network path: L, and os(m), or(m), g(m) as functions of m.

A measurement (mpi/plogp.c) gives medians at a set of sizes. The models need
the parameters at any size (segments, and the (P-1) m or 2^j m bundles of
scatter and gather), so they are interpolated linearly in m between measured
sizes and extrapolated past the largest with the slope of the last two points
(the stream bandwidth), as Kielmann et al. do. The measured medians are first
made non-decreasing in m (pool-adjacent-violators): sending more bytes never
costs less, and a VM stall at one small size would otherwise bend every
prediction that touches it.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import GridsplitError

QUANTITIES = ("os", "or", "g")
KIND = "gridsplit-plogp"  # the "kind" of a parameter file


def read_kind(path: Path | str, kinds: tuple[str, ...], what: str, hint: str) -> dict[str, Any]:
    """One of the model's JSON files, whose "kind" is one of `kinds`; else one line saying what is wrong."""
    p = Path(path)
    try:
        d = json.loads(p.read_text())
    except OSError as e:
        raise GridsplitError(f"{p}: cannot read {what} ({e.strerror}); {hint}") from None
    except ValueError as e:
        raise GridsplitError(f"{p}: not JSON ({e}); {hint}") from None
    if not isinstance(d, dict) or d.get("kind") not in kinds:
        raise GridsplitError(f"{p}: not {what} (no \"kind\": {' or '.join(map(repr, kinds))}); {hint}")
    return d


def monotone(values: list[float]) -> list[float]:
    """Least-squares non-decreasing fit (pool adjacent violators)."""
    blocks: list[list[float]] = []  # [sum, count]
    for v in values:
        blocks.append([v, 1])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, c = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += c
    out: list[float] = []
    for s, c in blocks:
        out += [s / c] * int(c)
    return out


@dataclass
class PLogP:
    """The parameters of one path (a pair of hosts, direct or through gateways)."""

    name: str
    L: float
    sizes: list[int]
    os_: list[float]
    or_: list[float]
    g_: list[float]
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.sizes or len({len(self.sizes), len(self.os_), len(self.or_), len(self.g_)}) != 1:
            raise GridsplitError(f"pLogP parameters {self.name!r}: sizes and values do not line up")
        if sorted(self.sizes) != self.sizes or len(set(self.sizes)) != len(self.sizes):
            raise GridsplitError(f"pLogP parameters {self.name!r}: sizes must be distinct and increasing")
        self.os_ = monotone([max(v, 0.0) for v in self.os_])
        self.or_ = monotone([max(v, 0.0) for v in self.or_])
        self.g_ = monotone([max(v, 0.0) for v in self.g_])

    # -- evaluation ------------------------------------------------------
    def _at(self, ys: list[float], m: float) -> float:
        xs = self.sizes
        if m < 0:
            raise ValueError(f"negative message size {m}")
        if len(xs) == 1:
            return ys[0]
        i = bisect.bisect_right(xs, m)
        if i == 0:
            return ys[0]
        if i >= len(xs):
            a, b = len(xs) - 2, len(xs) - 1  # extrapolate with the last slope
        else:
            a, b = i - 1, i
        f = (m - xs[a]) / (xs[b] - xs[a])
        return max(ys[a] + f * (ys[b] - ys[a]), 0.0)

    def g(self, m: float) -> float:
        return self._at(self.g_, m)

    def os(self, m: float) -> float:
        return self._at(self.os_, m)

    def or_at(self, m: float) -> float:
        return self._at(self.or_, m)

    @property
    def max_size(self) -> int:
        return self.sizes[-1]

    def bandwidth_Bps(self) -> float:
        """Asymptotic stream bandwidth (bytes/s) from the last two gaps."""
        if len(self.sizes) < 2 or self.g_[-1] <= self.g_[-2]:
            return float("inf")
        return (self.sizes[-1] - self.sizes[-2]) / (self.g_[-1] - self.g_[-2])

    # -- (de)serialisation ------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "L_s": self.L, "sizes": self.sizes, "os_s": self.os_, "or_s": self.or_,
                "g_s": self.g_, "meta": self.meta}

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "parameters") -> "PLogP":
        try:
            return cls(d.get("name", "?"), float(d["L_s"]), [int(x) for x in d["sizes"]],
                       [float(x) for x in d["os_s"]], [float(x) for x in d["or_s"]],
                       [float(x) for x in d["g_s"]], dict(d.get("meta", {})))
        except (KeyError, TypeError, ValueError) as e:
            raise GridsplitError(f"{where}: not a pLogP parameter set ({e}); produce one with `gridsplit model measure`") from None

    @classmethod
    def from_plogp_lines(cls, name: str, lines: list[dict[str, Any]], meta: dict[str, Any] | None = None) -> "PLogP":
        """From the JSON lines printed by mpi/plogp.c (one per size, then plogp_L)."""
        pts = sorted((d for d in lines if d.get("op") == "plogp"), key=lambda d: d["size_bytes"])
        summary = [d for d in lines if d.get("op") == "plogp_L"]
        if not pts or not summary:
            raise GridsplitError(f"pLogP run {name!r} printed no results (is build/mpi/*/plogp up to date? `make -C mpi all`)")
        return cls(name, float(summary[-1]["L_s"]), [d["size_bytes"] for d in pts],
                   [d["os_s"]["median"] for d in pts], [d["or_s"]["median"] for d in pts],
                   [d["g_s"]["median"] for d in pts],
                   {**(meta or {}), "hosts": summary[-1]["hosts"], "rtt0_s": summary[-1]["rtt0_s"],
                    "points": pts})


@dataclass
class ParamSet:
    """The pLogP parameters of every path kind measured on one grid (lan, wan, split)."""

    paths: dict[str, PLogP]
    meta: dict[str, Any]

    def path(self, name: str) -> PLogP:
        if name not in self.paths:
            have = ", ".join(self.paths) or "none"
            raise GridsplitError(f"no {name!r} parameters in this set (have: {have}); measure them with `gridsplit model measure --pairs {name}`")
        return self.paths[name]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": KIND, "version": 1, "meta": self.meta,
                "paths": {k: v.to_dict() for k, v in self.paths.items()}}

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=1) + "\n")

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str) -> "ParamSet":
        return cls({k: PLogP.from_dict(v, f"{where}: paths.{k}") for k, v in d.get("paths", {}).items()}, d.get("meta", {}))

    @classmethod
    def load(cls, path: Path | str) -> "ParamSet":
        d = read_kind(path, (KIND,), "a pLogP parameter file", "give a file written by `gridsplit model measure`")
        return cls.from_dict(d, str(path))
