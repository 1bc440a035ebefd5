"""The default split policy (splitadvise.split_policy) against application runs of `gridsplit bench app`.

The split model has no term for a whole application, so an application cell scores only
the decision, not a predicted ratio: which of the site pairs the job's ranks span the
policy splits, against what the run measured.

- The run applied the policy (the lab's node file, recorded in the meta row's
  `lab.split_policy`): right when split is not slower than direct beyond TOLERANCE.
- The run split pairs of which the policy splits none (e.g. `[gateways] split = "all"`, as
  the paper preset does): right when direct is not slower beyond TOLERANCE, i.e. the
  measured split/direct is at least 1 - TOLERANCE.
- Any other mix (the policy splits some pairs, the run split others) measures neither
  decision against direct; the cell is listed as not comparable and not scored.
- An A/B (`bench app --a/--b`) whose one side applied the policy and whose other split other
  pairs compares the two choices in the same rounds: one more cell, right when the other
  side is not faster than the policy's beyond TOLERANCE (its time over the policy side's,
  per round, at least 1 - TOLERANCE).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from ..bench.appsummary import side_ratios, summarize_apps
from ..bench.results import named_split, read_rows
from ..errors import GridsplitError
from ..topology import Topology
from .splitadvise import split_policy

TOLERANCE = 0.05


def _pair(a: str, b: str) -> frozenset[str]:
    return frozenset((a, b))


def run_split_pairs(topo: Topology, lab: dict[str, Any], src: str) -> set[frozenset[str]]:
    """The site pairs whose connections the run split: all on a `split = "all"` or unrouted
    grid, else the ones the lab's recorded policy split."""
    if topo.gateways.split == "all" or not topo.routed:
        return {_pair(w.a, w.b) for w in topo.wans}
    recorded = lab.get("split_policy")
    if recorded is None:
        raise GridsplitError(f"{src}: the meta row does not record the lab's split policy (a run before it was "
                             f"recorded); rerun it with `gridsplit bench app`")
    # keys are "A-B" in the topology's WAN order (lab.realize); site names may hold '-', so match the links
    return {_pair(w.a, w.b) for w in topo.wans if recorded.get(f"{w.a}-{w.b}", "").startswith("split")}


def _spanned(topo: Topology, sites: dict[str, int]) -> set[frozenset[str]]:
    """The site pairs a job with `sites` ({site: ranks}) has ranks on both ends of."""
    return {_pair(w.a, w.b) for w in topo.wans if sites.get(w.a) and sites.get(w.b)}


def named_pairs(topo: Topology, spec: str) -> set[frozenset[str]]:
    """The pairs a run that named its split (Topology.with_split's spec) relayed."""
    if spec == "all":
        return {_pair(w.a, w.b) for w in topo.wans}
    return {_pair(w.a, w.b) for w in topo.with_split(spec).wans if w.split == "always"}


def app_cells(path: Path, name: str, topo: Topology, meta: dict[str, Any]) -> list[dict[str, Any]]:
    """One cell per (app, impl, split variant) of an app result file."""
    ran = run_split_pairs(topo, meta.get("lab") or {}, str(path))
    policy = split_policy(replace(topo, gateways=replace(topo.gateways, split="auto")))
    splits = {_pair(a, b) for (a, b), (yes, _) in policy.items() if yes}
    reasons = {_pair(a, b): why for (a, b), (_, why) in policy.items()}
    out = []
    # An A/B's sides (bench app --a/--b) and a sweep's named splits say which pairs each variant split.
    named = {d["label"]: d["split"] for d in (meta.get("ab") or {}).values() if d.get("split", "policy") != "policy"}
    rows = read_rows(path)
    summary = summarize_apps(rows)
    for s in summary:
        if s["ratio"] is None:
            continue
        spanned = _spanned(topo, s["sites"])
        advised = splits & spanned
        spec = named.get(s["variant"]) or named_split(s["variant"])
        ran_here = (ran if spec is None else named_pairs(topo, spec)) & spanned
        meas = s["ratio"]
        if advised == ran_here:
            basis, right = "the run applied the policy", meas <= 1 + TOLERANCE
        elif not advised:
            basis, right = "the run split; the policy splits none of these pairs", meas >= 1 - TOLERANCE
        else:
            basis, right = "not comparable: the run split other pairs than the policy", None
        out.append({"file": name, "topology": topo.name, "app": s["app"], "impl": s["impl"], "variant": s["variant"],
                    "sites": s["sites"], "policy_split": sorted("-".join(sorted(p)) for p in advised),
                    "run_split": sorted("-".join(sorted(p)) for p in ran_here),
                    "reasons": {"-".join(sorted(p)): reasons[p] for p in spanned if p in reasons},
                    "measured_ratio": meas, "measured_min": s["ratio_min"], "measured_max": s["ratio_max"],
                    "rounds": s["rounds"], "basis": basis, "right": right})
    placed = {(s["app"], s["impl"]): s["sites"] for s in summary}
    return out + _side_cells(rows, placed, name, topo, meta, ran, splits)


def _side_cells(rows: list[dict[str, Any]], placed: dict[tuple[str, str], dict[str, int]], name: str, topo: Topology,
                meta: dict[str, Any], ran: set[frozenset[str]], splits: set[frozenset[str]]) -> list[dict[str, Any]]:
    """An A/B's two split choices against each other, where one side applied the policy
    (`placed`: each (app, impl)'s ranks per site)."""
    sides = {d["label"]: d.get("split", "policy") for d in (meta.get("ab") or {}).values() if d.get("label")}
    if len(sides) != 2:
        return []
    out = []
    for r in side_ratios(rows, *sides):
        sites = placed[(r["app"], r["impl"])]
        spanned = _spanned(topo, sites)
        pairs = {lab: (ran if spec == "policy" else named_pairs(topo, spec)) & spanned for lab, spec in sides.items()}
        (a, pa), (b, pb) = pairs.items()
        policy_side = a if pa == splits & spanned else b if pb == splits & spanned else None
        if policy_side is None or pa == pb:
            continue
        other = b if policy_side == a else a
        # side_ratios gives B's time over A's; the cell wants the other side's over the policy's.
        flip = other == a
        meas, lo, hi = ((1 / r["ratio"], 1 / r["ratio_max"], 1 / r["ratio_min"]) if flip
                        else (r["ratio"], r["ratio_min"], r["ratio_max"]))
        out.append({"file": name, "topology": topo.name, "app": r["app"], "impl": r["impl"],
                    "variant": f"{other} vs {policy_side}", "sites": sites,
                    "policy_split": sorted("-".join(sorted(p)) for p in pairs[policy_side]),
                    "run_split": sorted("-".join(sorted(p)) for p in pairs[other]),
                    "reasons": {}, "measured_ratio": meas, "measured_min": lo, "measured_max": hi,
                    "rounds": r["rounds"], "basis": "the other choice's time over the policy's, same rounds",
                    "right": meas >= 1 - TOLERANCE})
    return out


def score(cells: list[dict[str, Any]]) -> dict[str, Any]:
    scored = [c for c in cells if c["right"] is not None]
    right = sum(bool(c["right"]) for c in scored)
    return {"cells": len(cells), "scored": len(scored), "right": right,
            "decision_accuracy": right / len(scored) if scored else None}


def report_lines(cells: list[dict[str, Any]]) -> list[str]:
    if not cells:
        return []
    s = score(cells)
    acc = "-" if s["decision_accuracy"] is None else f"{100 * s['decision_accuracy']:.0f} %"
    L = ["", "## The default policy on applications", "",
         "The model predicts no application time; these cells score only the policy's decision for the site "
         "pairs the job's ranks span (python/gridsplit/model/appvalidate.py says how).",
         f"Decisions right: {s['right']}/{s['scored']} = {acc}"
         + (f" ({s['cells'] - s['scored']} not comparable)" if s['cells'] > s['scored'] else "") + ".", "",
         "| file | app | impl | sites (ranks) | policy splits | run split | measured (split/direct, or as the basis says) | basis | right |",
         "|---|---|---|---|---|---|---:|---|---|"]
    for c in cells:
        sites = ", ".join(f"{k} {v}" for k, v in c["sites"].items())
        mark = "-" if c["right"] is None else ("yes" if c["right"] else "**no**")
        L.append(f"| {Path(c['file']).name} | {c['app']} | {c['impl']} | {sites} | {', '.join(c['policy_split']) or 'none'} | "
                 f"{', '.join(c['run_split']) or 'none'} | {c['measured_ratio']:.2f} ({c['measured_min']:.2f}-"
                 f"{c['measured_max']:.2f}) | {c['basis']} | {mark} |")
    return L
