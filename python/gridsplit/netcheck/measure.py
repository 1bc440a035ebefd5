"""Measuring the site matrix: targets, the per-pair procedure, and the report it builds.

For every ordered site pair (source -> destination, as in Guillier et al. 2006's tables)
one representative host per site is measured, one pair at a time (concurrent
tests would measure each other):

1. RTT: n pings (min/avg/max/mdev, median);
2. one TCP flow with the hosts' own settings ("untuned");
3. one TCP flow with buffers of headroom x BDP, the BDP from the measured RTT
   and the path's capacity ("tuned");
4. parallel flows (default 2, 5, 10 streams) with tuned buffers: aggregate,
   per-stream mean, Jain's index, retransmits.

Every remote step has a hard time limit. A host that cannot be reached, lacks
iperf3, or whose port is filtered makes its cells "unmeasured" with the reason;
the run goes on. The report is rewritten after every pair (atomically), so an
interrupted run can be resumed with --resume and skips what is done.
"""

from __future__ import annotations

import difflib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..errors import GridsplitError
from ..lab.check import representative
from ..tcpbound import FRAME_OVERHEAD
from ..inventory import load_inventory
from ..machine import facts as machine_facts
from .diagnose import DEFAULT_THRESHOLDS, diagnose, grid_status, summarize_iperf
from .runner import Endpoint, LabRunner, Runner
from .tuning import DEFAULT_HEADROOM, buffer_for, cell_advice, site_advice

SCHEMA = "gridsplit.netcheck/1"
# Bytes on the wire per TCP segment beyond its payload. The lab's tbf shapes
# frames (lab check's FRAME_OVERHEAD); a real Ethernet link also carries
# preamble, FCS and inter-frame gap (24 more: 1 GbE gives 941 Mb/s of TCP
# goodput, Guillier et al. 2006 Table 1's footnote).
LAB_OVERHEAD = FRAME_OVERHEAD
ETHERNET_OVERHEAD = FRAME_OVERHEAD + 24


@dataclass
class Settings:
    count: int = 20                 # pings per pair (Guillier et al. 2006: 20)
    interval: float = 0.2
    duration: float = 5.0           # seconds measured per iperf3 test
    omit: int = 1                   # seconds of slow start left out
    streams: tuple[int, ...] = (2, 5, 10)
    headroom: float = DEFAULT_HEADROOM
    thresholds: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_THRESHOLDS))
    congestion: str | None = None   # iperf3 -C; None keeps each host's own
    port: int = 5201
    keep_raw: Path | None = None    # directory for every raw iperf3 JSON, with its context
    iperf_args: tuple[str, ...] = ()  # extra iperf3 client arguments (e.g. -l 64K, -Z)

    def to_dict(self) -> dict[str, Any]:
        return {"count": self.count, "interval": self.interval, "duration": self.duration, "omit": self.omit,
                "streams": list(self.streams), "headroom": self.headroom, "thresholds": self.thresholds,
                "congestion": self.congestion, "port": self.port, "iperf_args": list(self.iperf_args)}


@dataclass
class Target:
    """What to measure: sites, candidate hosts per site, how to reach them, their capacity."""

    mode: str                                   # "lab" | "hosts"
    runner: Runner
    sites: list[str]
    candidates: dict[str, list[Endpoint]]       # per site, the representative first
    capacity: Callable[[Endpoint, Endpoint], tuple[float | None, str]]
    overhead: int
    description: dict[str, Any]


def lab_target(state) -> Target:
    topo = state.topo
    cands = {}
    for s in topo.sites:
        rep = representative(state, s.name)
        cands[s.name] = [Endpoint(rep.name, s.name, str(rep.ip))]

    def capacity(a: Endpoint, b: Endpoint) -> tuple[float, str]:
        return topo.bottleneck_mbps(topo.host(a.name), topo.host(b.name)), "lab topology"

    return Target("lab", LabRunner(state), [s.name for s in topo.sites], cands, capacity, LAB_OVERHEAD,
                  {"topology": topo.to_dict(), "prefix": state.names.prefix})


def load_hosts(path: str) -> tuple[Target, int | None]:
    """Parse a --hosts TOML file (the shared inventory, inventory.py; format in docs/netcheck.md);
    returns the target and its iperf3 port."""
    inv = load_inventory(path)
    if len(inv.sites) < 2:
        raise GridsplitError(f"{path}: netcheck measures between sites; list at least two [[site]] tables")
    runner = inv.runner
    cands = {s.name: list(s.hosts) for s in inv.sites}
    caps = {s.name: s.capacity_mbps for s in inv.sites}

    def capacity(a: Endpoint, b: Endpoint) -> tuple[float | None, str]:
        given = [caps[a.site], caps[b.site]]
        if all(given):
            return min(given), "hosts file"
        speeds = [_nic_speed(runner, a, b.address), _nic_speed(runner, b, a.address)]
        known = [x for x in speeds + given if x]
        if known:
            return min(known), "NIC speed" if not any(given) else "hosts file and NIC speed"
        return None, "unknown"

    return (Target("hosts", runner, list(cands), cands, capacity, ETHERNET_OVERHEAD, {"hosts_file": str(inv.path)}),
            inv.iperf_port)


def _nic_speed(runner: Runner, ep: Endpoint, toward: str) -> float | None:
    """The link speed (Mb/s) of the interface `ep` uses toward `toward`, if the driver reports one."""
    script = (f"d=$(ip -o route get {toward} 2>/dev/null | sed -n 's/.* dev \\([^ ]*\\).*/\\1/p'); "
              "cat /sys/class/net/$d/speed 2>/dev/null")
    res = runner.run(ep, ["sh", "-c", script], timeout=10)
    try:
        v = int(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None
    return float(v) if v > 0 else None


# ---------------------------------------------------------------------------
# One iperf3 test
# ---------------------------------------------------------------------------


def iperf_test(runner: Runner, src: Endpoint, dst: Endpoint, s: Settings, streams: int = 1,
               window: int | None = None, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """One iperf3 client run src -> dst against a one-off server on dst; raw JSON or {"error": reason}."""
    limit = s.duration + s.omit + 25
    server = runner.spawn(dst, ["iperf3", "-s", "-1", "-J", "-p", str(s.port)], timeout=limit + 10)
    args = ["iperf3", "-c", dst.address, "-p", str(s.port), "-t", f"{s.duration:g}", "-O", str(s.omit),
            "-P", str(streams), "-J", "--get-server-output", "--connect-timeout", "3000", *s.iperf_args, *extra]
    if window:
        args += ["-w", str(window)]
    if s.congestion:
        args += ["-C", s.congestion]
    try:
        # The server needs a moment to listen (longer over ssh): retry a refused
        # connection until it is up, but not once it has died.
        deadline = time.monotonic() + 15
        while True:
            res = runner.run(src, args, timeout=limit)
            reason = runner.unreachable(res)
            if reason:
                return {"error": f"{src.name}: {reason}"}
            try:
                raw = json.loads(res.stdout)
            except ValueError:
                if res.timed_out:
                    return {"error": f"iperf3 client on {src.name} did not finish within {limit:.0f} s"}
                why = res.why()
                if "not found" in why or res.rc == 127:
                    return {"error": f"iperf3 is not installed on {src.name} (apt-get install iperf3)"}
                return {"error": f"iperf3 client on {src.name} gave no JSON: {why}"}
            err = raw.get("error", "")
            if err and "refused" in err and server.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
                continue
            if err and server.poll() is not None:
                serr = (server.stderr.read() if server.stderr else "").strip().splitlines()
                if serr or server.returncode not in (0, None):
                    return {"error": f"iperf3 server on {dst.name} exited ({server.returncode}): "
                                     f"{serr[-1][:200] if serr else 'no message'}"}
            return raw if "end" in raw and "sum_received" in raw.get("end", {}) else {
                "error": f"iperf3 {src.name} -> {dst.name}: {err or 'no result'}"}
    finally:
        runner.stop([server])


# ---------------------------------------------------------------------------
# One cell, and the whole matrix
# ---------------------------------------------------------------------------


class Session:
    """A measurement run: the target, the settings, host facts, and the report being built."""

    def __init__(self, target: Target, settings: Settings, report: dict[str, Any] | None = None,
                 out: Path | None = None, progress: Callable[[str], None] = lambda m: None):
        self.t, self.s, self.out, self.say = target, settings, out, progress
        old = report or {}
        self.report = {
            "schema": SCHEMA, "mode": target.mode, "machine": machine_facts(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "target": target.description, "sites": target.sites,
            "settings": {**settings.to_dict(), "wire_overhead_bytes": target.overhead},
            "hosts": dict(old.get("hosts", {})), "representatives": {}, "cells": [], "site_advice": {},
        }
        if old:
            self.report["resumed_from"] = old.get("started")
        self.done = {(c["src_site"], c["dst_site"]): c for c in old.get("cells", []) if c.get("status") == "measured"}
        self.facts: dict[str, dict[str, Any]] = {}

    def host_facts(self, ep: Endpoint) -> dict[str, Any]:
        if ep.name not in self.facts:
            self.facts[ep.name] = self.t.runner.facts(ep)
            self.report["hosts"][ep.name] = {"site": ep.site, "address": ep.address, **self.facts[ep.name]}
        return self.facts[ep.name]

    def representative(self, site: str) -> tuple[Endpoint | None, str | None]:
        """The first candidate host of `site` that answers, or the reasons none did."""
        reasons = []
        for ep in self.t.candidates[site]:
            f = self.host_facts(ep)
            if "error" not in f:
                self.report["representatives"][site] = ep.name
                return ep, None
            reasons.append(f"{ep.name}: {f['error']}")
        return None, "; ".join(reasons)

    def _keep(self, cell: dict[str, Any], phase: str, raw: dict[str, Any], flow: dict[str, Any]) -> None:
        if not self.s.keep_raw:
            return
        self.s.keep_raw.mkdir(parents=True, exist_ok=True)
        name = f"{cell['src_site']}-{cell['dst_site']}-{phase}.json"
        ctx = {k: cell.get(k) for k in ("src", "dst", "src_site", "dst_site", "rtt", "capacity_mbps",
                                        "capacity_source", "max_goodput_mbps", "tuned_buffer_bytes")}
        ctx["src_facts"], ctx["dst_facts"] = self.facts.get(cell["src"], {}), self.facts.get(cell["dst"], {})
        ctx["phase"], ctx["recorded"] = phase, time.strftime("%Y-%m-%dT%H:%M:%S%z")
        ctx["emulator"] = flow.get("emulator")
        ctx["topology"] = (self.t.description.get("topology") or {}).get("name") or self.t.description.get("hosts_file")
        (self.s.keep_raw / name).write_text(json.dumps({"context": ctx, "iperf3": raw}, indent=1))

    def _flow(self, cell: dict[str, Any], phase: str, src: Endpoint, dst: Endpoint, **kw) -> dict[str, Any]:
        token = self.t.runner.health_begin()
        raw = iperf_test(self.t.runner, src, dst, self.s, **kw)
        health = self.t.runner.health_end(token)
        flow = summarize_iperf(raw) if "error" not in raw else {"error": raw["error"]}
        if health is not None:
            flow["emulator"] = {k: health[k] for k in ("ok", "late_fraction", "worst_late_us", "packets", "steal_ms")}
        self._keep(cell, phase, raw, flow)
        return flow

    def measure_cell(self, a: str, b: str) -> dict[str, Any]:
        s = self.s
        cell: dict[str, Any] = {"src_site": a, "dst_site": b, "status": "unmeasured", "reason": None}
        src, why_a = self.representative(a)
        dst, why_b = self.representative(b)
        if src is None or dst is None:
            cell["reason"] = "no reachable host: " + "; ".join(
                f"site {site}: {why}" for site, why in ((a, why_a), (b, why_b)) if why)
            return cell
        cell.update(src=src.name, dst=dst.name, src_addr=src.address, dst_addr=dst.address)
        fs, fd = self.facts[src.name], self.facts[dst.name]
        missing = [ep.name for ep, f in ((src, fs), (dst, fd)) if not f.get("iperf3")]
        cell["rtt"] = self.t.runner.ping(src, dst, s.count, s.interval) if fs.get("ping") or self.t.mode == "lab" \
            else {"error": f"ping is not installed on {src.name} (apt-get install iputils-ping)"}
        if missing:
            cell["reason"] = f"iperf3 is not installed on {', '.join(missing)} (apt-get install iperf3)"
            return cell
        cap, source = self.t.capacity(src, dst)
        cell["capacity_mbps"], cell["capacity_source"] = cap, source

        self.say(f"{a} -> {b}: single flow, hosts' own settings")
        untuned = self._flow(cell, "untuned", src, dst)
        cell["untuned"] = untuned
        mss = untuned.get("mss") or 1448
        base = cell["rtt"].get("min_ms") or untuned.get("min_rtt_ms")
        if cap is None:
            cap_guess = max(untuned.get("goodput_mbps", 0) * (mss + self.t.overhead) / mss, 1000.0)
        else:
            cap_guess = cap
        nbytes = buffer_for(cap_guess * 1e6 / 8 * (base or 1.0) / 1000, s.headroom)
        cell["bdp_bytes"] = int(cap_guess * 1e6 / 8 * (base or 0) / 1000) if base else None
        cell["tuned_buffer_bytes"] = nbytes
        window = nbytes if getattr(self.t.runner, "tune_mode", "sysctl") == "socket" else None
        cell["parallel"] = []
        try:
            with self.t.runner.tuned([src, dst], nbytes) as how:
                cell["tuning"] = how
                self.say(f"{a} -> {b}: single flow, buffers {nbytes} B")
                cell["tuned"] = self._flow(cell, "tuned", src, dst, window=window)
                for n in s.streams:
                    if n <= 1:
                        continue
                    self.say(f"{a} -> {b}: {n} parallel flows")
                    f = self._flow(cell, f"parallel{n}", src, dst, streams=n, window=window)
                    if "error" in f:
                        cell["parallel"].append({"streams": n, "error": f["error"]})
                    else:
                        cell["parallel"].append({"streams": n, "goodput_mbps": f["goodput_mbps"],
                                                 "mean_stream_mbps": round(f["goodput_mbps"] / n, 3),
                                                 "jain": f["jain"], "retransmits": f["retransmits"],
                                                 "per_stream_mbps": f["per_stream_mbps"]})
        except GridsplitError as e:
            cell["tuned"] = {"error": str(e)}
        if cap is None:
            # No capacity given or readable: the best rate measured is a lower bound.
            best = max([cell[k].get("goodput_mbps") or 0 for k in ("untuned", "tuned")] +
                       [p.get("goodput_mbps") or 0 for p in cell["parallel"]])
            cap, source = (round(best * (mss + self.t.overhead) / mss, 1), "estimated: best measured rate (a lower bound)") \
                if best else (None, "unknown")
            cell["capacity_mbps"], cell["capacity_source"] = cap, source
        self.finish_cell(cell)
        return cell

    def finish_cell(self, cell: dict[str, Any]) -> None:
        finish_cell(cell, self.facts, self.t.overhead, self.s.thresholds, self.s.headroom)

    def pairs(self, only: list[tuple[str, str]] | None, one_way: bool) -> list[tuple[str, str]]:
        sites = self.t.sites
        if only is None:
            return [(a, b) for a in sites for b in sites if a != b]
        out = []
        for a, b in only:
            for x in (a, b):
                if x not in sites:
                    close = difflib.get_close_matches(x, sites, n=1)
                    raise GridsplitError(f"--pairs: unknown site {x!r}" + (f" (did you mean {close[0]!r}?)" if close
                                                                          else f"; sites: {', '.join(sites)}"))
            if a == b:
                raise GridsplitError(f"--pairs: {a}:{b} joins a site to itself; give two different sites")
            out += [(a, b)] if one_way else [(a, b), (b, a)]
        return list(dict.fromkeys(out))

    def run(self, pairs: list[tuple[str, str]], on_cell: Callable[[int, int, dict], None] = lambda i, n, c: None) -> dict:
        cells = {}

        def collect() -> None:
            # This run's cells in order, then the resumed report's other measured cells.
            self.report["cells"] = list(cells.values()) + [c for k, c in self.done.items() if k not in cells]

        for i, (a, b) in enumerate(pairs):
            fresh = (a, b) not in self.done
            cells[(a, b)] = self.measure_cell(a, b) if fresh else self.done[(a, b)]
            on_cell(i, len(pairs), cells[(a, b)])
            if fresh:
                collect()
                self.save()
        collect()
        self.report["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        self.report["site_advice"] = site_advice(self.report["cells"], self.report["hosts"])
        self.save()
        return self.report

    def save(self) -> None:
        if self.out is None:
            return
        tmp = self.out.with_name(self.out.name + ".tmp")
        tmp.write_text(json.dumps(self.report, indent=1, default=str))
        os.replace(tmp, self.out)


def finish_cell(cell: dict[str, Any], facts: dict[str, dict[str, Any]], overhead: int,
                thr: dict[str, float], headroom: float) -> None:
    """Diagnosis, grid status and advice of a cell from what was measured (also for saved reports)."""
    cap = cell.get("capacity_mbps")
    fs, fd = facts.get(cell.get("src"), {}), facts.get(cell.get("dst"), {})
    mss = next((cell[k].get("mss") for k in ("untuned", "tuned") if (cell.get(k) or {}).get("mss")), 1448)
    cell["max_goodput_mbps"] = round(cap * mss / (mss + overhead), 2) if cap else None
    cell["diagnosis"], cell["grid"] = {}, {}
    for phase in ("untuned", "tuned"):
        flow = cell.get(phase) or {"error": "not measured"}
        src_f, dst_f = fs, fd
        if phase == "tuned" and (cell.get("tuning") or {}).get("method") in ("sysctl", "sudo-sysctl"):
            # The tuned flow ran with raised autotuning maxima, not the hosts' own.
            n = cell["tuned_buffer_bytes"]
            src_f = {**fs, "net.ipv4.tcp_wmem": [*(fs.get("net.ipv4.tcp_wmem") or [4096, 16384])[:2], n]}
            dst_f = {**fd, "net.ipv4.tcp_rmem": [*(fd.get("net.ipv4.tcp_rmem") or [4096, 131072])[:2], n]}
        if cap:
            d = diagnose(flow, rtt=cell.get("rtt") or {}, capacity_mbps=cap,
                         max_goodput_mbps=cell["max_goodput_mbps"], src=src_f, dst=dst_f, ok=thr["ok"])
        else:
            d = {"verdict": "unmeasured", "why": flow.get("error") or "capacity unknown"}
        cell["diagnosis"][phase] = d
        cell["grid"][phase] = grid_status(d.get("fraction"), thr)
    cell["advice"] = cell_advice(cell, fs, fd, headroom)
    errors = [f"{k}: {cell[k]['error']}" for k in ("untuned", "tuned") if "error" in (cell.get(k) or {})]
    errors += [f"rtt: {cell['rtt']['error']}"] if "error" in (cell.get("rtt") or {}) else []
    errors += [f"{p['streams']} streams: {p['error']}" for p in cell.get("parallel", []) if "error" in p]
    both = all("error" in (cell.get(k) or {"error": 1}) for k in ("untuned", "tuned"))
    cell["status"] = "unmeasured" if both else ("partial" if errors else "measured")
    cell["reason"] = "; ".join(errors) or None


def rediagnose(report: dict[str, Any], thresholds: dict[str, float] | None = None) -> dict[str, Any]:
    """Apply the current rules (and new thresholds) to a saved report's measurements."""
    st = report["settings"]
    if thresholds:
        st["thresholds"] = thresholds
    facts = report.get("hosts", {})
    overhead = st.get("wire_overhead_bytes", LAB_OVERHEAD if report.get("mode") == "lab" else ETHERNET_OVERHEAD)
    for c in report.get("cells", []):
        if c.get("src") and c.get("dst") and (c.get("untuned") or c.get("tuned")):
            finish_cell(c, facts, overhead, st["thresholds"], st.get("headroom", DEFAULT_HEADROOM))
    report["site_advice"] = site_advice(report["cells"], facts)
    return report


def load_report(path: str) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise GridsplitError(f"{path}: no such netcheck report") from None
    except (OSError, ValueError) as e:
        raise GridsplitError(f"{path}: not a netcheck JSON report ({e})") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise GridsplitError(f"{path}: not a netcheck report (schema {data.get('schema') if isinstance(data, dict) else None!r}, "
                             f"expected {SCHEMA!r})")
    # What rediagnose reads: a report cut short or edited by hand is refused here, not half-read.
    if not isinstance(data.get("settings"), dict) or not isinstance(data.get("settings", {}).get("thresholds"), dict) \
            or not isinstance(data.get("cells"), list):
        raise GridsplitError(f"{path}: a netcheck report without its settings or cells (cut short or edited?); "
                             "write it again with `gridsplit netcheck ... --out FILE`")
    return data


def parse_pairs(spec: str) -> list[tuple[str, str]]:
    out = []
    for item in spec.split(","):
        a, sep, b = item.strip().partition(":")
        if not sep or not a or not b:
            raise GridsplitError(f"--pairs: {item.strip()!r} is not SITE:SITE; e.g. --pairs rennes:nancy,lyon:sophia")
        out.append((a.strip(), b.strip()))
    return out
