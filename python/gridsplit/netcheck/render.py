"""Showing a netcheck report: terminal matrices, a MaDDash-like grid, advice, heatmap PNGs.

Matrices are laid out as in Guillier et al. 2006 Tables 1-3: one row per destination, one
column per source. Throughput is TCP goodput in Mb/s as iperf3 reports it
(receiver side). The seed's own tables can be drawn beside ours (--reference,
the g5k_*.csv files), mapped by site name.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Callable

from rich.table import Table
from rich.text import Text

from ..errors import GridsplitError
from .tuning import setsockopt_text

STATUS_STYLE = {"ok": "green", "warning": "yellow", "critical": "bold red", "unmeasured": "dim"}
STATUS_COLOR = {"ok": "#2e9e44", "warning": "#f2c12e", "critical": "#d64541", "unmeasured": "#b0b0b0"}
VERDICT_SHORT = {"ok": "ok", "window-limited": "WIN", "loss-limited": "LOSS", "host-limited": "HOST",
                 "unexplained": "?", "unmeasured": "-"}


def cell_map(report: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(c["src_site"], c["dst_site"]): c for c in report.get("cells", [])}


def _short(site: str) -> str:
    return site[:8]


def site_table(report: dict[str, Any], title: str, show: Callable[[dict], Any], justify: str = "right") -> Table:
    """A destination x source table of the report's sites; show(cell) gives one cell's content."""
    sites, cells = report["sites"], cell_map(report)
    t = Table(title=title, title_justify="left")
    t.add_column("dst \\ src", style="bold")
    for s in sites:
        t.add_column(_short(s), justify=justify)
    for d in sites:
        t.add_row(d, *["" if s == d else (Text("··", style="dim") if (s, d) not in cells else show(cells[(s, d)]))
                       for s in sites])
    return t


def matrix(report: dict[str, Any], title: str, value: Callable[[dict], Any], fmt: str,
           status: Callable[[dict], str] | None = None) -> Table:
    def show(c: dict) -> Text:
        v = value(c)
        return Text(format(v, fmt) if isinstance(v, (int, float)) else "-", style=STATUS_STYLE.get(status(c), "") if status else "")
    return site_table(report, title, show)


def _get(c: dict | None, *path: str) -> Any:
    for k in path:
        if not isinstance(c, dict):
            return None
        c = c.get(k)
    return c


def grid(report: dict[str, Any]) -> Table:
    """MaDDash-like: each cell shows two squares, hosts' own settings then tuned."""
    thr = report["settings"]["thresholds"]

    def show(c: dict) -> Text:
        txt = Text()
        for phase in ("untuned", "tuned"):
            txt.append("■", style=STATUS_STYLE[_get(c, "grid", phase) or "unmeasured"])
        return txt
    return site_table(report, f"grid (■ own settings ■ tuned): OK ≥ {thr['ok']:.0%} of capacity, "
                              f"warning ≥ {thr['critical']:.0%}, critical below", show, "center")


def _verdict_table(report: dict[str, Any]) -> Table:
    def show(c: dict) -> Text:
        parts = [VERDICT_SHORT.get(_get(c, "diagnosis", p, "verdict") or "unmeasured", "?") for p in ("untuned", "tuned")]
        return Text("→".join(parts), style=STATUS_STYLE.get(_get(c, "grid", "untuned") or "unmeasured"))
    return site_table(report, "verdict, own settings → tuned (WIN window-limited, LOSS loss-limited, HOST host-limited, "
                              "? unexplained, - unmeasured)", show, "center")


def parallel_table(report: dict[str, Any]) -> Table | None:
    rows = [(c, p) for c in report.get("cells", []) for p in [{"streams": 1, **(c.get("tuned") or {})}] + c.get("parallel", [])
            if c.get("parallel")]
    if not rows:
        return None
    t = Table("pair", "streams", "aggregate Mb/s", "mean per stream", "Jain index", "retransmits", "% of capacity",
              title="parallel flows, tuned buffers (Guillier et al. 2006 Table 4)", title_justify="left")
    for c, p in rows:
        pair = f"{c['src_site']} → {c['dst_site']}"
        if "error" in p:
            t.add_row(pair, str(p["streams"]), Text(p["error"][:60], style="dim"), "", "", "", "")
            continue
        n = p["streams"]
        agg = p.get("goodput_mbps") or 0
        frac = agg / c["max_goodput_mbps"] if c.get("max_goodput_mbps") else None
        t.add_row(pair, str(n), f"{agg:.1f}", f"{agg / n:.1f}",
                  f"{p['jain']:.4f}" if p.get("jain") is not None else ("1" if n == 1 else "-"),
                  str(p.get("retransmits", "")), f"{frac:.0%}" if frac is not None else "-")
    return t


def render(report: dict[str, Any], con, details: int = 8) -> None:
    """Everything a user reads, in the order they need it."""
    n = report["settings"]["count"]
    thr = report["settings"]["thresholds"]
    status = lambda phase: (lambda c: _get(c, "grid", phase) or "unmeasured")
    con.print(matrix(report, "Table 1 — single TCP flow, hosts' own settings (goodput, Mb/s)",
                     lambda c: _get(c, "untuned", "goodput_mbps"), ".1f", status("untuned")))
    con.print(matrix(report, f"Table 2 — RTT (ms, mean of {n} pings; min/mdev in the JSON)",
                     lambda c: _get(c, "rtt", "avg_ms"), ".2f"))
    con.print(matrix(report, "Table 3 — single TCP flow, buffers sized to headroom × BDP (goodput, Mb/s)",
                     lambda c: _get(c, "tuned", "goodput_mbps"), ".1f", status("tuned")))
    con.print(matrix(report, "capacity (Mb/s at the wire; goodput can reach MSS/(MSS+overhead) of it)",
                     lambda c: c.get("capacity_mbps"), ".0f"))
    con.print(grid(report))
    con.print(_verdict_table(report))
    pt = parallel_table(report)
    if pt is not None:
        con.print(pt)

    cells = report.get("cells", [])
    shown = 0
    bad = [(c, p) for c in cells for p in ("untuned", "tuned")
           if (_get(c, "diagnosis", p, "verdict") or "ok") not in ("ok", "unmeasured")]
    if bad:
        con.print(f"\n[bold]diagnosis[/bold] ({len(bad)} flows below {thr['ok']:.0%} of capacity)")
    for c, p in bad:
        if shown >= details:
            con.print(f"  … {len(bad) - shown} more (all of them: --details {len(bad)}, or the JSON)")
            break
        label = "own settings" if p == "untuned" else "tuned"
        con.print(f"  {c['src_site']} → {c['dst_site']} ({label}): {c['diagnosis'][p]['why']}")
        shown += 1
    notes = sorted({n for c in cells for p in ("untuned", "tuned") for n in (_get(c, "diagnosis", p, "notes") or [])})
    for note in notes:
        con.print(f"  [yellow]note[/yellow]: {note}")

    un = [c for c in cells if c.get("status") != "measured"]
    if un:
        con.print(f"\n[bold]unmeasured or partial[/bold] ({len(un)} cells)")
        for c in un:
            con.print(f"  {c['src_site']} → {c['dst_site']}: [{'red' if c['status'] == 'unmeasured' else 'yellow'}]"
                      f"{c['status']}[/]: {c.get('reason')}")

    adv = report.get("site_advice") or {}
    if adv:
        con.print("\n[bold]advice[/bold]: put these lines in /etc/sysctl.d/90-netcheck.conf on each site's hosts, "
                  "then run `sysctl --system` (as root)")
        groups: dict[tuple[str, ...], list[str]] = {}
        for site, a in adv.items():
            groups.setdefault(tuple(a["sysctl"]), []).append(site)
        for lines, sites in groups.items():
            a = adv[sites[0]]
            con.print(f"  [bold]{', '.join(sites)}[/bold] (largest BDP {a['bdp_bytes'] / 1e6:.2f} MB on "
                      f"{a['worst_pair']}; buffers {a['buffer_bytes']} B = headroom × BDP rounded up):")
            for line in lines:
                con.print(f"    {line}", highlight=False, markup=False)
            con.print(f"    [dim]congestion control: {a['congestion']['algorithm']}: {a['congestion']['why']}[/dim]")
        best = max(adv.values(), key=lambda a: a["buffer_bytes"])
        con.print("  Without root, an application can ask for its own buffers (setsockopt) instead:")
        for line in setsockopt_text(best["buffer_bytes"]).splitlines():
            con.print(f"    {line}", highlight=False, markup=False)


# ---------------------------------------------------------------------------
# PNGs
# ---------------------------------------------------------------------------


def read_reference(directory: str) -> dict[str, dict[tuple[str, str], float]]:
    """Guillier et al. 2006's tables from g5k_*.csv (row = destination, column = source), keyed (src, dst)."""
    out = {}
    for key, name in (("rtt", "g5k_rtt_ms.csv"), ("untuned", "g5k_throughput_untuned_mbps.csv"),
                      ("tuned", "g5k_throughput_tuned_mbps.csv")):
        p = Path(directory) / name
        if not p.exists():
            continue
        rows = [r for r in csv.reader(l for l in p.read_text().splitlines() if not l.startswith("#")) if r]
        if not rows:
            raise GridsplitError(f"{p}: empty; --reference takes the directory of Guillier et al.'s tables "
                                 f"(a header row of sites, then one row per destination site)")
        head = rows[0][1:]
        m = {}
        for i, r in enumerate(rows[1:], 2):
            for src, v in zip(head, r[1:]):
                if v.strip():
                    try:
                        m[(src, r[0])] = float(v)
                    except ValueError:
                        raise GridsplitError(f"{p}: row {i} ({r[0]}), column {src}: {v!r} is not a number; "
                                             f"fix the table or leave the cell empty") from None
        out[key] = m
    return out


def heatmaps(report: dict[str, Any], path: Path, reference: dict | None = None) -> Path:
    """RTT, own-settings and tuned goodput heatmaps (and the seed's beside them, if given)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    sites, cells = report["sites"], cell_map(report)
    cap = max((c.get("max_goodput_mbps") or 0 for c in cells.values()), default=0) or None
    panels = [("RTT (ms)", lambda c: _get(c, "rtt", "avg_ms"), "rtt", "viridis", None),
              ("goodput, own settings (Mb/s)", lambda c: _get(c, "untuned", "goodput_mbps"), "untuned", "RdYlGn", cap),
              ("goodput, tuned buffers (Mb/s)", lambda c: _get(c, "tuned", "goodput_mbps"), "tuned", "RdYlGn", cap)]
    rows = 2 if reference else 1
    n = len(sites)
    size = max(3.2, 0.5 * n + 1.2)
    fig, axes = plt.subplots(rows, 3, figsize=(3 * size + 1.5, rows * size + 0.6), squeeze=False)
    topo = (report.get("target", {}).get("topology") or {})
    label = topo.get("name") or report.get("target", {}).get("hosts_file", "")
    scale = topo.get("scale", 1)
    for j, (title, get, key, cmap, vmax) in enumerate(panels):
        sources = [("netcheck: " + label + (f" (rates / {scale:g})" if scale and scale != 1 else ""),
                    lambda s, d: get(cells[(s, d)]) if (s, d) in cells else None, vmax)]
        if reference:
            ref = reference.get(key, {})
            sources.append(("Guillier et al. (Grid'5000, 2006)", lambda s, d, ref=ref: ref.get((s, d)),
                            941.0 if key != "rtt" else None))
        for i, (who, val, vm) in enumerate(sources):
            ax = axes[i][j]
            m = np.full((n, n), np.nan)
            for a, s in enumerate(sites):
                for b, d in enumerate(sites):
                    v = val(s, d) if s != d else None
                    if v is not None:
                        m[b, a] = v
            im = ax.imshow(m, cmap=cmap, vmin=0, vmax=vm if vm else (np.nanmax(m) if np.isfinite(m).any() else 1))
            for a in range(n):
                for b in range(n):
                    if np.isfinite(m[b, a]):
                        v = m[b, a]
                        ax.text(a, b, f"{v:.0f}" if v >= 100 else f"{v:.1f}", ha="center", va="center",
                                fontsize=max(5, 9 - n // 3))
            ax.set_xticks(range(n), [s[:4] for s in sites], rotation=90 if n > 4 else 0, fontsize=8)
            ax.set_yticks(range(n), [s[:4] for s in sites], fontsize=8)
            ax.set_xlabel("source", fontsize=8)
            ax.set_ylabel("destination", fontsize=8)
            ax.set_title(f"{title}\n{who}", fontsize=9)
            fig.colorbar(im, ax=ax, shrink=0.75)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def grid_png(report: dict[str, Any], path: Path) -> Path:
    """The MaDDash-like grid: each cell split, own settings (upper left) and tuned (lower right)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Polygon

    sites, cells = report["sites"], cell_map(report)
    thr = report["settings"]["thresholds"]
    n = len(sites)
    fig, ax = plt.subplots(figsize=(max(3.5, 0.55 * n + 2.2), max(3.0, 0.55 * n + 1.4)))
    for a, s in enumerate(sites):
        for b, d in enumerate(sites):
            if s == d:
                ax.add_patch(Polygon([(a, b), (a + 1, b), (a + 1, b + 1), (a, b + 1)], color="white", ec="#dddddd"))
                continue
            c = cells.get((s, d))
            up = STATUS_COLOR[_get(c, "grid", "untuned") or "unmeasured"]
            tu = STATUS_COLOR[_get(c, "grid", "tuned") or "unmeasured"]
            ax.add_patch(Polygon([(a, b), (a + 1, b), (a, b + 1)], color=up, ec="white", lw=1))
            ax.add_patch(Polygon([(a + 1, b), (a + 1, b + 1), (a, b + 1)], color=tu, ec="white", lw=1))
    ax.set_xlim(0, n)
    ax.set_ylim(n, 0)
    ax.set_xticks([i + 0.5 for i in range(n)], [s[:6] for s in sites], rotation=90 if n > 4 else 0, fontsize=8)
    ax.set_yticks([i + 0.5 for i in range(n)], [s[:6] for s in sites], fontsize=8)
    ax.set_xlabel("source")
    ax.set_ylabel("destination")
    ax.set_aspect("equal")
    ax.set_title(f"single-flow goodput / capacity: ◤ own settings, ◢ tuned\n"
                 f"OK ≥ {thr['ok']:.0%}, warning ≥ {thr['critical']:.0%}, critical below", fontsize=9)
    ax.legend(handles=[Patch(color=STATUS_COLOR[k], label=k) for k in STATUS_COLOR], fontsize=7,
              loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
