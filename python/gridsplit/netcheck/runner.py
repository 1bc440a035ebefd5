"""Where netcheck's commands run: lab namespaces or real hosts over ssh, behind one interface.

The measurement code (measure.py) never knows which it is talking to. A Runner
runs a command on an Endpoint with a hard timeout, starts a background process
there (the iperf3 server), reads the host's TCP facts, probes RTT, and can give
a set of hosts buffers sized for a path for the length of one test. The lab
runner does this with `ip netns exec` and the lab's own helpers
(lab.sh.in_ns, lab.pinger.ping, lab.iperf.buffers); the ssh runner with
OpenSSH in batch mode, so a host that asks for a password fails at once
instead of waiting for one. Every remote command is also wrapped in
coreutils' `timeout`, so a lost ssh connection cannot leave an iperf3 behind.
"""

from __future__ import annotations

import os
import re
import shlex
import statistics
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

from ..errors import GridsplitError
from ..lab import iperf
from ..lab.check import emulator_watch_begin, emulator_watch_end
from ..lab.iperf import BUF_KEYS as keys  # the same four the lab raises, in the same order
from ..lab.iperf import stop  # SIGTERM, wait, SIGKILL: the lab's own way of ending its children
from ..lab.pinger import ping

# The sysctls netcheck reads on every host: the buffer limits behind the
# wizard gap, the congestion control, and the backlog of Guillier et al. 2006 §3.
SYSCTLS = ("net.core.rmem_max", "net.core.wmem_max", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem",
           "net.ipv4.tcp_congestion_control", "net.ipv4.tcp_available_congestion_control",
           "net.core.netdev_max_backlog", "net.ipv4.tcp_window_scaling", "net.ipv4.tcp_sack")

# One POSIX sh script, the same for a namespace and an ssh host, so both are
# described by the same facts. Keys print even when their file is missing.
FACTS_SCRIPT = "; ".join([
    "for k in " + " ".join(SYSCTLS) + "; do f=/proc/sys/$(echo $k | tr . /); "
    "v=$(cat $f 2>/dev/null | tr '\\t' ' '); echo \"$k=$v\"; done",
    "echo \"kernel=$(uname -r)\"",
    "echo \"cpus=$(nproc 2>/dev/null)\"",
    "h=$( (zcat /proc/config.gz 2>/dev/null; cat /boot/config-$(uname -r) 2>/dev/null) | sed -n 's/^CONFIG_HZ=//p' | head -1); echo \"hz=$h\"",
    "echo \"iperf3=$(command -v iperf3)\"",
    "echo \"iperf3_version=$(iperf3 --version 2>/dev/null | head -1)\"",
    "echo \"ping=$(command -v ping)\"",
])


@dataclass(frozen=True)
class Endpoint:
    """One host netcheck measures from or to."""

    name: str          # e.g. "bordeaux-1" or "node-3.bordeaux.grid5000.fr"
    site: str
    address: str       # the address the peer's traffic goes to (iperf3 -c, ping)
    ssh_target: str = ""   # [user@]host for ssh; empty in the lab


@dataclass
class Result:
    rc: int
    stdout: str
    stderr: str
    timed_out: bool = False

    def why(self) -> str:
        """The last meaningful line a failed command printed."""
        lines = [l.strip() for l in (self.stderr or self.stdout or "").splitlines() if l.strip()]
        return lines[-1][:240] if lines else f"exit status {self.rc}, no output"


class Runner:
    """How commands reach endpoints. Subclasses implement argv() and may override the rest."""

    kind = "abstract"

    def argv(self, ep: Endpoint, cmd: Sequence[str], timeout: float) -> list[str]:
        raise NotImplementedError

    def unreachable(self, res: Result) -> str | None:
        """A reason if `res` says the endpoint itself could not be reached (not the command failing)."""
        return None

    def run(self, ep: Endpoint, cmd: Sequence[str], timeout: float) -> Result:
        try:
            cp = subprocess.run(self.argv(ep, cmd, timeout), text=True, capture_output=True, timeout=timeout + 5)
        except subprocess.TimeoutExpired as e:
            return Result(124, _text(e.stdout), _text(e.stderr), timed_out=True)
        except FileNotFoundError as e:
            return Result(127, "", f"cannot run {e.filename}: not installed")
        # coreutils' timeout exits 124 when it had to stop the command.
        return Result(cp.returncode, cp.stdout, cp.stderr, timed_out=cp.returncode == 124)

    def spawn(self, ep: Endpoint, cmd: Sequence[str], timeout: float) -> subprocess.Popen:
        return subprocess.Popen(self.argv(ep, cmd, timeout), stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def facts(self, ep: Endpoint) -> dict[str, Any]:
        """The host's TCP settings and tools, or {"error": reason}."""
        res = self.run(ep, ["sh", "-c", FACTS_SCRIPT], timeout=20)
        reason = self.unreachable(res)
        if reason:
            return {"error": reason}
        if res.rc != 0 and "kernel=" not in res.stdout:
            return {"error": f"cannot read host settings: {res.why()}"}
        return parse_facts(res.stdout)

    def ping(self, src: Endpoint, dst: Endpoint, count: int, interval: float) -> dict[str, Any]:
        """RTT statistics from src to dst, from iputils ping's own summary (µs precision)."""
        res = self.run(src, ["ping", "-n", "-c", str(count), "-i", f"{interval:g}", "-W", "2", dst.address],
                       timeout=count * interval + 10)
        reason = self.unreachable(res)
        if reason:
            return {"error": reason}
        return parse_ping(res.stdout, count) if "transmitted" in res.stdout else {"error": f"ping failed: {res.why()}"}

    @contextmanager
    def tuned(self, hosts: list[Endpoint], nbytes: int) -> Iterator[dict[str, Any]]:
        """Buffers of at least nbytes on `hosts` for the duration; yields how (for the record)."""
        yield {"method": "none"}

    def health_begin(self) -> Any:
        """Start watching whatever could falsify a measurement besides the network (the lab's emulator)."""
        return None

    def health_end(self, token: Any) -> dict[str, Any] | None:
        return None

    def stop(self, procs: list[subprocess.Popen]) -> None:
        stop(procs)


def _text(b: Any) -> str:
    return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")


def parse_facts(text: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for line in text.splitlines():
        k, sep, v = line.partition("=")
        if sep:
            out[k.strip()] = " ".join(v.split())
    for k in ("net.core.rmem_max", "net.core.wmem_max", "net.core.netdev_max_backlog", "hz", "cpus"):
        out[k] = int(out[k]) if out.get(k, "").isdigit() else None
    for k in ("net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"):
        parts = out.get(k, "").split()
        out[k] = [int(x) for x in parts] if len(parts) == 3 and all(p.isdigit() for p in parts) else None
    return out


_PING_SUMMARY = re.compile(r"= ([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+) ms")
_PING_COUNTS = re.compile(r"(\d+) packets transmitted, (\d+) (?:packets )?received")
_PING_SAMPLE = re.compile(r"time=([\d.]+) ms")


def parse_ping(text: str, count: int) -> dict[str, Any]:
    m = _PING_COUNTS.search(text)
    sent, recv = (int(m.group(1)), int(m.group(2))) if m else (count, 0)
    s = _PING_SUMMARY.search(text)
    if not s or recv == 0:
        return {"error": f"no reply to {sent} pings (host down, or ICMP filtered)", "count": sent, "received": 0}
    mn, avg, mx, mdev = (float(x) for x in s.groups())
    samples = [float(x) for x in _PING_SAMPLE.findall(text)]
    return {"count": sent, "received": recv, "min_ms": mn, "avg_ms": avg, "max_ms": mx, "mdev_ms": mdev,
            "median_ms": statistics.median(samples) if samples else avg}


def rtt_stats(samples: list[float], count: int) -> dict[str, Any]:
    """The same statistics as ping's summary line, from raw samples (mdev as ping computes it)."""
    if not samples:
        return {"error": f"no reply to {count} probes (host down, or ICMP filtered)", "count": count, "received": 0}
    avg = statistics.fmean(samples)
    mdev = max(statistics.fmean(x * x for x in samples) - avg * avg, 0.0) ** 0.5
    return {"count": count, "received": len(samples), "min_ms": round(min(samples), 4), "avg_ms": round(avg, 4),
            "max_ms": round(max(samples), 4), "mdev_ms": round(mdev, 4),
            "median_ms": round(statistics.median(samples), 4)}


# ---------------------------------------------------------------------------
# The lab: namespaces of a running lab
# ---------------------------------------------------------------------------


class LabRunner(Runner):
    """Commands run in the lab hosts' namespaces; tuning uses the lab's per-namespace sysctls."""

    kind = "lab"

    def __init__(self, state):
        self.state = state

    def ns(self, ep: Endpoint) -> str:
        return self.state.ns(ep.name)

    def argv(self, ep: Endpoint, cmd: Sequence[str], timeout: float) -> list[str]:
        return ["ip", "netns", "exec", self.ns(ep), "timeout", "-k", "3", f"{timeout:g}", *cmd]

    def spawn(self, ep: Endpoint, cmd: Sequence[str], timeout: float) -> subprocess.Popen:
        # Without the timeout wrapper `ip netns exec` execs the command itself,
        # so the PID we hold is the server's and terminate() reaches it.
        return subprocess.Popen(["ip", "netns", "exec", self.ns(ep), *cmd], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def facts(self, ep: Endpoint) -> dict[str, Any]:
        f = super().facts(ep)
        if "error" not in f and f.get("net.core.netdev_max_backlog") is None:
            # netdev_max_backlog is global (not per namespace): every lab host
            # shares this kernel's backlog, so read it where it lives.
            try:
                with open("/proc/sys/net/core/netdev_max_backlog") as fh:
                    f["net.core.netdev_max_backlog"] = int(fh.read())
            except (OSError, ValueError):
                pass
        return f

    def ping(self, src: Endpoint, dst: Endpoint, count: int, interval: float) -> dict[str, Any]:
        # The lab's prober keeps every sample at µs precision (iputils prints
        # 0.1 ms above 10 ms), which the median needs.
        try:
            samples = ping(self.ns(src), dst.address, count, interval)
        except GridsplitError as e:
            return {"error": str(e)}
        return rtt_stats(samples, count)

    def health_begin(self) -> Any:
        pid = self.state.wanem_pid
        if pid is None or not os.path.exists(f"/proc/{pid}"):
            return None
        return emulator_watch_begin(self.state)

    def health_end(self, token: Any) -> dict[str, Any] | None:
        """Did the delay line keep its schedule? (lab.check's bound: <= 2 % of frames > 200 µs late)."""
        if token is None:
            return None
        try:
            return emulator_watch_end(self.state, token)
        except GridsplitError:
            return None

    @contextmanager
    def tuned(self, hosts: list[Endpoint], nbytes: int) -> Iterator[dict[str, Any]]:
        with iperf.buffers(self.state, [self.state.topo.host(h.name) for h in hosts], nbytes):
            yield {"method": "sysctl", "tcp_rmem_max": nbytes, "tcp_wmem_max": nbytes}


# ---------------------------------------------------------------------------
# Real hosts over ssh
# ---------------------------------------------------------------------------

# What OpenSSH prints when it never reached the remote shell.
_SSH_FAIL = re.compile(r"ssh: |Connection (refused|timed out|closed)|Permission denied|Host key verification failed|"
                       r"No route to host|Could not resolve|Network is unreachable|kex_exchange_identification")


@dataclass
class SshRunner(Runner):
    """Commands run over ssh (BatchMode, bounded connect time); tuning per the hosts file's `tune`."""

    ssh_command: list[str] = field(default_factory=lambda: ["ssh"])
    options: list[str] = field(default_factory=list)
    connect_timeout: int = 5
    tune_mode: str = "socket"   # "socket" (iperf3 -w), "sysctl" (a root login), "sudo-sysctl", or "none"
    kind: str = "ssh"

    def argv(self, ep: Endpoint, cmd: Sequence[str], timeout: float) -> list[str]:
        remote = "timeout -k 3 {:g} {}".format(timeout, " ".join(shlex.quote(c) for c in cmd))
        return [*self.ssh_command, "-o", "BatchMode=yes", "-o", f"ConnectTimeout={self.connect_timeout}",
                "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=2", *self.options,
                ep.ssh_target or ep.address, "--", remote]

    def unreachable(self, res: Result) -> str | None:
        # ssh itself exits 255 when the connection or authentication failed.
        if res.rc == 255 or (res.rc != 0 and _SSH_FAIL.search(res.stderr or "") and not res.stdout):
            return f"ssh failed: {res.why()}"
        if res.timed_out and not res.stdout:
            return "ssh did not answer within the time limit"
        return None

    @contextmanager
    def tuned(self, hosts: list[Endpoint], nbytes: int) -> Iterator[dict[str, Any]]:
        if self.tune_mode not in ("sysctl", "sudo-sysctl"):
            # iperf3 -w sets SO_SNDBUF/SO_RCVBUF on both ends (measure.py); the
            # kernel clamps it to rmem_max/wmem_max, which the record shows.
            yield {"method": "socket" if self.tune_mode == "socket" else "none", "window": nbytes}
            return
        priv = ["sudo", "-n"] if self.tune_mode == "sudo-sysctl" else []
        how = " ".join([*priv, "sysctl"])
        saved: dict[Endpoint, list[str]] = {}
        try:
            for h in hosts:
                res = self.run(h, ["sysctl", "-n", *keys], timeout=15)
                vals = [" ".join(l.split()) for l in res.stdout.splitlines()]
                if res.rc != 0 or len(vals) != 4:
                    raise GridsplitError(f"{h.name}: cannot read buffer sysctls: {res.why()}")
                saved[h] = vals
                tmin, tdef, _ = vals[2].split()
                wmin, wdef, _ = vals[3].split()
                new = [str(max(nbytes, int(vals[0]))), str(max(nbytes, int(vals[1]))),
                       f"{tmin} {tdef} {nbytes}", f"{wmin} {wdef} {nbytes}"]
                res = self.run(h, [*priv, "sysctl", "-q", "-w", *[f"{k}={v}" for k, v in zip(keys, new)]], 15)
                if res.rc != 0:
                    raise GridsplitError(f"{h.name}: cannot raise buffers with {how}: {res.why()}")
            yield {"method": self.tune_mode, "tcp_rmem_max": nbytes, "tcp_wmem_max": nbytes}
        finally:
            for h, vals in saved.items():
                self.run(h, [*priv, "sysctl", "-q", "-w", *[f"{k}={v}" for k, v in zip(keys, vals)]], 15)
