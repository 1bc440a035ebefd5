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
from ..errors import GridsplitError
from ..topology import Topology
from ..topology_file import load_topology
from . import splitadvise
from . import splitmodel as sm

KIND = "gridsplit-split-predictions"
VERSION = 1
SIZES = (10_000, 100_000, 1_000_000)
IMPLS = ("mpich", "openmpi")
OPS = ("gather", "alltoall", "bcast", "halo")


def _fmt(m: int) -> str:
    return f"{m // 1_000_000}M" if m >= 1_000_000 else f"{m // 1000}K"


def grid_rows(path: str, topo: Topology, bands: dict[str, Any], run_policy: set[frozenset[str]] | None) -> list[dict[str, Any]]:
    """Every (pair, op, size, impl) of one grid (`model advise`), with the model's own policy, and
    the bench's `-n all` layout under the policy the measuring lab applies (`run_policy`, the
    model's own when None): what its split/direct should be."""
    policy = splitadvise.split_policy(topo)
    split = {frozenset(p) for p, (yes, _) in policy.items() if yes}
    run = split if run_policy is None else run_policy
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
                    rows.append({"kind": "prediction", "layout": "pair", "grid": topo.name, "file": path,
                                 "pair": pair["sites"], "op": op, "size": m, "impl": impl, "modelled": True,
                                 "direct_s": c["direct_s"], "split_s": c["split_s"],
                                 "split_over_direct": c["split_over_direct"], "advice_split": c["split"],
                                 "band_p90": c["band"]["p90"], "band_factor": c["band"]["factor"], "range": c["range"],
                                 "band_validated": c["band"]["validated"],
                                 "streams": c["streams"], "policy_split": key in split,
                                 "policy_reason": reasons.get(key)})
                rows.append(bench_row(path, topo, op, m, impl, run))
    return rows


def bench_row(path: str, topo: Topology, op: str, m: int, impl: str, run: set[frozenset[str]]) -> dict[str, Any]:
    """`gridsplit bench OP -n all` on the grid, with the pairs `run` relayed in its split runs."""
    job = sm.Job(op, m, impl)
    relayed = run & sm.crossed_pairs(topo, op)
    if op in sm.EXCHANGES:
        f = sm.alltoall if op == "alltoall" else sm.halo
        d, s = f(topo, job, frozenset()), f(topo, job, frozenset(relayed))
    else:
        d = sm.all_to_one(topo, job, set(), op == "gather")
        s = sm.all_to_one(topo, job, relayed, op == "gather")
    return {"kind": "prediction", "layout": "bench -n all", "grid": topo.name, "file": path, "pair": "-n all",
            "op": op, "size": m, "impl": impl, "modelled": True, "direct_s": d["seconds"], "split_s": s["seconds"],
            "split_over_direct": s["seconds"] / d["seconds"], "kept_direct": not relayed,
            "relayed": sorted("-".join(sorted(p)) for p in relayed)}


def run_policy_of(predictions: Path, grid: str) -> set[frozenset[str]]:
    """The pairs a recorded predictions file's policy splits on `grid` (its meta row's `policies`)."""
    hint = "give --run-policy-from a file that `gridsplit model record-predictions` wrote"
    try:
        meta = json.loads((predictions.read_text().splitlines() or ["{}"])[0])
    except OSError as e:
        raise GridsplitError(f"{predictions}: cannot read it ({e.strerror}); {hint}") from None
    except ValueError:
        raise GridsplitError(f"{predictions}: its first line is not JSON; {hint}") from None
    if not isinstance(meta, dict) or meta.get("kind") != KIND or not isinstance(meta.get("policies"), dict):
        raise GridsplitError(f"{predictions}: not a predictions file (no {KIND!r} meta row with policies); {hint}")
    if grid not in meta["policies"]:
        raise GridsplitError(f"{predictions}: records no policy for grid {grid!r} (it has "
                             f"{', '.join(sorted(meta['policies'])) or 'none'}); record predictions for that topology")
    return {frozenset(p.split("-", 1)) for p, why in meta["policies"][grid].items() if why.startswith("split")}


def record(files: list[str], out: Path, command: str, run_policy_from: Path | None = None,
           split: str = "policy") -> dict[str, Any]:
    """Predictions of every grid of `files` into `out`; `run_policy_from`: a predictions file whose
    recorded policy the measuring lab applies (else the model's own); `split`: the pairs the runs
    split, as `bench --split` names them (Topology.with_split; "policy": each grid's own keys)."""
    bands = splitadvise.load_bands()
    meta = {"kind": KIND, "version": VERSION, "date": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.gmtime()),
            "git": machine.facts().get("git"), "command": command, "files": files, "sizes": list(SIZES),
            "decide_split_below": sm.DECIDE_BELOW, "ops_modelled": list(sm.OPS),
            "run_policy_from": str(run_policy_from) if run_policy_from else None, "split": split}
    rows, policies = [], {}
    for f in files:
        topo = load_topology(f).with_split(split)
        rows += grid_rows(f, topo, bands, run_policy_of(run_policy_from, topo.name) if run_policy_from else None)
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
    run = meta.get("run_policy_from")
    L = [f"# Split model predictions, recorded {meta['date']}", "",
         f"Model: python/gridsplit/model/split*.py at git {meta['git']} (their sha256 and the grids' are in "
         f"predictions.jsonl's meta row). Command: `{meta['command']}`.", "",
         "**What a bench run should measure** (`gridsplit bench OP -t GRID -n all"
         + ("" if meta.get("split", "policy") == "policy" else f" --split {meta['split']}") + "`, split runs under the policy "
         + (f"recorded in `{run}`, the one the measuring lab applies" if run else "the model writes") + "): "
         "split/direct of the whole operation, every other node sending to the root on the second site (gather, "
         "bcast), every node (alltoall), the ring in the bench's rank order (halo). Where no pair the operation "
         "crosses is split, both sides run direct and 1.00 is expected (`kept direct`).", "",
         "| grid | op | impl | 10K | 100K | 1M | relayed pairs |", "|---|---|---|---:|---:|---:|---|"]
    bench = [r for r in rows if r.get("layout") == "bench -n all"]
    for key in dict.fromkeys((r["grid"], r["op"], r["impl"]) for r in bench):
        cells = {r["size"]: r for r in bench if (r["grid"], r["op"], r["impl"]) == key}
        fmt = lambda r: "1.00 (kept direct)" if r["kept_direct"] else f"{r['split_over_direct']:.2f}"
        rel = next(iter(cells.values()))["relayed"]
        L.append(f"| {key[0]} | {key[1]} | {key[2]} | " + " | ".join(fmt(cells[m]) for m in SIZES if m in cells)
                 + f" | {', '.join(rel) or 'none'} |")
    L += ["", "## The model's own default policy (what `gridsplit gateway config` would write with it)", ""]
    for g, pol in meta["policies"].items():
        L.append(f"- **{g}**")
        L += [f"  - {p}: {why}" for p, why in pol.items()]
    L += ["", "## Per site pair (`gridsplit model advise -t GRID --op OP --size SIZE --impl IMPL --json`)", "",
          "The pair's split relayed, the rest of the grid direct (gather, bcast: the pair alone, its bigger site "
          f"sending). Advice: split below {meta['decide_split_below']}.", "",
          "| grid | pair | op | size | impl | direct | split | split/direct (90 % band) | advice | model's policy |",
          "|---|---|---|---:|---|---:|---:|---:|---|---|"]
    for r in rows:
        if r.get("layout") != "pair":
            if not r["modelled"]:
                L.append(f"| {r['grid']} | - | {r['op']} | {_fmt(r['size'])} | {r['impl']} | - | - | not modelled | - | - |")
            continue
        L.append(f"| {r['grid']} | {'-'.join(r['pair'])} | {r['op']} | {_fmt(r['size'])} | {r['impl']} | "
                 f"{r['direct_s'] * 1e3:.1f} ms | {r['split_s'] * 1e3:.1f} ms | {r['split_over_direct']:.2f} "
                 f"({r['range'][0]:.2f}-{r['range'][1]:.2f}) | {'split' if r['advice_split'] else 'direct'} | "
                 f"{'split' if r['policy_split'] else 'direct'} |")
    return L
