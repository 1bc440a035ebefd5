"""`gridsplit lab ...`: bring the emulated grid up and down, look at it, use it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import click
from rich.table import Table

from ..console import emit_json, out
from ..errors import GridsplitError
from ..machine import facts
from ..topology import gateway_of_label
from ..topology_file import load_topology
from . import counters as C
from . import fault as F
from . import gateways as G
from . import queues, realize
from .check import SMALL_BUFFER_FRAMES, diagnose, probe_schedule, render, run_check, summarize
from .fault import active, describe
from .mpi import launcher
from .mpi import mpirun as run_mpi
from .mpi import split_env
from .names import LabNames


def _names() -> LabNames:
    return LabNames.from_env()


def _console():
    return out


@click.group()
def lab() -> None:
    """An emulated multi-site grid on this machine: real TCP stacks, real MPI.

    \b
    Every host is a network namespace; sites have a switch (drop-tail output
    buffers, tbf rates) and a router; WAN links get their delay from a
    user-space delay line. Names start with $GRIDSPLIT_LAB_PREFIX (default gs).
    """


AUTO = "auto"
AUTO_DOUBLINGS = 3


def _scale(ctx, param, value):
    if value is None or value == AUTO:
        return value
    try:
        f = float(value)
    except ValueError:
        f = 0.0
    if not f > 0:
        raise click.BadParameter(f"{value!r} is not a positive number or auto (e.g. 10: every rate / 10)")
    return f


def _up_auto_scale(topology: str, nodes: int | None, gateways: bool, keep_failed: bool, say) -> realize.LabState:
    """`lab up --scale auto`: the topology's scale, doubled while this machine cannot hold
    its schedule (check.probe_schedule), then the lab stays up at the first that holds."""
    scale = load_topology(topology, nodes).scale
    attempt = 0
    while True:
        state = realize.up(topology, nodes, _names(), progress=say, gateways=gateways, scale=scale,
                           keep_failed=keep_failed, scale_auto=True)
        if not state.topo.wans:
            return state
        say(f"probing the schedule at rate scale {scale:g}: one full-rate flow across the WAN")
        probe = probe_schedule(state)
        if not probe["ok"]:
            # One 3-s flow can dip on a busy VM: a scale is given up only if it misses twice.
            say(f"rate scale {scale:g} missed once ({probe['why']}); probing again")
            probe = probe_schedule(state)
        if probe["ok"]:
            say(f"rate scale {scale:g}: this machine holds it (delay line {probe['emulator']['late_fraction']:.2%} "
                f"late, CPU {probe['emulator']['cpu_percent']}%)")
            return state
        smallest = min(x.switch_buffer_bytes for x in state.topo.sites)
        if smallest / 2 < SMALL_BUFFER_FRAMES * 1514:
            say(f"[yellow]rate scale {scale:g} does not hold here ({probe['why']}), and at {scale * 2:g} a switch "
                f"buffer would hold {smallest / 2 / 1514:.0f} full frames, too few to emulate; the lab stays at "
                f"{scale:g}.[/yellow] Stop other load and rebuild, or read its numbers with the delay line's "
                "lateness each run records.")
            return state
        if attempt == AUTO_DOUBLINGS:  # the last scale stays, said plainly
            what, todo = diagnose({"rtt": [], "throughput": probe["throughput"], "buffer": [],
                                   "emulator": probe["emulator"], "scale": scale})
            say(f"[yellow]no rate scale up to {scale:g} holds on this machine now: {what}[/yellow] {todo} "
                "The lab stays up at this scale.")
            return state
        say(f"rate scale {scale:g} does not hold here ({probe['why']}); trying {scale * 2:g}")
        realize.down(state.names)
        scale *= 2
        attempt += 1


@lab.command()
@click.option("--topology", "-t", default="mini", show_default=True, metavar="NAME|FILE",
              help="A preset (paper, g5k9, mini) or a topology TOML file.")
@click.option("--nodes", "-n", type=click.IntRange(1, 250), default=None,
              help="Node count of the topology's variable sites (paper: bordeaux senders).")
@click.option("--scale", default=None, callback=_scale, metavar="FACTOR|auto",
              help="Divide every rate (and rate-sized buffer) by this, keeping delays; overrides the topology's "
                   "scale. auto: start at the topology's scale and double it until one full-rate flow across the "
                   "WAN keeps the delay line on schedule on this machine (at most 3 doublings); the scale is printed.")
@click.option("--no-gateways", is_flag=True, help="Do not start gridsplitd on the gateway hosts.")
@click.option("--keep-failed", is_flag=True,
              help="If setting up fails, leave the half-built lab for inspection (then `gridsplit lab down`).")
def up(topology: str, nodes: int | None, scale: float | str | None, no_gateways: bool, keep_failed: bool) -> None:
    """Build the lab: namespaces, switches, routers, WAN links, delay line, gateways."""
    con = _console()
    t0 = time.monotonic()
    say = lambda m: con.print(f"[dim]·[/dim] {m}")
    if scale == AUTO:
        state = _up_auto_scale(topology, nodes, not no_gateways, keep_failed, say)
    else:
        state = realize.up(topology, nodes, _names(), progress=say, gateways=not no_gateways, scale=scale,
                           keep_failed=keep_failed)
    hosts = state.topo.hosts()
    if state.topo.scale != 1:
        con.print(f"[dim]·[/dim] rates are the topology's divided by {state.topo.scale:g} (delays kept): "
                  f"NICs {', '.join(sorted({f'{s.nic_mbps:g}' for s in state.topo.sites}))} Mb/s")
    con.print(f"lab [bold]{state.topo.name}[/bold] is up in {time.monotonic() - t0:.1f} s: "
              f"{len(state.topo.sites)} sites, {len(hosts)} hosts, {len(state.topo.wans)} WAN links "
              f"(prefix {state.names.prefix}). Try `gridsplit lab status`, `gridsplit lab check`.")


@lab.command()
def down() -> None:
    """Remove the lab: every namespace, process and file it created (also after a crash)."""
    removed = realize.down(_names())
    _console().print(f"lab down: removed {len(removed)} namespaces" if removed else "lab down: nothing to remove")


@lab.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status(as_json: bool) -> None:
    """Show the running lab: sites, hosts, WAN links and the delay line's health."""
    state = realize.load_state(_names())
    stats = state.wanem_stats()
    alive = state.wanem_pid is not None and os.path.exists(f"/proc/{state.wanem_pid}")
    faults = active(state.names)
    if as_json:
        emit_json({"prefix": state.names.prefix, "created": state.data["created"], "topology": state.topo.to_dict(),
                   "hosts": [{"name": h.name, "site": h.site, "role": h.role, "ip": str(h.ip), "ns": state.ns(h)}
                             for h in state.topo.hosts()],
                   "wanem": {"pid": state.wanem_pid, "alive": alive, "stats": stats},
                   "emulation": state.emulation, "faults": faults, "scale": state.topo.scale,
                   "scale_auto": bool(state.data.get("scale_auto")), "gridsplitd": state.data.get("gridsplitd")})
        return
    con = _console()
    con.print(f"lab [bold]{state.topo.name}[/bold] (prefix {state.names.prefix}, up since {state.data['created']}"
              f"{f', rates scaled 1/{state.topo.scale:g}' if state.topo.scale != 1 else ''}"
              f"{' (chosen by --scale auto)' if state.data.get('scale_auto') else ''})")
    t = Table("site", "subnet", "nodes", "NIC", "switch buffer", "TCP max buffers", "CC", "gateway")
    for s in state.topo.sites:
        t.add_row(s.name, str(s.subnet), str(s.nodes), f"{s.nic_mbps:g} Mb/s", f"{s.switch_buffer_bytes} B",
                  f"{s.tcp.rmem_max}/{s.tcp.wmem_max}", s.tcp.congestion,
                  (f"{s.gateway_ip}" + (f" ({s.gateway_nic_mbps:g} Mb/s)" if s.gateway_nic_mbps != s.nic_mbps else ""))
                  if s.gateway else "-")
    con.print(t)
    t = Table("WAN link", "RTT", "rate", "buffer", "loss", "packets a→b / b→a", "late", "worst late")
    by_name: dict[str, list] = {}
    for ls in stats.get("links", []):
        by_name.setdefault(ls["name"], []).append(ls)
    for w in state.topo.wans:
        ls = by_name.get(w.name, [])
        t.add_row(w.name, f"{w.rtt_ms:g} ms", f"{w.rate_mbps:g} Mb/s", f"{w.buffer_bytes} B", f"{w.loss:g}",
                  " / ".join(str(x["tx_packets"]) for x in ls), str(sum(x["late"] for x in ls)),
                  f"{max((x['worst_late_us'] for x in ls), default=0):.0f} µs")
    con.print(t)
    con.print(f"delay line: pid {state.wanem_pid} {'running' if alive else '[red]NOT RUNNING[/red]'}, "
              f"CPU {stats.get('cpu_s', 0):.1f} s over {stats.get('uptime_s', 0):.0f} s, "
              f"calibration −{state.data.get('delay_compensation_us', 0)} µs per direction"
              + {"poll": ", idle CPUs polling", "halt": ", idle CPUs halting"}.get(state.data.get("idle"), ""))
    for label in state.data.get("gateways", []):
        pid = state.data["pids"].get(f"gw-{label}")
        host = G.host_of(label)
        st = G.gateway_status(state.names, label, quiet=True)
        if st is None:
            con.print(f"gateway {host}: pid {pid} [red]not answering[/red] (log: {state.names.state_dir}/gw-{label}.log)")
            continue
        c = st.get("counters", {})
        site, k = gateway_of_label(label)
        con.print(f"gateway {host}: pid {pid}, {len(st.get('links', []))} WAN link(s) up, "
                  f"{c.get('flows_active', 0)} active flows, {c.get('relayed_bytes_out', 0)} B relayed out "
                  f"(details: gridsplit gateway status --lab {site}{f' --gateway {k + 1}' if k else ''})")
    for f in faults:
        until = "until `gridsplit lab fault clear`" if f["ends_at"] is None else \
            f"{f['remaining_s']:g} s left (until {f['ends']}), undo process {f['undo_pid']}" + \
            ("" if f["undo_alive"] else " [red]not running: run `gridsplit lab fault clear`[/red]")
        con.print(f"[yellow]{describe(f)}[/yellow] since {f['started']}, {until}")
    con.print("hosts: " + ", ".join(f"{h.name} ({h.ip})" for h in state.topo.hosts()))


@lab.command("exec", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("host")
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
def exec_(host: str, cmd: tuple[str, ...]) -> None:
    """Run CMD on lab HOST (a node or gateway name, or its address).

    Example: gridsplit lab exec east-1 -- ping -c 3 west-1
    """
    state = realize.load_state(_names())
    h = state.topo.host(host)
    cmd = cmd[1:] if cmd and cmd[0] == "--" else cmd
    if not cmd:
        raise GridsplitError("no command given; usage: gridsplit lab exec HOST -- CMD ARGS")
    rc = subprocess.call([str(launcher(state)), "--exec", h.name, *cmd])
    sys.exit(rc)


@lab.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (the exit code still tells pass/fail).")
@click.option("--pairs", type=int, default=3, show_default=True,
              help="How many site pairs get the throughput test (RTT is tested on every pair).")
@click.option("--seconds", type=float, default=6.0, show_default=True, help="Duration of each throughput test (the first second is omitted).")
@click.option("--repeat", type=click.IntRange(1, 50), default=1, show_default=True,
              help="Run the whole check K times; the summary gives medians and min-max.")
@click.option("--out", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Also write the full report (with machine facts) to this JSON file.")
def check(as_json: bool, pairs: int, seconds: float, repeat: int, out: str | None) -> None:
    """Fidelity self-test: RTT, throughput, buffer, and the delay line's schedule.

    Exits 3 if any measurement misses its bound, or if the emulator fell behind.
    """
    state = realize.load_state(_names())
    say = None if as_json else (lambda m: _console().print(f"[dim]·[/dim] {m}"))
    machine = facts()
    runs = []
    for i in range(repeat):
        if say and repeat > 1:
            say(f"run {i + 1} of {repeat}")
        runs.append(run_check(state, pairs=pairs, seconds=seconds, progress=say))
    report = runs[-1] if repeat == 1 else summarize(runs)
    report["machine"] = machine
    report["topology_detail"] = state.topo.to_dict()
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps({**report, "runs": runs if repeat > 1 else None}, indent=1))
    if as_json:
        emit_json(report)
    else:
        render(report, _console())
    if not report["ok"]:
        sys.exit(3)


@lab.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--impl", type=click.Choice(["mpich", "openmpi"]), default="mpich", show_default=True)
@click.option("-n", "nprocs", type=click.IntRange(1, 4096), default=None, help="Number of ranks (default: one per host).")
@click.option("--hosts", default=None, help="Comma-separated lab hosts, rank 0 on the first (default: every node).")
@click.option("--split", "split", is_flag=False, flag_value="policy", default=None, metavar="[policy|all|none|root|PAIRS]",
              help="Through the site gateways (libgridsplit.so preloaded into the ranks): --split follows the "
                   "topology's split policy (site pairs where the split model predicts no gain, or a loss, stay "
                   "direct: `gridsplit gateway config` says why per pair), --split=all splits every cross-site "
                   "connection, --split=none none, --split=root only those with an end at the first host (rank 0's: "
                   "docs/design/host-rule.md), --split=east-west+east-north only those pairs.")
@click.option("--direct", "direct", is_flag=True, help="Node to node, no gateway (the default).")
@click.option("--timeout", type=float, default=None, help="Stop the job after this many seconds.")
@click.option("--poll", is_flag=True,
              help="Leave Open MPI's ranks busy-polling. By default they yield when idle, as in `gridsplit bench`: "
                   "on a machine with few cores, polling ranks take the CPU the gateways and the delay line need.")
@click.argument("prog", nargs=-1, required=True, type=click.UNPROCESSED)
def mpirun(impl: str, nprocs: int | None, hosts: str | None, split: str | None, direct: bool, timeout: float | None,
           poll: bool, prog: tuple[str, ...]) -> None:
    """Run a real MPI job across lab nodes: gridsplit lab mpirun -n 4 -- PROG ARGS."""
    state = realize.load_state(_names())
    hs = [state.topo.host(x.strip()) for x in hosts.split(",")] if hosts else state.topo.nodes()
    prog = prog[1:] if prog and prog[0] == "--" else prog
    if split and direct:
        raise GridsplitError("give --split or --direct, not both")
    env = split_env(state, split, hs[0]) if split else None
    cp = run_mpi(state, impl, nprocs or len(hs), hs, list(prog), env=env,
                 timeout=timeout, poll=poll)
    sys.exit(cp.returncode)


@lab.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--interval", type=float, default=None, help="Measure over this many seconds (when no command is given).")
@click.option("--all", "show_all", is_flag=True, help="Show every counter that moved, not only the headline ones.")
@click.option("--json", "as_json", is_flag=True)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def counters(interval: float | None, show_all: bool, as_json: bool, args: tuple[str, ...]) -> None:
    """Per-host TCP counter deltas over a command or an interval, and which of the lab's
    queues (NICs, switch ports, WAN entries, the delay line) dropped packets meanwhile.

    \b
    gridsplit lab counters east-1 west-1 -- gridsplit lab mpirun -- ./gather
    gridsplit lab counters --interval 5
    """
    state = realize.load_state(_names())
    argv = list(args)
    # The hosts are the leading arguments that name lab hosts, the command what follows
    # them (after a "--": click takes a leading one for itself, `lab counters -- CMD`).
    known = {h.name for h in state.topo.hosts()}
    k = next((i for i, a in enumerate(argv) if a not in known), len(argv))
    hosts_part, cmd = argv[:k], argv[k + 1:] if argv[k:k + 1] == ["--"] else argv[k:]
    if cmd and cmd[0].startswith("-") and cmd[0] != "--":
        raise GridsplitError(f"{cmd[0]}: options of lab counters go before the hosts "
                             f"(gridsplit lab counters [--json] [HOST...] -- COMMAND)")
    if cmd and interval:
        raise GridsplitError("give either a command (after --) or --interval, not both")
    hosts = [state.topo.host(h) for h in hosts_part] or state.topo.hosts()
    nss = [state.ns(h) for h in hosts]
    before, qbefore = C.snapshot_many(nss), queues.snapshot(state)
    rc = 0
    if cmd:
        try:
            rc = subprocess.call(cmd)
        except OSError as e:
            raise GridsplitError(f"{cmd[0]}: cannot run it ({e.strerror}), nor is it a host of the lab; "
                                 f"hosts: {', '.join(sorted(known))}") from None
    else:
        time.sleep(interval if interval else 1.0)
    after, qafter = C.snapshot_many(nss), queues.snapshot(state)
    deltas = {h.name: C.delta(before[state.ns(h)], after[state.ns(h)]) for h in hosts}
    drops = queues.delta(qbefore, qafter)
    if as_json:
        emit_json({"command": cmd, "exit_code": rc, "interval_s": None if cmd else (interval or 1.0), "deltas": deltas,
                   "queue_drops": drops})
    else:
        keys = sorted({k for d in deltas.values() for k in d}) if show_all else list(C.HEADLINE)
        t = Table("host", *keys)
        for name, d in deltas.items():
            t.add_row(name, *[str(d.get(k, 0)) for k in keys])
        _console().print(t)
        _console().print("queue drops: " + (", ".join(f"{k} {v}" for k, v in drops.items()) or "none"), markup=False)
    sys.exit(rc)


# ---------------------------------------------------------------------------
# lab fault: WAN events (the logic is in fault.py)
# ---------------------------------------------------------------------------


@lab.group()
def fault() -> None:
    """Inject WAN events into the running lab: blackout, loss burst, delay spike, gateway death.

    \b
    Each fault is undone when its --seconds are over, or at once on Ctrl-C;
    with --background the command returns and an undo process (its PID in the
    lab's state) undoes it on time. `gridsplit lab status` shows active faults,
    `gridsplit lab fault clear` ends them all, `gridsplit lab down` removes everything.
    """


def _where(f):
    f = click.option("--site", default=None, metavar="SITE", help="Every WAN link of this site.")(f)
    return click.option("--pair", default=None, metavar="SITE_A:SITE_B", help="The WAN link between two sites.")(f)


def _timed(f):
    f = click.option("--background", is_flag=True,
                     help="Return at once; an undo process ends the fault on time.")(f)
    return click.option("--seconds", type=float, required=True, help="How long the fault lasts.")(f)


def _run_fault(kind: str, seconds: float | None, background: bool, target: str, params: dict, apply) -> None:
    names = _names()
    con = _console()
    rec, proc = F.start(names, kind, target, params, seconds, apply)
    if proc is None:
        con.print(f"{F.describe(rec)}, started {rec['started']}; `gridsplit lab fault clear` undoes it")
        return
    con.print(f"{F.describe(rec)} for {seconds:g} s, until {rec['ends']} (undo process {proc.pid})")
    if background:
        con.print("[dim]·[/dim] running in the background: `gridsplit lab status` shows it, "
                  "`gridsplit lab fault clear` ends it now")
        return
    con.print("[dim]·[/dim] Ctrl-C ends it now")
    t0 = time.monotonic()
    interrupted = F.wait(names, rec, proc)
    con.print(f"fault {rec['id']} undone after {time.monotonic() - t0:.1f} s{' (interrupted)' if interrupted else ''}")
    if interrupted:
        sys.exit(130)


def _links_of(pair: str | None, site: str | None, seconds: float | None):
    state = realize.load_state(_names())
    F.check_seconds(seconds)
    return F.resolve_links(state, pair, site)


@fault.command()
@_where
@_timed
def blackout(pair: str | None, site: str | None, seconds: float, background: bool) -> None:
    """Drop every packet between two sites (or of a site's WAN links), silently.

    Blackhole routes in both routers: no link goes down, no ICMP error comes back.
    Example: gridsplit lab fault blackout --pair east:west --seconds 10
    """
    label, links = _links_of(pair, site, seconds)
    _run_fault("blackout", seconds, background, label, {"links": [w.name for w in links]},
               lambda st, fid, objs: F._blackout(st, fid, links, objs))


@fault.command()
@_where
@click.option("--percent", type=float, required=True, help="Share of packets lost, each direction (0-100].")
@_timed
def loss(pair: str | None, site: str | None, percent: float, seconds: float, background: bool) -> None:
    """Random loss burst: each packet crossing the WAN link is dropped with this probability.

    Example: gridsplit lab fault loss --pair east:west --percent 20 --seconds 5
    """
    if not 0 < percent <= 100:
        raise GridsplitError(f"--percent {percent:g}: give a loss over 0 and at most 100 (percent of packets)")
    label, links = _links_of(pair, site, seconds)
    _run_fault("loss", seconds, background, label, {"percent": percent, "links": [w.name for w in links]},
               lambda st, fid, objs: F._loss(st, fid, links, percent, objs))


@fault.command()
@_where
@click.option("--add-ms", type=float, required=True, help="Delay added to each direction (the RTT grows by twice this).")
@_timed
def delay(pair: str | None, site: str | None, add_ms: float, seconds: float, background: bool) -> None:
    """Delay spike: the WAN link's one-way delay grows by --add-ms in each direction.

    Frames already in flight keep their delay; the delay line never reorders.
    Example: gridsplit lab fault delay --pair east:west --add-ms 50 --seconds 5
    """
    label, links = _links_of(pair, site, seconds)
    room = min(10_000 - max(w.delay_ms_ab, w.delay_ms_ba) for w in links)
    if not 0 < add_ms <= room:
        raise GridsplitError(f"--add-ms {add_ms:g}: give an added delay over 0 and at most {room:g} ms "
                             "(the delay line holds a frame for 10 s at most)")
    _run_fault("delay", seconds, background, label, {"add_ms": add_ms, "links": [w.name for w in links]},
               lambda st, fid, objs: F._delay(st, objs))


@fault.command("kill-gateway")
@click.option("--site", required=True, metavar="SITE", help="The site whose gridsplitd is killed (SIGKILL).")
@click.option("--gateway", "gw", type=int, default=1, show_default=True, metavar="N",
              help="Which of the site's gateways, for a site with several.")
@click.option("--restart-after", type=float, default=None, metavar="SECONDS",
              help="Start it again after this long (default: it stays dead until `lab fault clear` or `lab down`).")
@click.option("--background", is_flag=True, help="With --restart-after: return at once; an undo process restarts it.")
def kill_gateway(site: str, gw: int, restart_after: float | None, background: bool) -> None:
    """Kill a site's gateway process, as a crash would (its flows are reset).

    Example: gridsplit lab fault kill-gateway --site east --restart-after 5
    """
    state = realize.load_state(_names())
    F.check_seconds(restart_after, "--restart-after")
    label = G.gateway_label_of(state, site, gw)
    F._kill_gateway(state, label, [], check_only=True)
    _run_fault("kill-gateway", restart_after, background, G.host_of(label), {"site": label},
               lambda st, fid, objs: F._kill_gateway(st, label, objs))


@fault.command()
def clear() -> None:
    """End every active fault now (restarts killed gateways)."""
    done = F.clear(_names())
    _console().print("\n".join(f"{F.describe(f)}: undone" for f in done) if done else "no active fault")
