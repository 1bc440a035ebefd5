"""iperf3 as the lab's traffic engine, read through its JSON output.

Servers and clients run inside host namespaces as child processes of this one,
and are stopped by PID. A TCP test can temporarily give both ends buffers large
enough for the path (per-namespace sysctls) so that it measures the path, not
the hosts' settings; netcheck measures with the hosts' own settings instead.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import time
from contextlib import contextmanager
from typing import Any, Iterator

from ..topology import Host
from .realize import LabState
from .sh import in_ns

_ports = itertools.count(15201)
BUF_KEYS = ("net.core.rmem_max", "net.core.wmem_max", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem")


def receiver_intervals_mbps(raw: dict[str, Any]) -> list[float]:
    """Per-second goodput from the server's report (iperf3 -J --get-server-output):
    what crossed the path each second, not what the sender managed to queue.
    Omitted warm-up intervals and the short tail interval are left out."""
    server = raw.get("server_output_json") or {}
    return [i["sum"]["bits_per_second"] / 1e6 for i in server.get("intervals", [])
            if not i["sum"].get("omitted") and i["sum"].get("seconds", 0) > 0.5]


def _port() -> int:
    return 15201 + (next(_ports) - 15201) % 2000


def _read_sysctls(ns: str) -> dict[str, str]:
    cp = in_ns(ns, ["sysctl", "-n", *BUF_KEYS])
    return dict(zip(BUF_KEYS, [" ".join(l.split()) for l in cp.stdout.splitlines()]))


def _write_sysctls(ns: str, values: dict[str, str]) -> None:
    in_ns(ns, ["sysctl", "-q", "-w", *[f"{k}={v}" for k, v in values.items()]])


@contextmanager
def buffers(state: LabState, hosts: list[Host], nbytes: int) -> Iterator[None]:
    """Raise the TCP buffer maxima of `hosts` to at least nbytes for the duration."""
    saved = {state.ns(h): _read_sysctls(state.ns(h)) for h in hosts}
    try:
        for ns in saved:
            _write_sysctls(ns, {"net.core.rmem_max": str(nbytes), "net.core.wmem_max": str(nbytes),
                                "net.ipv4.tcp_rmem": f"4096 131072 {nbytes}", "net.ipv4.tcp_wmem": f"4096 16384 {nbytes}"})
        yield
    finally:
        for ns, vals in saved.items():
            _write_sysctls(ns, vals)


def _server(state: LabState, dst: Host, port: int) -> subprocess.Popen:
    return subprocess.Popen(["ip", "netns", "exec", state.ns(dst), "iperf3", "-s", "-1", "-J", "-p", str(port), "-B", str(dst.ip)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=3)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _client(state: LabState, src: Host, args: list[str], timeout: float) -> dict[str, Any]:
    """Run an iperf3 client, retrying while its server is still starting."""
    for attempt in range(20):
        cp = in_ns(state.ns(src), ["iperf3", "-J", *args], check=False, timeout=timeout)
        try:
            data = json.loads(cp.stdout)
        except ValueError:
            return {"error": f"iperf3 gave no JSON: {(cp.stderr or cp.stdout).strip()[:200]}"}
        err = data.get("error", "")
        if "refused" in err and attempt < 19:
            time.sleep(0.1)
            continue
        return data
    return {"error": "iperf3 server did not start"}


def tcp(state: LabState, src: Host, dst: Host, seconds: float = 4.0, tuned: bool = True,
        streams: int = 1, congestion: str | None = None) -> dict[str, Any]:
    """One TCP test; returns goodput (received, after the first second), retransmits and MSS."""
    topo = state.topo
    rtt_s = max(topo.rtt_ms(src.site, dst.site), 0.5) / 1000
    bdp = int(topo.bottleneck_mbps(src, dst) * 1e6 / 8 * rtt_s)
    port = _port()
    server = _server(state, dst, port)
    args = ["-c", str(dst.ip), "-p", str(port), "-t", str(seconds), "-O", "1", "-P", str(streams),
            "--get-server-output"]
    if congestion:
        args += ["-C", congestion]
    try:
        if tuned:
            with buffers(state, [src, dst], max(4 * bdp, 4 << 20)):
                data = _client(state, src, args, seconds + 30)
        else:
            data = _client(state, src, args, seconds + 30)
    finally:
        stop([server])
    if "error" in data and "end" not in data:
        return {"error": data["error"]}
    end = data["end"]
    return {
        "goodput_mbps": end["sum_received"]["bits_per_second"] / 1e6,
        "interval_mbps": receiver_intervals_mbps(data),
        "sent_mbps": end["sum_sent"]["bits_per_second"] / 1e6,
        "retransmits": end["sum_sent"].get("retransmits", 0),
        "mss": data["start"].get("tcp_mss_default") or 1448,
        "streams": [s["receiver"]["bits_per_second"] / 1e6 for s in end.get("streams", [])],
        "raw": data,
    }


@contextmanager
def udp_flood(state: LabState, flows: list[tuple[Host, Host, float]], seconds: float) -> Iterator[None]:
    """Constant-rate UDP flows (src, dst, Mb/s) for `seconds`, in the background."""
    procs: list[subprocess.Popen] = []
    try:
        for src, dst, mbps in flows:
            port = _port()
            procs.append(_server(state, dst, port))
        time.sleep(0.2)
        for (src, dst, mbps), srv in zip(flows, list(procs)):
            port = int(srv.args[srv.args.index("-p") + 1])
            # Above a few hundred Mb/s one 1400-byte datagram per system call
            # costs more CPU than two cores have; 8900-byte datagrams leave as
            # six MTU-sized fragments for a sixth of the calls.
            length = "1400" if mbps <= 300 else "8900"
            procs.append(subprocess.Popen(
                ["ip", "netns", "exec", state.ns(src), "iperf3", "-u", "-c", str(dst.ip), "-p", str(port),
                 "-b", f"{mbps:.2f}M", "-l", length, "-t", str(seconds), "--pacing-timer", "200"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        yield
    finally:
        stop(procs)
