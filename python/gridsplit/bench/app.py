"""`gridsplit bench app`: a real MPI application, direct vs split, in interleaved rounds.

The microbenchmarks show one pattern at a time; an application mixes them. This
runs any MPI command (`-- CMD ARGS`) or a preset (apppresets.py) in the lab,
once node to node ("direct") and once through the site gateways ("split") per
round, for K rounds, the order alternating (direct first in even rounds, split
first in odd ones) so that a drift of the machine weighs on both. Per run it
records the wall time, the exit status, the application's own time and
verification (read from its output with a pattern), the local/distant TCP
counters, queue drops and gateway CPU as the sweeps do (measure.py), and each
rank's CPU (bench/apps/rankcpu.py). A run that hangs is stopped at --timeout and
recorded as a timeout. Rows go to a JSONL file (docs/apps.md); the summary and
the HTML report take medians and min-max of the per-round split/direct ratios.
"""

from __future__ import annotations

import json
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from .. import machine, sysdeps
from ..errors import GridsplitError
from ..procs import sigterm_interrupts
from ..inventory import Inventory
from ..lab.mpi import IMPLS, TIMED_OUT
from ..topology import Host, Topology
from ..topology_file import load_topology
from . import options as O
from .ab import Side, parse_sides, side_point
from .appresults import build_app_report, render_app_summary, summarize_apps
from .appsummary import side_ratios
from .apppresets import DATA, PRESETS, App, check_built_for, preset_names
from .grid import lab_grid
from .hosts import check_impls, hosts_grid, hosts_topology
from .measure import gw_cpu
from .results import SCHEMA

MODES = ("direct", "split")
PLACEMENTS = ("round-robin", "block")
RANKCPU = DATA / "rankcpu.py"


# -- placement ----------------------------------------------------------------------

def place(topo: Topology, ranks: int, rule: str, hosts: list[str] | None) -> list[Host]:
    """The lab hosts of `topo` in rank order (place_on)."""
    return place_on([s.name for s in topo.sites], list(topo.nodes()), f"the lab ({topo.name})", ranks, rule, hosts)


def place_on(sites: list[str], nodes: list, where: str, ranks: int, rule: str, hosts: list[str] | None) -> list:
    """The hosts in rank order, among a grid's `nodes` (lab Hosts or real hosts, in the order of
    `sites`). Both launchers map rank i to the i-th host of the list, cycling when there are
    more ranks than hosts, so the list is the placement.

    round-robin: one node of each site in turn (sites in the grid's order);
    block: the ranks cut into one block per site, as even as the sites' nodes allow;
    hosts: the nodes named, in order.
    """
    by_name = {h.name: h for h in nodes}
    if hosts:
        bad = [h for h in hosts if h not in by_name]
        if bad:
            raise GridsplitError(f"--hosts: {', '.join(bad)} not a node of {where}: {', '.join(by_name)}")
        if len(set(hosts)) != len(hosts):
            raise GridsplitError("--hosts: name each node once; ranks beyond the list go round it again")
        return [by_name[h] for h in hosts]
    per_site = [[h for h in nodes if h.site == s] for s in sites]
    per_site = [x for x in per_site if x]
    if len(per_site) < 2:
        raise GridsplitError(f"{where} has nodes on one site; bench app spreads ranks over sites")
    n = min(ranks, len(nodes))
    if rule == "round-robin":
        out, i = [], 0
        while len(out) < n:
            site = per_site[i % len(per_site)]
            k = i // len(per_site)
            if k < len(site):
                out.append(site[k])
            i += 1
            if i > len(per_site) * max(len(s) for s in per_site):
                break
        return out
    # block: even shares, a site with fewer nodes giving its rest to the others
    share = {i: 0 for i in range(len(per_site))}
    left = n
    while left:
        open_ = [i for i in share if share[i] < len(per_site[i])]
        for i in open_[:left]:
            share[i] += 1
            left -= 1
    return [h for i, site in enumerate(per_site) for h in site[:share[i]]]


# -- reading the output -------------------------------------------------------------

def compile_pattern(flag: str, pattern: str | None) -> re.Pattern | None:
    if pattern is None:
        return None
    try:
        return re.compile(pattern, re.MULTILINE)
    except re.error as e:
        raise GridsplitError(f"{flag} {pattern!r} is not a valid regular expression: {e}") from None


def app_time(rx: re.Pattern | None, text: str) -> float | None:
    """The app's own time: the last match's group `time`, or its first group, in seconds."""
    if rx is None:
        return None
    found = list(rx.finditer(text))
    if not found:
        return None
    m = found[-1]
    g = m.groupdict().get("time") or (m.group(1) if m.groups() else None)
    if g is None:
        raise GridsplitError(f"--time-pattern {rx.pattern!r} has no group to read the time from: "
                             "put the number in (...) or (?P<time>...)")
    try:
        return float(g)
    except ValueError:
        raise GridsplitError(f"--time-pattern {rx.pattern!r} matched {g!r}, which is not a number of seconds") from None


def figures(specs: tuple[str | tuple[str, str], ...], text: str) -> dict[str, float]:
    """The figures an app's output gives: NAME from a NAME=VALUE line, or (NAME, REGEX) from its
    last match's first group; a figure absent or not a number is left out."""
    out = {}
    for spec in specs:
        name, pattern = (spec, rf"(?m)^{re.escape(spec)}=(\S+)$") if isinstance(spec, str) else spec
        found = re.findall(pattern, text)
        if found:
            try:
                out[name] = float(found[-1])
            except ValueError:
                pass
    return out


def _tail(text: str | None, n: int) -> list[str]:
    lines = [l for l in (text or "").strip().splitlines() if l.strip()]
    return lines[-n:] if n else []


def _last_line(text: str) -> str:
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    return (lines[-1][:120] if lines else "(no output)")


# -- one run ----------------------------------------------------------------------------

def rank_cpu(cpu_dir: Path) -> list[dict[str, Any]]:
    recs = []
    for p in cpu_dir.glob("rank-*.json"):
        try:
            recs.append(json.loads(p.read_text()))
        except (OSError, ValueError):
            pass
    return sorted(recs, key=lambda r: r["rank"])


def cpu_row(ranks: list[dict[str, Any]], gws: dict[str, float], softirq: dict[str, float] | None,
            wall: float) -> dict[str, Any]:
    """Each rank's CPU (percent of one core over its own lifetime) and each gateway's over the job's wall time."""
    per = [{"rank": r["rank"], "host": r["host"], "cpu_s": round(r["user_s"] + r["sys_s"], 3),
            "pct": round(100 * (r["user_s"] + r["sys_s"]) / r["wall_s"], 1) if r["wall_s"] > 0 else None}
           for r in ranks]
    pcts = [p["pct"] for p in per if p["pct"] is not None]
    return {"window_s": round(wall, 3),
            "ranks": {"mean_pct": round(statistics.fmean(pcts), 1) if pcts else None,
                      "max_pct": max(pcts) if pcts else None, "per_rank": per},
            "gateways": {s: gw_cpu(v, None if softirq is None else softirq.get(s, 0.0), wall) for s, v in gws.items()}}


def run_one(grid, app: App, impl: str, mode: str, repeat: int, order: int,
            hosts: list, ranks: int, rule: str, timeout: float, patterns: dict[str, re.Pattern | None],
            con: Console, split: str = "policy") -> dict[str, Any]:
    """One run of `app` on `grid` (the lab, grid.LabGrid, or real hosts, hosts.HostsGrid): its row."""
    topo = grid.topo
    sites = {h.site for h in hosts}
    gws = grid.gateways(sites)
    watched = {h.name: h for h in [*hosts, *gws]}
    env = {**dict(app.env), **(grid.split_env(split, hosts[0]) if mode == "split" else {})}
    work = Path(tempfile.mkdtemp(prefix=f"gridsplit-app-{app.name}-"))
    try:
        cpu_dir = work / ".rankcpu"
        cpu_dir.mkdir()
        for f in app.files:
            shutil.copy(f, work / f.name)
        # A preset runs in a directory of its own (its inputs, its output files); a user's command where it was
        # given (in the lab; on real hosts, in a directory of its own on each rank's host).
        with grid.app_dir(work, hosts[:ranks], bool(app.files or app.output_file or app.collect), RANKCPU) as (wdir, wrap):
            probe = grid.probe(watched, mode)
            probe.start()
            t0 = time.monotonic()
            cp = grid.mpirun(impl, hosts, [*wrap, *app.argv], env, timeout, probe.at_result, n=ranks, wdir=wdir)
            wall = time.monotonic() - t0
            probe.stop()
        text = (cp.stdout or "") + "\n" + (cp.stderr or "")
        if app.output_file and (work / app.output_file).exists():
            text += "\n" + (work / app.output_file).read_text(errors="replace")
        extra = app.collect(work, ranks) if app.collect else {}
        cpus = rank_cpu(cpu_dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    timed_out = cp.returncode == TIMED_OUT
    status = "timeout" if timed_out else ("ok" if cp.returncode == 0 else "failed")
    t_app = app_time(patterns["time"], text)
    passed = bool(patterns["pass"].search(text)) if patterns["pass"] else None
    same = [(m.group(1) if m.groups() else m.group(0)).strip() for m in patterns["same"].finditer(text)] \
        if patterns["same"] else None
    verified = extra.pop("verified", None)
    if passed is not None:
        verified = passed and verified is not False
    if status != "ok" and verified:
        verified = False
    g = topo.gateways
    bad = status != "ok" or verified is False
    return {
        "kind": "app", "schema": SCHEMA, "app": app.name, "preset": app.preset, "impl": impl, "mode": mode,
        "variant": {"strategy": g.strategy, "congestion": g.congestion, "lan_tuning": g.lan_tuning,
                    "lan_pacing": g.lan_pacing, "wan_streams": g.wan_streams,
                    "split": "policy"} if mode == "split" else None,
        "repeat": repeat, "order": order, "ranks": ranks,
        "placement": {"rule": rule, "hosts": [hosts[i % len(hosts)].name for i in range(ranks)],
                      "sites": {s: sum(1 for i in range(ranks) if hosts[i % len(hosts)].site == s) for s in sorted(sites)},
                      "observed": {str(r["rank"]): r["host"] for r in cpus}},
        "command": list(app.argv), "env": dict(app.env),
        "status": status, "exit_status": None if timed_out else cp.returncode, "timeout_s": timeout,
        "wall_s": round(wall, 3), "app_time_s": t_app, "time_s": t_app if t_app is not None else round(wall, 3),
        "verified": verified, "pass_matched": passed, "same": same, "figures": figures(app.figures, text), **extra,
        "counters": probe.counters(mode), **probe.network(),
        "cpu": {**cpu_row(cpus, probe.gw_cpu_s() if mode == "split" else {}, probe.gw_softirq_s(), wall),
                **probe.softirq_note()},
        # The last lines of stdout, then of stderr (where the launchers say why a job ended).
        "output_tail": _tail(cp.stdout, 4 if bad else 2) + _tail(cp.stderr, 4 if bad else 0),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def check_patterns(row: dict[str, Any], app: App, patterns: dict[str, re.Pattern | None], text_hint: str) -> None:
    """The first run that ends well establishes the patterns: one that matches nothing there is a bad pattern."""
    for key, flag, found in (("time", "--time-pattern", row["app_time_s"] is not None),
                             ("pass", "--pass-pattern", row["pass_matched"] is not False),
                             ("same", "--same-pattern", bool(row["same"]))):
        rx = patterns[key]
        if rx is not None and not found:
            what = f"preset {app.preset}'s {flag[2:]}" if app.preset else flag
            raise GridsplitError(f"{what} {rx.pattern!r} matched nothing in the output of {app.name} "
                                 f"({row['mode']}, exit 0); its last line: {text_hint!r}")


# -- the bench -------------------------------------------------------------------------

def bench_app(apps: list[tuple[App, list[str]]], topology: str, scale: float | None, repeat: int, ranks: int | None,
              rule: str, hosts: list[str] | None, timeout: float | None, modes: list[str], out: Path,
              con: Console, requested: dict[str, Any], inventory: Inventory | None = None,
              sides: tuple[Side, Side] | None = None) -> list[dict[str, Any]]:
    """Every run, in rounds: each mode in alternating order, or with `sides` (an A/B of gateway builds or
    settings, as `bench ab`) direct and then the two sides, A first in even rounds and B first in odd ones."""
    if inventory is None:
        sysdeps.need_root("gridsplit bench app")
        topo = load_topology(topology, None, scale)
        opened = lab_grid(topology, scale, None, set(modes), con)
    else:
        topo = load_topology(topology)
        opened = hosts_grid(inventory, set(modes), con)
    if sides:
        sides = (sides[0].for_topology(topo), sides[1].for_topology(topo))
    if "direct" in modes and not topo.routed:
        raise GridsplitError(f"direct mode cannot run on topology {topo.name!r}: its sites are unroutable "
                             "([addressing] routed = false); use --modes split")
    out.parent.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    checked: set[str] = set()
    with opened as grid, out.open("a") as f:
        f.write(json.dumps({
            "kind": "meta", "schema": SCHEMA, "op": "app", "topology_spec": topology, **grid.meta(),
            "machine": machine.facts(), "command": sys.argv, "requested": requested,
            "rank_env": {i: grid.rank_env.get(i, {}) for i in IMPLS},
            **({"ab": {"a": sides[0].describe(), "b": sides[1].describe()}} if sides else {}),
        }) + "\n")
        f.flush()
        for k in range(repeat):
            order: list[tuple[str, Side | None]] = [(m, None) for m in (modes if k % 2 == 0 else modes[::-1])]
            if sides:
                order = [(m, None) for m in modes if m == "direct"] + \
                        [("split", s) for s in (sides if k % 2 == 0 else sides[::-1])]
            for app, impl in [(a, i) for a, ai in apps for i in ai]:
                n = ranks or app.ranks
                placed = place_on(grid.sites, grid.nodes, grid.where, n, rule, hosts)
                patterns = {"time": compile_pattern("--time-pattern", app.time_pattern),
                            "pass": compile_pattern("--pass-pattern", app.pass_pattern),
                            "same": compile_pattern("--same-pattern", app.same_pattern)}
                for j, (mode, side) in enumerate(order):
                    con.print(f"[dim]·[/dim] round {k + 1}/{repeat}: {app.name} {impl} {side.label if side else mode}, "
                              f"{n} ranks on {', '.join(h.name for h in placed[:n])}")
                    point = side and side_point(side, grid.topo.gateways, "app", impl, n, 0, k)
                    if point:
                        grid.prepare(point, con.print)
                    row = run_one(grid, app, impl, mode, k, j, placed, n, rule,
                                  timeout or app.timeout, patterns, con, point.split if point else "policy")
                    if point:
                        row["variant"] = point.variant
                    if row["status"] == "ok" and app.name not in checked:
                        check_patterns(row, app, patterns, _last_line("\n".join(row["output_tail"])))
                        checked.add(app.name)
                    f.write(json.dumps(row) + "\n")
                    f.flush()
                    rows.append(row)
                    con.print(_row_line(row))
    return rows


def _row_line(r: dict[str, Any]) -> str:
    st = {"ok": "[green]ok[/green]", "failed": f"[red]exit {r['exit_status']}[/red]",
          "timeout": f"[red]timeout after {r['timeout_s']:.0f} s[/red]"}[r["status"]]
    ver = {True: "verified", False: "[red]NOT verified[/red]", None: "no verification"}[r["verified"]]
    own = f", app {r['app_time_s']:.3f} s" if r["app_time_s"] is not None else ""
    tests = r.get("tests")
    t = (f", tests {len(tests['passed'])} passed {len(tests['failed'])} failed {len(tests['skipped'])} skipped"
         if tests else "")
    d = r["counters"]["distant"]
    return (f"  {r['app']} {r['impl']} {r['mode']:6} {st} wall {r['wall_s']:.2f} s{own}, {ver}{t}, "
            f"WAN retrans {d['RetransSegs']}, RTO {d['TCPTimeouts']}")


# -- CLI -----------------------------------------------------------------------------------

@click.command(name="app", context_settings={"ignore_unknown_options": True})
@click.option("--preset", "-p", default=None, metavar="NAME[,NAME]|all",
              help=f"Preset application(s): {', '.join(PRESETS)}, or all (docs/apps.md).")
@click.option("--name", default=None, help="Name of a user command in the results (default: the program's name).")
@click.option("--topology", "-t", default="paper", show_default=True, metavar="NAME|FILE",
              help="Preset or topology file; the lab is brought up (or reused) for it.")
@click.option("--scale", type=float, default=None, help="Override the topology's rate scale (see `lab up --scale`).")
@click.option("--impl", "impls", default=None, callback=O.csv(O.choice_list(IMPLS)),
              help="MPI implementation(s): mpich, openmpi or both; an app runs with the ones it is built for "
                   "[lab: openmpi; --hosts FILE: the hosts file's [mpi] impl].")
@click.option("--ranks", "-n", type=click.IntRange(2, 64), default=None,
              help="Number of ranks (default: the preset's, 4; or one per --hosts entry).")
@click.option("--placement", type=click.Choice(PLACEMENTS), default="round-robin", show_default=True,
              help="Ranks over the sites: one node of each site in turn, or one block per site.")
@click.option("--hosts", default=None, metavar="FILE|NODE,NODE,...",
              help="A hosts file (TOML, ending in .toml: run on those real hosts over ssh, docs/bench.md), or in "
                   "the lab an explicit placement: rank i on the i-th node named (cycling if there are more ranks).")
@click.option("--repeat", "-k", default=3, show_default=True, type=click.IntRange(1, 100),
              help="Rounds; each runs direct and split, the order alternating from round to round.")
@click.option("--modes", default="direct,split", show_default=True, callback=O.csv(O.choice_list(MODES)))
@click.option("--timeout", type=click.FloatRange(1), default=None,
              help="Seconds before a run is stopped and recorded as a timeout (default: the preset's, or 600).")
@click.option("--time-pattern", default=None, metavar="REGEX",
              help="Regex finding the app's own time in its output: the number in its first group (or (?P<time>...)), "
                   "in seconds; the last match counts.")
@click.option("--pass-pattern", default=None, metavar="REGEX", help="Regex whose presence in the output means verified.")
@click.option("--same-pattern", default=None, metavar="REGEX",
              help="Regex whose matches must be identical in every run (e.g. a final energy line).")
@click.option("--mpi4py-tests", default=None, metavar="all|MODULE,...",
              help="The mpi4py suite's modules to run (default: those that move data between ranks: "
                   "p2p_obj, cco_obj, comm, msgzero; all: the whole suite, tens of minutes in the lab).")
@click.option("--a", "side_a", default=None, metavar="KEY=VALUE,...",
              help="An A/B of two gateway builds or settings instead of one split mode (lab only): side A, with "
                   "`bench ab`'s keys (gridsplitd, strategy, congestion, lan_tuning, lan_pacing, wan_pacing, wan_quickack, lan_rto_min_us, wan_streams, "
                   "split (policy, all, none, root or site pairs), policy_ops, policy_sizes, encryption, label); each round runs direct, then A and B in alternating order.")
@click.option("--b", "side_b", default=None, metavar="KEY=VALUE,...", help="Side B of --a's A/B.")
@click.option("--prepare", is_flag=True, help="Only check and build the presets (e.g. mpi4py per MPI), then exit.")
@click.option("--out", "-o", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="JSONL result file (default: gridsplit-out/bench/DATE-TIME-TOPOLOGY-app.jsonl).")
@click.option("--report/--no-report", "make_report", default=True, show_default=True,
              help="Write the HTML report next to the result file at the end.")
@click.argument("cmd", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def app_cmd(ctx, preset, name, topology, scale, impls, ranks, placement, hosts, repeat, modes, timeout, time_pattern,
            pass_pattern, same_pattern, mpi4py_tests, side_a, side_b, prepare, out, make_report, cmd):
    """Run an MPI application direct and split, side by side, in interleaved rounds.

    Either a preset (--preset lammps-lj|lammps-pppm|hpcc|mpi4py|all) or any
    command after --, e.g.

      gridsplit bench app -t mini --pass-pattern 'PASSED' -- ./my_mpi_app -x 3

    Per run: wall time, exit status, the app's own time and verification (from
    its output), local/distant TCP counters, drops, gateway and rank CPU, in a
    JSONL file with a summary table and an HTML report (docs/apps.md).
    """
    con = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
    sigterm_interrupts()
    inventory = O.inventory_for(ctx, hosts) if hosts and hosts.endswith(".toml") else None
    if inventory is None:
        hosts = O.csv(str)(ctx, None, hosts)
        impls = impls or ["openmpi"]
    else:
        hosts, topology, impls = None, hosts_topology(inventory), check_impls(inventory, impls)
    sides = None
    if side_a is not None or side_b is not None:
        if side_a is None or side_b is None:
            raise GridsplitError("an A/B needs both --a and --b (e.g. --a gridsplitd=/tmp/old/gridsplitd --b label=new)")
        if inventory is not None:
            raise GridsplitError("--a/--b restart the lab's gateways with each side; real hosts' gateways run their "
                                 "own config: compare two builds there by running the bench once with each")
        if "split" not in modes:
            raise GridsplitError("--a/--b are two split modes; keep split in --modes")
        sides = parse_sides(side_a, side_b)
    cmd = list(cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if bool(preset) == bool(cmd):
        raise GridsplitError("give either --preset NAME or a command after -- (e.g. gridsplit bench app -- ./app ARGS)")
    for flag, v in (("--time-pattern", time_pattern), ("--pass-pattern", pass_pattern),
                    ("--same-pattern", same_pattern)):
        compile_pattern(flag, v)
    apps = build_apps(preset, cmd, name, impls, time_pattern, pass_pattern, same_pattern, con, mpi4py_tests)
    if prepare:
        con.print(f"ready: {', '.join(sorted({a.name + ' (' + i + ')' for a, ai in apps for i in ai}))}")
        return
    if out is None:
        out = Path("gridsplit-out/bench") / (f"{time.strftime('%Y-%m-%d-%H%M%S')}-{Path(topology).stem}"
                                             f"{'-hosts' if inventory else ''}-app.jsonl")
    if out.exists():
        raise GridsplitError(f"{out} exists; give another --out (app runs are not resumed)")
    requested = {"preset": preset, "command": cmd, "impls": impls, "ranks": ranks, "placement": placement,
                 "hosts": hosts, "hosts_file": inventory and str(inventory.path), "repeat": repeat, "modes": modes, "timeout_s": timeout,
                 "time_pattern": time_pattern, "pass_pattern": pass_pattern, "same_pattern": same_pattern,
                 "mpi4py_tests": mpi4py_tests, "sides": [s.describe() for s in sides] if sides else None}
    n = ranks or (len(hosts) if hosts else None)
    rows = bench_app(apps, topology, scale, repeat, n, placement, hosts, timeout, modes, out, con, requested, inventory,
                     sides)
    summary = summarize_apps(rows)
    render_app_summary(summary, con, f"bench app: split vs direct, medians over rounds ({out})")
    if sides:
        a, b = sides[0].label, sides[1].label
        for s in side_ratios(rows, a, b):
            con.print(f"{s['app']} {s['impl']}: {b}/{a} {s['ratio']:.3f} ({s['ratio_min']:.3f}-{s['ratio_max']:.3f}) "
                      f"over {s['rounds']} rounds")
    con.print(f"results: {out}")
    if make_report:
        con.print(f"report: {build_app_report([out], out.with_suffix(''))}")


def build_apps(preset: str | None, cmd: list[str], name: str | None, impls: list[str], time_pattern: str | None,
               pass_pattern: str | None, same_pattern: str | None, con: Console,
               mpi4py_tests: str | None = None) -> list[tuple[App, list[str]]]:
    """Each app with the MPI implementations it runs with. A preset not built for an MPI asked for is an
    error when named alone; with --preset all (or a list) it is skipped with a note."""
    if cmd:
        app = App(name or Path(cmd[0]).name, tuple(cmd), time_pattern=time_pattern, pass_pattern=pass_pattern,
                  same_pattern=same_pattern)
        for i in impls:
            check_built_for(app, i)
        return [(app, impls)]
    out = []
    names = preset_names(preset)
    for p in names:
        got: dict[str, App] = {}
        for i in impls:
            try:
                got[i] = PRESETS[p](i, con, mpi4py_tests) if p == "mpi4py" else PRESETS[p](i, con)
            except GridsplitError as e:
                if len(names) == 1 or "is built for" not in str(e):
                    raise
                con.print(f"[yellow]note:[/yellow] skipping {p} with {i}: {e}")
        if got:
            a = next(iter(got.values()))
            if time_pattern or pass_pattern or same_pattern:
                a = App(**{**a.__dict__, "time_pattern": time_pattern or a.time_pattern,
                           "pass_pattern": pass_pattern or a.pass_pattern,
                           "same_pattern": same_pattern or a.same_pattern})
            # mpi4py's build differs per MPI: one App per implementation
            if p == "mpi4py":
                out += [(got[i], [i]) for i in got]
            else:
                out.append((a, list(got)))
    return out
