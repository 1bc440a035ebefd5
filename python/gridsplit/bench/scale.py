"""`gridsplit bench scale`: how far one gateway scales in flows (issue 21).

A job of 256 ranks per site on two sites opens up to 65,536 cross-site
connections. This runs two gridsplitd processes on loopback (sites
127.K.1.0/24 and 127.K.2.0/24, fixed ports, configs in a temporary directory)
and gsload (crates/gsload), which opens many LAN connections through them, as
libgridsplit.so would, to sinks behind the far gateway, and measures:

  * memory per idle flow: each gateway's VmRSS (and VmSize, RssAnon, open fds)
    from /proc/PID/status before and after N idle flows, divided by N;
  * the most concurrent flows reached (steps, e.g. 10,000 then 20,000);
  * new flows per second: GSq1 → GSa1 plus a 16-byte hello echoed end to end,
    every flow checked (the sink compares the GSo1 origin with the client's
    address, the client the echo with what it sent);
  * round-trip latency (p50/p99/p99.9) of small messages on a few active flows
    while the N idle flows are open;
  * the gateways' /metrics (flows_active etc.) at each point, and that every
    flow is gone once the clients closed them.

Before the measured runs a probe starts the gateways with the product's default
[limits] and counts how many flows they admit (`--probe-defaults`).

Every process started here gets RLIMIT_NOFILE raised (`--nofile`, soft = hard),
since 20,000 flows need 20,000 descriptors in each gateway and twice that in
gsload, and is stopped by its PID on exit, failure, Ctrl-C or SIGTERM.
Results: OUT/DATE-HOST.jsonl (a meta row, one row per step and repeat, one per
repeat, probe rows, a summary row) and OUT/DATE-HOST.md.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import resource
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import click
from rich.markup import escape

from gridsplit import machine, sysdeps
from gridsplit.errors import GridsplitError
from gridsplit.procs import Processes, wait_gateway_link
from gridsplit.console import err, out
from gridsplit.topology import STRATEGIES
from gridsplit.units import int_list
from gridsplit.bench.scalereport import analyse, markdown, summarize, table
from gridsplit.gateway import toml_str

SCHEMA = "gridsplit.scale/1"
ROOT = Path(__file__).resolve().parents[3]
TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
SINKS = 4  # sink listeners 127.K.2.20-23
IDLE_CPU_S = 2.0  # seconds over which the gateways' CPU with idle flows is read, per step


class ScaleError(GridsplitError):
    """A failure worth one line to the user (no traceback)."""


class Stopped(Exception):
    """SIGTERM arrived: unwind like Ctrl-C so that every process is stopped."""


# ------------------------------------------------------------------ processes




def nofile_of(pid: int) -> int | None:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    return None


def proc_sample(pid: int) -> dict:
    """Memory, descriptors and CPU time of a process, from /proc."""
    st = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        k, _, v = line.partition(":")
        if k in ("VmRSS", "RssAnon", "VmSize", "VmHWM", "VmData"):
            st[k] = int(v.split()[0])  # kB
    stat = Path(f"/proc/{pid}/stat").read_text()
    f = stat[stat.rindex(")") + 2 :].split()
    return {
        "rss_kb": st["VmRSS"], "rss_anon_kb": st.get("RssAnon"), "vmsize_kb": st["VmSize"],
        "vmdata_kb": st.get("VmData"), "hwm_kb": st["VmHWM"],
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
        "cpu_s": (int(f[11]) + int(f[12])) / TICK,
    }


def sockstat() -> dict:
    """System-wide TCP sockets and their kernel memory (pages -> kB), /proc/net/sockstat."""
    for line in Path("/proc/net/sockstat").read_text().splitlines():
        if line.startswith("TCP:"):
            p = line.split()[1:]
            d = {p[i]: int(p[i + 1]) for i in range(0, len(p) - 1, 2)}
            return {"inuse": d.get("inuse"), "tw": d.get("tw"), "mem_kb": d.get("mem", 0) * PAGE // 1024}
    return {}


def metrics(admin: str) -> dict:
    """The gateway's /metrics: unlabelled gauges and counters, and non-zero labelled ones;
    {"error": ...} if it does not answer (a gateway out of descriptors cannot accept).
    Read as a monitoring system reads it, from the exported text format; its lines are
    `NAME VALUE` or `NAME{LABELS} VALUE`, which needs no Prometheus client library."""
    try:
        with urllib.request.urlopen(f"http://{admin}/metrics", timeout=5) as r:
            text = r.read().decode()
    except (OSError, ValueError) as e:
        return {"error": str(e)}
    m = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, v = line.rpartition(" ")
        try:
            val = float(v)
        except ValueError:
            continue
        if "{" in name and val == 0:
            continue
        m[name.removeprefix("gridsplit_")] = int(val) if val == int(val) else val
    return m


# Listening ports, below Linux's ephemeral range (32768-60999): a port picked by
# binding port 0 is an ephemeral one, which the far gateway's thousands of
# outgoing connections (bound to its LAN address, port 0) may hold, or have just
# left in TIME_WAIT, when the next repeat's listener binds it.
PORTS = {"lan": 7100, "wan": 7200, "admin": 7300, "sink": 7400}


def port_free(ip: str, port: int) -> int:
    """`port` if a listener can bind ip:port (as gridsplitd and gsload do, with
    SO_REUSEADDR), else one clear error."""
    s = socket.socket()
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((ip, port))
        return port
    except OSError as e:
        raise ScaleError(f"cannot bind {ip}:{port}: {e.strerror}; is another bench scale running? "
                         "give it another --octet") from None
    finally:
        s.close()


# ------------------------------------------------------------------ set-up


@dataclass
class Plan:
    k: int
    per_flow_buffer: int | None  # None: the product's default [limits]
    total_buffer: int | None
    strategy: str
    threads: int | None
    # The gateways' [lan] window_budget, rate_bps and burst_bytes: 0 each = off (the LAN
    # controls whose 5 ms ticks read every LAN socket; collect/incast.rs, collect/egress.rs).
    lan: tuple[int, int, int] = (0, 0, 0)

    def ip(self, site: int, host: int) -> str:
        return f"127.{self.k}.{site}.{host}"


def write_configs(d: Path, plan: Plan) -> dict:
    """Configs of both gateways (ports: PORTS); returns their addresses."""
    (d / "psk").write_text(secrets.token_hex(32))
    gw = {}
    for site, name in ((1, "alpha"), (2, "beta")):
        own = plan.ip(site, 254)
        admin_ip = f"127.{plan.k}.0.{site}"
        gw[name] = {"lan": (own, port_free(own, PORTS["lan"])), "wan": (own, port_free(own, PORTS["wan"])),
                    "admin": f"{admin_ip}:{port_free(admin_ip, PORTS['admin'])}"}
    limits = ""
    if plan.per_flow_buffer is not None:
        limits = f"[limits]\nper_flow_buffer = {plan.per_flow_buffer}\ntotal_buffer = {plan.total_buffer}\n"
    if any(plan.lan):
        budget, rate, burst = plan.lan
        limits += f"[lan]\nwindow_budget = {budget}\nrate_bps = {rate}\nburst_bytes = {burst}\n"
    for site, name in ((1, "alpha"), (2, "beta")):
        g = gw[name]
        sites = "".join(
            f'[[site]]\nname = "{n}"\nsubnet = "127.{plan.k}.{s}.0/24"\n'
            f'gateway_lan = "{gw[n]["lan"][0]}:{gw[n]["lan"][1]}"\n'
            f'gateway_wan = "{gw[n]["wan"][0]}:{gw[n]["wan"][1]}"\n'
            for s, n in ((1, "alpha"), (2, "beta")))
        text = (f"# Generated by gridsplit bench scale: loopback sites.\n[gateway]\nsite = \"{name}\"\n"
                f'lan_listen = "{g["lan"][0]}:{g["lan"][1]}"\nwan_listen = "{g["wan"][0]}:{g["wan"][1]}"\n'
                f'admin_listen = "{g["admin"]}"\nstrategy = "{plan.strategy}"\npsk_file = {toml_str(d / "psk")}\n'
                f"{limits}[wan]\nbandwidth_bps = 1000000000\nrtt_ms = 1.0\n{sites}")
        (d / f"{name}.toml").write_text(text)
        g["config"] = d / f"{name}.toml"
    return gw


def binaries(no_build: bool) -> tuple[Path, Path]:
    """gridsplitd ($GRIDSPLITD, else cargo's release build) and gsload ($GSLOAD, else the
    same; sysdeps.own_build); `cargo build --release -p gsload -p gridsplitd` if one is missing."""
    gsd, gsl = (sysdeps.own_build(n)[0] for n in ("gridsplitd", "gsload"))
    missing = [p for p in (gsd, gsl) if not p.is_file()]
    if missing and not no_build:
        err.print("[dim]building gsload and gridsplitd (cargo build --release -p gsload -p gridsplitd)[/dim]")
        r = subprocess.run(["cargo", "build", "--release", "-p", "gsload", "-p", "gridsplitd"],
                           cwd=ROOT, capture_output=True, text=True)
        if r.returncode != 0:
            last = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["?"]
            raise ScaleError(f"cargo build --release -p gsload -p gridsplitd failed: {last[0]}")
    for p in (gsd, gsl):
        if not p.is_file():
            raise ScaleError(f"{p} is missing: cargo build --release -p gsload -p gridsplitd")
    return gsd, gsl


def binary_facts(p: Path) -> dict:
    h = hashlib.sha256(p.read_bytes()).hexdigest()[:16]
    mtime = _dt.datetime.fromtimestamp(p.stat().st_mtime, _dt.timezone.utc).isoformat(timespec="seconds")
    return {"path": str(p), "sha256_16": h, "built": mtime}


# ------------------------------------------------------------------ one run


def one_run(gsd: Path, gsl: Path, plan: Plan, nofile: int, steps: list[int], active: int, seconds: float,
            msg_size: int, concurrency: int, rate: float, open_timeout_ms: int, gsload_threads: int,
            on_event=None) -> dict:
    """Two gateways and gsload, from start to a clean stop; returns every sample and event."""
    tmp = Path(tempfile.mkdtemp(prefix="gridsplit-bench-scale-"))
    procs = Processes(tmp, nofile)
    events: list[dict] = []
    samples: list[dict] = []
    try:
        gw = write_configs(tmp, plan)
        extra = ["--log-level", "warn"] + (["--threads", str(plan.threads)] if plan.threads else [])
        pids = {}
        for name in ("alpha", "beta"):
            pids[name] = procs.start(f"gridsplitd-{name}", [str(gsd), "--config", str(gw[name]["config"]), *extra]).pid
        wait_gateway_link(gw["alpha"]["admin"], procs)
        sink_port = port_free(plan.ip(2, 20), PORTS["sink"])
        sinks = ",".join(f"{plan.ip(2, 20 + i)}:{sink_port}" for i in range(SINKS))
        lan_ip, lan_port = gw["alpha"]["lan"]
        common = [str(gsl), "--gateway", f"{lan_ip}:{lan_port}", "--src-prefix", f"127.{plan.k}.1",
                  "--src-hosts", "1-250", "--sink", sinks, "--threads", str(gsload_threads)]
        # Sinks and clients in two processes: each holds one descriptor per flow.
        sink = procs.start("gsload-sink", [*common, "--role", "sink"], pipes=True)
        started = json.loads(sink.stdout.readline() or "{}")
        if started.get("event") != "start":
            raise ScaleError(f"gsload sink did not start: {procs.tail('gsload-sink')}")
        argv = [*common, "--role", "client", "--steps", ",".join(map(str, steps)),
                "--active", str(active), "--latency-seconds", str(seconds), "--msg-size", str(msg_size),
                "--concurrency", str(concurrency), "--rate", str(rate),
                "--open-timeout-ms", str(open_timeout_ms), "--pause"]
        load = procs.start("gsload", argv, pipes=True)
        nofiles = {n: nofile_of(p) for n, p in (*pids.items(), ("gsload", load.pid), ("gsload-sink", sink.pid))}
        for line in load.stdout:
            ev = json.loads(line)
            events.append(ev)
            if on_event:
                on_event(ev)
            if ev["event"] != "ready":
                continue
            if ev["phase"] == "closed":
                # Every flow closed by its client must leave both gateways.
                deadline = time.monotonic() + 15
                while time.monotonic() < deadline:
                    if all(metrics(gw[n]["admin"]).get("flows_active") == 0 for n in gw):
                        break
                    time.sleep(0.2)
            idle_cpu = {}
            if ev["phase"] == "idle":
                time.sleep(1.0)  # let allocations settle before reading memory
                # What the gateways spend on idle flows alone (their timers and ticks).
                c0 = {n: proc_sample(p)["cpu_s"] for n, p in pids.items()}
                time.sleep(IDLE_CPU_S)
                idle_cpu = {n: (proc_sample(p)["cpu_s"] - c0[n]) / IDLE_CPU_S * 100 for n, p in pids.items()}
            procs.check()
            s = {"phase": ev["phase"], "idle_flows": ev.get("idle_flows"), "step": ev.get("step"),
                 "sockstat": sockstat(), "gateways": {}, "idle_cpu_pct": idle_cpu}
            for n in ("alpha", "beta"):
                s["gateways"][n] = {**proc_sample(pids[n]), "metrics": metrics(gw[n]["admin"])}
            samples.append(s)
            load.stdin.write("go\n")
            load.stdin.flush()
        if load.wait(timeout=30) != 0:
            raise ScaleError(f"gsload exited with status {load.returncode}: {procs.tail('gsload')}")
        sink.stdin.close()  # the sink prints its counts and exits
        done = [json.loads(l) for l in sink.stdout]
        events += [e for e in done if e.get("event") == "done"]
        sink.wait(timeout=10)
        for n in ("alpha", "beta"):
            p = next(p for nm, p in procs.procs if nm == f"gridsplitd-{n}")
            if p.poll() is not None:
                raise ScaleError(f"gridsplitd-{n} exited with status {p.returncode}: {procs.tail('gridsplitd-' + n)}")
        warnings = {n: [l for l in (tmp / f"gridsplitd-{n}.log").read_text(errors="replace").splitlines()
                        if " WARN " in l or " ERROR " in l][-5:] for n in ("alpha", "beta")}
        return {"events": events, "samples": samples, "nofile": nofiles, "gateway_log_tail": warnings}
    finally:
        procs.stop()
        shutil.rmtree(tmp, ignore_errors=True)


# ------------------------------------------------------------------ command


def default_nofile() -> int:
    try:
        return min(1 << 20, int(Path("/proc/sys/fs/nr_open").read_text()))
    except (OSError, ValueError):
        return 1 << 20


def run(out_dir: Path, steps: list[int], active: int, seconds: float, msg_size: int, concurrency: int,
        rate: float, repeat: int, per_flow_buffer: int, total_buffer: int, nofile: int, octet: int,
        strategy: str, threads: int | None, gsload_threads: int, open_timeout_ms: int, probe_defaults: bool,
        probe_flows: int, no_build: bool, command: str, lan: tuple[int, int, int] = (0, 0, 0)) -> Path:
    steps = sorted(set(steps))
    # Each flow takes one descriptor in each gateway and two in gsload (client and sink).
    need = 2 * (steps[-1] + active) + 1024
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if nofile > hard and os.geteuid() != 0:
        raise ScaleError(f"--nofile {nofile} is above this shell's hard limit ({hard}) and raising it needs root; "
                         f"run as root or pass --nofile {hard}")
    if nofile < need:
        err.print(f"[yellow]warning: --nofile {nofile} is below the {need} descriptors that {steps[-1]} flows "
                  "need in gsload: opens will fail with EMFILE[/yellow]")
    gsd, gsl = binaries(no_build)
    out.print(f"[bold]gridsplit bench scale[/bold]: steps {', '.join(map(str, steps))} idle flows, {active} active, "
              f"{repeat} repeat(s); RLIMIT_NOFILE of gridsplitd and gsload raised to {nofile} "
              f"where allowed (this shell: soft {soft}, hard {hard})")
    meta = {
        "kind": "meta", "schema": SCHEMA, "command": command,
        "machine": machine.facts(),
        "requested": {"steps": steps, "active": active, "seconds": seconds, "msg_size": msg_size,
                      "concurrency": concurrency, "rate": rate, "repeat": repeat, "per_flow_buffer": per_flow_buffer,
                      "total_buffer": total_buffer, "nofile": nofile, "octet": octet, "strategy": strategy,
                      "threads": threads, "gsload_threads": gsload_threads, "open_timeout_ms": open_timeout_ms,
                      "probe_defaults": probe_defaults, "probe_flows": probe_flows, "no_build": no_build},
        "limits": {"per_flow_buffer": per_flow_buffer, "total_buffer": total_buffer},
        "lan": dict(zip(("window_budget", "rate_bps", "burst_bytes"), lan)),
        "shell_nofile": {"soft": soft, "hard": hard},
        "binaries": {"gridsplitd": binary_facts(gsd), "gsload": binary_facts(gsl)},
        "addresses": {"alpha": f"127.{octet}.1.0/24", "beta": f"127.{octet}.2.0/24",
                      "sources": f"127.{octet}.1.1-250", "sinks": f"127.{octet}.2.20-{20 + SINKS - 1}"},
    }
    rows: list[dict] = [meta]
    step_rows: list[dict] = []
    runs: list[dict] = []
    probe = None

    def show(ev: dict) -> None:
        if ev["event"] == "open":
            f = f", failed {ev['failed']} {ev['failures']}" if ev["failed"] else ""
            out.print(f"  opened {ev['opened']}/{ev['requested']} → {ev['step']} idle flows at "
                      f"{ev['rate_per_s']:.0f}/s{escape(f)}")
        elif ev["event"] == "latency":
            r = ev["rtt_us"]
            out.print(f"  {ev['msg_size']} B echo with {ev['idle_flows']} idle flows: p50 {r['p50']:.0f} µs, "
                      f"p99 {r['p99']:.0f} µs, p99.9 {r['p999']:.0f} µs ({ev['round_trips']} round trips)")

    if probe_defaults:
        out.print(f"probe: {probe_flows} flows through gateways with the product's default limits")
        r = one_run(gsd, gsl, Plan(octet, None, None, strategy, threads), nofile, [probe_flows], 1, 0.5,
                    msg_size, concurrency, 0.0, 3000, gsload_threads)
        o = next(e for e in r["events"] if e["event"] == "open")
        s = next(s for s in r["samples"] if s["phase"] == "idle")
        probe = {"kind": "probe", "schema": SCHEMA, "limits": "product defaults (per_flow_buffer 4 MiB, total_buffer 256 MiB)",
                 "requested": o["requested"], "opened": o["opened"], "failures": o["failures"],
                 "open_timeout_ms": 3000,
                 "flows_active": {g: s["gateways"][g]["metrics"].get("flows_active") for g in ("alpha", "beta")},
                 "lan_accepted": {g: s["gateways"][g]["metrics"].get("lan_accepted_total") for g in ("alpha", "beta")}}
        rows.append(probe)
        out.print(escape(f"  admitted {o['opened']} of {o['requested']} (failures {o['failures']})"))

    for rep in range(repeat):
        out.print(f"[bold]repeat {rep + 1}/{repeat}[/bold]")
        r = one_run(gsd, gsl, Plan(octet, per_flow_buffer, total_buffer, strategy, threads, lan), nofile, steps, active,
                    seconds, msg_size, concurrency, rate, open_timeout_ms, gsload_threads, on_event=show)
        srows, summ = analyse(r)
        for s in srows:
            step_rows.append(s)
            rows.append({"kind": "step", "schema": SCHEMA, "repeat": rep, **s})
        run_row = {"kind": "run", "schema": SCHEMA, "repeat": rep, "summary": summ, "nofile": r["nofile"],
                   "gateway_log_tail": r["gateway_log_tail"], "events": r["events"], "samples": r["samples"]}
        rows.append(run_row)
        runs.append(run_row)
        if rep == 0:
            got = ", ".join(f"{k} {v}" for k, v in r["nofile"].items())
            out.print(f"  RLIMIT_NOFILE in effect: {got}")
            if min(v or 0 for v in r["nofile"].values()) < need // 2:
                err.print(f"[yellow]warning: a process got fewer descriptors than {need // 2} "
                          "(raising the hard limit needs CAP_SYS_RESOURCE): the steps above it hit EMFILE[/yellow]")
    summary = summarize(step_rows, runs)
    rows.append({"kind": "summary", "schema": SCHEMA, **summary})

    out.print(table(summary))
    for k, ok in summary["targets"].items():
        out.print(f"  target {k}: " + ("[green]met[/green]" if ok else "[red]missed[/red]"))
    out.print("  every flow opened and echoed correctly: " + ("[green]yes[/green]" if summary["all_checked"] else "[red]NO[/red]"))
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"{_dt.date.today().isoformat()}-{meta['machine']['hostname']}"
    jsonl = stem.with_suffix(".jsonl")
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    stem.with_suffix(".md").write_text(markdown(meta, summary, probe))
    out.print(f"wrote {jsonl} and {stem.with_suffix('.md')}")
    return jsonl


@click.command("scale")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("gridsplit-out/scale"), show_default=True, help="Directory for DATE-HOST.{jsonl,md}.")
@click.option("--flows", default="10000,20000", show_default=True,
              help="Idle-flow counts to reach, in steps (cumulative), comma-separated.")
@click.option("--active", type=click.IntRange(1, 64), default=4, show_default=True,
              help="Flows carrying the latency measurement.")
@click.option("--seconds", type=click.FloatRange(0.2, 600), default=5.0, show_default=True,
              help="Duration of each latency measurement.")
@click.option("--msg-size", type=click.IntRange(1, 65536), default=64, show_default=True,
              help="Bytes per echoed latency message.")
@click.option("--rate", type=click.FloatRange(0, 1e6), default=0.0, show_default=True,
              help="Opens started per second; 0: as fast as the gateways answer.")
@click.option("--concurrency", type=click.IntRange(1, 65536), default=256, show_default=True,
              help="Opens in progress at once.")
@click.option("--repeat", type=click.IntRange(1, 50), default=3, show_default=True,
              help="Runs, each with fresh gateways (medians and min–max over them).")
@click.option("--per-flow-buffer", type=click.IntRange(4096, 2**31 - 1), default=4 << 20, show_default=True,
              help="The gateways' [limits] per_flow_buffer (default: the product's).")
@click.option("--total-buffer", type=click.IntRange(16384), default=256 << 20, show_default=True,
              help="The gateways' [limits] total_buffer (default: the product's; half of it backs the flows' "
                   "receive windows, which open small and grow with use).")
@click.option("--nofile", type=click.IntRange(1024), default=default_nofile(), show_default=True,
              help="RLIMIT_NOFILE (soft and hard) of every process started.")
@click.option("--octet", type=click.IntRange(1, 254), default=21, show_default=True,
              help="Second octet K of the loopback sites 127.K.1.0/24 and 127.K.2.0/24.")
@click.option("--strategy", type=click.Choice(STRATEGIES), default="fair", show_default=True,
              help="The gateways' scheduling strategy.")
@click.option("--threads", type=click.IntRange(1, 256), default=None,
              help="gridsplitd --threads (default: its own, 1).")
@click.option("--gsload-threads", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Runtime threads of the load generator.")
@click.option("--open-timeout-ms", type=click.IntRange(100, 600_000), default=10_000, show_default=True,
              help="An open (GSq1 to echoed hello) slower than this fails.")
@click.option("--probe-defaults/--no-probe-defaults", default=True, show_default=True,
              help="First count the flows gateways with the product's default [limits] admit.")
@click.option("--probe-flows", type=click.IntRange(1, 100_000), default=200, show_default=True,
              help="Flows the probe tries to open.")
@click.option("--lan-window-budget", type=click.IntRange(0, 1 << 30), default=0, show_default=True,
              help="The gateways' [lan] window_budget (LAN incast clamps; 0: off, as the flows here are loopback).")
@click.option("--lan-rate-bps", type=click.IntRange(0), default=0, show_default=True,
              help="The gateways' [lan] rate_bps (LAN pacing per host; 0: off).")
@click.option("--lan-burst-bytes", type=click.IntRange(0, 1 << 30), default=0, show_default=True,
              help="The gateways' [lan] burst_bytes (with --lan-rate-bps).")
@click.option("--no-build", is_flag=True, help="Never run cargo, even if a binary is missing.")
def scale(out_dir, flows, active, seconds, msg_size, rate, concurrency, repeat, per_flow_buffer, total_buffer,
          nofile, octet, strategy, threads, gsload_threads, open_timeout_ms, probe_defaults, probe_flows,
          lan_window_budget, lan_rate_bps, lan_burst_bytes, no_build):
    """Flows per gateway: idle-flow memory, most concurrent flows, opens/s, latency under load (loopback)."""

    def on_term(*_):
        raise Stopped()

    old = signal.signal(signal.SIGTERM, on_term)
    try:
        run(out_dir, int_list(flows, "--flows", 1, "10000,20000"), active, seconds, msg_size, concurrency, rate, repeat, per_flow_buffer,
            total_buffer, nofile, octet, strategy, threads, gsload_threads, open_timeout_ms, probe_defaults,
            probe_flows, no_build, " ".join(["gridsplit", "bench", "scale", *sys.argv[3:]])
            if sys.argv[1:3] == ["bench", "scale"] else " ".join(sys.argv),
            (lan_window_budget, lan_rate_bps, lan_burst_bytes))
    except GridsplitError as e:
        err.print(f"gridsplit bench scale: error: {e}")
        sys.exit(2)
    except (KeyboardInterrupt, Stopped):
        err.print("gridsplit bench scale: interrupted; every process stopped")
        sys.exit(130)
    finally:
        signal.signal(signal.SIGTERM, old)
