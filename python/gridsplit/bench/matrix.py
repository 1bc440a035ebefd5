"""Several grids' sweeps in one report: the evidence matrix of "never slower than direct".

`gridsplit report` hands result files here when their meta rows name more than one
topology. Each grid is summarised on its own (points of different grids never pair or
pool), and the heat map puts the grids in rows and (op, size) in columns, one map per
MPI library and split variant, each cell the median split/direct over the grid's rounds.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Any

from ..errors import GridsplitError
from . import page
from .results import read_rows, summarize
from ..units import fmt_size


def grid_of(meta: dict[str, Any]) -> str:
    """One line that tells the grids of a matrix apart: name, sites, RTTs, loss, gateway NIC."""
    t = meta.get("topology") or {}
    sites, wans = t.get("sites", []), t.get("wan", [])
    rtts = sorted({round(w["delay_ms_ab"] + w["delay_ms_ba"], 1) for w in wans})
    loss = sorted({w.get("loss", 0) for w in wans})
    gw = sorted({round(s["gateway_nic_mbps"] / s["nic_mbps"], 1) for s in sites if s.get("gateway_nic_mbps")})
    split = (t.get("gateways") or {}).get("split", "auto")
    return (f"{t.get('name', '?')}: {len(sites)} sites, RTT {'/'.join(f'{r:g}' for r in rtts)} ms, "
            f"loss {'/'.join(f'{100 * x:g} %' for x in loss)}, gateway NIC {'/'.join(f'{g:g}' for g in gw)}x"
            + ("" if split == "auto" else f", split {split}"))


def grid_count(paths: list[Path]) -> int:
    """How many distinct grids (name and physics) the files' meta rows describe."""
    return len({((r.get("topology") or {}).get("name"), _physics(r.get("topology"))) for p in paths if p.exists()
                for r in read_rows(p) if r.get("kind") == "meta"})


def _physics(topo: dict[str, Any] | None) -> str:
    """What makes two grids the same grid: its network and its split policy, not where the
    topology was read from, nor gateway settings an A/B varies (rows carry those as their
    variant), nor keys a later gridsplit added to the record (`gateways.encryption`)."""
    t = topo or {}
    return json.dumps({"sites": t.get("sites"), "wan": t.get("wan"), "scale": t.get("scale"),
                       "split": (t.get("gateways") or {}).get("split", "auto")}, sort_keys=True)


def summarize_grids(paths: list[Path]) -> list[dict[str, Any]]:
    """summarize() per grid, each row tagged with its grid; files of one grid pool their points."""
    grids: dict[str, dict[str, Any]] = {}
    for p in paths:
        rows = read_rows(p)
        meta = next((r for r in rows if r.get("kind") == "meta"), None)
        if meta is None:
            raise GridsplitError(f"{p}: no meta row; is this a `gridsplit bench` result file?")
        name = (meta.get("topology") or {}).get("name", "?")
        g = grids.setdefault(name, {"topology": meta.get("topology"), "label": grid_of(meta), "points": []})
        if _physics(g["topology"]) != _physics(meta.get("topology")):
            raise GridsplitError(f"{p}: topology {name!r} differs from another file's of the same name; "
                                 f"give each grid its own name")
        g["points"] += [r for r in rows if r.get("kind") == "point"]
    return [{**s, "grid": g["label"]} for g in grids.values() for s in summarize(g["points"])]


def fig_matrix(summary: list[dict[str, Any]], outdir: Path) -> list[str]:
    import matplotlib.pyplot as plt  # loaded only by the commands that draw
    out = []
    for impl, var in sorted({(s["impl"], s["variant"]) for s in summary}):
        ss = [s for s in summary if (s["impl"], s["variant"]) == (impl, var) and s["ratio"] is not None]
        if not ss:
            continue
        grids = sorted({s["grid"] for s in ss})
        cols = sorted({(s["op"], s["size_bytes"]) for s in ss})
        # more than one sender count in a cell: the largest, where incast is worst
        widest: dict[tuple, dict[str, Any]] = {}
        for s in ss:
            k = (s["grid"], s["op"], s["size_bytes"])
            if k not in widest or s["nodes"] > widest[k]["nodes"]:
                widest[k] = s
        cells = [[math.nan] * len(cols) for _ in grids]
        for (g, op, m), s in widest.items():
            cells[grids.index(g)][cols.index((op, m))] = s["ratio"]
        fig, ax = plt.subplots(figsize=(2.5 + 0.85 * len(cols), 1.2 + 0.5 * len(grids)))
        page.ratio_heatmap(fig, ax, cells)
        ax.set_xticks(range(len(cols)), [f"{op}\n{fmt_size(m)}" for op, m in cols], fontsize=8)
        ax.set_yticks(range(len(grids)), grids, fontsize=8)
        ax.set_title(f"{impl}, split ({var}) / direct time, median over rounds (< 1: splitting is faster)", fontsize=9)
        out.append(page.png(fig, outdir, f"matrix-{impl}-{var.replace(':', '-')}.png"))
    return out


def build_matrix_report(paths: list[Path], outdir: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    summary = summarize_grids(paths)
    if not summary:
        raise GridsplitError(f"{', '.join(map(str, paths))}: no measured points in the file(s) yet")
    outdir.mkdir(parents=True, exist_ok=True)
    rows = [[s["grid"], s["op"], s["impl"], s["nodes"], fmt_size(s["size_bytes"]), s["variant"],
             "-" if s["ratio"] is None else f"{s['ratio']:.2f} ({s['ratio_min']:.2f}-{s['ratio_max']:.2f})",
             s["repeats"], f"{s['wan_retrans_direct']} → {s['wan_retrans_split']}", s["wan_rto_split"]]
            for s in sorted(summary, key=lambda s: (s["grid"], s["op"], s["impl"], s["nodes"], s["size_bytes"]))]
    slower = [s for s in summary if s["ratio"] is not None and s["ratio"] > 1.05]
    doc = f"""<!doctype html><html><head><meta charset="utf-8"><title>gridsplit: several grids</title>
<style>body{{font-family:sans-serif;max-width:1300px;margin:auto;padding:1em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:2px 6px;font-size:13px;text-align:right}}th{{background:#eee}}
img{{max-width:100%}}figcaption{{font-size:11px;color:#666}}</style></head><body>
<h1>Split vs direct on {len({s['grid'] for s in summary})} grids</h1>
<p>From {html.escape(', '.join(map(str, paths)))}. Each grid is summarised on its own: split/direct per round
(the two ran back to back), median and min-max over rounds. {len(slower)} of {len(summary)} cells are slower
split than direct by more than 5 %. Each grid's own report (`gridsplit report FILE`) has its counters, drops and CPU.</p>
{''.join(fig_matrix(summary, outdir))}
<h2>Cells</h2>{page.table(['grid', 'op', 'impl', 'nodes', 'size', 'split variant', 'split/direct (min-max)', 'rounds',
                          'WAN retrans direct → split', 'WAN RTO split'], rows)}
</body></html>"""
    path = outdir / "index.html"
    path.write_text(doc)
    return path
