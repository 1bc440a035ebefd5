"""Bench result files: their schema, reading them, and the per-point summary
(medians over repeats, split/direct) that the sweep prints and the report draws.
Shared by sweep.py (which writes the rows) and report.py (which reads them)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from ..errors import GridsplitError
from ..tcpbound import FRAME_OVERHEAD, GOODPUT
from .. import units

SCHEMA = "gridsplit.bench/1"

HEADERS = FRAME_OVERHEAD  # Ethernet, IPv4, TCP with timestamps: every data frame carries them


def frame_ceiling(mean_frame: float) -> float:
    """The efficiency a port whose data frames average `mean_frame` bytes can reach
    against the bound (which assumes full-size frames): its payload share over GOODPUT."""
    return min(1.0, (mean_frame - HEADERS) / mean_frame / GOODPUT) if mean_frame > HEADERS else 0.0


def lan_pacing_of(row: dict[str, Any]) -> str | None:
    """A row's [gateways] lan_pacing ("auto", "on" or "off"); None for a direct run. Rows
    written before the setting existed ran without LAN pacing: "off"."""
    if row["mode"] == "direct":
        return None
    return (row.get("variant") or {}).get("lan_pacing") or "off"


def variant_tag(row: dict[str, Any]) -> str:
    """"direct", or the split run's gateway variant as "strategy:congestion", with ":no-lan-tuning" when the
    LAN legs ran untuned, ":lan-pacing-on" (or "-auto") when lan_pacing was not off, ":K-streams" when the WAN
    links had a fixed stream count, ":split-all" when every connection was split whatever the split policy, and
    ":split-none" or ":split-a-b+c-d" when the run named the pairs it split (tables, plots, file names). A
    `bench ab` row is its side's label ("A", "B", or the one given), whose settings the result file's meta row
    holds."""
    if row["mode"] == "direct":
        return "direct"
    v = row.get("variant") or {}
    if v.get("ab"):
        return v["ab"]
    streams = f":{v['wan_streams']}-streams" if v.get("wan_streams") else ""
    pacing = "" if lan_pacing_of(row) == "off" else f":lan-pacing-{lan_pacing_of(row)}"
    return (f"{v.get('strategy')}:{v.get('congestion')}{':no-lan-tuning' if v.get('lan_tuning') is False else ''}"
            f"{pacing}{streams}{'' if v.get('split') in (None, 'policy') else ':split-' + v['split']}")


def named_split(tag: str) -> str | None:
    """The split a variant tag names (variant_tag's ":split-..."): "all", "none", "a-b+c-d"; None for the policy."""
    return tag.rsplit(":split-", 1)[1] if ":split-" in tag else None


def median_of(vals) -> float | None:
    """Median of the values that are present, or None."""
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def row_key(row: dict[str, Any]) -> tuple:
    v = row.get("variant") or {}
    # The point's own node count: `--nodes all` is one key whatever the grid's size (older rows: nodes).
    return (row["op"], row["impl"], row.get("nodes_requested", row["nodes"]), row["size_bytes"], row["repeat"], row["mode"],
            v.get("strategy"), v.get("congestion"), v.get("lan_tuning"), v.get("wan_streams"), v.get("split"),
            v.get("ab"), v.get("encryption"), lan_pacing_of(row), v.get("wan_pacing"), v.get("wan_quickack"),
            v.get("lan_rto_min_us"))


# What every point row carries (row_key, summarize).
POINT_KEYS = ("op", "impl", "nodes", "size_bytes", "repeat", "mode")


_CUT_NOTED: set[str] = set()


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Rows of a result file; a torn last line (killed mid-write) is left out with a note on stderr,
    anything else is an error."""
    rows = []
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise GridsplitError(f"{path}: cannot read it ({e.strerror}); give a `gridsplit bench` result file") from None
    except UnicodeDecodeError:
        raise GridsplitError(f"{path}: not text (a binary file?); give a `gridsplit bench` result file") from None
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            if i == len(lines) and rows:
                # A run killed mid-write leaves its last row cut; the rows before it stand. Said (once
                # per file: a report reads its files more than once), not hidden.
                if str(path) not in _CUT_NOTED:
                    _CUT_NOTED.add(str(path))
                    click.echo(f"gridsplit: note: {path}:{i}: its last line is cut (a run stopped mid-write?); "
                               f"read without it", err=True)
                break
            raise GridsplitError(f"{path}:{i}: not a JSON line; is this a `gridsplit bench` result file?") from None
        if not isinstance(row, dict):
            raise GridsplitError(f"{path}:{i}: not a result row (a JSON object); is this a `gridsplit bench` result file?")
        if row.get("kind") == "point" and (missing := [k for k in POINT_KEYS if k not in row]):
            raise GridsplitError(f"{path}:{i}: a point row without {', '.join(missing)}; "
                                 f"is this a `gridsplit bench` result file?")
        rows.append(row)
    if rows and rows[0].get("schema", "").split("/")[0] != SCHEMA.split("/")[0]:
        raise GridsplitError(f"{path}: schema {rows[0].get('schema')!r} is not {SCHEMA!r}: not the result file of a "
                             f"bench sweep, ab or app run (bench outage, scale and relay write their own reports)")
    return rows


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (op, impl, nodes, size, split variant): medians over repeats and the split/direct ratio."""
    groups: dict[tuple, dict[str, list]] = {}
    for r in rows:
        if r.get("kind") != "point":
            continue
        groups.setdefault((r["op"], r["impl"], r["nodes"], r["size_bytes"]), {}).setdefault(variant_tag(r), []).append(r)
    out = []
    for (op, impl, n, m), by in sorted(groups.items()):
        direct = by.get("direct", [])
        for tag, split in sorted((t, v) for t, v in by.items() if t != "direct"):
            s = _med(split, "total_s")
            d = _med(direct, "total_s")
            ratios = _paired_ratios(direct, split)
            out.append({
                "op": op, "impl": impl, "nodes": n, "size_bytes": m, "variant": tag,
                "direct_s": d, "split_s": s, "ratio": statistics.median(ratios) if ratios else None,
                "ratio_min": min(ratios) if ratios else None, "ratio_max": max(ratios) if ratios else None,
                "repeats": len(ratios),
                "wan_retrans_direct": _med(direct, lambda r: r["counters"]["distant"]["RetransSegs"]),
                "wan_retrans_split": _med(split, lambda r: r["counters"]["distant"]["RetransSegs"]),
                "wan_rto_split": max((r["counters"]["distant"]["TCPTimeouts"] for r in split), default=None),
                # Timeouts inside the sites (the LAN legs split; a site's own flows either way): what an
                # overflowing LAN port costs, where fast retransmit cannot repair (docs/bench.md).
                "lan_rto_direct": _med(direct, lambda r: r["counters"]["local"]["TCPTimeouts"]),
                "lan_rto_split": _med(split, lambda r: r["counters"]["local"]["TCPTimeouts"]),
                "efficiency_split": _med(split, "efficiency"),
                # split time >= the bound, so split/direct can go no lower than direct's own efficiency.
                "ratio_floor": _med(direct, "efficiency"),
            })
    return out


def _med(rows: list[dict], key) -> float | None:
    return median_of(key(r) if callable(key) else r.get(key) for r in rows)


def _paired_ratios(direct: list[dict], split: list[dict]) -> list[float]:
    """split/direct per repetition: each pair ran back to back, so their ratio is the side-by-side one."""
    d = {r["repeat"]: r["total_s"] for r in direct}
    return [r["total_s"] / d[r["repeat"]] for r in split if d.get(r["repeat"])]


def render_summary(summary: list[dict[str, Any]], con: Console, title: str) -> None:
    t = Table(title=title)
    for c in ("op", "impl", "nodes", "size", "split variant", "direct", "split", "split/direct (min-max)",
              "WAN retrans direct→split", "WAN RTO split", "LAN RTO direct→split", "eff. split"):
        t.add_column(c, justify="right" if c not in ("op", "impl", "split variant") else "left")
    for s in summary:
        ratio = "-" if s["ratio"] is None else f"{s['ratio']:.2f} ({s['ratio_min']:.2f}-{s['ratio_max']:.2f})"
        col = "green" if s["ratio"] is not None and s["ratio"] <= 1.0 else "red"
        t.add_row(s["op"], s["impl"], str(s["nodes"]), units.fmt_size(s["size_bytes"]), s["variant"],
                  _s(s["direct_s"]), _s(s["split_s"]), f"[{col}]{ratio}[/{col}]",
                  f"{num(s['wan_retrans_direct'])} → {num(s['wan_retrans_split'])}", num(s["wan_rto_split"]),
                  f"{num(s['lan_rto_direct'])} → {num(s['lan_rto_split'])}",
                  "-" if s["efficiency_split"] is None else f"{s['efficiency_split']:.2f}")
    con.print(t)


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f} s"


def num(x: float | None) -> str:
    """A value for a table cell: "-" when absent."""
    return "-" if x is None else f"{x:g}"
