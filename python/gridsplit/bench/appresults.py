"""`gridsplit bench app` results: the summary (medians over rounds, split/direct with
min-max, correctness) printed at the end, and the HTML report beside the JSONL."""

from __future__ import annotations

import html
import json
import statistics
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from ..errors import GridsplitError
from .appsummary import correctness, summarize_apps
from . import page
from .results import num, read_rows, variant_tag


def _variants(summary: list[dict[str, Any]]) -> list[str]:
    """The split variants of the runs (an A/B's side labels, or sweep-like tags), when there are several:
    the tables then say which row is which."""
    tags = sorted({s["variant"] for s in summary if s["variant"]})
    return tags if len(tags) > 1 else []


def render_app_summary(summary: list[dict[str, Any]], con: Console, title: str) -> None:
    t = Table(title=title)
    multi = bool(_variants(summary))
    for c in ("app", "impl", *(["split as"] if multi else []), "ranks", "direct", "split", "split/direct (min-max)",
              "rounds", "WAN retrans direct→split", "gw CPU", "correctness"):
        t.add_column(c, justify="left" if c in ("app", "impl", "split as", "correctness") else "right")
    for s in summary:
        ratio = "-" if s["ratio"] is None else f"{s['ratio']:.2f} ({s['ratio_min']:.2f}-{s['ratio_max']:.2f})"
        col = "green" if s["ratio"] is not None and s["ratio"] <= 1.0 else "red"
        w = s["wan_retrans"]
        t.add_row(s["app"], s["impl"], *([s["variant"] or "-"] if multi else []),
                  f"{s['ranks']} ({'+'.join(map(str, s['sites'].values()))})",
                  _s(s["direct_s"]), _s(s["split_s"]), f"[{col}]{ratio}[/{col}]", str(s["rounds"]),
                  f"{num(w['direct'])} → {num(w['split'])}",
                  "-" if s["gw_cpu_pct"] is None else f"{s['gw_cpu_pct']:.0f} %", correctness(s))
    con.print(t)
    con.print(f"[dim]times: the app's own where it reports one ({', '.join(sorted({s['app'] for s in summary if s['time_source'] == 'app'})) or 'none'}), "
              "else wall; ratios are per round (direct and split ran back to back), median and min-max over rounds.[/dim]")


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f} s"


# -- HTML ---------------------------------------------------------------------------------

def holds_app_runs(paths: list[Path]) -> bool:
    """Whether result files hold `bench app` runs and no sweep points (`gridsplit report` draws them here)."""
    kinds = {r.get("kind") for p in paths if p.exists() for r in read_rows(p)}
    return "app" in kinds and "point" not in kinds


def _load(paths: list[Path]) -> tuple[list[dict], list[dict]]:
    """Meta rows and app runs of the result files."""
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise GridsplitError(f"{', '.join(missing)}: no such result file")
    rows = [r for p in paths for r in read_rows(p)]
    runs = [r for r in rows if r.get("kind") == "app"]
    if not runs:
        raise GridsplitError(f"{', '.join(map(str, paths))}: no `bench app` runs in the file(s)")
    return [r for r in rows if r.get("kind") == "meta"], runs


def fig_times(rows: list[dict], summary: list[dict], outdir: Path) -> str:
    """Time per app and MPI: direct and split medians (each split variant apart), bars from min to max over rounds."""
    import matplotlib.pyplot as plt
    cells = sorted({(s["app"], s["impl"]) for s in summary})
    labels = [f"{a}\n{i}" for a, i in cells]
    series = [("direct", "direct")] + ([(v, v) for v in _variants(summary)] or [("split", None)])
    width = 0.76 / len(series)
    fig, ax = plt.subplots(figsize=(max(4.5, 1.6 * len(labels)), 3.6))
    for k, (name, tag) in enumerate(series):
        med, lo, hi = [], [], []
        for app, impl in cells:
            vals = [r["time_s"] for r in rows if r["app"] == app and r["impl"] == impl and r["status"] == "ok"
                    and (r["mode"] == name if tag in ("direct", None) else variant_tag(r) == tag)]
            m = statistics.median(vals) if vals else 0
            med.append(m)
            lo.append(m - min(vals) if vals else 0)
            hi.append(max(vals) - m if vals else 0)
        xs = [i + (k - (len(series) - 1) / 2) * width for i in range(len(labels))]
        ax.bar(xs, med, width, yerr=[lo, hi], capsize=3, label=name)
    ax.set_xticks(range(len(labels)), labels, fontsize=8)
    ax.set_ylabel("time (s): median, min-max")
    ax.legend(fontsize=8)
    return page.png(fig, outdir, "app-times.png")


def build_app_report(paths: list[Path], outdir: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    metas, rows = _load(paths)
    outdir.mkdir(parents=True, exist_ok=True)
    summary = summarize_apps(rows)
    meta = metas[0] if metas else {}
    mach, topo = meta.get("machine", {}), meta.get("topology", {})
    e = html.escape

    def ratio(s):
        return "-" if s["ratio"] is None else f"{s['ratio']:.2f} ({s['ratio_min']:.2f}–{s['ratio_max']:.2f})"

    multi = bool(_variants(summary))
    head = ("app", "impl", *(["split as"] if multi else []), "ranks (per site)", "direct (s)", "split (s)",
            "split/direct (min–max)", "rounds", "WAN retrans direct → split", "gateway CPU (split)", "correctness")
    body = "".join(
        "<tr>" + "".join(f"<td>{e(str(c))}</td>" for c in (
            s["app"], s["impl"], *([s["variant"] or "-"] if multi else []),
            f"{s['ranks']} ({', '.join(f'{k} {v}' for k, v in s['sites'].items())})",
            _s(s["direct_s"]), _s(s["split_s"]), ratio(s), s["rounds"],
            f"{num(s['wan_retrans']['direct'])} → {num(s['wan_retrans']['split'])}",
            "-" if s["gw_cpu_pct"] is None else f"{s['gw_cpu_pct']:.0f} % of a core", correctness(s))) + "</tr>"
        for s in summary)
    figs = ""
    for s in summary:
        if s["figures"]:
            side = f", split as {e(s['variant'])}" if multi else ""
            figs += f"<h3>{e(s['app'])} ({e(s['impl'])}{side}): reported figures, medians</h3><table><tr><th>figure</th>" \
                    "<th>direct</th><th>split</th><th>split/direct</th></tr>"
            for f, v in s["figures"].items():
                d, sp = v["direct"], v["split"]
                r = f"{sp / d:.2f}" if d and sp is not None else "-"
                figs += f"<tr><td>{e(f)}</td><td>{num(d)}</td><td>{num(sp)}</td><td>{r}</td></tr>"
            figs += "</table>"
        t = s["tests"]
        if t and not t["identical"]:
            figs += f"<h3>{e(s['app'])} ({e(s['impl'])}): tests whose outcome differs</h3><ul>" + "".join(
                f"<li>{e(tid)}: {e(json.dumps(by))}</li>" for tid, by in sorted(t["differs"].items())[:200]) + "</ul>"
    bad = [r for r in rows if r["status"] != "ok" or r["verified"] is False]
    fails = "".join(f"<li>{e(r['app'])} {e(r['impl'])} {e(r['mode'])} round {r['repeat'] + 1}: {e(r['status'])}"
                    f" (exit {r['exit_status']}, verified {r['verified']}): <code>{e(' | '.join(r['output_tail']))}</code></li>"
                    for r in bad)
    doc = f"""<!doctype html><html><head><meta charset="utf-8"><title>gridsplit bench app report</title>
<style>body{{font-family:sans-serif;max-width:1200px;margin:auto;padding:1em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:2px 6px;font-size:13px}}th{{background:#eee}}img{{max-width:100%}}</style></head><body>
<h1>gridsplit bench app</h1>
<p>Topology <b>{e(str(topo.get('name', '?')))}</b> (scale {topo.get('scale', '?')}), machine {e(str(mach.get('hostname', '?')))}:
{e(str(mach.get('cpu', '?')))}, {mach.get('cores', '?')} cores, git {e(str(mach.get('git', '?')))}, started {e(str(mach.get('date', '?')))}.</p>
<p>Command: <code>{e(' '.join(meta.get('command', [])))}</code></p>
<p>{len(rows)} runs. Times are the app's own where it reports one, else wall time. Direct and split ran back to back in
each round, the order alternating; ratios are split/direct per round, then the median and min–max over rounds.
Lab timings on a shared 2-core machine are noisy.</p>
<table><tr>{''.join(f'<th>{h}</th>' for h in head)}</tr>{body}</table>
{fig_times(rows, summary, outdir)}
{figs}
{f'<h2>Failed, timed out or not verified</h2><ul>{fails}</ul>' if fails else ''}
</body></html>"""
    path = outdir / "index.html"
    path.write_text(doc)
    return path
