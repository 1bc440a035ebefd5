"""Split or direct per site pair, for `gridsplit model advise` and the gateways' default policy.

Every answer comes from splitmodel.py, with the error band its validation measured
(splitvalidate.py; the summary shipped as data/split-validation.json), and a line
for every grid parameter outside what that validation covered.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import GridsplitError
from ..topology import Topology
from . import splitmodel as sm
from .splitmodel import grid_facts
from .splitterms import TOLERANCE

ADVICE_KIND = "gridsplit-model-advice"
# Version of `model advise --json` (docs/model.md §5.4): 2 added `pairs`, `split_model` and
# `validation_split`; bump it when a key changes meaning or goes away.
# 3: `range` is the prediction times and divided by the band's `factor` (was: plus and minus `p90`).
ADVICE_VERSION = 3
SHIPPED = "split-validation.json"
SUMMARY_KIND = "gridsplit-split-validation-summary"
# 2 added p90_log_error (overall and per op): advise's ranges are multiplicative when it is there.
SUMMARY_VERSION = 2
# The default policy (split_policy) weighs the topology's `[gateways] policy_ops` at its
# `policy_sizes` (GatewaySettings.policy_jobs): a pair is split only where the model predicts a
# gain for one of them and no loss beyond TOLERANCE for any. Unset, the job is unknown: gather,
# all-to-all and halo (for applications such as LAMMPS) at 10 KB, 100 KB and 1 MB; 100 KB is
# where split's gains on incast and slow start are largest (results/bench/2026-11-23-paper-gather-v8.md), which 10 KB
# and 1 MB alone miss once a fast gateway's port costs the 1 MB gather (docs/model.md §5.6).
# How to measure what a grid parameter out of the validated range leaves unknown.
MEASURE = {"rtt_ms": "`gridsplit netcheck` measures the RTTs", "loss": "`gridsplit netcheck` measures the loss (retransmissions)",
           "nic_mbps": "`gridsplit netcheck` measures what a node reaches",
           "gateway_nic_mbps": "`gridsplit netcheck` measures the gateways' paths",
           "switch_buffer_bytes": "`gridsplit bench gather --modes direct,split` measures its incast",
           "wan_over_nic": "`gridsplit netcheck` measures the WAN's rate against the nodes'",
           "nodes": "`gridsplit bench gather --nodes N` measures that many senders",
           "sites": "`gridsplit bench alltoall -n all` on the grid measures it",
           "size": "`gridsplit model measure --max-size` and `gridsplit bench --sizes` measure it",
           "senders": "`gridsplit bench gather --nodes N` measures it"}


def _merge(facts: list[dict[str, list[float]]]) -> dict[str, list[float]]:
    return {k: [min(f[k][0] for f in facts), max(f[k][1] for f in facts)] for k in facts[0]} if facts else {}


def bands(result: dict[str, Any]) -> dict[str, Any]:
    """What `model advise` quotes per op: the validation's median and 90th-percentile error of
    split/direct, and what it was validated on (the ranges `advise` flags outside of)."""
    # Cells run direct on both sides (kept direct by the policy) say nothing of a predicted ratio.
    cells = [c for c in result["cells"] if not c.get("kept_direct")]
    return {"kind": SUMMARY_KIND, "version": SUMMARY_VERSION, "date": result["meta"]["date"],
            "overall": {k: result.get("split_runs", result["overall"])[k]
                        for k in ("cells", "decision_accuracy", "median_abs_error", "p90_abs_error", "p90_log_error")},
            "by_op": {op: {"cells": s["cells"], "median_abs_error": s["median_abs_error"], "p90_abs_error": s["p90_abs_error"],
                           "p90_log_error": s["p90_log_error"], "decision_accuracy": s["decision_accuracy"]}
                      for op, s in result.get("by_op_split", result["by_op"]).items()},
            "impls": sorted({c["impl"] for c in cells}),
            "ranges": {**_merge([c["grid"] for c in cells]),
                       "size": [min(c["size"] for c in cells), max(c["size"] for c in cells)],
                       "senders": [min(c["nodes"] for c in cells), max(c["nodes"] for c in cells)]}}


def load_bands(path: Path | None = None) -> dict[str, Any]:
    """The validation summary (bands): shipped, or a file `model validate-split` wrote."""
    p = path or Path(str(resources.files("gridsplit.model").joinpath("data", SHIPPED)))
    try:
        d = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise GridsplitError(f"{p}: cannot read a split-model validation ({e}); write one with "
                             f"`gridsplit model validate-split`") from None
    if d.get("kind") == "gridsplit-split-validation":
        d = bands(d)
    if d.get("kind") != SUMMARY_KIND:
        raise GridsplitError(f"{p}: not a split-model validation; write one with `gridsplit model validate-split`")
    if d.get("version", 1) < 2:
        raise GridsplitError(f"{p}: a split-model validation summary of version {d.get('version', 1)}, without the "
                             f"factor bands; write it again with `gridsplit model validate-split`")
    return d


def outside(topo: Topology, size: int, senders: int | None, ranges: dict[str, list[float]]) -> list[str]:
    """One line per grid parameter outside the validated range: what is unknown and how to measure it."""
    facts = {**grid_facts(topo), "size": [size, size], **({"senders": [senders, senders]} if senders else {})}
    out = []
    for k, (lo, hi) in facts.items():
        if k not in ranges or k == "sites":
            continue
        vlo, vhi = ranges[k]
        if lo < vlo * 0.999 or hi > vhi * 1.001:
            have = f"{lo:g}" if lo == hi else f"{lo:g}-{hi:g}"
            out.append(f"{k} {have} is outside the validated {vlo:g}-{vhi:g}: the error band there is unknown; {MEASURE[k]}")
    return out


def _band(bands: dict[str, Any], op: str) -> dict[str, Any]:
    """The op's validation errors: median and 90th percentile of |predicted - measured|, and the
    90th percentile of |ln(predicted / measured)| as `factor` (e to it), which the range uses:
    the model's errors grow with the ratio (a 1 MB all-to-all predicted 4.07 measured 1.78-2.14),
    so an additive band around 0.85 would reach below zero and say nothing."""
    b = bands.get("by_op", {}).get(op)
    validated = bool(b)
    b = b or bands["overall"]
    return {"median": b["median_abs_error"], "p90": b["p90_abs_error"],
            "factor": math.exp(b["p90_log_error"]), "validated": validated}


def pair_cells(topo: Topology, ops: list[str], size: int, impl: str, bands: dict[str, Any],
               senders: int | None = None) -> list[dict[str, Any]]:
    """Per site pair and op: direct and split times, split/direct with its band, the decision, K."""
    if len(topo.sites) < 2:
        raise GridsplitError(f"topology {topo.name!r} has a single site: nothing crosses a WAN, so there is nothing "
                             f"to split; describe the other sites (`gridsplit netcheck` measures their RTTs and rates)")
    out = []
    for w in topo.wans:
        a, b = sm.pair_sites(topo, w.a, w.b)
        if not b.nodes:
            continue   # a site without nodes runs no rank: nothing of a job crosses this pair
        entry = {"sites": [a.name, b.name], "rtt_ms": w.rtt_ms, "loss": w.loss, "ops": []}
        for op in ops:
            job = sm.Job(op, size, impl, senders=None if op in sm.EXCHANGES else senders)
            c = sm.cell(topo, job, (a.name, b.name))
            band = _band(bands, op)
            lo, hi = c["ratio"] / band["factor"], c["ratio"] * band["factor"]
            # Unrouted sites ([addressing] routed = false) reach each other only through the gateways.
            entry["ops"].append({"op": op, "direct_s": c["direct_s"], "split_s": c["split_s"],
                                 "split_over_direct": c["ratio"], "split": c["split"] or not topo.routed,
                                 "direct_possible": topo.routed, "band": band, "range": [lo, hi],
                                 "confident": hi < sm.DECIDE_BELOW or lo > 1 + TOLERANCE or not topo.routed,
                                 "streams": c.get("streams"),
                                 "direct_parts": c["direct_parts"], "split_parts": c["split_parts"]})
        out.append(entry)
    if not out:
        raise GridsplitError(f"topology {topo.name!r} has fewer than two sites with nodes: no rank pair crosses a WAN; "
                             f"give the sites' nodes (`gridsplit netcheck` measures a real grid's sites)")
    return out


def split_policy(topo: Topology, impl: str = "openmpi") -> dict[tuple[str, str], tuple[bool, str]]:
    """What the gateways' config should split for the jobs the topology names (`[gateways]
    policy_ops`, `policy_sizes`; unset: the job is unknown): for each WAN pair whose two sites have gateways, (split?, the reason in one line), as gateway.split_pairs returns.
    A pair is split when the model predicts one of the topology's policy jobs
    (`[gateways] policy_ops` × `policy_sizes`) gains (split/direct < DECIDE_BELOW)
    and none loses beyond TOLERANCE: never slower, faster where TCP suffers; always on an unrouted grid or with
    `[gateways] split = "all"`; as `[[wan]] split` says where it pins the pair ("always", "never");
    never when a site of the pair has no nodes. The pairs that pass
    are then taken in order of their best predicted gain, each only while the exchanges (all-to-all,
    halo), with it and every pair taken before it relayed together, still lose nothing beyond
    TOLERANCE: a site's gateway carries every relayed pair's bytes at once, which no pair's
    prediction on its own shows (docs/model.md §5.6)."""
    return {pair: (split, why) for pair, (split, why, _) in _split_policy(topo, impl)}


def policy_short(topo: Topology, impl: str = "openmpi") -> dict[tuple[str, str], str]:
    """split_policy's reasons in short, what decided each pair: "split = all", "halo 100K would
    lose", "relayed together with a-b, the alltoall of 1000K would lose (1.07)", ..."""
    return {pair: short for pair, (_, _, short) in _split_policy(topo, impl)}


@lru_cache(maxsize=16)
def _split_policy(topo: Topology, impl: str) -> tuple[tuple[tuple[str, str], tuple[bool, str, str]], ...]:
    out: dict[tuple[str, str], tuple[bool, str, str]] = {}
    gains: dict[tuple[str, str], float] = {}
    for w in topo.wans:
        if not (topo.site(w.a).gateway and topo.site(w.b).gateway):
            continue
        if not topo.routed:
            out[(w.a, w.b)] = (True, "split: the sites' subnets are not routed to each other ([addressing] routed = false)",
                               "routed = false")
            continue
        if topo.gateways.split == "all":
            out[(w.a, w.b)] = (True, 'split: [gateways] split = "all"', 'split = "all"')
            continue
        if w.split != "auto":
            pinned = w.split == "always"
            out[(w.a, w.b)] = (pinned, f'{"split" if pinned else "direct"}: [[wan]] split = "{w.split}"',
                               f'[[wan]] split = "{w.split}"')
            continue
        empty = [x for x in (w.a, w.b) if not topo.site(x).nodes]
        if empty:
            out[(w.a, w.b)] = (False, f"direct: {empty[0]} has no nodes, so no rank pair crosses {w.a}-{w.b}",
                               f"{empty[0]} has no nodes")
            continue
        ratios = {(op, m): sm.cell(topo, sm.Job(op, m, impl), (w.a, w.b))["ratio"]
                  for op, m in topo.gateways.policy_jobs}
        gains_any = min(ratios.values()) < sm.DECIDE_BELOW
        worst = max(ratios, key=ratios.get)
        ok = ratios[worst] <= 1 + TOLERANCE
        text = ", ".join(f"{op} {m // 1000}K {r:.2f}" for (op, m), r in ratios.items())
        best = min(ratios, key=ratios.get)
        short = (f"{worst[0]} {worst[1] // 1000}K would lose" if not ok else "nothing gains" if not gains_any else
                 f"{best[0]} {best[1] // 1000}K gains")
        split = _one_gains_none_loses(ratios.values())
        why = ("split" if split else "direct") + f": predicted split/direct {text}"
        if not split:
            why += f" ({short})"
            if hint := _jobs_hint(ratios):
                why += f"; {hint}"
        else:
            gains[(w.a, w.b)] = min(ratios.values())
        out[(w.a, w.b)] = (split, why, short)
    # Pairs pinned split are relayed whatever the policy says: the others are checked together with them.
    taken: list[tuple[str, str]] = [(w.a, w.b) for w in topo.wans if w.split == "always" and (w.a, w.b) in out]
    for pair in sorted(gains, key=lambda p: (gains[p], p)):
        if taken and (joint := _joint_worst(topo, impl, [*taken, pair])):
            worst, ratio = joint
            if ratio > 1 + TOLERANCE:
                short = (f"relayed together with {', '.join('-'.join(p) for p in taken)}, the {worst[0]} of "
                         f"{worst[1] // 1000}K would lose (predicted split/direct {ratio:.2f})")
                out[pair] = (False, f"direct: {short}; on its own: " + out[pair][1].split(": ", 1)[1], short)
                continue
        taken.append(pair)
    return tuple(out.items())


def _one_gains_none_loses(ratios) -> bool:
    """The policy's rule for a pair, on the predicted split/direct of the jobs it weighs: one
    gains (below DECIDE_BELOW) and none loses beyond TOLERANCE."""
    rs = list(ratios)
    return min(rs) < sm.DECIDE_BELOW and max(rs) <= 1 + TOLERANCE


def _jobs_hint(ratios: dict[tuple[str, int], float]) -> str:
    """For a pair kept direct because one op would lose: the ops whose own jobs pass the pair's
    rule (_one_gains_none_loses), as the `policy_ops` line that says a job runs only those; ""
    when there is none. What an unknown job gives up there is measured in
    results/matrix/2026-11-28-direct-decisions (docs/model.md §5.6, "The jobs it weighs")."""
    by_op: dict[str, list[float]] = {}
    for (op, _), r in ratios.items():
        by_op.setdefault(op, []).append(r)
    fine = [op for op, rs in by_op.items() if _one_gains_none_loses(rs)]
    if not fine:
        return ""
    listed = ", ".join(f'"{op}"' for op in fine)
    return f"a job that runs only {' and '.join(fine)} would split it on its own: [gateways] policy_ops = [{listed}]"


def _joint_worst(topo: Topology, impl: str, pairs: list[tuple[str, str]]) -> tuple[tuple[str, int], float] | None:
    """The exchange of the policy's jobs that loses most with `pairs` relayed together, and its
    split/direct; None when the policy weighs no exchange (the model runs a gather or a bcast on one
    pair's two sites, which the pair's own prediction already covers)."""
    relayed = frozenset(frozenset(p) for p in pairs)
    ratios = {}
    for op, m in topo.gateways.policy_jobs:
        if op in sm.EXCHANGES:
            run = sm.alltoall if op == "alltoall" else sm.halo
            job = sm.Job(op, m, impl)
            ratios[(op, m)] = run(topo, job, relayed)["seconds"] / run(topo, job, frozenset())["seconds"]
    if not ratios:
        return None
    worst = max(ratios, key=ratios.get)
    return worst, ratios[worst]
