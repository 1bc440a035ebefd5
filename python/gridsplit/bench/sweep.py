"""`gridsplit bench gather` (and scatter, bcast, alltoall, pingpong): MPI sweeps, direct vs split.

This is Alter and Glück's evaluation (§9-10) as one command. For every point
(implementation, node count, message size, repetition) the same MPI job runs
once node to node ("direct") and once through the site gateways ("split"),
back to back on the same lab, so that their ratio is measured side by side.
Around each run it records:

- the job's own timing (the program's JSON line: total and per-rep stats);
- TCP counter deltas of every host involved, attributed to *local* (inside a
  site) or *distant* (across the WAN) connections with the kernel's
  per-connection retransmission trace (lab/tcptrace.py);
- CPU: each rank's process CPU over its measurement window (reported by the
  program itself, mpi/common.c) and each gateway daemon's CPU from /proc.

Rows go to a JSONL file (schema in docs/bench.md), flushed one per run, so an
interrupted sweep resumes where it stopped.
"""

from __future__ import annotations

import json
import math
import signal
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from .. import machine, sysdeps
from ..errors import GridsplitError
from ..topology import STRATEGIES, Host, Topology, load_topology
from ..lab import queues, realize
from ..lab.softirq import SoftirqClock
from ..lab.mpi import IMPLS, RANK_ENV, TIMED_OUT, mpirun, split_env
from ..lab.names import LabNames
from ..lab.sh import list_netns
from ..lab.tcptrace import Trace
from . import options as O
from . import units
from .options import ALL_NODES
from . import measure
from .measure import Probe, tracers
from .report import build_report
from ..tcpbound import GOODPUT
from .results import SCHEMA, read_rows, render_summary, row_key, summarize

MODES = ("direct", "split")


@dataclass(frozen=True)
class Op:
    prog: str
    args: tuple[str, ...] = ()
    pair: bool = False  # two ranks only, one per site


OPS = {
    "gather": Op("gather"),
    "scatter": Op("coll", ("-o", "scatter")),
    "bcast": Op("coll", ("-o", "bcast")),
    "alltoall": Op("coll", ("-o", "alltoall")),
    "pingpong": Op("pingpong", pair=True),
}


@dataclass(frozen=True)
class Point:
    """One measured run; `key` identifies it in a result file (for resume)."""

    op: str
    impl: str
    nodes: int
    size: int
    repeat: int
    mode: str
    strategy: str | None
    congestion: str | None
    lan: bool | None = None
    # [gateways] wan_streams: 0 = auto (gateway.wan_streams), else a count.
    streams: int | None = None
    # Which connections the ranks split: "policy" (the topology's split policy) or "all".
    split: str | None = None
    # `bench ab`: the side's label and the gridsplitd it runs (None: this checkout's build).
    ab: str | None = None
    gridsplitd: str | None = None

    @property
    def variant(self) -> dict[str, Any] | None:
        """The gateway settings of a split run, as result rows record them (row_key reads them back)."""
        if self.mode != "split":
            return None
        v = {"strategy": self.strategy, "congestion": self.congestion, "lan_tuning": self.lan,
             "wan_streams": self.streams, "split": self.split}
        return {**v, "ab": self.ab, "gridsplitd": self.gridsplitd} if self.ab else v

    @property
    def key(self) -> tuple:
        return (self.op, self.impl, self.nodes, self.size, self.repeat, self.mode, self.strategy, self.congestion,
                self.lan, self.streams, self.split, self.ab)


# -- placement and physics -----------------------------------------------------


def placement(topo: Topology, op: str, nodes: int) -> tuple[Host, list[Host]]:
    """The root (first node of the second site) and the `nodes` senders of the first site,
    or, for nodes = ALL_NODES, every other node of every site.

    The first is Alter and Glück §10.2's layout: senders in bordeaux, the gather root in sophia.
    """
    if len(topo.sites) < 2:
        raise GridsplitError(f"topology {topo.name!r} has one site; cross-site benchmarks need two")
    a, b = topo.sites[0], topo.sites[1]
    if nodes == ALL_NODES and not OPS[op].pair:
        root = next(h for h in topo.nodes() if h.site == b.name)
        return root, [h for h in topo.nodes() if h != root]
    senders = [h for h in topo.nodes() if h.site == a.name]
    roots = [h for h in topo.nodes() if h.site == b.name]
    if OPS[op].pair:
        nodes = 1
    if nodes > len(senders):
        raise GridsplitError(f"--nodes {nodes}: site {a.name} of the lab has {len(senders)} nodes; "
                             f"bring the lab up with `--nodes {nodes}` or lower --nodes")
    return roots[0], senders[:nodes]


def bound_per_rep(topo: Topology, op: str, root: Host, senders: list[Host], size: int) -> float:
    """The physical lower bound of one repetition, in seconds.

    For gather (timed at the root from the start of the barrier, as in seed
    000): the senders cannot leave the barrier before hearing that the root
    entered it (one one-way delay); their data then needs another one-way
    delay plus the time for n·m bytes to cross the narrowest point where their
    flows converge (root NIC, WAN, uplinks, or the senders' NICs together) at
    its payload rate. Protocol round trips (rendezvous, slow start) are not
    physics and are not in it. For pingpong it bounds half a round trip; the
    other collectives get the same form as gather, as a reference line.
    """
    rtt = max(topo.rtt_ms(root.site, s.site) for s in senders) / 1e3
    path = min(topo.bottleneck_mbps(s, root) for s in senders)
    if OPS[op].pair:
        return rtt / 2 + size * 8 / (path * 1e6 * GOODPUT)
    agg = min(path, root.nic_mbps, sum(s.nic_mbps for s in senders)) * 1e6 * GOODPUT
    return rtt + len(senders) * size * 8 / agg


def measured_period(op: str, res: dict[str, Any]) -> float | None:
    """Measured time comparable with reps x bound_per_rep, or None for ops without a sound bound."""
    if op == "gather":
        return res["total_s"]
    if OPS[op].pair:
        return res["median_s"] * res["reps"]
    return None


def effective_reps(requested: int, budget_s: float, bound: float, min_reps: int = 5) -> int:
    """Cap reps so that the point's ideal duration stays within the budget (0: no cap)."""
    if budget_s <= 0 or bound * requested <= budget_s:
        return requested
    return max(min(min_reps, requested), int(budget_s / bound))


# -- CPU -------------------------------------------------------------------------

def cpu_summary(rank_cpu: list[dict[str, Any]], root: Host, gw_cpu: dict[str, float],
                gw_softirq: dict[str, float] | None = None) -> dict[str, Any]:
    """Percent of one core per role over the program's measurement window; for
    gateways also the part of it the kernel spent in softirq in their context
    (lab.softirq), when traced."""
    def pct(r):
        return 100 * (r["user_s"] + r["sys_s"]) / r["wall_s"] if r["wall_s"] > 0 else math.nan

    by_rank = sorted(rank_cpu, key=lambda r: r["rank"])
    window = by_rank[0]["wall_s"] if by_rank else math.nan
    root_r = [r for r in by_rank if r["host"] == root.name] or by_rank[:1]
    send = [pct(r) for r in by_rank if r not in root_r]
    return {
        "window_s": window,
        "senders": {"mean_pct": statistics.fmean(send) if send else None, "max_pct": max(send) if send else None,
                    "per_rank_pct": [round(x, 1) for x in send]},
        "root": {"pct": pct(root_r[0]) if root_r else None},
        # The daemon's CPU from the job's start to its result, over the measurement
        # window: the window is where the traffic is, so this overstates by the
        # job's start-up (connections open lazily, in the window), never understates.
        "gateways": {site: measure.gw_cpu(s, None if gw_softirq is None else gw_softirq.get(site, 0.0), window)
                     for site, s in gw_cpu.items()},
    }


# -- running one point -------------------------------------------------------------

class MpiJobFailed(GridsplitError):
    """An MPI job of a point failed twice."""


def run_point(state: realize.LabState, trace: Trace | None, p: Point, reps_requested: int, budget: float,
              check: bool, rank_env: dict[str, str] | None = None, sirq: SoftirqClock | None = None) -> dict[str, Any]:
    topo = state.topo
    root, senders = placement(topo, p.op, p.nodes)
    bound = bound_per_rep(topo, p.op, root, senders, p.size)
    reps = effective_reps(reps_requested, budget, bound)
    timeout = max(120.0, 20 * bound * reps + 60)
    ranks = [root, *senders]
    gws = [h for h in topo.hosts() if h.role == "gateway" and h.site in {root.site, *(s.site for s in senders)}]
    watched = {h.name: h for h in [*ranks, *gws]}
    op = OPS[p.op]
    prog = [sysdeps.mpi_program(p.impl, op.prog), *op.args, "-s", str(p.size), "-r", str(reps)]
    if check:
        prog.append("--check")
    split = split_env(state, force_all=p.split == "all") if p.mode == "split" else {}
    env = {**(rank_env or {}), **split}  # over mpirun's RANK_ENV
    # Gateways carry traffic in split mode only; their softirq is traced then.
    sirq = sirq if p.mode == "split" else None

    for attempt in (1, 2):
        probe = Probe(state, watched, trace, sirq)
        probe.start()
        t0 = time.monotonic()
        cp = mpirun(state, p.impl, len(ranks), ranks, prog, env=env, capture=True, timeout=timeout, keep_partial=True,
                    expect_lines=1, on_result=probe.at_result)
        wall = time.monotonic() - t0
        probe.stop()
        lines = [json.loads(l) for l in (cp.stdout or "").splitlines() if l.startswith("{")]
        res = next((l for l in lines if l.get("op") and "total_s" in l), None)
        if res is not None and (cp.returncode in (0, TIMED_OUT)):
            break
        why = "timed out" if cp.returncode == TIMED_OUT else f"exit {cp.returncode}"
        tail = (cp.stderr or "").strip().splitlines()[-3:]
        if attempt == 2:
            raise MpiJobFailed(f"{p.op} {p.impl} {p.mode} nodes={p.nodes} size={p.size}: MPI job failed twice "
                                 f"({why}): {' | '.join(tail) or 'no output'}")
    if res.get("verified") is False:
        raise GridsplitError(f"{p.op} {p.impl} {p.mode} nodes={p.nodes} size={p.size}: received data failed "
                             "verification (--check); the run is not recorded")
    return {
        "kind": "point", "schema": SCHEMA, "op": p.op, "mode": p.mode,
        "variant": p.variant, "rank_env": rank_env or {},
        "impl": p.impl, "impl_version": res.get("impl_version"), "nodes": len(senders), "ranks": len(ranks),
        "size_bytes": p.size, "reps": res["reps"], "reps_requested": reps_requested, "repeat": p.repeat,
        "total_s": res["total_s"],
        "per_rep_s": {k: res[f"{k}_s"] for k in ("min", "median", "mean", "max")},
        "verified": res.get("verified"),
        "bound_per_rep_s": bound, "efficiency": _efficiency(bound * res["reps"], measured_period(p.op, res)),
        "counters": probe.counters(p.mode), **probe.network(),
        "cpu": {**cpu_summary(res.get("cpu", []), root, probe.gw_cpu_s() if p.mode == "split" else {},
                              probe.gw_softirq_s()), **probe.softirq_note()},
        "timing": res.get("timing"), "run_wall_s": round(wall, 3), "attempts": attempt,
        "finalize_hang": cp.returncode == TIMED_OUT,
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def _efficiency(bound_total: float, measured: float | None) -> float | None:
    return bound_total / measured if measured else None


# -- the sweep ---------------------------------------------------------------------

def ensure_lab(names: LabNames, topology: str, nodes: int | None, scale: float | None,
               con: Console) -> realize.LabState:
    """Reuse the running lab if it is this topology with enough nodes (None: the
    topology's own counts), else rebuild it."""
    want = load_topology(topology, None, scale)
    asked = nodes
    if nodes is None:
        nodes = want.sites[0].nodes
    try:
        state = realize.load_state(names)
    except GridsplitError:
        state = None
    if state is not None:
        a = state.topo.sites[0]
        # A lab brought up with `--scale auto` keeps the scale this machine could hold.
        same_scale = state.topo.scale == want.scale or (scale is None and state.data.get("scale_auto"))
        if (state.data.get("topology_spec") == topology and a.nodes >= nodes and same_scale
                and state.data.get("gateways")):
            con.print(f"[dim]·[/dim] reusing the running lab {state.topo.name!r} ({a.nodes} nodes on {a.name})")
            return state
        con.print(f"[dim]·[/dim] the running lab ({state.topo.name}, {a.nodes} nodes) does not fit; rebuilding it")
        realize.down(names)
    con.print(f"[dim]·[/dim] bringing up lab {topology!r} with {nodes} nodes")
    return realize.up(topology, asked, names, progress=lambda m: con.print(f"[dim]  ·[/dim] {m}"), scale=scale)


def plan(op: str, impls: list[str], nodes: list[int], sizes: list[int], modes: list[str], repeat: int,
         strategies: list[str | None], ccs: list[str | None], lans: tuple[bool | None, ...] = (None,),
         streams: tuple[int | None, ...] = (None,), splits: tuple[str | None, ...] = (None,)) -> list[Point]:
    """Every point in run order: direct and the first split variant side by side; other variants after."""
    variants = [(s, c, i, k, x) for s in strategies for c in ccs for i in lans for k in streams for x in splits]
    if OPS[op].pair:
        nodes = [1]
    pts = []
    for k in range(repeat):
        for impl in impls:
            for n in nodes:
                for m in sizes:
                    for mode in modes:
                        v = variants[0] if mode == "split" else (None, None, None, None, None)
                        pts.append(Point(op, impl, n, m, k, mode, *v))
        if "split" in modes:
            for v in variants[1:]:
                for impl in impls:
                    for n in nodes:
                        for m in sizes:
                            pts.append(Point(op, impl, n, m, k, "split", *v))
    return pts


def sweep(op: str, topology: str, scale: float | None, nodes: list[int], sizes: list[int], reps: int,
          budget: float, modes: list[str], impls: list[str], repeat: int, strategies: list[str | None],
          ccs: list[str | None], out: Path, check: bool, con: Console,
          lans: tuple[bool | None, ...] = (None,), rank_env: dict[str, str] | None = None,
          streams: tuple[int | None, ...] = (None,),
          splits: tuple[str, ...] = ("policy",)) -> list[dict[str, Any]]:
    sysdeps.need_root(f"gridsplit bench {op}")
    gw = load_topology(topology, None, scale).gateways
    strategies = [s or gw.strategy for s in strategies]
    ccs = [c or gw.congestion for c in ccs]
    lans = [gw.lan_tuning if i is None else i for i in lans]
    streams = tuple(gw.wan_streams if k is None else k for k in streams)
    rank_env = rank_env or {}
    pts = plan(op, impls, nodes, sizes, modes, repeat, strategies, ccs, lans, streams, splits)
    requested = {"nodes": nodes, "sizes": sizes, "reps": reps, "budget_s": budget, "modes": modes, "impls": impls,
                 "repeat": repeat, "strategies": strategies, "congestion": ccs, "lan_tuning": lans,
                 "wan_streams": streams, "split": splits, "check": check}
    return run_plan(op, topology, scale, pts, reps, budget, check, out, con, rank_env, requested)


def run_plan(op: str, topology: str, scale: float | None, pts: list[Point], reps: int, budget: float, check: bool,
             out: Path, con: Console, rank_env: dict[str, str], requested: dict[str, Any],
             extra_meta: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Run `pts` in order on the lab (brought up or reused), appending rows to `out`; points already
    in `out` are skipped, so a sweep resumes. `extra_meta` (e.g. `bench ab`'s sides) goes into the
    meta row and must match a resumed file's."""
    if "direct" in {p.mode for p in pts}:
        topo = load_topology(topology, None, scale)
        if not topo.routed:
            raise GridsplitError(f"direct mode cannot run on topology {topo.name!r}: its sites are unroutable "
                                 "([addressing] routed = false), so nodes reach other sites only through the "
                                 "gateways and a direct job would fail; use --modes split")
    names = LabNames.from_env()
    extra_meta = json.loads(json.dumps(extra_meta or {}))
    done: dict[tuple, dict] = {}
    if out.exists():
        rows = read_rows(out)
        meta = next((r for r in rows if r.get("kind") == "meta"), None)
        if meta and meta.get("topology_spec") != topology:
            raise GridsplitError(f"{out} holds a sweep of topology {meta.get('topology_spec')!r}, not {topology!r}; "
                                 "give another --out")
        # Resuming must not pair rows run under other MPI settings: the point
        # keys do not carry them, and a table's direct and split would differ
        # in more than the gateways.
        if meta and meta.get("rank_env_extra", {}) != rank_env:
            raise GridsplitError(f"{out} holds a sweep run with --rank-env {O.env_str(meta.get('rank_env_extra', {}))}, "
                                 f"not {O.env_str(rank_env)}; give another --out")
        for k, v in extra_meta.items():
            if meta and meta.get(k) != v:
                raise GridsplitError(f"{out} holds a run with other {k} settings ({json.dumps(meta.get(k))}); "
                                     "give another --out")
        done = {row_key(r): r for r in rows if r.get("kind") == "point"}
    todo = [p for p in pts if p.key not in done]
    if done:
        con.print(f"[dim]·[/dim] resuming {out}: {len(pts) - len(todo)} of {len(pts)} points already measured")
    if not todo:
        return [done[p.key] for p in pts]
    modes = {p.mode for p in pts}
    nodes = {p.nodes for p in pts}
    state = ensure_lab(names, topology, None if ALL_NODES in nodes else max(nodes), scale, con)
    if "split" in modes and not state.data.get("gateways"):
        raise GridsplitError("split mode needs gateways, and this lab has none running")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tracers(names, "split" in modes, con) as (trace, sirq), out.open("a") as f:
        f.write(json.dumps({
            "kind": "meta", "schema": SCHEMA, "op": op, "topology_spec": topology, "topology": state.topo.to_dict(),
            "lab": {"prefix": state.data.get("prefix"), "nodes": state.data.get("nodes"), **state.emulation},
            "machine": machine.facts(), "command": sys.argv, "requested": requested,
            "rank_env": {i: {**RANK_ENV.get(i, {}), **rank_env} for i in IMPLS},
            "rank_env_extra": rank_env,
            "other_labs": sorted({ns.split("-")[0] for ns in list_netns() if not names.owns_ns(ns)}),
            **extra_meta,
        }) + "\n")
        f.flush()
        rows = _run_all(state, trace, todo, reps, budget, check, f, con, rank_env, sirq)
    done.update((row_key(r), r) for r in rows)
    return [done[p.key] for p in pts if p.key in done]


def _n(nodes: int) -> str:
    return "all" if nodes == ALL_NODES else str(nodes)


def _short(p: Point) -> str:
    if p.ab:
        return p.ab
    return (p.strategy + ("" if p.lan in (None, True) else "-untuned") + (f"-{p.streams}s" if p.streams else "")
            + ("-all" if p.split == "all" else ""))


def _run_all(state: realize.LabState, trace: Trace | None, todo: list[Point], reps: int, budget: float,
             check: bool, f, con: Console, rank_env: dict[str, str],
             sirq: SoftirqClock | None = None) -> list[dict[str, Any]]:
    rows = []
    g = state.topo.gateways
    built = sysdeps.built("gridsplitd")
    variant = (g.strategy, g.congestion, g.lan_tuning, g.wan_streams, realize.gateway_binary(state.data))
    cols = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("ETA"), TimeRemainingColumn())
    with Progress(*cols, console=con, transient=False) as bar:
        task = bar.add_task("sweep", total=len(todo))
        for p in todo:
            want = (p.strategy, p.congestion, p.lan, p.streams, p.gridsplitd or built)
            if p.mode == "split" and want != variant:
                bar.console.print(f"[dim]·[/dim] restarting gateways: strategy {p.strategy}, WAN congestion control "
                                  f"{p.congestion}, LAN tuning {'on' if p.lan else 'off'}, WAN streams "
                                  f"{p.streams or 'auto'}{'' if want[4] == built else ', gridsplitd ' + want[4]}")
                state = realize.restart_gateways(state, gridsplitd=p.gridsplitd, strategy=p.strategy,
                                                 congestion=p.congestion, lan_tuning=p.lan, wan_streams=p.streams)
                variant = want
            bar.update(task, description=f"{p.op} {p.impl} n={_n(p.nodes)} {units.fmt_size(p.size)} {p.mode}"
                                          f"{'/' + _short(p) if p.mode == 'split' else ''} #{p.repeat}")
            try:
                row = run_point(state, trace, p, reps, budget, check, rank_env, sirq)
            except MpiJobFailed as e:
                # One job that keeps failing (MPICH's launcher at 20 ranks on this
                # machine) must not cost the rest of a long sweep: the failure is
                # recorded, said, and retried when the sweep is resumed.
                f.write(json.dumps({"kind": "failure", "schema": SCHEMA, "op": p.op, "mode": p.mode,
                                    "variant": p.variant,
                                    "impl": p.impl, "nodes": p.nodes, "size_bytes": p.size, "repeat": p.repeat,
                                    "error": str(e), "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z")}) + "\n")
                f.flush()
                bar.console.print(f"[red]failed:[/red] {e} (recorded; resuming the sweep retries it)")
                bar.advance(task)
                continue
            f.write(json.dumps(row) + "\n")
            f.flush()
            rows.append(row)
            dist = row["counters"]["distant"]
            emu = row.get("emulator")
            # Said as it happens: a run measured while the delay line lagged describes the machine.
            lag = (f" [yellow]delay line behind: {emu['late_fraction']:.1%} late, worst "
                   f"{emu['worst_late_us'] / 1000:.1f} ms[/yellow]"
                   if emu and queues.fell_behind(emu) else "")
            bar.console.print(
                f"{p.op} {p.impl:7} n={_n(p.nodes):<3} {units.fmt_size(p.size):>5} {p.mode:6}"
                f"{('/' + _short(p)) if p.mode == 'split' else '':10} {row['total_s']:8.3f} s  "
                f"({row['reps']} reps, eff {row['efficiency'] or 0:.2f}, WAN retrans {dist['RetransSegs']}, "
                f"WAN RTO {dist['TCPTimeouts']}){lag}")
            bar.advance(task)
    return rows


# -- summary -------------------------------------------------------------------------


# -- CLI -------------------------------------------------------------------------------

def _interrupt(signum, frame):
    raise KeyboardInterrupt


def make_command(op: str) -> click.Command:
    defaults = {"pingpong": ("1", "8,1K,10K,100K,1M")}.get(op, ("2,4,8,12,16,20", "1K,10K,100K,500K,1M,2M,10M"))

    @click.command(name=op)
    @O.lab_topology
    @click.option("--nodes", "-n", default=defaults[0], show_default=True, callback=O.csv(O.count),
                  help="Sender node counts (on the first site; the root is on the second), or all: every node of "
                       "every site of the topology takes part (the root is the second site's first node).")
    @click.option("--sizes", "-s", default=defaults[1], show_default=True, callback=O.csv(units.parse_size),
                  help="Message sizes (K=1e3, M=1e6, as the MPI programs read them).")
    @O.reps_budget
    @click.option("--modes", default="direct,split", show_default=True, callback=O.csv(O.choice_list(MODES)))
    @click.option("--impl", "impls", default="mpich,openmpi", show_default=True, callback=O.csv(O.choice_list(IMPLS)))
    @click.option("--repeat", "-k", default=1, show_default=True, type=click.IntRange(1, 100),
                  help="Repetitions of the whole sweep; the report takes medians and min-max over them.")
    @click.option("--strategy", "strategies", default=None, callback=O.csv(O.choice_list(STRATEGIES)),
                  help=f"Gateway strategies to compare in split mode ({', '.join(STRATEGIES)}); default: the topology's.")
    @click.option("--wan-cc", "ccs", default=None, callback=O.csv(O.choice_list(("cubic", "reno", "bbr"))),
                  help="WAN congestion controls to compare in split mode; default: the topology's.")
    @click.option("--lan-tuning", "lans", default=None, callback=O.csv(O.choice_list(("on", "off"))),
                  help="LAN tuning of the split legs (receive-window clamps sharing the gateway's switch port; "
                       "LAN timers too where the topology sets lan_rto_min_us) to compare in split mode: on, off "
                       "or on,off; default: the topology's (on).")
    @click.option("--wan-streams", "streams", default=None, callback=O.csv(O.streams),
                  help="TCP connections per WAN link to compare in split mode: auto (the fewest that reach the "
                       "link's rate at its loss, Mathis) or 1..16, e.g. 1,auto; default: the topology's "
                       "([gateways] wan_streams).")
    @click.option("--split", "splits", default="policy", show_default=True,
                  callback=O.csv(O.choice_list(("policy", "all"))),
                  help="Which cross-site connections split mode splits, to compare: policy (the topology's split "
                       "policy: pairs whose gateways cannot carry what their nodes reach directly stay direct), "
                       "all, or policy,all.")
    @click.option("--rank-env", "rank_env", multiple=True, metavar="NAME=VALUE", callback=O.rank_env,
                  help="Environment for every rank in both modes, e.g. an MPI setting such as "
                       "OMPI_MCA_btl_tcp_eager_limit=131072 or UCX_RNDV_THRESH=1048576 (repeatable; recorded in "
                       "each row). A result file holds one such setting: give each its own --out.")
    @click.option("--check/--no-check", default=False, show_default=True,
                  help="Verify every received payload (costs CPU outside the timed region).")
    @click.option("--out", "-o", type=click.Path(dir_okay=False, path_type=Path), default=None,
                  help="JSONL result file (appended; existing points are skipped, so a sweep resumes). "
                       "Default: gridsplit-out/bench/DATE-TOPOLOGY-OP.jsonl (under the current directory).")
    @O.report
    def cmd(topology, scale, nodes, sizes, reps, budget, modes, impls, repeat, strategies, ccs, lans, streams,
            splits, rank_env, check, out, make_report):
        con = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
        # A sweep stopped by SIGTERM (e.g. under nohup, where SIGINT is ignored)
        # must still stop its MPI job and remove its trace instance.
        signal.signal(signal.SIGTERM, _interrupt)
        if out is None:
            out = Path("gridsplit-out/bench") / f"{time.strftime('%Y-%m-%d')}-{Path(topology).stem}-{op}.jsonl"
        rows = sweep(op, topology, scale, nodes, sizes, reps, budget, modes, impls, repeat,
                     strategies or [None], ccs or [None], out, check, con,
                     tuple(i == "on" for i in lans) if lans else (None,), rank_env,
                     tuple(streams) if streams else (None,), tuple(splits))
        summary = summarize(rows)
        render_summary(summary, con, f"{op}: split vs direct, medians over repeats ({out})")
        con.print(f"results: {out}")
        if make_report:
            html = build_report([out], out.with_suffix(""))
            con.print(f"report: {html}")

    cmd.help = (f"Sweep MPI {op} over node counts and message sizes, direct vs split, side by side.\n\n"
                "Brings the lab up if needed (or reuses it), runs every point in each mode back to back, and "
                "records time, local/distant TCP counters and CPU per run in a JSONL file (docs/bench.md).")
    return cmd


def iter_ops() -> Iterator[click.Command]:
    for op in OPS:
        yield make_command(op)
