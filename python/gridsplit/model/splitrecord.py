"""Record the split model's predictions for grids before they are measured (a held-out test).

`gridsplit model record-predictions GRID.toml ... --out DIR` writes, for every grid, site
pair, op, size and MPI library, what `gridsplit model advise --json` answers (direct and
split times, split/direct, the decision, its band), the default split policy of the grid
(splitadvise.split_policy, what `gateway config` writes) and the split/direct the model
expects of a bench run under that policy: the pair's predicted ratio where the policy
splits it, 1.0 where it keeps it direct (both sides of such a run are direct). Output:
`predictions.jsonl` (one row per cell, a meta row first) and `README.md` (the table).
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

from .. import machine
from ..topology import Topology, load_topology
from . import splitadvise
from . import splitmodel as sm

KIND = "gridsplit-split-predictions"
VERSION = 1
SIZES = (10_000, 100_000, 1_000_000)
IMPLS = ("mpich", "openmpi")
OPS = ("gather", "alltoall", "bcast", "halo")


def _fmt(m: int) -> str:
    return f"{m // 1_000_000}M" if m >= 1_000_000 else f"{m // 1000}K"


def grid_rows(path: str, topo: Topology, bands: dict[str, Any]) -> list[dict[str, Any]]:
    """Every (pair, op, size, impl) of one grid, with the policy and the ratio expected under it."""
    policy = splitadvise.split_policy(topo)
    split = {frozenset(p) for p, (yes, _) in policy.items() if yes}
    reasons = {frozenset(p): why for p, (_, why) in policy.items()}
    rows = []
    for impl in IMPLS:
        for m in SIZES:
            for op in OPS:
                if op not in sm.OPS:
                    rows.append({"kind": "prediction", "grid": topo.name, "file": path, "op": op, "size": m,
                                 "impl": impl, "modelled": False})
                    continue
                for pair in splitadvise.pair_cells(topo, [op], m, impl, bands):
                    c = pair["ops"][0]
                    key = frozenset(pair["sites"])
                    row = {"kind": "prediction", "grid": topo.name, "file": path, "pair": pair["sites"], "op": op,
                           "size": m, "impl": impl, "modelled": True, "direct_s": c["direct_s"],
                           "split_s": c["split_s"], "split_over_direct": c["split_over_direct"],
                           "advice_split": c["split"], "band_p90": c["band"]["p90"],
                           "band_validated": c["band"]["validated"], "streams": c["streams"],
                           "policy_split": key in split, "policy_reason": reasons.get(key),
                           "expected_under_policy": c["split_over_direct"] if key in split else 1.0}
                    rows.append(row)
                if op in ("alltoall", "halo") and len(topo.sites) > 2:
                    # The whole grid's exchange, every pair the policy splits relayed at once.
                    job = sm.Job(op, m, impl)
                    run = sm.alltoall if op == "alltoall" else sm.halo
                    d, s = run(topo, job, frozenset()), run(topo, job, split)
                    rows.append({"kind": "prediction", "grid": topo.name, "file": path, "pair": "all, as the policy splits",
                                 "op": op, "size": m, "impl": impl, "modelled": True, "direct_s": d["seconds"],
                                 "split_s": s["seconds"], "split_over_direct": s["seconds"] / d["seconds"],
                                 "policy_split": sorted("-".join(sorted(p)) for p in split),
                                 "expected_under_policy": s["seconds"] / d["seconds"]})
    return rows


def record(files: list[str], out: Path, command: str) -> dict[str, Any]:
    bands = splitadvise.load_bands()
    meta = {"kind": KIND, "version": VERSION, "date": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.gmtime()),
            "git": machine.facts().get("git"), "command": command, "files": files, "sizes": list(SIZES),
            "decide_split_below": sm.DECIDE_BELOW, "ops_modelled": list(sm.OPS)}
    rows, policies = [], {}
    for f in files:
        topo = load_topology(f)
        rows += grid_rows(f, topo, bands)
        policies[topo.name] = {f"{a}-{b}": why for (a, b), (_, why) in splitadvise.split_policy(topo).items()}
    meta["policies"] = policies
    meta["sha256"] = {f: hashlib.sha256(Path(f).read_bytes()).hexdigest() for f in files}
    here = Path(__file__).parent
    meta["model_sha256"] = {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
                            for p in sorted(here.glob("split*.py")) if p.name != "splitrecord.py"}
    out.mkdir(parents=True, exist_ok=True)
    (out / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [meta, *rows]))
    (out / "README.md").write_text("\n".join(report_lines(meta, rows)) + "\n")
    return {"meta": meta, "rows": rows}


def report_lines(meta: dict[str, Any], rows: list[dict[str, Any]]) -> list[str]:
    L = [f"# Split model predictions, recorded {meta['date']}", "",
         f"Model: python/gridsplit/model/split*.py at git {meta['git']} (their sha256 and the grids' are in "
         f"predictions.jsonl's meta row). Command: `{meta['command']}`.", "",
         "Per grid, site pair (the bigger site sends the gather), op, size and library: the model's split/direct "
         "for splitting that pair (`model advise`), its decision (split below "
         f"{meta['decide_split_below']}), and what a bench run under the grid's default policy should measure: "
         "the pair's ratio where the policy splits it, 1.00 where it keeps it direct (both sides direct). "
         "`all` rows: the whole grid's exchange with every pair the policy splits relayed.", "",
         "## Default policy (what `gridsplit gateway config` writes)", ""]
    for g, pol in meta["policies"].items():
        L.append(f"- **{g}**")
        L += [f"  - {p}: {why}" for p, why in pol.items()]
    L += ["", "## Predictions", "",
          "| grid | pair | op | size | impl | direct | split | split/direct (90 % band) | advice | policy | expected under policy |",
          "|---|---|---|---:|---|---:|---:|---:|---|---|---:|"]
    for r in rows:
        if not r["modelled"]:
            L.append(f"| {r['grid']} | - | {r['op']} | {_fmt(r['size'])} | {r['impl']} | - | - | not modelled | - | - | - |")
            continue
        pair = r["pair"] if isinstance(r["pair"], str) else "-".join(r["pair"])
        band = f" (±{r['band_p90']:.2f})" if "band_p90" in r else ""
        advice = ("split" if r["advice_split"] else "direct") if "advice_split" in r else "-"
        pol = (("split" if r["policy_split"] else "direct") if isinstance(r["policy_split"], bool)
               else (", ".join(r["policy_split"]) or "none split"))
        L.append(f"| {r['grid']} | {pair} | {r['op']} | {_fmt(r['size'])} | {r['impl']} | {r['direct_s'] * 1e3:.1f} ms | "
                 f"{r['split_s'] * 1e3:.1f} ms | {r['split_over_direct']:.2f}{band} | {advice} | {pol} | "
                 f"{r['expected_under_policy']:.2f} |")
    return L
