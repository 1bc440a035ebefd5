"""Relay benchmark: gridsplitd against HAProxy and a direct connection, in one run.

    python3 -m gridsplit.bench.relay [--out gridsplit-out/relay] [--repeat 5] [--seconds 5]

On loopback only (127.0.0.0/8) it builds three chains from the same client to the
same kind of server, plus a reference, and measures them interleaved, K times over:

    direct      client ──────────────────────────────────────▶ server
    floor       client ─▶ relay A ────────────────────────▶ relay B ─▶ server
    epoll       client ─▶ relay A ────────────────────────▶ relay B ─▶ server
    gridsplitd  client ─▶ gridsplitd A ═══ WAN link ═══▶ gridsplitd B ─▶ server
    haproxy     client ─▶ haproxy A ──────────────────────▶ haproxy B ─▶ server

`floor` and `epoll` are the least a user-space relay can do, in the two shapes a
relay can have: relaybench's `relay` (two blocking threads per connection, recv()
then send()) and `erelay` (one thread, one epoll set, recv() then send() in the
same wake-up: HAProxy's shape with nothing else). What they add per hop is what the
two extra sockets and process wake-ups cost on this machine, the bound below which
no relay that sleeps between messages, gridsplitd or HAProxy, can go (--no-floor
leaves both out).

Sites are 127.0.1.0/24 (client, gateway A) and 127.0.2.0/24 (server, gateway B),
as in gridsplitd's end-to-end tests. The gridsplitd client is an unmodified
program with build/libgridsplit.so preloaded (the real node path: GSq1 on connect,
GSo1 on accept). Each relay is one process: gridsplitd as built, HAProxy in
`mode tcp` with `nbthread 1` and otherwise default settings (2.6 has no TCP_NODELAY
knob for tcp mode: it sets TCP_NODELAY itself on both its client and server
sockets, as strace shows; kernel splicing stays off as by default).

Metrics, each per repeat, reported as median and min–max over repeats:
  * RTT of an 8-byte ping-pong (median and p99 of >= 20k round trips, taken in
    blocks that alternate between the chains); each chain has two relay hops, so
    the added RTT per hop is (chain − direct) / 2, taken against the direct RTT
    of the same repeat;
  * throughput of one stream (client → server, timed until the server has it all);
  * relay CPU: utime+stime of both relay processes (from /proc/PID/stat) during the
    stream, per GB of application payload carried end to end (each relay handles
    every byte once in each of its two sockets' directions it carries).

Results go to a rich table and to OUT/YYYY-MM-DD-HOSTNAME.{json,md}. Every process
started here is stopped by its PID, also on Ctrl-C, SIGTERM or failure.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import click
from rich.console import Console

from gridsplit import machine, sysdeps
from gridsplit.errors import GridsplitError
from gridsplit.gateway.nodes import NodeSite, nodes_file
from gridsplit.procs import Processes, wait_gateway_link
from gridsplit.topology import STRATEGIES

from .relayreport import BLOCKS, CHAINS, FLOORS, markdown, summarize, table

ROOT = Path(__file__).resolve().parents[3]

# Addresses: site alpha (client side) and site beta (server side).
CLIENT_IP = "127.0.1.10"
SERVER_IP = "127.0.2.20"
GW_A, GW_B = "127.0.1.254", "127.0.2.254"
SERVER_PORT = {"direct": 5101, "gridsplitd": 5102, "haproxy": 5103, "floor": 5104, "epoll": 5105}
GS_LAN, GS_WAN, GS_ADMIN = 7100, 7200, 7300
HAP_A, HAP_B = 8100, 8200
FLOOR_A, FLOOR_B = 8300, 8400
EPOLL_A, EPOLL_B = 8301, 8401

TICK = os.sysconf("SC_CLK_TCK")
# Tables stay readable when piped or logged (as in cli.py).
console = Console(highlight=False, width=None if sys.stdout.isatty() else int(os.environ.get("COLUMNS", "150")))


class BenchError(GridsplitError):
    """A failure worth one line to the user (no traceback)."""


class Stopped(Exception):
    """SIGTERM arrived: unwind like Ctrl-C so every process gets stopped."""


# ------------------------------------------------------------------ processes




def cpu_seconds(pid: int) -> float:
    """utime + stime of a whole process (all threads), in seconds."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    # The command name may contain spaces; fields resume after its closing paren.
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def wait_port(ip: str, port: int, procs: Processes, what: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        procs.check()
        try:
            with socket.create_connection((ip, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise BenchError(f"{what} is not listening on {ip}:{port} after {timeout:.0f} s")


def check_free(addrs: list[tuple[str, int]]) -> None:
    for ip, port in addrs:
        s = socket.socket()
        # As the daemons do: connections of an earlier run in TIME_WAIT are no
        # obstacle, only a live listener is.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((ip, port))
        except OSError as e:
            raise BenchError(
                f"{ip}:{port} is not available ({e.strerror}); is another benchmark or lab running?"
            ) from None
        finally:
            s.close()


# ------------------------------------------------------------------ set-up


def gridsplitd_config(d: Path, site: str, strategy: str, encryption: str = "noise") -> Path:
    own = {"alpha": GW_A, "beta": GW_B}[site]
    text = f"""# Generated by gridsplit.bench.relay: loopback sites, product defaults otherwise.
[gateway]
site = "{site}"
lan_listen = "{own}:{GS_LAN}"
wan_listen = "{own}:{GS_WAN}"
admin_listen = "{own}:{GS_ADMIN}"
strategy = "{strategy}"
psk_file = "{d / 'psk'}"
[wan]
encryption = "{encryption}"

[[site]]
name = "alpha"
subnet = "127.0.1.0/24"
gateway_lan = "{GW_A}:{GS_LAN}"
gateway_wan = "{GW_A}:{GS_WAN}"

[[site]]
name = "beta"
subnet = "127.0.2.0/24"
gateway_lan = "{GW_B}:{GS_LAN}"
gateway_wan = "{GW_B}:{GS_WAN}"
"""
    path = d / f"gridsplitd-{site}.toml"
    path.write_text(text)
    return path


def nodes_config(d: Path) -> Path:
    """The node file of the preloaded client and server (GRIDSPLIT_SITE picks each one's site)."""
    path = d / "nodes.conf"
    path.write_text(nodes_file([NodeSite("alpha", "127.0.1.0/24", f"{GW_A}:{GS_LAN}"),
                                NodeSite("beta", "127.0.2.0/24", f"{GW_B}:{GS_LAN}")], source="gridsplit.bench.relay"))
    return path


def haproxy_config(d: Path, name: str, bind: str, server: str, splice: bool) -> Path:
    # One thread per instance, like one gridsplitd process per gateway; long client
    # and server timeouts so that no measurement is cut short.
    text = f"""# Generated by gridsplit.bench.relay: TCP relay {name}, one thread.
global
    nbthread 1
    maxconn 1024

defaults
    mode tcp
    timeout connect 5s
    timeout client 10m
    timeout server 10m
{'    option splice-auto' if splice else ''}

frontend in
    bind {bind}
    default_backend out

backend out
    server next {server}
"""
    path = d / f"haproxy-{name}.cfg"
    path.write_text(text)
    return path


def gridsplitd_binary(explicit: Path | None) -> tuple[Path, bool]:
    """The gridsplitd to measure, and whether it was named rather than built here:
    --gridsplitd, else $GRIDSPLITD (the override every gridsplit command honours,
    sysdeps.BUILT), else cargo's release build of this checkout (sysdeps.own_build)."""
    return (explicit, True) if explicit is not None else sysdeps.own_build("gridsplitd")


def build(quiet: bool, cargo: bool = True) -> None:
    steps = [
        (["make", "-s", "-C", str(ROOT / "bench/relay")], "relaybench (make -C bench/relay)"),
        # Only the library: the preload tests' binaries are not needed here.
        (["make", "-s", "-C", str(ROOT / "preload"), "../build/libgridsplit.so"],
         "libgridsplit.so (make -C preload)"),
    ]
    if cargo:
        steps.append((["cargo", "build", "--release", "--quiet", "-p", "gridsplitd"],
                      "gridsplitd (cargo build --release)"))
    for argv, what in steps:
        if not quiet:
            console.print(f"[dim]building {what}[/dim]")
        r = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
        if r.returncode != 0:
            last = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["?"]
            raise BenchError(f"building {what} failed: {last[0]}")


# ------------------------------------------------------------------ measuring


@dataclass
class Chain:
    name: str
    client_argv_prefix: list[str]  # "IP PORT" and options, after the subcommand
    client_env: dict
    relays: list[str]  # process names whose CPU counts


def run_client(bench: Path, sub: str, chain: Chain, extra: list[str], timeout: float) -> dict:
    argv = [str(bench), sub, *chain.client_argv_prefix, *extra]
    r = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **chain.client_env},
    )
    if r.returncode != 0:
        raise BenchError(f"{chain.name} {sub} failed: {(r.stderr.strip() or r.stdout.strip())[:300]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


# Ping-pong runs are cut into blocks, and the chains take turns block by block:
# on a shared or virtual machine latency drifts within seconds, and fine
# interleaving exposes every chain to the same drift, so differences between
# chains stay meaningful even when absolute numbers move (BLOCKS: relayreport.py).
BLOCK_WARMUP = 200


def pct(sorted_xs: list[float], p: float) -> float:
    return sorted_xs[min(len(sorted_xs) - 1, int(p / 100 * (len(sorted_xs) - 1) + 0.5))]


def measure(
    bench: Path, procs: Processes, chains: list[Chain], rep: int, repeat: int, seconds: float, count: int
) -> list[dict]:
    # Rotate the order every repeat: what runs first or last changes.
    order = chains[rep % len(chains) :] + chains[: rep % len(chains)]
    rec: dict = {"repeat": rep + 1, "order": [c.name for c in order], "ping": {}, "stream": {}}
    samples: dict[str, list[float]] = {c.name: [] for c in order}
    # Each chain's median per block: blocks of one round ran back to back, so
    # chain-minus-chain within a round cancels most of the machine's drift.
    block_medians: dict[str, list[float]] = {c.name: [] for c in order}
    cpu: dict[str, dict[str, float]] = {c.name: {r: 0.0 for r in c.relays} for c in order}
    per_block = -(-count // BLOCKS)
    for _ in range(BLOCKS):
        for c in order:
            procs.check()
            cpu0 = {r: cpu_seconds(procs.pid(r)) for r in c.relays}
            res = run_client(bench, "ping", c,
                             ["--count", str(per_block), "--warmup", str(BLOCK_WARMUP), "--raw"],
                             timeout=per_block * 0.01 + 60)
            for r in c.relays:
                cpu[c.name][r] += cpu_seconds(procs.pid(r)) - cpu0[r]
            samples[c.name] += res["samples_us"]
            block_medians[c.name].append(statistics.median(res["samples_us"]))
    for c in order:
        xs = sorted(samples[c.name])
        rec["ping"][c.name] = {
            "size": 8, "count": len(xs), "warmup": BLOCKS * BLOCK_WARMUP, "blocks": BLOCKS,
            "rtt_us": {"min": xs[0], "median": pct(xs, 50), "mean": statistics.fmean(xs), "p90": pct(xs, 90),
                       "p99": pct(xs, 99), "p999": pct(xs, 99.9), "max": xs[-1]},
            "relay_cpu_s": cpu[c.name],
            "block_medians_us": block_medians[c.name],
        }
        r = rec["ping"][c.name]["rtt_us"]
        console.print(f"  repeat {rep + 1}/{repeat} ping   {c.name:<11} median {r['median']:8.2f} µs"
                      f"   p99 {r['p99']:8.2f} µs")
    for c in order:
        procs.check()
        cpu0 = {r: cpu_seconds(procs.pid(r)) for r in c.relays}
        res = run_client(bench, "stream", c, ["--seconds", str(seconds)], timeout=seconds + 60)
        res["relay_cpu_s"] = {r: cpu_seconds(procs.pid(r)) - cpu0[r] for r in c.relays}
        rec["stream"][c.name] = res
        used = sum(res["relay_cpu_s"].values())
        console.print(
            f"  repeat {rep + 1}/{repeat} stream {c.name:<11} {res['gbps']:8.2f} Gb/s"
            + (f"   relays {used / (res['bytes'] / 1e9):.3f} CPU-s/GB" if c.relays else "")
        )
    return [rec]


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def versions(gridsplitd: Path, custom: bool) -> dict:
    def out(argv: list[str]) -> str:
        try:
            r = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=10)
            return (r.stdout or r.stderr).strip()
        except OSError:
            return ""

    rev = out(["git", "rev-parse", "--short", "HEAD"]) or "unknown"
    if out(["git", "status", "--porcelain", "--", "crates/gridsplitd"]):
        rev += "-dirty"
    where = f"binary {gridsplitd}" if custom else f"git {rev}"
    return {
        "gridsplitd": f"{out([str(gridsplitd), '--version']) or 'gridsplitd'} ({where})",
        "haproxy": out(["haproxy", "-v"]).splitlines()[0] if shutil.which("haproxy") else "absent",
    }


# ------------------------------------------------------------------ command


def start_all(procs: Processes, tmp: Path, bench: Path, gsd: Path, lib: Path, cfg_a: Path, cfg_b: Path,
              preload: bool, splice: bool, floor: bool, threads: int | None) -> list[Chain]:
    """Starts the servers and the relays of every chain; returns the chains, warmed up."""
    b = str(bench)
    nodes = nodes_config(tmp) if preload else None
    procs.start("server-direct", [b, "server", SERVER_IP, str(SERVER_PORT["direct"])])
    if preload:
        procs.start("server-gridsplitd", [b, "server", SERVER_IP, str(SERVER_PORT["gridsplitd"])],
                    {"LD_PRELOAD": str(lib), "GRIDSPLIT_CONFIG": str(nodes), "GRIDSPLIT_SITE": "beta"})
    else:
        procs.start("server-gridsplitd", [b, "server", SERVER_IP, str(SERVER_PORT["gridsplitd"]), "--gso1"])
    procs.start("server-haproxy", [b, "server", SERVER_IP, str(SERVER_PORT["haproxy"])])
    log = ["--log-level", "warn"] + (["--threads", str(threads)] if threads else [])
    procs.start("gridsplitd-a", [str(gsd), "--config", str(cfg_a), *log])
    procs.start("gridsplitd-b", [str(gsd), "--config", str(cfg_b), *log])
    hb = haproxy_config(tmp, "b", f"{GW_B}:{HAP_B}", f"{SERVER_IP}:{SERVER_PORT['haproxy']}", splice)
    ha = haproxy_config(tmp, "a", f"{GW_A}:{HAP_A}", f"{GW_B}:{HAP_B}", splice)
    # -db: stay in the foreground as one process, so its PID is the relay's.
    procs.start("haproxy-b", ["haproxy", "-db", "-f", str(hb)])
    procs.start("haproxy-a", ["haproxy", "-db", "-f", str(ha)])
    if floor:
        procs.start("server-floor", [b, "server", SERVER_IP, str(SERVER_PORT["floor"])])
        procs.start("floor-b", [b, "relay", GW_B, str(FLOOR_B), "--to", f"{SERVER_IP}:{SERVER_PORT['floor']}"])
        procs.start("floor-a", [b, "relay", GW_A, str(FLOOR_A), "--to", f"{GW_B}:{FLOOR_B}"])
        procs.start("server-epoll", [b, "server", SERVER_IP, str(SERVER_PORT["epoll"])])
        procs.start("epoll-b", [b, "erelay", GW_B, str(EPOLL_B), "--to", f"{SERVER_IP}:{SERVER_PORT['epoll']}"])
        procs.start("epoll-a", [b, "erelay", GW_A, str(EPOLL_A), "--to", f"{GW_B}:{EPOLL_B}"])
        for ip, port, what in [(GW_B, FLOOR_B, "floor relay B"), (GW_A, FLOOR_A, "floor relay A"),
                               (GW_B, EPOLL_B, "epoll relay B"), (GW_A, EPOLL_A, "epoll relay A")]:
            wait_port(ip, port, procs, what)
    for name, port in SERVER_PORT.items():
        if name not in FLOORS or floor:
            wait_port(SERVER_IP, port, procs, f"relaybench server ({name})")
    wait_port(GW_B, HAP_B, procs, "haproxy B")
    wait_port(GW_A, HAP_A, procs, "haproxy A")
    wait_gateway_link(f"{GW_A}:{GS_ADMIN}", procs)

    dst_gs = [SERVER_IP, str(SERVER_PORT["gridsplitd"]), "--bind", CLIENT_IP]
    if preload:
        gs_chain = Chain("gridsplitd", dst_gs, {"LD_PRELOAD": str(lib), "GRIDSPLIT_CONFIG": str(nodes),
                                                "GRIDSPLIT_SITE": "alpha"}, ["gridsplitd-a", "gridsplitd-b"])
    else:
        gs_chain = Chain("gridsplitd", [GW_A, str(GS_LAN), "--bind", CLIENT_IP,
                                        "--gsq1", f"{SERVER_IP}:{SERVER_PORT['gridsplitd']}"],
                         {}, ["gridsplitd-a", "gridsplitd-b"])
    chains = [
        Chain("direct", [SERVER_IP, str(SERVER_PORT["direct"]), "--bind", CLIENT_IP], {}, []),
        gs_chain,
        Chain("haproxy", [GW_A, str(HAP_A), "--bind", CLIENT_IP], {}, ["haproxy-a", "haproxy-b"]),
    ]
    if floor:
        chains[1:1] = [Chain("floor", [GW_A, str(FLOOR_A), "--bind", CLIENT_IP], {}, ["floor-a", "floor-b"]),
                       Chain("epoll", [GW_A, str(EPOLL_A), "--bind", CLIENT_IP], {}, ["epoll-a", "epoll-b"])]
    # A short pass through every chain first: fails fast, and warms every path.
    for c in chains:
        run_client(bench, "ping", c, ["--count", "200", "--warmup", "0"], timeout=30)
    return chains


def run(out: Path, repeat: int, seconds: float, count: int, strategy: str, preload: bool,
        splice: bool, no_build: bool, floor: bool = True, threads: int | None = None,
        gridsplitd_bin: Path | None = None, tag: str = "", encryption: str = "noise") -> dict:
    if not shutil.which("haproxy"):
        raise BenchError("haproxy is not installed: apt-get install haproxy")
    gsd, named = gridsplitd_binary(gridsplitd_bin)
    if not no_build:
        # A named binary is measured as it is; only this checkout's is rebuilt.
        build(quiet=False, cargo=not named)
    bench = ROOT / "build/bench/relaybench"
    lib = ROOT / "build/libgridsplit.so"
    for f, how in [(bench, "make -C bench/relay"), (gsd, "cargo build --release -p gridsplitd")]:
        if not f.exists():
            raise BenchError(f"{f} is missing: {how}")
    if preload and not lib.exists():
        raise BenchError(f"{lib} is missing: make -C preload (or pass --no-preload)")

    check_free(
        [(SERVER_IP, p) for p in SERVER_PORT.values()]
        + [(ip, p) for ip in (GW_A, GW_B) for p in (GS_LAN, GS_WAN, GS_ADMIN)]
        + [(GW_A, HAP_A), (GW_B, HAP_B), (GW_A, FLOOR_A), (GW_B, FLOOR_B), (GW_A, EPOLL_A), (GW_B, EPOLL_B)]
    )
    load_before = loadavg()
    tmp = Path(tempfile.mkdtemp(prefix="gridsplit-bench-relay-"))
    (tmp / "psk").write_bytes(secrets.token_hex(32).encode())
    cfg_a, cfg_b = (gridsplitd_config(tmp, s, strategy, encryption) for s in ("alpha", "beta"))
    procs = Processes(tmp)

    def on_term(*_):
        raise Stopped()

    old_term = signal.signal(signal.SIGTERM, on_term)
    runs: list[dict] = []
    try:
        console.print(f"[bold]measuring[/bold] {', '.join(c for c in CHAINS if c not in FLOORS or floor)}: "
                      f"{repeat} repeats, {count} round trips and {seconds:g} s streams each")
        for rep in range(repeat):
            # Every repeat starts every process afresh: on a small (virtual) machine
            # where the scheduler puts each process decides much of a ping-pong's
            # latency, so each repeat draws a new placement for every chain alike
            # instead of one draw holding for the whole run.
            chains = start_all(procs, tmp, bench, gsd, lib, cfg_a, cfg_b, preload, splice, floor, threads)
            runs += measure(bench, procs, chains, rep, repeat, seconds, count)
            procs.check()
            procs.stop(3.0)
    finally:
        procs.stop(3.0)
        signal.signal(signal.SIGTERM, old_term)
        shutil.rmtree(tmp, ignore_errors=True)

    summary = summarize(runs)
    date = _dt.date.today().isoformat()
    doc = {
        "benchmark": "relay",
        "date": date,
        "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {**machine.facts(), "loadavg_before": load_before, "loadavg_after": loadavg()},
        "versions": versions(gsd, named),
        "parameters": {
            "repeat": repeat, "seconds": seconds, "ping_count": count, "ping_blocks": BLOCKS, "ping_warmup_per_block": BLOCK_WARMUP,
            "ping_size": 8,
            "stream_block": 256 * 1024, "strategy": strategy, "preload": preload, "haproxy_splice": splice,
            "haproxy_nbthread": 1, "loopback_sites": ["127.0.1.0/24", "127.0.2.0/24"],
            "gridsplitd_args": f"--threads {threads}" if threads else "", "floor": floor, "tag": tag,
            "encryption": encryption,
        },
        "summary": summary,
        "runs": runs,
    }
    console.print(table(summary, repeat))
    tg = summary["targets"]
    for k, ok in tg.items():
        console.print(f"  target {k}: " + ("[green]met[/green]" if ok else "[red]missed[/red]"))
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"{date}-{doc['machine']['hostname']}{'-' + tag if tag else ''}"
    stem.with_suffix(".json").write_text(json.dumps(doc, indent=1) + "\n")
    stem.with_suffix(".md").write_text(markdown(doc))
    console.print(f"wrote {stem}.json and {stem}.md")
    return doc


@click.command("relay")
@click.option("--out", type=click.Path(path_type=Path), default=Path("gridsplit-out/relay"), show_default=True,
              help="Directory for YYYY-MM-DD-HOSTNAME.{json,md}.")
@click.option("--repeat", type=click.IntRange(1, 100), default=5, show_default=True,
              help="Interleaved repeats of every measurement.")
@click.option("--seconds", type=click.FloatRange(0.5, 600), default=5.0, show_default=True,
              help="Duration of each stream.")
@click.option("--count", type=click.IntRange(20000, 10_000_000), default=20000, show_default=True,
              help=f"Round trips per chain and repeat, in {BLOCKS} blocks (each after {BLOCK_WARMUP} of warm-up).")
@click.option("--strategy", type=click.Choice(STRATEGIES), default="fair", show_default=True,
              help="gridsplitd scheduling strategy.")
@click.option("--preload/--no-preload", default=True, show_default=True,
              help="Client and server run with libgridsplit.so, or speak GSq1/GSo1 themselves.")
@click.option("--haproxy-splice", is_flag=True, help="Enable HAProxy's kernel splicing (off by default).")
@click.option("--floor/--no-floor", default=True, show_default=True,
              help="Also measure minimal C relays, threaded and epoll (the machine's floor for any relay).")
@click.option("--threads", type=click.IntRange(1, 256), default=None,
              help="Pass --threads N to gridsplitd (default: its own default).")
@click.option("--gridsplitd", "gridsplitd_bin", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="Another gridsplitd binary (e.g. an older build, for before/after); "
              "default: $GRIDSPLITD if set, else this checkout's, rebuilt.")
@click.option("--tag", default="", help="Suffix for the result files' names (a variant: -TAG).")
@click.option("--no-build", is_flag=True, help="Use the binaries as they are.")
@click.option("--encryption", type=click.Choice(["noise", "insecure"]), default="noise", show_default=True,
              help="gridsplitd's [wan] encryption (docs/design/wan-encryption.md).")
def relay(out, repeat, seconds, count, strategy, preload, haproxy_splice, floor, threads, gridsplitd_bin,
          tag, no_build, encryption):
    """Latency, throughput and CPU of gridsplitd vs HAProxy vs direct, on loopback."""
    try:
        if tag and not tag.replace("-", "").replace("_", "").isalnum():
            raise BenchError(f"--tag {tag!r}: use letters, digits, - and _ only")
        run(out, repeat, seconds, count, strategy, preload, haproxy_splice, no_build, floor, threads,
            gridsplitd_bin, tag, encryption)
    except GridsplitError as e:
        click.echo(f"gridsplit bench relay: error: {e}", err=True)
        sys.exit(2)
    except (KeyboardInterrupt, Stopped):
        click.echo("gridsplit bench relay: interrupted; every process stopped", err=True)
        sys.exit(130)


if __name__ == "__main__":
    relay()
