"""`gridsplit report RESULTS...`: a self-contained HTML report, with PNGs, from bench result files.

It draws what Alter and Glück show in §10.4 (time vs size per node count, Figures 9-10;
retransmissions and timeouts, Tables 1-2; CPU, Figures 11-13) from the JSONL
rows that `gridsplit bench` writes, adds what MPI5000 lacked (min-max bands
over repetitions, the physical bound and efficiency, a split/direct heatmap,
strategy comparison), and checks the issue's targets against the data. Images
are written beside the HTML and embedded in it, so the page can be mailed alone.
"""

from __future__ import annotations

import html
import json
import math
import statistics
from collections import defaultdict
from pathlib import Path

import click

from ..errors import GridsplitError
from ..lab.check import LATE_FRACTION_MAX, STALL_US
from ..lab.queues import fell_behind
from . import page
from .appresults import build_app_report, holds_app_runs
from .matrix import build_matrix_report, grid_count
from .results import HEADERS, frame_ceiling, median_of, read_rows, row_key, summarize, variant_tag
from ..units import fmt_size

# Alter and Glück Tables 1-2 (MPICH, 200 gathers): (nodes, size) -> (direct distant, split local, split distant).
SEED_FAST_RETRANS = {
    (4, 100000): (0, 14, 0), (4, 500000): (3, 79, 0), (4, 1000000): (17, 174, 1), (4, 2000000): (38, 395, 2),
    (10, 100000): (0, 64, 0), (10, 500000): (37, 377, 0), (10, 1000000): (75, 526, 2), (10, 2000000): (96, 888, 2),
    (20, 100000): (31, 141, 0), (20, 500000): (122, 428, 2), (20, 1000000): (121, 701, 2), (20, 2000000): (186, 1569, 5),
}
SEED_TIMEOUTS = {
    (4, 100000): (0, 0, 0), (4, 500000): (0, 1, 1), (4, 1000000): (1, 2, 1), (4, 2000000): (1, 1, 3),
    (10, 100000): (0, 0, 0), (10, 500000): (0, 2, 0), (10, 1000000): (0, 0, 0), (10, 2000000): (0, 0, 2),
    (20, 100000): (1, 0, 0), (20, 500000): (1, 2, 0), (20, 1000000): (1, 1, 3), (20, 2000000): (0, 1, 8),
}


def _load(paths: list[Path]) -> tuple[list[dict], list[dict], list[dict]]:
    """Meta rows, measured points, and failures that no later run of the same point made good."""
    metas, rows = [], []
    for p in paths:
        if not p.exists():
            raise GridsplitError(f"{p}: no such result file (write one with `gridsplit bench gather --out {p}`)")
        for r in read_rows(p):
            (metas if r.get("kind") == "meta" else rows).append(r)
    points = [r for r in rows if r.get("kind") == "point"]
    if not points:
        raise GridsplitError(f"{', '.join(map(str, paths))}: no measured points in the file(s) yet")
    # Rows are paired and grouped without their rank environment, so one report
    # holds one: a direct run with one MPI setting must not meet a split run
    # with another.
    envs = {json.dumps(r.get("rank_env", {}), sort_keys=True) for r in points}
    if len(envs) > 1:
        raise GridsplitError(f"{', '.join(map(str, paths))}: runs under different --rank-env settings "
                             f"({'; '.join(sorted(envs))}); report each setting's file on its own")
    measured = {row_key(r) for r in points}
    failures = [r for r in rows if r.get("kind") == "failure" and row_key(r) not in measured]
    return metas, points, failures


def _variant(r: dict) -> str:
    """Plot and table label of a row's mode and gateway variant."""
    tag = variant_tag(r)
    return tag if tag == "direct" else f"split {tag}"


def _groups(points: list[dict]) -> dict[tuple, list[dict]]:
    g: dict[tuple, list[dict]] = defaultdict(list)
    for r in points:
        g[(r["op"], r["impl"], _variant(r), r["nodes"], r["size_bytes"])].append(r)
    return g


def _per_rep(r: dict) -> float:
    return r["total_s"] / r["reps"]


def fig_time(points: list[dict], outdir: Path) -> list[str]:
    """Alter and Glück Figs 9-10: mean time per operation vs size, one panel per node count."""
    import matplotlib.pyplot as plt
    g = _groups(points)
    out = []
    for op, impl in sorted({(r["op"], r["impl"]) for r in points}):
        nodes = sorted({r["nodes"] for r in points if r["op"] == op and r["impl"] == impl})
        variants = sorted({_variant(r) for r in points if r["op"] == op and r["impl"] == impl},
                          key=lambda v: (v != "direct", v))
        cols = min(3, len(nodes))
        rows_ = math.ceil(len(nodes) / cols)
        fig, axes = plt.subplots(rows_, cols, figsize=(4.6 * cols, 3.6 * rows_), squeeze=False)
        for ax, n in zip(axes.flat, nodes):
            sizes = sorted({r["size_bytes"] for r in points if r["op"] == op and r["impl"] == impl and r["nodes"] == n})
            for v in variants:
                xs, med, lo, hi = [], [], [], []
                for m in sizes:
                    rs = g.get((op, impl, v, n, m), [])
                    if not rs:
                        continue
                    vals = [_per_rep(r) * 1e3 for r in rs]
                    xs.append(m)
                    med.append(statistics.median(vals))
                    lo.append(min(vals))
                    hi.append(max(vals))
                if xs:
                    line, = ax.plot(xs, med, marker="o", ms=3, label=v)
                    ax.fill_between(xs, lo, hi, color=line.get_color(), alpha=0.2)
            bound = {r["size_bytes"]: r["bound_per_rep_s"] * 1e3 for r in points
                     if r["op"] == op and r["impl"] == impl and r["nodes"] == n}
            bs = sorted(bound)
            ax.plot(bs, [bound[m] for m in bs], "k--", lw=1, label="physical bound")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_title(f"{n} sender node{'s' if n > 1 else ''}")
            ax.set_xlabel("message size (bytes)")
            ax.set_ylabel(f"time per {op} (ms)")
            ax.grid(True, which="both", alpha=0.3)
        for ax in list(axes.flat)[len(nodes):]:
            ax.axis("off")
        axes.flat[0].legend(fontsize=7)
        fig.suptitle(f"{op}, {impl}: median per-operation time, band = min-max over repetitions")
        fig.tight_layout()
        out.append(page.png(fig, outdir, f"time-{op}-{impl}.png"))
    return out


def fig_heatmap(summary: list[dict], outdir: Path) -> list[str]:
    import matplotlib.pyplot as plt
    out = []
    for op, impl, var in sorted({(s["op"], s["impl"], s["variant"]) for s in summary}):
        ss = [s for s in summary if (s["op"], s["impl"], s["variant"]) == (op, impl, var) and s["ratio"] is not None]
        if not ss:
            continue
        nodes = sorted({s["nodes"] for s in ss})
        sizes = sorted({s["size_bytes"] for s in ss})
        grid = [[math.nan] * len(sizes) for _ in nodes]
        for s in ss:
            grid[nodes.index(s["nodes"])][sizes.index(s["size_bytes"])] = s["ratio"]
        fig, ax = plt.subplots(figsize=(1.0 + 0.9 * len(sizes), 1.0 + 0.55 * len(nodes)))
        page.ratio_heatmap(fig, ax, grid, origin="lower")
        ax.set_xticks(range(len(sizes)), [fmt_size(m) for m in sizes])
        ax.set_yticks(range(len(nodes)), [str(n) for n in nodes])
        ax.set_xlabel("message size")
        ax.set_ylabel("sender nodes")
        ax.set_title(f"{op}, {impl}, split ({var}) / direct time\n(< 1: splitting is faster)", fontsize=9)
        out.append(page.png(fig, outdir, f"ratio-{op}-{impl}-{var.replace(':', '-')}.png"))
    return out


def fig_cpu(points: list[dict], outdir: Path) -> list[str]:
    """Alter and Glück Figs 11-13: sender, root and gateway CPU vs size, per node count."""
    import matplotlib.pyplot as plt
    out = []
    g = _groups(points)
    for op, impl in sorted({(r["op"], r["impl"]) for r in points}):
        sel = [r for r in points if r["op"] == op and r["impl"] == impl]
        nodes = sorted({r["nodes"] for r in sel})
        sizes = sorted({r["size_bytes"] for r in sel})
        variants = sorted({_variant(r) for r in sel}, key=lambda v: (v != "direct", v))
        fig, axes = plt.subplots(1, 3, figsize=(15, 3.8))
        for ni, n in enumerate(nodes):
            for v in variants:
                def series(fn):
                    xs, ys = [], []
                    for m in sizes:
                        vals = [fn(r) for r in g.get((op, impl, v, n, m), [])]
                        vals = [x for x in vals if x is not None and not math.isnan(x)]
                        if vals:
                            xs.append(m)
                            ys.append(statistics.median(vals))
                    return xs, ys
                # One colour per node count, one line style per mode: the three panels read alike.
                kw = dict(color=f"C{ni % 10}", ls="-" if v == "direct" else "--", marker=".", label=f"{n} nodes, {v}")
                axes[0].plot(*series(lambda r: r["cpu"]["senders"]["mean_pct"]), **kw)
                axes[1].plot(*series(lambda r: r["cpu"]["root"]["pct"]), **kw)
                if v != "direct":
                    axes[2].plot(*series(lambda r: _busiest_gw(r, "pct")), **kw)
                    if any(_busiest_gw(r, "softirq_pct") is not None for r in sel):
                        axes[2].plot(*series(lambda r: _busiest_gw(r, "softirq_pct")),
                                     **dict(kw, ls=":", marker="", label=f"{n} nodes, {v}: of which softirq"))
        for ax, title in zip(axes, ("sender nodes (mean, % of a core)", "root node (% of a core)",
                                    "busiest gateway daemon (% of a core)")):
            ax.set_xscale("log")
            ax.set_title(title, fontsize=9)
            ax.set_xlabel("message size (bytes)")
            ax.grid(True, alpha=0.3)
        axes[2].axhline(25, color="k", lw=0.8, ls=":")
        axes[0].legend(fontsize=6, ncol=2)
        if axes[2].lines:
            axes[2].legend(fontsize=6, loc="lower right")
        fig.suptitle(f"{op}, {impl}: process CPU during the measurement (MPI libraries poll while waiting)")
        fig.tight_layout()
        out.append(page.png(fig, outdir, f"cpu-{op}-{impl}.png"))
    return out


def fig_strategies(summary: list[dict], outdir: Path) -> list[str]:
    import matplotlib.pyplot as plt
    variants = sorted({s["variant"] for s in summary})
    if len(variants) < 2:
        return []
    out = []
    for op, impl in sorted({(s["op"], s["impl"]) for s in summary}):
        pts = sorted({(s["nodes"], s["size_bytes"]) for s in summary if (s["op"], s["impl"]) == (op, impl)})
        fig, ax = plt.subplots(figsize=(min(14, max(6, 0.3 * len(pts) * len(variants))), 4))
        w = 0.8 / len(variants)
        for i, v in enumerate(variants):
            d = {(s["nodes"], s["size_bytes"]): s["ratio"] for s in summary
                 if (s["op"], s["impl"], s["variant"]) == (op, impl, v)}
            ax.bar([k + i * w for k in range(len(pts))], [d.get(p) or 0 for p in pts], width=w, label=v)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xticks([k + 0.4 - w / 2 for k in range(len(pts))], [f"{n}×{fmt_size(m)}" for n, m in pts],
                      rotation=60, fontsize=7)
        ax.set_ylabel("split / direct time")
        ax.set_title(f"{op}, {impl}: gateway variants (strategy, WAN congestion control, LAN tuning and pacing)")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        fig.tight_layout()
        out.append(page.png(fig, outdir, f"strategies-{op}-{impl}.png"))
    return out


# -- tables ----------------------------------------------------------------------

def retrans_tables(points: list[dict]) -> str:
    """Alter and Glück Tables 1-2, our numbers beside MPI5000's (medians over repetitions, per 200 operations)."""
    parts = []
    for counter, seed, title in (("TCPFastRetrans", SEED_FAST_RETRANS, "Table 1: fast retransmits"),
                                 ("TCPTimeouts", SEED_TIMEOUTS, "Table 2: retransmission timeouts"),
                                 ("RetransSegs", {}, "Retransmitted segments")):
        for op, impl in sorted({(r["op"], r["impl"]) for r in points}):
            sel = [r for r in points if (r["op"], r["impl"]) == (op, impl)]
            split_vars = sorted({_variant(r) for r in sel if r["mode"] == "split"})
            rows = []
            for n, m in sorted({(r["nodes"], r["size_bytes"]) for r in sel}):
                def val(variant, cls):
                    rs = [r for r in sel if (r["nodes"], r["size_bytes"]) == (n, m) and _variant(r) == variant]
                    # Rows ran with different rep counts under --budget: scale to 200 like the seed.
                    v = median_of([r["counters"][cls].get(counter, 0) * 200 / r["reps"] for r in rs])
                    return "-" if v is None else f"{v:.0f}"
                row = [n, fmt_size(m), val("direct", "local"), val("direct", "distant")]
                for sv in split_vars[:1]:
                    row += [val(sv, "local"), val(sv, "distant")]
                s = seed.get((n, m))
                row += [" / ".join(map(str, s)) if s else ""] if seed else []
                rows.append(row)
            headers = ["nodes", "size", "direct local", "direct distant (WAN)", "split local", "split distant (WAN)"]
            if seed:
                headers.append("MPI5000 (Alter and Glück): direct distant / split local / split distant")
            parts.append(f"<h3>{title}, {op}, {impl} (per 200 operations, median over repetitions)</h3>"
                         + page.table(headers, rows))
    return "".join(parts)


def drop_tables(points: list[dict]) -> str:
    """Which of the lab's queues dropped packets (per 200 operations, median over repetitions)."""
    have = [r for r in points if "drops" in r]
    if not have:
        return "<p>This result file predates per-queue drop counts (bench before git cab96ce).</p>"

    def cell(rs: list[dict]) -> str:
        qs = sorted({q for r in rs for q in r["drops"]})
        med = {q: median_of([r["drops"].get(q, 0) * 200 / r["reps"] for r in rs]) for q in qs}
        top = sorted(((v, q) for q, v in med.items() if v), reverse=True)[:3]
        return "; ".join(f"{html.escape(q)}: {v:.0f}" for v, q in top) or ("-" if rs else "")

    parts = [_per_point_tables(have, cell, "queues that dropped")]
    emu = [r for r in have if r.get("emulator")]
    if emu:
        behind = [r for r in emu if fell_behind(r["emulator"])]
        worst = max(r["emulator"]["worst_late_us"] for r in emu)
        kept = "; ".join(f"{sum(1 for r in emu if r['mode'] == m and not fell_behind(r['emulator']))} of "
                         f"{sum(1 for r in emu if r['mode'] == m)} {m} runs" for m in ("direct", "split")
                         if any(r["mode"] == m for r in emu))
        parts.append(f"<p>The delay line kept its schedule (at most {LATE_FRACTION_MAX:.0%} of frames over its "
                     f"lateness threshold, no single frame {STALL_US / 1000:g} ms late) in {kept}; "
                     f"its worst lateness in any run was {worst / 1000:.1f} ms. "
                     + ("Runs where it fell behind: " + "; ".join(html.escape(
                         f"{r['impl']} {r['mode']} n={r['nodes']} {fmt_size(r['size_bytes'])} #{r['repeat']} "
                         f"({r['emulator']['late_fraction']:.1%} late, worst {r['emulator']['worst_late_us'] / 1000:.1f} ms)")
                         for r in behind[:8]) + ("…" if len(behind) > 8 else "") + "." if behind else "") + "</p>")
    return "".join(parts)


def data_path_frames(rows: list[dict]) -> tuple[str, float] | None:
    """The queue with the smallest mean frame among those that carried the runs' data
    (at least half the bytes of the busiest queue), over all `rows` together: (label, mean frame)."""
    tot: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in rows:
        for q, c in r.get("frames", {}).items():
            tot[q][0] += c["packets"]
            tot[q][1] += c["bytes"]
    if not tot:
        return None
    top = max(b for _, b in tot.values())
    return min(((q, b / p) for q, (p, b) in tot.items() if p and b >= top / 2), key=lambda x: x[1])


def frame_tables(points: list[dict]) -> str:
    """Per point and mode, the data path's hop with the shortest frames and the efficiency they allow."""
    have = [r for r in points if "frames" in r]
    if not have:
        return "<p>This result file predates per-queue frame counts (bench before git 5cbcca0).</p>"

    def cell(rs: list[dict]) -> str:
        hop = data_path_frames(rs)
        return "-" if hop is None else f"{hop[1]:.0f} B at {html.escape(hop[0])} (ceiling {frame_ceiling(hop[1]):.2f})"

    return _per_point_tables(have, cell, "shortest frames on the data path")


def _per_point_tables(rows: list[dict], cell, what: str) -> str:
    """One table per (op, impl): a row per (nodes, size), a `cell(runs)` for direct and for
    the first split variant (the runs of that point and mode)."""
    parts = []
    for op, impl in sorted({(r["op"], r["impl"]) for r in rows}):
        sel = [r for r in rows if (r["op"], r["impl"]) == (op, impl)]
        split_vars = sorted({_variant(r) for r in sel if r["mode"] == "split"})
        table = []
        for n, m in sorted({(r["nodes"], r["size_bytes"]) for r in sel}):
            table.append([n, fmt_size(m)] + [cell([r for r in sel if (r["nodes"], r["size_bytes"]) == (n, m)
                                                   and _variant(r) == variant])
                                             for variant in ["direct", *split_vars[:1]]])
        parts.append(f"<h3>{op}, {impl}</h3>" + page.table(["nodes", "size", f"direct: {what}", f"split: {what}"], table))
    return "".join(parts)


def targets(summary: list[dict], points: list[dict]) -> tuple[str, list[dict]]:
    """The issue's targets, evaluated on the gather rows with the default split variant."""
    ss = [s for s in summary if s["op"] == "gather" and s["ratio"] is not None]
    if not ss:
        return "<p>No gather points with both modes: targets not evaluated.</p>", []
    default_var = statistics.mode([s["variant"] for s in ss])
    ss = [s for s in ss if s["variant"] == default_var]
    res = []

    def add(name, sel, pred, fmt, reach=None):
        """`reach(s)`: False where the target lies below what physics allows at that point."""
        if not sel:
            res.append({"target": name, "met": None, "worst": "no points", "points": 0})
            return
        bad = [s for s in sel if not pred(s)]
        res.append({"target": name, "met": not bad, "points": len(sel),
                    "worst": fmt(max(sel, key=lambda s: s["_k"])) if sel else "", "misses": [
                        f"{s['impl']} n={s['nodes']} {fmt_size(s['size_bytes'])}: {fmt(s)}" for s in bad][:8],
                    "out_of_reach": None if reach is None else sum(1 for s in bad if not reach(s))})

    def ratio_target(name, sel, limit):
        # Split cannot beat the bound, so split/direct >= direct's efficiency: where direct
        # already runs closer to the bound than `limit`, no gateway could meet the target.
        add(name, sel, lambda s: s["ratio"] <= limit,
            lambda s: f"{s['ratio']:.2f}" + ("" if s.get("ratio_floor") is None else f" (floor {s['ratio_floor']:.2f})"),
            reach=lambda s: s.get("ratio_floor") is None or s["ratio_floor"] <= limit)

    for s in ss:
        s["_k"] = s["ratio"]
    ratio_target("split/direct ≤ 0.5 for 100 KB-1 MB with 4-20 nodes",
                 [s for s in ss if 100e3 <= s["size_bytes"] <= 1e6 and 4 <= s["nodes"] <= 20], 0.5)
    ratio_target("split/direct ≤ 0.9 for ≥ 1 MB with ≥ 12 nodes",
                 [s for s in ss if s["size_bytes"] >= 1e6 and s["nodes"] >= 12], 0.9)
    ratio_target("split/direct ≤ 1.03 for ≤ 10 KB", [s for s in ss if s["size_bytes"] <= 10e3], 1.03)
    # Below 50 direct retransmissions the ratio would demand a fraction of a segment.
    wan = [dict(s, _k=(s["wan_retrans_split"] or 0) / max(s["wan_retrans_direct"] or 0, 1)) for s in ss
           if (s["wan_retrans_direct"] or 0) >= 50]
    add("split WAN retransmissions ≤ 1/50 of direct's (points where direct had ≥ 50)", wan,
        lambda s: (s["wan_retrans_split"] or 0) * 50 <= s["wan_retrans_direct"],
        lambda s: f"{s['wan_retrans_split']:g} vs {s['wan_retrans_direct']:g}")
    add("no WAN timeouts in split mode", [dict(s, _k=s["wan_rto_split"] or 0) for s in ss],
        lambda s: not s["wan_rto_split"], lambda s: f"{s['wan_rto_split']} RTOs")
    add("efficiency ≥ 0.8 for ≥ 100 KB (split)",
        [dict(s, _k=-(s["efficiency_split"] or 0)) for s in ss if s["size_bytes"] >= 100e3],
        lambda s: (s["efficiency_split"] or 0) >= 0.8, lambda s: f"{s['efficiency_split']:.2f}")
    cpu = _cpu_points(points, default_var)
    add("node CPU split ≤ direct + 5 points", [dict(c, _k=c["delta"]) for c in cpu],
        lambda c: c["delta"] <= 5, lambda c: f"{c['delta']:+.1f} points")
    add("gateway CPU ≤ 25 % of a core", [dict(c, _k=c["gw"]) for c in cpu if c["gw"] is not None],
        lambda c: c["gw"] <= 25,
        lambda c: f"{c['gw']:.1f} %" + ("" if c["gw_softirq"] is None else f" (softirq in its context {c['gw_softirq']:.1f})"))
    rows = [[r["target"], "<b style='color:green'>met</b>" if r["met"] else
             ("n/a" if r["met"] is None else "<b style='color:#b00'>missed</b>"),
             r["points"], r["worst"], "-" if r.get("out_of_reach") is None else r["out_of_reach"],
             "; ".join(r.get("misses", []))] for r in res]
    return (f"<p>Evaluated on gather, split variant <code>{html.escape(default_var)}</code>, medians over repetitions. "
            "For the time ratios, <i>floor</i> is direct mode's efficiency: split takes at least the physical "
            "bound, so split/direct cannot go below it, and a miss whose floor is above the target is out of "
            "any gateway's reach at that point.</p>"
            + page.table(["target", "verdict", "points", "worst point", "misses out of physical reach",
                      "misses (first 8)"], rows)), res


def _cpu_points(points: list[dict], split_var: str) -> list[dict]:
    g = defaultdict(lambda: defaultdict(list))
    for r in points:
        if r["op"] != "gather":
            continue
        g[(r["impl"], r["nodes"], r["size_bytes"])][variant_tag(r)].append(r)
    out = []
    for (impl, n, m), by in sorted(g.items()):
        d, s = by.get("direct"), by.get(split_var)
        if not d or not s:
            continue
        dn = median_of([r["cpu"]["senders"]["mean_pct"] for r in d])
        sn = median_of([r["cpu"]["senders"]["mean_pct"] for r in s])
        gw = median_of([_busiest_gw(r, "pct") for r in s])
        sirq = median_of([_busiest_gw(r, "softirq_pct") for r in s])
        if dn is None or sn is None:
            continue
        out.append({"impl": impl, "nodes": n, "size_bytes": m, "delta": sn - dn, "gw": gw, "gw_softirq": sirq})
    return out


def _busiest_gw(r: dict, field: str) -> float | None:
    """`field` of the gateway that used the most CPU in a run (None if not recorded)."""
    gws = [g for g in r["cpu"]["gateways"].values() if g.get("pct") is not None]
    if not gws:
        return None
    return max(gws, key=lambda g: g["pct"]).get(field)


def build_report(paths: list[Path], outdir: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    metas, points, failures = _load(paths)
    outdir.mkdir(parents=True, exist_ok=True)
    summary = summarize(points)
    tgt_html, _ = targets(summary, points)
    meta = metas[0] if metas else {}
    mach = meta.get("machine", {})
    topo = meta.get("topology", {})
    sumrows = [[s["op"], s["impl"], s["nodes"], fmt_size(s["size_bytes"]), s["variant"],
                f"{s['direct_s']:.3f}" if s["direct_s"] is not None else "-",
                f"{s['split_s']:.3f}" if s["split_s"] is not None else "-",
                "-" if s["ratio"] is None else f"{s['ratio']:.2f} ({s['ratio_min']:.2f}-{s['ratio_max']:.2f})",
                s["repeats"], f"{s['wan_retrans_direct']} → {s['wan_retrans_split']}",
                "-" if s["efficiency_split"] is None else f"{s['efficiency_split']:.2f}"] for s in summary]
    figs = fig_time(points, outdir) + fig_heatmap(summary, outdir) + fig_strategies(summary, outdir) + fig_cpu(points, outdir)
    reps = sorted({r["reps"] for r in points})
    hangs = sum(1 for r in points if r.get("finalize_hang"))
    notes = [f"{len(points)} runs from {', '.join(html.escape(str(p)) for p in paths)}.",
             f"Repetitions per run: {', '.join(map(str, reps))} (capped by --budget for large points; counters in "
             "Tables 1-2 are scaled to 200 operations, times are each run's own total, and direct and split of a "
             "point ran the same repetitions).",
             "Ratios are split/direct per repetition (the two ran back to back), then the median and min-max over repetitions.",
             "Local = connections with both ends in one site (node↔node, node↔gateway); distant = across the WAN "
             f"(counters attributed per connection by the kernel's tcp_retransmit_skb trace: "
             f"{html.escape(', '.join(sorted({r['counters'].get('attribution', '?') for r in points})))}).",
             "Physical bound per gather (timed at the root from the start of its barrier, as in MPI5000, Alter and Glück): one WAN "
             "round trip (the barrier must reach the senders, their data the root) plus n·m bytes at the payload rate "
             "of the narrowest point where the senders' flows converge (MSS 1448 in a 1514-byte frame); "
             "efficiency = bound / measured.",
             f"Rank environment beyond the defaults (--rank-env): "
             f"{html.escape(' '.join(f'{k}={v}' for k, v in sorted(points[0].get('rank_env', {}).items())) or 'none')}.",
             "CPU: each rank's process CPU (user+sys, all threads) over its measurement window, and each gateway "
             "daemon's CPU over the same window. All namespaces share one kernel, which charges the softirq work it "
             "runs on a process's way out of a system call to that process: for a gateway, its own packets' receive "
             "path but also the emulated switch and the peers' TCP that the same softirq carries packets through. "
             "Where traced, the gateway's part spent in softirq is shown beside its total (dotted in the CPU "
             "figures); a real gateway host's CPU lies between the total and the total minus that part."]
    if hangs:
        notes.append(f"{hangs} run(s) hit MPICH 4.0.2's MPI_Finalize hang (pmodels/mpich#6596) after printing "
                     "their results; the results were kept.")
    if failures:
        shown = "; ".join(html.escape(f"{r['impl']} {r['mode']} n={r['nodes']} {fmt_size(r['size_bytes'])} #{r['repeat']}")
                          for r in failures[:8])
        notes.append(f"<b>{len(failures)} run(s) failed</b> and have no result ({shown}{' …' if len(failures) > 8 else ''}); "
                     "their errors are in the result file's failure rows.")
    other = sorted({o for m in metas for o in m.get("other_labs", [])})
    if other:
        notes.append(f"Other labs were up during the sweep (namespace prefixes: {', '.join(map(html.escape, other))}); "
                     "they share the CPU, and their retransmissions could be counted in the trace attribution.")
    doc = f"""<!doctype html><html><head><meta charset="utf-8"><title>gridsplit bench report</title>
<style>body{{font-family:sans-serif;max-width:1200px;margin:auto;padding:1em}}table{{border-collapse:collapse;margin:.5em 0}}
td,th{{border:1px solid #ccc;padding:2px 6px;font-size:13px;text-align:right}}th{{background:#eee}}
figure{{margin:1em 0}}img{{max-width:100%}}figcaption{{font-size:11px;color:#666}}</style></head><body>
<h1>gridsplit bench report</h1>
<p>Topology <b>{html.escape(str(topo.get('name', '?')))}</b> (scale {topo.get('scale', '?')}), machine {html.escape(str(mach.get('hostname', '?')))}:
{html.escape(str(mach.get('cpu', '?')))}, {mach.get('cores', '?')} cores, kernel {html.escape(str(mach.get('kernel', '?')))},
git {html.escape(str(mach.get('git', '?')))}, started {html.escape(str(mach.get('date', '?')))}.</p>
<p>Command: <code>{html.escape(' '.join(meta.get('command', [])))}</code></p>
<ul>{''.join(f'<li>{n}</li>' for n in notes)}</ul>
<h2>Targets</h2>{tgt_html}
<h2>Summary</h2>{page.table(['op', 'impl', 'nodes', 'size', 'split variant', 'direct (s)', 'split (s)', 'split/direct (min-max)', 'repeats', 'WAN retrans direct → split', 'efficiency split'], sumrows)}
<h2>Figures</h2>{''.join(figs)}
<h2>Retransmissions and timeouts (MPI5000, Alter and Glück, Tables 1-2)</h2>{retrans_tables(points)}
<h2>Where packets were dropped</h2>
<p>Drops counted by the lab's own queues during each run (tbf at every NIC, switch port, uplink and WAN entry; the
delay line's queue and socket), per 200 operations, median over repetitions, the three largest per cell. A
retransmission without a drop here resent a segment that was not lost (a loss probe, or a timer that fired
before its acknowledgment came).</p>{drop_tables(points)}
<h2>Frame sizes on the data path</h2>
<p>Frames and bytes sent by each of the lab's queues during each run. Of the queues that carried the data (at
least half the bytes of the busiest), the one with the shortest mean frame, Ethernet header included, over
all repetitions. Each frame carries {HEADERS} bytes of headers, so a hop whose frames are short cannot reach the
payload rate the bound assumes (full-size frames): <i>ceiling</i> is the efficiency its frames allow for the
bound's transfer term (n·m at the bottleneck rate), which dominates from about 100 KB up; small messages make
short frames anyway, and their bound is mostly the round trip. Split
mode's LAN flows into the sending gateway send such frames: its incast control holds each to a window of one
segment or less, Linux rounds a one-segment window up to its window unit (1448 to 1536) and the sender fills
it with a full segment and an 88-byte one, and a window under one segment with two short ones.</p>{frame_tables(points)}
</body></html>"""
    path = outdir / "index.html"
    path.write_text(doc)
    return path


@click.command()
@click.argument("results", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--out", "-o", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Directory for index.html and the PNGs [gridsplit-out/report/DIR-NAME: the first file's "
                   "directory and name, without .jsonl].")
def report(results: tuple[Path, ...], out: Path | None) -> None:
    """Build an HTML report with PNG plots from `gridsplit bench` result files (JSONL)."""
    paths = list(results)
    # `bench app` files have their own page, and so have the sweeps of several grids (matrix.py).
    build = (build_app_report if holds_app_runs(paths)
             else build_matrix_report if grid_count(paths) > 1 else build_report)
    # Not beside the file by default: committed results would gain generated pages.
    path = build(paths, out or Path("gridsplit-out/report") / f"{paths[0].resolve().parent.name}-{paths[0].stem}")
    click.echo(f"report: {path}")
