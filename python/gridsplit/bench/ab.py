"""`gridsplit bench ab`: two gateway builds, or two gateway settings, compared on one
lab in alternating rounds.

An A/B experiment asks whether one change to the gateways helps. Its two sides run
the same MPI job on the same lab, round after round, in the order A B, B A, A B, …
(so that a drift of the machine weighs on both), and the per-round B/A ratio is the
side-by-side figure: its median and min-max over rounds are what an experiment
reports. A side is a gridsplitd binary (`gridsplitd=PATH`, e.g. a build of another
commit) and/or gateway settings; the points run through the sweep's own machinery
(sweep.run_plan), so rows, counters, resume and the HTML report are the bench's.
"""

from __future__ import annotations

import hashlib
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from .. import sysdeps
from ..errors import GridsplitError
from ..procs import sigterm_interrupts
from ..lab.mpi import IMPLS
from ..model.splitadvise import split_policy
from ..topology import DEFAULT_POLICY_OPS, DEFAULT_POLICY_SIZES, LAN_PACING, STRATEGIES, WAN_PACING, Topology
from ..topology_file import BadPolicyJobs, lan_timer, load_topology, policy_jobs
from . import options as O
from .. import units
from .report import build_report
from .sweep import OPS, Point, run_plan

# A side's keys and how each is read: gateway settings (as the sweep's flags take them),
# the split policy of the ranks, the gridsplitd binary, and a label.
# policy_ops and policy_sizes ('+'-joined) name the jobs a side's split policy weighs, as the
# topology's [gateways] keys do; Side.for_topology turns them into the pairs that policy splits.
KEYS = ("gridsplitd", "strategy", "congestion", "lan_tuning", "lan_pacing", "wan_pacing", "wan_quickack", "lan_rto_min_us",
        "wan_streams",
        "split", "encryption", "policy_ops", "policy_sizes", "label")
CHOICES = {"strategy": STRATEGIES, "congestion": ("cubic", "reno", "bbr"), "lan_tuning": ("on", "off"),
           "wan_quickack": ("on", "off"),
           "lan_pacing": LAN_PACING, "wan_pacing": WAN_PACING, "encryption": ("noise", "insecure")}


@dataclass(frozen=True)
class Side:
    """One side of the comparison: what differs from the topology's gateways."""

    label: str
    gridsplitd: str | None = None  # None: this checkout's build
    settings: dict[str, Any] = field(default_factory=dict)  # KEYS other than gridsplitd and label

    def describe(self) -> dict[str, Any]:
        """What the result file's meta row records of this side (a binary by path, size and digest)."""
        d: dict[str, Any] = {"label": self.label, **self.settings}
        if self.gridsplitd:
            d["gridsplitd"] = {"path": self.gridsplitd, "sha256": _digest(self.gridsplitd),
                               "version": _version(self.gridsplitd)}
        return d

    def for_topology(self, topo: Topology) -> "Side":
        """This side on `topo`: with policy_ops/policy_sizes, `split` becomes the site pairs that the
        default policy splits for those jobs ("none" if it splits none), and `policy_split` records
        each pair's reason; otherwise the side unchanged."""
        s = self.settings
        if "policy_ops" not in s and "policy_sizes" not in s:
            return self
        if topo.gateways.split == "all":
            raise GridsplitError(f"side {self.label}: policy_ops/policy_sizes choose the pairs of the default policy, but "
                                 f"topology {topo.name!r} splits every pair ([gateways] split = \"all\"); give a "
                                 "topology without that key")
        g = replace(topo.gateways, policy_ops=s.get("policy_ops", topo.gateways.policy_ops),
                    policy_sizes=s.get("policy_sizes", topo.gateways.policy_sizes))
        policy = split_policy(replace(topo, gateways=g))
        spec = "+".join(f"{a}-{b}" for (a, b), (yes, _) in policy.items() if yes) or "none"
        reasons = {f"{a}-{b}": why for (a, b), (_, why) in policy.items()}
        return replace(self, settings={**s, "split": spec, "policy_split": reasons})


def parse_side(default_label: str, text: str) -> Side:
    """`key=value,...` (empty: the topology's gateways and this checkout's gridsplitd)."""
    items: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        key, eq, value = part.partition("=")
        key = key.strip().replace("-", "_")
        if not eq or key not in KEYS:
            raise GridsplitError(f"--{default_label.lower()} {text!r}: {part!r} is not KEY=VALUE with KEY one of "
                                 f"{', '.join(KEYS)} (e.g. gridsplitd=/tmp/old/gridsplitd or wan_streams=4)")
        items[key] = value.strip()
    settings: dict[str, Any] = {}
    for key, value in items.items():
        if key in CHOICES and value not in CHOICES[key]:
            raise GridsplitError(f"--{default_label.lower()}: {key}={value!r} is not one of {', '.join(CHOICES[key])}")
        if key == "wan_streams":
            try:
                settings[key] = O.streams(value)
            except ValueError as e:
                raise GridsplitError(f"--{default_label.lower()}: wan_streams: {e}") from None
        elif key in ("lan_tuning", "wan_quickack"):
            settings[key] = value == "on"
        elif key == "lan_rto_min_us":
            try:
                settings[key] = lan_timer("lan_rto_min_us", value)
            except ValueError as e:
                raise GridsplitError(f"--{default_label.lower()}: {e}") from None
        elif key == "split":
            try:
                settings[key] = O.split_spec(value)
            except ValueError as e:
                raise GridsplitError(f"--{default_label.lower()}: split: {e}") from None
            if value != "policy" and ("policy_ops" in items or "policy_sizes" in items):
                raise GridsplitError(f"--{default_label.lower()}: policy_ops/policy_sizes choose the pairs of split=policy; "
                                     f"drop split={value} or the policy keys")
        elif key in CHOICES:
            settings[key] = value
    if "policy_ops" in items or "policy_sizes" in items:
        try:
            ops, sizes = policy_jobs(*(items[k].split("+") if k in items else list(d)
                                       for k, d in (("policy_ops", DEFAULT_POLICY_OPS), ("policy_sizes", DEFAULT_POLICY_SIZES))))
        except BadPolicyJobs as e:
            raise GridsplitError(f"--{default_label.lower()}: {e.key}: {e}; join several with '+', "
                                 f"e.g. policy_ops=gather+halo,policy_sizes=100K+1M") from None
        settings.update({k: v for k, v in (("policy_ops", ops), ("policy_sizes", sizes)) if k in items})
    binary = items.get("gridsplitd")
    if binary is not None:
        binary = str(Path(binary).expanduser().resolve())
        if not os.path.isfile(binary) or not os.access(binary, os.X_OK):
            raise GridsplitError(f"--{default_label.lower()}: gridsplitd={items['gridsplitd']} is not an executable "
                                 "file; build the other commit first (e.g. `git worktree add /tmp/old REV && "
                                 "cargo build --release --manifest-path /tmp/old/Cargo.toml`)")
    return Side(items.get("label") or default_label, binary, settings)


def parse_sides(side_a: str, side_b: str) -> tuple[Side, Side]:
    """--a and --b, which must differ in their gateways and in their labels."""
    a, b = parse_side("A", side_a), parse_side("B", side_b)
    if a.label == b.label:
        raise GridsplitError(f"both sides are labelled {a.label!r}; give one another label=NAME")
    if (a.gridsplitd, a.settings) == (b.gridsplitd, b.settings):
        raise GridsplitError("--a and --b describe the same gateways; change a setting or the gridsplitd binary")
    return a, b


def _digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def _version(path: str) -> str:
    try:
        return subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def side_point(side: Side, g, op: str, impl: str, nodes: int, size: int, repeat: int) -> Point:
    """The split run of `side` (settings over the topology's gateways `g`), as the sweep and `bench app` run it."""
    s = side.settings
    return Point(op, impl, nodes, size, repeat, "split", s.get("strategy", g.strategy), s.get("congestion", g.congestion),
                 s.get("lan_tuning", g.lan_tuning), s.get("wan_streams", g.wan_streams), s.get("split", "policy"),
                 ab=side.label, gridsplitd=side.gridsplitd, encryption=s.get("encryption", g.encryption),
                 pacing=s.get("lan_pacing", g.lan_pacing), wan_pacing=s.get("wan_pacing", g.wan_pacing),
                 wan_quickack=s.get("wan_quickack", g.wan_quickack), lan_rto=s.get("lan_rto_min_us"))


def plan(op: str, topo_gateways, sides: tuple[Side, Side], impls: list[str], nodes: list[int], sizes: list[int],
         rounds: int, direct: bool) -> list[Point]:
    """Every point in run order: per round, direct (if asked), then the two sides,
    A first in even rounds and B first in odd ones; each side's points run together
    so that its gateways restart once per round."""
    g = topo_gateways
    if OPS[op].pair:
        nodes = [1]
    cells = [(i, n, m) for i in impls for n in nodes for m in sizes]
    pts = []
    for r in range(rounds):
        if direct:
            pts += [Point(op, i, n, m, r, "direct", None, None) for i, n, m in cells]
        for side in (sides if r % 2 == 0 else sides[::-1]):
            pts += [side_point(side, g, op, i, n, m, r) for i, n, m in cells]
    return pts


def compare(rows: list[dict[str, Any]], a: str, b: str) -> list[dict[str, Any]]:
    """Per (op, impl, nodes, size): medians of each side and of direct, and B/A paired by round."""
    cells: dict[tuple, dict[str, dict[int, float]]] = {}
    for r in rows:
        if r.get("kind") != "point":
            continue
        side = "direct" if r["mode"] == "direct" else (r.get("variant") or {}).get("ab")
        cell = cells.setdefault((r["op"], r["impl"], r["nodes"], r["size_bytes"]), {})
        cell.setdefault(side, {})[r["repeat"]] = r["total_s"]
    out = []
    for (op, impl, n, m), by in sorted(cells.items()):
        ta, tb, td = by.get(a, {}), by.get(b, {}), by.get("direct", {})
        ratios = [tb[k] / ta[k] for k in sorted(ta) if k in tb and ta[k] > 0]
        med = lambda d: statistics.median(d.values()) if d else None
        out.append({"op": op, "impl": impl, "nodes": n, "size_bytes": m, "a_s": med(ta), "b_s": med(tb),
                    "direct_s": med(td), "ratio": statistics.median(ratios) if ratios else None,
                    "ratio_min": min(ratios, default=None), "ratio_max": max(ratios, default=None),
                    "rounds": len(ratios)})
    return out


def render(table: list[dict[str, Any]], a: str, b: str, con: Console, title: str) -> None:
    t = Table(title=title)
    for c in ("op", "impl", "nodes", "size", f"{a}", f"{b}", f"{b}/{a} (min-max)", "rounds", "direct",
              f"{a}/direct", f"{b}/direct"):
        t.add_column(c, justify="left" if c in ("op", "impl") else "right")
    s = lambda x: "-" if x is None else f"{x:.3f} s"
    q = lambda x, y: "-" if x is None or not y else f"{x / y:.2f}"
    for c in table:
        ratio = "-" if c["ratio"] is None else f"{c['ratio']:.3f} ({c['ratio_min']:.3f}-{c['ratio_max']:.3f})"
        t.add_row(c["op"], c["impl"], str(c["nodes"]), units.fmt_size(c["size_bytes"]), s(c["a_s"]), s(c["b_s"]),
                  ratio, str(c["rounds"]), s(c["direct_s"]), q(c["a_s"], c["direct_s"]), q(c["b_s"], c["direct_s"]))
    con.print(t)


@click.command(name="ab")
@click.argument("op", type=click.Choice(sorted(OPS)))
@click.option("--a", "side_a", default="", metavar="KEY=VALUE,...",
              help=f"Side A: keys {', '.join(KEYS)}; empty: the topology's gateways and this checkout's gridsplitd.")
@click.option("--b", "side_b", required=True, metavar="KEY=VALUE,...", help="Side B, as --a.")
@O.lab_topology
@click.option("--nodes", "-n", default="4", show_default=True, callback=O.csv(O.count),
              help="Sender node counts, or all (as `bench gather --nodes`).")
@click.option("--sizes", "-s", default="1M", show_default=True, callback=O.csv(O.message_size),
              help="Message sizes (K=1e3, M=1e6).")
@click.option("--impl", "impls", default="openmpi", show_default=True, callback=O.csv(O.choice_list(IMPLS)))
@click.option("--rounds", "-k", default=5, show_default=True, type=click.IntRange(2, 100),
              help="Rounds; each runs both sides, in alternating order.")
@O.reps_budget
@click.option("--direct/--no-direct", default=True, show_default=True,
              help="Also run each point direct once per round, as the reference both sides are read against.")
@click.option("--rank-env", "rank_env", multiple=True, metavar="NAME=VALUE", callback=O.rank_env,
              help="Environment for every rank of both sides (repeatable; recorded).")
@click.option("--out", "-o", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="JSONL result file (appended; a run with the same sides resumes). "
                   "Default: gridsplit-out/ab/DATE-TOPOLOGY-OP-A-vs-B.jsonl (under the current directory).")
@O.report
def ab(op, side_a, side_b, topology, scale, nodes, sizes, impls, rounds, reps, budget, direct, rank_env, out,
       make_report):
    """Compare two gridsplitd builds or two gateway settings in alternating rounds.

    Each side is KEY=VALUE,... with keys gridsplitd (a binary, e.g. another commit's build),
    strategy, congestion, lan_tuning (on/off), lan_pacing (auto/on/off: pace the gateways' writes toward each LAN
    host at the nodes' NIC rate), wan_pacing (full/shared/adaptive: the WAN links' rate, docs/design/wan-pacing.md),
    wan_quickack (on/off: a WAN lane's pending ACK sent at each read, docs/design/wan-striping.md),
    lan_rto_min_us (0, or 2000-200000: the LAN timers of the gateways' and the ranks' LAN connections, docs/design/lan-legs.md),
    wan_streams (auto/1..16), split (policy, all, none, root: only the connections of the job's first host, or
    site pairs joined by +, e.g. east-west+east-north: those split, the others direct), policy_ops and policy_sizes (the jobs
    split=policy weighs, joined by +, e.g. policy_ops=gather,policy_sizes=100K+1M; as the topology's [gateways]
    keys), encryption (noise/insecure) and label.
    Example: `gridsplit bench ab gather --b gridsplitd=/tmp/old/target/release/gridsplitd`.
    The table gives B/A per point: the median and min-max of the per-round ratios (docs/bench.md).
    """
    con = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
    sigterm_interrupts()
    a, b = parse_sides(side_a, side_b)
    sysdeps.need_root("gridsplit bench ab")
    topo = load_topology(topology, None, scale)
    a, b = a.for_topology(topo), b.for_topology(topo)
    if out is None:
        out = Path("gridsplit-out/ab") / f"{time.strftime('%Y-%m-%d')}-{Path(topology).stem}-{op}-{a.label}-vs-{b.label}.jsonl"
    pts = plan(op, topo.gateways, (a, b), impls, nodes, sizes, rounds, direct)
    requested = {"nodes": nodes, "sizes": sizes, "reps": reps, "budget_s": budget, "impls": impls,
                 "rounds": rounds, "direct": direct}
    sides = {"ab": {"a": a.describe(), "b": b.describe()}}
    rows = run_plan(op, topology, scale, pts, reps, budget, False, out, con, rank_env, requested, sides)
    render(compare(rows, a.label, b.label), a.label, b.label, con,
           f"{op}: {b.label} vs {a.label}, per-round ratios over {rounds} alternating rounds ({out})")
    con.print(f"results: {out}")
    if make_report:
        con.print(f"report: {build_report([out], out.with_suffix(''))}")
