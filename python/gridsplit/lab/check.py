"""`lab check`: does the emulated grid behave like the topology says?

Four measurements, each against a stated bound (docs/lab.md):
- idle ping RTT of every site pair within max(2 %, 0.2 ms) of the configured RTT;
- single-flow TCP throughput (iperf3) >= 95 % of the path's bottleneck rate;
- a switch output port's full drop-tail queue delays packets by B/R, within 10 %;
- the delay line kept its schedule while all of this ran.

The last one guards the others: if the emulator released packets late, the
numbers describe this machine's load, not the network, and the check fails.
"""

from __future__ import annotations

import itertools
import os
import signal
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from .. import sysdeps
from ..errors import GridsplitError
from ..tcpbound import FRAME_OVERHEAD
from ..topology import Host
from . import iperf
from .pinger import ping
from .realize import LabState

RTT_REL, RTT_ABS_MS = 0.02, 0.2
THROUGHPUT_MIN = 0.95
BUFFER_TOL = 0.10
# Below this many full frames a switch buffer's emulated delay is too coarse for BUFFER_TOL.
SMALL_BUFFER_FRAMES = 12
# An emulator that cannot keep up releases a growing share of frames late; that
# fails the check. This VM also stalls now and then for a few ms (nested
# virtualisation: every vCPU stops, the kernel's own timers included). Such a
# stall delays ~0.1 % of a check's frames; it is reported, with the steal time
# the hypervisor admits to, but only a share of late frames above the bound fails.
LATE_FRACTION_MAX = 0.02    # more than 2 % of frames > 200 µs late: not trustworthy
STALL_US = 5000             # a single frame this late is reported as a stall


def representative(state: LabState, site: str) -> Host:
    hs = [h for h in state.topo.hosts() if h.site == site]
    return next((h for h in hs if h.role == "node"), hs[0])


def check_rtt(state: LabState, count: int = 30) -> list[dict[str, Any]]:
    topo = state.topo
    pairs = list(itertools.combinations([s.name for s in topo.sites], 2))

    def one(pair):
        a, b = pair
        src, dst = representative(state, a), representative(state, b)
        samples = ping(state.ns(src), str(dst.ip), count, 0.02)
        cfg = topo.rtt_ms(a, b)
        bound = max(RTT_REL * cfg, RTT_ABS_MS)
        row = {"pair": f"{a}-{b}", "src": src.name, "dst": dst.name, "configured_ms": cfg, "bound_ms": round(bound, 3),
               "samples": len(samples)}
        if len(samples) < count * 0.9:
            return {**row, "ok": False, "why": f"only {len(samples)}/{count} ping replies"}
        med = statistics.median(samples)
        return {**row, "min_ms": min(samples), "median_ms": round(med, 3), "max_ms": max(samples),
                "error_ms": round(med - cfg, 3), "ok": abs(med - cfg) <= bound}

    # Pings are light; a few at a time keeps a 36-pair matrix short without loading the CPU.
    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(one, pairs))


def check_throughput(state: LabState, pairs: int, seconds: float, lan: bool = True) -> list[dict[str, Any]]:
    topo = state.topo
    all_pairs = sorted(itertools.combinations([s.name for s in topo.sites], 2), key=lambda p: -topo.rtt_ms(*p))
    rows = []
    chosen = [(a, b) for a, b in all_pairs][:max(pairs, 0)]
    # Also one pair inside a site: the LAN path must deliver the NIC rate.
    for site in topo.sites if lan else []:
        hs = [h for h in topo.hosts() if h.site == site.name]
        if len(hs) >= 2:
            chosen.append((hs[0].name, hs[1].name))
            break
    for a, b in chosen:
        if a in [s.name for s in topo.sites]:
            src, dst = representative(state, a), representative(state, b)
        else:
            src, dst = topo.host(a), topo.host(b)
        rate = topo.bottleneck_mbps(src, dst)
        rtt = topo.rtt_ms(src.site, dst.site)
        res = iperf.tcp(state, src, dst, seconds=seconds, tuned=True)
        row = {"src": src.name, "dst": dst.name, "rtt_ms": rtt, "bottleneck_mbps": rate}
        if "error" in res:
            rows.append({**row, "ok": False, "why": res["error"]})
            continue
        mss = res["mss"]
        to_wire = (mss + FRAME_OVERHEAD) / mss
        # The sustained rate is the median of the 1-second intervals: a stall of
        # this VM (see emulator_health) dents one interval, not the link's rate.
        # The whole-run mean is reported next to it.
        sustained = statistics.median(res["interval_mbps"]) if res["interval_mbps"] else res["goodput_mbps"]
        wire = sustained * to_wire
        rows.append({**row, "goodput_mbps": round(sustained, 2), "mean_goodput_mbps": round(res["goodput_mbps"], 2),
                     "wire_mbps": round(wire, 2), "fraction": round(wire / rate, 4),
                     "mean_fraction": round(res["goodput_mbps"] * to_wire / rate, 4),
                     "retransmits": res["retransmits"], "mss": mss, "ok": wire >= THROUGHPUT_MIN * rate})
    return rows


def check_buffer(state: LabState, seconds: float = 3.0) -> list[dict[str, Any]]:
    """Fill one switch output port with UDP from other hosts; ping through it from the router."""
    topo = state.topo
    site = max(topo.sites, key=lambda s: s.nodes + s.gateway)
    hs = [h for h in topo.hosts() if h.site == site.name]
    target = hs[0]
    rate = target.nic_mbps
    expect_ms = site.switch_buffer_bytes * 8 / (rate * 1e6) * 1000
    # Offered load 1.8x the port rate keeps the queue full even when this VM
    # deschedules a sender for a millisecond; each sender stays below its own
    # NIC rate so the queue forms at the switch, not at a sender.
    need, senders = 1.8 * rate, []
    for h in [h for h in hs[1:]] + [h for h in topo.hosts() if h.site != site.name]:
        if need <= 0:
            break
        share = min(0.9 * h.nic_mbps, need)
        senders.append((h, share))
        need -= share
    row = {"site": site.name, "port_toward": target.name, "rate_mbps": rate,
           "buffer_bytes": site.switch_buffer_bytes, "expected_ms": round(expect_ms, 3)}
    if need > 0:
        return [{**row, "ok": False, "why": "not enough hosts to overload one switch port"}]
    rt_ns = state.names.router_ns(site.name)
    idle = ping(rt_ns, str(target.ip), 20, 0.01)
    if not idle:
        return [{**row, "ok": False, "why": "router cannot ping the target"}]
    base = statistics.median(idle)
    with iperf.udp_flood(state, [(h, target, mbps) for h, mbps in senders], seconds + 2):
        time.sleep(1.0)  # let the queue fill
        loaded = ping(rt_ns, str(target.ip), int(seconds / 0.01), 0.01)
    if len(loaded) < 10:
        return [{**row, "ok": False, "why": f"only {len(loaded)} ping replies under load"}]
    q = sorted(x - base for x in loaded)
    # Under sustained overload a drop-tail queue stays full, so every probe that
    # gets in waits the maximum queueing delay; the median of those waits is
    # that maximum without the VM's occasional scheduling hiccups.
    qmax = statistics.median(q)
    return [{**row, "senders": [h.name for h, _ in senders], "idle_rtt_ms": round(base, 3),
             "queue_delay_full_ms": round(qmax, 3), "queue_delay_p95_ms": round(q[int(0.95 * (len(q) - 1))], 3),
             "queue_delay_max_ms": round(q[-1], 3), "samples": len(q), "error": round(qmax / expect_ms - 1, 4),
             "ok": abs(qmax / expect_ms - 1) <= BUFFER_TOL}]


def steal_ticks() -> int:
    """CPU time the hypervisor took from this VM, in clock ticks, all CPUs."""
    fields = open("/proc/stat").readline().split()
    return int(fields[8]) if len(fields) > 8 else 0


def emulator_health(before: dict[str, Any], after: dict[str, Any], steal_ms: float = 0.0) -> dict[str, Any]:
    b = {(l["name"], l["dir"]): l for l in before.get("links", [])}
    pk = late = 0
    worst = 0.0
    for l in after.get("links", []):
        p = b.get((l["name"], l["dir"]), {})
        pk += l["tx_packets"] - p.get("tx_packets", 0)
        late += l["late"] - p.get("late", 0)
        worst = max(worst, l["worst_late_us"])  # the delay line's window started with the check
    wall = after.get("uptime_s", 0) - before.get("uptime_s", 0)
    cpu = after.get("cpu_s", 0) - before.get("cpu_s", 0)
    frac = late / pk if pk else 0.0
    ok = frac <= LATE_FRACTION_MAX
    return {"packets": pk, "late": late, "late_fraction": round(frac, 6), "worst_late_us": worst,
            "stall": worst > STALL_US, "steal_ms": round(steal_ms, 1),
            "cpu_percent": round(100 * cpu / wall, 1) if wall > 0 else None, "ok": ok,
            "why": None if ok else "the delay line fell behind its schedule; these measurements describe this "
                                   "machine's load, not the emulated network (reduce --nodes or rates, or stop other load)"}


def emulator_watch_begin(state: LabState) -> tuple[dict[str, Any], int]:
    """Open a window on the delay line's schedule: its stats and the VM's steal time now."""
    # SIGUSR2 opens a new window for the delay line's worst-lateness figure,
    # and makes it write its statistics at once.
    os.kill(state.wanem_pid, signal.SIGUSR2)
    time.sleep(0.3)
    return state.wanem_stats(), steal_ticks()


def emulator_watch_end(state: LabState, watch: tuple[dict[str, Any], int]) -> dict[str, Any]:
    """Did the delay line keep its schedule since emulator_watch_begin?"""
    time.sleep(0.6)  # one stats period, so the delay line's counters cover the tests
    before, steal0 = watch
    steal_ms = (steal_ticks() - steal0) * 1000 / os.sysconf("SC_CLK_TCK")
    return emulator_health(before, state.wanem_stats(), steal_ms)


def run_check(state: LabState, pairs: int = 3, seconds: float = 6.0,
              progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    for tool in ("ping", "iperf3"):
        sysdeps.need_tool(tool)
    say = progress or (lambda m: None)
    if state.wanem_pid is None or not os.path.exists(f"/proc/{state.wanem_pid}"):
        raise GridsplitError("the WAN delay line is not running; rebuild the lab (`gridsplit lab down && gridsplit lab up`)")
    watch = emulator_watch_begin(state)
    say(f"RTT of {len(state.topo.sites) * (len(state.topo.sites) - 1) // 2} site pair(s)")
    rtt = check_rtt(state)
    say(f"single-flow throughput ({seconds:g} s per path)")
    thr = check_throughput(state, pairs, seconds)
    say("drop-tail buffer at a switch output port")
    buf = check_buffer(state)
    emu = emulator_watch_end(state, watch)
    ok = all(r["ok"] for r in rtt + thr + buf) and emu["ok"]
    return {"ok": ok, "topology": state.topo.name, "scale": state.topo.scale, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "bounds": {"rtt": f"max({RTT_REL:.0%}, {RTT_ABS_MS} ms)", "throughput": f">= {THROUGHPUT_MIN:.0%} of bottleneck (wire rate)",
                       "buffer": f"±{BUFFER_TOL:.0%} of B/R", "late_fraction": LATE_FRACTION_MAX},
            "rtt": rtt, "throughput": thr, "buffer": buf, "emulator": emu}


def probe_schedule(state: LabState, seconds: float = 3.0) -> dict[str, Any]:
    """Can this machine hold the lab's schedule at its rate scale? One full-rate TCP flow
    over the longest WAN path while the delay line is watched: the heaviest steady load
    one flow puts on the delay line, the core every cross-site measurement goes through.
    `lab up --scale auto` doubles the scale until this holds."""
    watch = emulator_watch_begin(state)
    thr = check_throughput(state, 1, seconds, lan=False)
    emu = emulator_watch_end(state, watch)
    ok = emu["ok"] and all(r["ok"] for r in thr)
    return {"ok": ok, "scale": state.topo.scale, "throughput": thr, "emulator": emu,
            "why": None if ok else _missed(thr, emu)}


def _missed(thr: list[dict[str, Any]], emu: dict[str, Any]) -> str:
    parts = [f"the delay line released {emu['late_fraction']:.1%} of frames late (bound {LATE_FRACTION_MAX:.0%})"
             ] if not emu["ok"] else []
    parts += [f"one flow {r['src']} → {r['dst']} reached {r['fraction']:.0%} of {r['bottleneck_mbps']:g} Mb/s "
              f"(bound {THROUGHPUT_MIN:.0%})" if "fraction" in r else f"{r['src']} → {r['dst']}: {r.get('why')}"
              for r in thr if not r["ok"]]
    return "; ".join(parts)


def diagnose(report: dict[str, Any], cores: int | None = None, load: float | None = None) -> tuple[str, str]:
    """For a check that missed a bound: what missed, the likely cause on this machine
    (hypervisor steal, load, too few cores for the delay line), and what to do."""
    missed = [f"RTT {r['pair']}" for r in report["rtt"] if not r["ok"]]
    missed += [f"throughput {r['src']} → {r['dst']} ({r['fraction']:.1%})" if "fraction" in r
               else f"throughput {r['src']} → {r['dst']}" for r in report["throughput"] if not r["ok"]]
    missed += [f"buffer {r['site']}" for r in report["buffer"] if not r["ok"]]
    e = report["emulator"]
    if not e["ok"]:
        missed.append(f"delay line {e['late_fraction']:.1%} of frames late")
    cores = cores or os.cpu_count() or 1
    load = os.getloadavg()[0] if load is None else load
    causes = []
    # A buffer of a few frames cannot show its B/R delay within the bound: the queue
    # fills and drains by whole frames (tbf's limit counts bytes of whole packets).
    small = [r for r in report["buffer"] if not r["ok"] and r.get("buffer_bytes", 1e9) < SMALL_BUFFER_FRAMES * 1514]
    if small:
        causes.append(f"at rate scale {report.get('scale') or 1:g} the switch buffer of {small[0]['site']} holds only "
                      f"{small[0]['buffer_bytes'] / 1514:.0f} full frames, too few to queue for B/R within "
                      f"{BUFFER_TOL:.0%}")
    if e.get("steal_ms", 0) > 50:
        causes.append(f"the hypervisor took {e['steal_ms']:.0f} ms of CPU from this VM during the check (steal)")
    if load > cores:
        causes.append(f"the load average ({load:.1f}) exceeds this machine's {cores} cores")
    if e.get("cpu_percent") and e["cpu_percent"] > 80:
        causes.append(f"the delay line used {e['cpu_percent']:.0f} % of its core")
    if cores < 2:
        causes.append("one core cannot run the delay line beside the hosts")
    what = (f"the lab missed {len(missed)} bound(s): {', '.join(missed)}. "
            f"Likely cause: {'; '.join(causes) if causes else 'transient load on this machine'}.")
    if small:
        todo = (f"What to do: rebuild at a smaller scale (`gridsplit lab up --scale {(report.get('scale') or 1) / 2:g}`) "
                "on a quieter machine; until then the switch ports drop a little earlier than the topology says.")
    else:
        todo = (f"What to do: stop other load and rerun `gridsplit lab check`, or rebuild at a lower rate "
                f"(`gridsplit lab up --scale {max(report.get('scale') or 1, 1) * 2:g}` or `--scale auto`). Results "
                "measured meanwhile record the delay line's lateness per run.")
    return what, todo


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Several check runs: the last run's tables, plus medians and ranges of the key figures."""
    def stat(xs):
        xs = sorted(xs)
        return {"median": statistics.median(xs), "min": xs[0], "max": xs[-1], "n": len(xs)} if xs else None
    rtt_err = [abs(r["error_ms"]) for run in runs for r in run["rtt"] if "error_ms" in r]
    thr = [r["fraction"] for run in runs for r in run["throughput"] if "fraction" in r]
    buf = [r["error"] for run in runs for r in run["buffer"] if "error" in r]
    late = [run["emulator"]["late_fraction"] for run in runs]
    worst = [run["emulator"]["worst_late_us"] for run in runs]
    cpu = [run["emulator"]["cpu_percent"] for run in runs if run["emulator"]["cpu_percent"] is not None]
    out = dict(runs[-1])
    out["ok"] = all(run["ok"] for run in runs)
    out["repeat"] = len(runs)
    out["passed_runs"] = sum(run["ok"] for run in runs)
    out["summary"] = {"rtt_abs_error_ms": stat(rtt_err), "throughput_fraction": stat(thr),
                      "buffer_error": stat(buf), "late_fraction": stat(late), "worst_late_us": stat(worst),
                      "delay_line_cpu_percent": stat(cpu)}
    return out


def render(report: dict[str, Any], con) -> None:
    from rich.table import Table

    def mark(ok):
        return "[green]ok[/green]" if ok else "[bold red]FAIL[/bold red]"

    t = Table("site pair", "configured", "median", "min / max", "bound", "", title="idle RTT")
    for r in report["rtt"]:
        t.add_row(r["pair"], f"{r['configured_ms']:.3f} ms",
                  f"{r['median_ms']:.3f} ms" if "median_ms" in r else r.get("why", ""),
                  f"{r.get('min_ms', 0):.3f} / {r.get('max_ms', 0):.3f}", f"±{r['bound_ms']} ms", mark(r["ok"]))
    con.print(t)
    t = Table("path", "RTT", "bottleneck", "goodput (median 1 s)", "wire rate", "fraction", "whole-run mean", "retrans", "",
              title="single TCP flow (iperf3)")
    for r in report["throughput"]:
        t.add_row(f"{r['src']} → {r['dst']}", f"{r['rtt_ms']:g} ms", f"{r['bottleneck_mbps']:g} Mb/s",
                  f"{r.get('goodput_mbps', 0):.1f} Mb/s", f"{r.get('wire_mbps', 0):.1f} Mb/s",
                  f"{r['fraction']:.1%}" if "fraction" in r else r.get("why", ""),
                  f"{r['mean_fraction']:.1%}" if "mean_fraction" in r else "", str(r.get("retransmits", "")), mark(r["ok"]))
    con.print(t)
    t = Table("port", "rate", "buffer", "expected B/R", "full-queue delay (median)", "p95 / max", "error", "", title="drop-tail switch buffer")
    for r in report["buffer"]:
        t.add_row(f"{r['site']} → {r['port_toward']}", f"{r['rate_mbps']:g} Mb/s", f"{r['buffer_bytes']} B",
                  f"{r['expected_ms']:.2f} ms",
                  f"{r['queue_delay_full_ms']:.2f} ms" if "queue_delay_full_ms" in r else r.get("why", ""),
                  f"{r.get('queue_delay_p95_ms', 0):.2f} / {r.get('queue_delay_max_ms', 0):.2f} ms",
                  f"{r['error']:+.1%}" if "error" in r else "", mark(r["ok"]))
    con.print(t)
    e = report["emulator"]
    con.print(f"delay line: {e['packets']} packets, {e['late']} released > 200 µs late "
              f"({e['late_fraction']:.3%}, bound {LATE_FRACTION_MAX:.0%}), worst {e['worst_late_us']:.0f} µs, "
              f"CPU {e['cpu_percent']}% — {mark(e['ok'])}")
    if e.get("stall"):
        con.print(f"[yellow]note: one or more frames were held {e['worst_late_us'] / 1000:.1f} ms: a stall of this VM "
                  f"(hypervisor steal during the check: {e['steal_ms']:.0f} ms); a measurement taken across it may "
                  f"carry that delay[/yellow]")
    if "summary" in report:
        t = Table("figure (over all runs)", "median", "min", "max", "n", title=f"{report['repeat']} runs, {report['passed_runs']} passed")
        for k, v in report["summary"].items():
            if v:
                t.add_row(k, f"{v['median']:.4g}", f"{v['min']:.4g}", f"{v['max']:.4g}", str(v["n"]))
        con.print(t)
    if report["ok"]:
        con.print("[bold green]lab check passed[/bold green]")
    else:
        what, todo = diagnose(report)
        con.print(f"[bold yellow]lab check:[/bold yellow] {what}")
        con.print(todo)
