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

The grid is the lab (grid.py) or, with --hosts FILE, real hosts over ssh
(hosts.py): one run of a point (run_point) is the same code on both.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from .. import machine, sysdeps
from ..errors import GridsplitError
from ..procs import sigterm_interrupts
from ..inventory import Inventory
from ..topology import LAN_PACING, STRATEGIES, Host
from ..topology_file import load_topology
from ..lab import queues
from ..lab.mpi import IMPLS, TIMED_OUT
from . import measure
from . import options as O
from .. import units
from .grid import lab_grid
from .hosts import check_fixed_variant, check_impls, hosts_grid, hosts_topology
from .options import ALL_NODES
from .points import MODES, OPS, Point, effective_reps, measured_period, placement, plan  # bench ab imports OPS, Point
from .report import build_report
from .results import SCHEMA, read_rows, render_summary, row_key, summarize

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


def run_point(grid, p: Point, reps_requested: int, budget: float, check: bool,
              rank_env: dict[str, str] | None = None) -> dict[str, Any]:
    """One point on `grid` (the lab, grid.LabGrid, or real hosts, hosts.HostsGrid): its row."""
    root, senders = placement(grid.sites, grid.nodes, p.op, p.nodes, grid.where, grid.more)
    bound = grid.bound(p.op, root, senders, p.size)
    reps = effective_reps(reps_requested, budget, bound)
    timeout = max(120.0, 20 * bound * reps + 60)
    ranks = [root, *senders]
    gws = grid.gateways({root.site, *(s.site for s in senders)})
    watched = {h.name: h for h in [*ranks, *gws]}
    op = OPS[p.op]
    prog = [grid.program(p.impl, op.prog), *op.args, "-s", str(p.size), "-r", str(reps)]
    if check:
        prog.append("--check")
    split = grid.split_env(p.split or "policy", root) if p.mode == "split" else {}
    env = {**(rank_env or {}), **split}  # over the grid's own rank settings (lab: mpirun's RANK_ENV)

    for attempt in (1, 2):
        probe = grid.probe(watched, p.mode)
        probe.start()
        t0 = time.monotonic()
        cp = grid.mpirun(p.impl, ranks, prog, env, timeout, probe.at_result, expect_lines=1)
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
        "impl": p.impl, "impl_version": res.get("impl_version"), "nodes": len(senders),
        "nodes_requested": p.nodes, "ranks": len(ranks),
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

def sweep(op: str, topology: str, scale: float | None, nodes: list[int], sizes: list[int], reps: int,
          budget: float, modes: list[str], impls: list[str], repeat: int, strategies: list[str | None],
          ccs: list[str | None], out: Path, check: bool, con: Console,
          lans: tuple[bool | None, ...] = (None,), rank_env: dict[str, str] | None = None,
          streams: tuple[int | None, ...] = (None,),
          splits: tuple[str, ...] = ("policy",), inventory: Inventory | None = None,
          pacings: tuple[str | None, ...] = (None,)) -> list[dict[str, Any]]:
    if inventory is None:
        sysdeps.need_root(f"gridsplit bench {op}")
        gw = load_topology(topology, None, scale).gateways
    else:
        topology = hosts_topology(inventory)
        gw = load_topology(topology).gateways
        check_fixed_variant(gw, strategies, ccs, lans, streams, pacings)
        impls = check_impls(inventory, impls)
    strategies = [s or gw.strategy for s in strategies]
    ccs = [c or gw.congestion for c in ccs]
    lans = [gw.lan_tuning if i is None else i for i in lans]
    pacings = tuple(q or gw.lan_pacing for q in pacings)
    streams = tuple(gw.wan_streams if k is None else k for k in streams)
    rank_env = rank_env or {}
    pts = plan(op, impls, nodes, sizes, modes, repeat, strategies, ccs, lans, streams, splits, pacings)
    requested = {"nodes": nodes, "sizes": sizes, "reps": reps, "budget_s": budget, "modes": modes, "impls": impls,
                 "repeat": repeat, "strategies": strategies, "congestion": ccs, "lan_tuning": lans,
                 "lan_pacing": pacings, "wan_streams": streams, "split": splits, "check": check}
    return run_plan(op, topology, scale, pts, reps, budget, check, out, con, rank_env, requested,
                    inventory=inventory)


def run_plan(op: str, topology: str, scale: float | None, pts: list[Point], reps: int, budget: float, check: bool,
             out: Path, con: Console, rank_env: dict[str, str], requested: dict[str, Any],
             extra_meta: dict[str, Any] | None = None, inventory: Inventory | None = None) -> list[dict[str, Any]]:
    """Run `pts` in order on the lab (brought up or reused) or, with `inventory`, on its real hosts,
    appending rows to `out`; points already in `out` are skipped, so a sweep resumes. `extra_meta`
    (e.g. `bench ab`'s sides) goes into the meta row and must match a resumed file's."""
    modes = {p.mode for p in pts}
    if "direct" in modes:
        topo = load_topology(topology, None, scale)
        if not topo.routed:
            raise GridsplitError(f"direct mode cannot run on topology {topo.name!r}: its sites are unroutable "
                                 "([addressing] routed = false), so nodes reach other sites only through the "
                                 "gateways and a direct job would fail; use --modes split")
    extra_meta = json.loads(json.dumps(extra_meta or {}))
    done: dict[tuple, dict] = {}
    if out.exists():
        rows = read_rows(out)
        meta = next((r for r in rows if r.get("kind") == "meta"), None)
        if meta and meta.get("topology_spec") != topology:
            raise GridsplitError(f"{out} holds a sweep of topology {meta.get('topology_spec')!r}, not {topology!r}; "
                                 "give another --out")
        if meta and (meta.get("hosts") or {}).get("file") != (inventory and str(inventory.path)):
            raise GridsplitError(f"{out} holds a sweep run {'on the hosts of ' + meta['hosts']['file'] if meta.get('hosts') else 'in the lab'}; "
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
    nodes = {p.nodes for p in pts}
    opened = (lab_grid(topology, scale, None if ALL_NODES in nodes else max(nodes), modes, con) if inventory is None
              else hosts_grid(inventory, modes, con))
    out.parent.mkdir(parents=True, exist_ok=True)
    with opened as grid, out.open("a") as f:
        f.write(json.dumps({
            "kind": "meta", "schema": SCHEMA, "op": op, "topology_spec": topology, **grid.meta(),
            "machine": machine.facts(), "command": sys.argv, "requested": requested,
            "rank_env": {i: {**grid.rank_env.get(i, {}), **rank_env} for i in IMPLS},
            "rank_env_extra": rank_env,
            **extra_meta,
        }) + "\n")
        f.flush()
        rows = _run_all(grid, todo, reps, budget, check, f, con, rank_env)
    done.update((row_key(r), r) for r in rows)
    return [done[p.key] for p in pts if p.key in done]


def _n(nodes: int) -> str:
    return "all" if nodes == ALL_NODES else str(nodes)


def _short(p: Point) -> str:
    if p.ab:
        return p.ab
    return (p.strategy + ("" if p.lan in (None, True) else "-untuned")
            + ("" if p.pacing in (None, "off") else f"-paced-{p.pacing}") + (f"-{p.streams}s" if p.streams else "")
            + ("" if p.split in (None, "policy") else f"-{p.split}"))


def _run_all(grid, todo: list[Point], reps: int, budget: float, check: bool, f, con: Console,
             rank_env: dict[str, str]) -> list[dict[str, Any]]:
    rows = []
    cols = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("ETA"), TimeRemainingColumn())
    with Progress(*cols, console=con, transient=False) as bar:
        task = bar.add_task("sweep", total=len(todo))
        for p in todo:
            grid.prepare(p, bar.console.print)
            bar.update(task, description=f"{p.op} {p.impl} n={_n(p.nodes)} {units.fmt_size(p.size)} {p.mode}"
                                          f"{'/' + _short(p) if p.mode == 'split' else ''} #{p.repeat}")
            try:
                row = run_point(grid, p, reps, budget, check, rank_env)
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
                f"WAN RTO {dist['TCPTimeouts']}, LAN RTO {row['counters']['local']['TCPTimeouts']}){lag}")
            bar.advance(task)
    return rows


# -- summary -------------------------------------------------------------------------


# -- CLI -------------------------------------------------------------------------------

def make_command(op: str) -> click.Command:
    defaults = {"pingpong": ("1", "8,1K,10K,100K,1M")}.get(op, ("2,4,8,12,16,20", "1K,10K,100K,500K,1M,2M,10M"))

    @click.command(name=op)
    @O.lab_topology
    @click.option("--nodes", "-n", default=defaults[0], show_default=True, callback=O.csv(O.count),
                  help="Sender node counts (on the first site; the root is on the second), or all: every node of "
                       "every site of the topology takes part (the root is the second site's first node).")
    @click.option("--sizes", "-s", default=defaults[1], show_default=True, callback=O.csv(O.message_size),
                  help="Message sizes (K=1e3, M=1e6, as the MPI programs read them).")
    @O.reps_budget
    @click.option("--modes", default="direct,split", show_default=True, callback=O.csv(O.choice_list(MODES)))
    @click.option("--impl", "impls", default=None, callback=O.csv(O.choice_list(IMPLS)),
                  help="MPI implementations [lab: mpich,openmpi; --hosts: the hosts file's [mpi] impl].")
    @click.option("--repeat", "-k", default=1, show_default=True, type=click.IntRange(1, 100),
                  help="Repetitions of the whole sweep; the report takes medians and min-max over them.")
    @click.option("--strategy", "strategies", default=None, callback=O.csv(O.choice_list(STRATEGIES)),
                  help=f"Gateway strategies to compare in split mode ({', '.join(STRATEGIES)}); default: the topology's.")
    @click.option("--wan-cc", "ccs", default=None, callback=O.csv(O.choice_list(("cubic", "reno", "bbr"))),
                  help="WAN congestion controls to compare in split mode; default: the topology's.")
    @click.option("--lan-tuning", "lans", default=None, callback=O.csv(O.choice_list(("on", "off"))),
                  help="LAN tuning of the split legs (receive-window clamps sharing the gateway's switch port; "
                       "the LAN timers are the topology's lan_rto_min_us) to compare in split mode: on, off "
                       "or on,off; default: the topology's (on).")
    @click.option("--lan-pacing", "pacings", default=None, callback=O.csv(O.choice_list(LAN_PACING)),
                  help="LAN pacing of the gateways (writes toward each LAN host paced at the nodes' NIC rate: on at "
                       "every site, auto where the gateway's NIC is faster than the nodes', off) to compare in "
                       "split mode, e.g. off,on; default: the topology's ([gateways] lan_pacing).")
    @click.option("--wan-streams", "streams", default=None, callback=O.csv(O.streams),
                  help="TCP connections per WAN link to compare in split mode: auto (the fewest that reach the "
                       "link's rate at its loss, Mathis) or 1..16, e.g. 1,auto; default: the topology's "
                       "([gateways] wan_streams).")
    @click.option("--split", "splits", default="policy", show_default=True,
                  callback=O.csv(O.split_spec),
                  help="Which cross-site connections split mode splits, to compare: policy (the topology's split "
                       "policy: pairs where the split model predicts no gain, or a loss, stay direct), "
                       "all, none, root (only the connections with an end at rank 0's host: its gathers and "
                       "broadcasts relayed, exchanges among the others direct), or site pairs joined by '+' "
                       "(e.g. east-west+east-north: those split, the others direct); e.g. policy,all,root.")
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
    @O.hosts_file
    @click.pass_context
    def cmd(ctx, topology, scale, nodes, sizes, reps, budget, modes, impls, repeat, strategies, ccs, lans, pacings,
            streams, splits, rank_env, check, out, make_report, hosts_file):
        con = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
        if OPS[op].pair and nodes != [1]:
            raise GridsplitError(f"--nodes {','.join('all' if n == ALL_NODES else str(n) for n in nodes)}: {op} runs between one node of each of two "
                                 f"sites, so it takes no node count; leave --nodes out")
        inventory = O.inventory_for(ctx, hosts_file)
        if inventory is None:
            impls = impls or list(IMPLS)
        else:
            topology = hosts_topology(inventory)
        # A sweep stopped by SIGTERM must still stop its MPI job and remove its trace instance.
        sigterm_interrupts()
        if out is None:
            out = Path("gridsplit-out/bench") / (f"{time.strftime('%Y-%m-%d')}-{Path(topology).stem}"
                                                 f"{'-hosts' if inventory else ''}-{op}.jsonl")
        rows = sweep(op, topology, scale, nodes, sizes, reps, budget, modes, impls, repeat,
                     strategies or [None], ccs or [None], out, check, con,
                     tuple(i == "on" for i in lans) if lans else (None,), rank_env,
                     tuple(streams) if streams else (None,), tuple(splits), inventory, tuple(pacings or (None,)))
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
