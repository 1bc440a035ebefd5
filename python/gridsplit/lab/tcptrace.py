"""Which TCP connection retransmitted: the kernel's own per-connection record.

Per-namespace counters (counters.py) say how many retransmissions and timeouts
a host had, not on which connection. Alter and Glück's Tables 1-2 need exactly that
split: *local* (both ends in one site: node <-> node or node <-> its gateway)
versus *distant* (across the WAN: node <-> node in direct mode, gateway <->
gateway in split mode). The kernel's tcp:tcp_retransmit_skb tracepoint names
the connection of every retransmitted segment, and tcp:tcp_cong_state_set every
entry into fast recovery (state 3) or RTO loss (state 4). They are read from a
tracefs instance of our own (named with the lab prefix), so the global trace
buffer and other users' tracing are untouched.

Tracepoints carry addresses, not namespaces: another lab running at the same
time with the same address plan would be counted too. `Trace.collect` reports
the lab's namespaces' RetransSegs beside the traced count so a mismatch shows.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import GridsplitError
from ..topology import Topology

TRACEFS = Path("/sys/kernel/tracing")
EVENTS = ("tcp/tcp_retransmit_skb", "tcp/tcp_cong_state_set")
CA_RECOVERY, CA_LOSS = 3, 4

_LINE = re.compile(r"(tcp_retransmit_skb|tcp_cong_state_set): .*?family=AF_INET sport=(\d+) dport=(\d+) "
                   r"saddr=([\d.]+) daddr=([\d.]+).*?(?:cong_state=(\d+))?$")


@dataclass
class ConnStats:
    retrans: int = 0
    recoveries: int = 0  # entries into TCP_CA_Recovery: fast retransmit episodes
    losses: int = 0      # entries into TCP_CA_Loss: retransmission timeouts


@dataclass
class TraceResult:
    conns: dict[tuple[str, int, str, int], ConnStats] = field(default_factory=dict)
    overrun: int = 0

    def by_class(self, topo: Topology) -> dict[str, dict[str, int]]:
        """Sum per class ("local"/"distant"/"other") of the connections seen."""
        out: dict[str, Counter] = {"local": Counter(), "distant": Counter()}
        for (sa, _, da, _), st in self.conns.items():
            cls = classify(topo, sa, da)
            c = out.setdefault(cls, Counter())
            c["retrans_segs"] += st.retrans
            c["fast_recoveries"] += st.recoveries
            c["rto_timeouts"] += st.losses
        return {k: dict(v) for k, v in out.items()}

    def by_source(self, topo: Topology) -> dict[str, Counter]:
        """Retransmitted segments per sending address and class, for attribution."""
        out: dict[str, Counter] = {}
        for (sa, _, da, _), st in self.conns.items():
            out.setdefault(sa, Counter())[classify(topo, sa, da)] += st.retrans
        return out


def classify(topo: Topology, saddr: str, daddr: str) -> str:
    a, b = topo.site_of_ip(saddr), topo.site_of_ip(daddr)
    if a is None or b is None:
        return "other"
    return "local" if a == b else "distant"


def parse(text: str) -> TraceResult:
    """Parse the instance's `trace` file; state changes count only on entry."""
    res = TraceResult()
    last_state: dict[tuple, int] = {}
    for line in text.splitlines():
        m = _LINE.search(line)
        if not m:
            continue
        ev, sport, dport, sa, da, st = m.groups()
        key = (sa, int(sport), da, int(dport))
        cs = res.conns.setdefault(key, ConnStats())
        if ev == "tcp_retransmit_skb":
            cs.retrans += 1
        elif st is not None:
            new = int(st)
            if new != last_state.get(key):
                cs.recoveries += new == CA_RECOVERY
                cs.losses += new == CA_LOSS
            last_state[key] = new
    return res


class Trace:
    """A private tracefs instance recording the two TCP events.

    Usage: `t = Trace(name); t.start(); ...; result = t.collect(); t.close()`.
    """

    def __init__(self, name: str, buffer_kb: int = 8192):
        self.name = name
        self.buffer_kb = buffer_kb
        self.dir = TRACEFS / "instances" / name

    @staticmethod
    def available() -> str | None:
        """None if tracing works here, else why not (for a one-line note)."""
        return missing_tracepoint(EVENTS, "no per-connection attribution; counters attributed by host role")

    def start(self) -> None:
        make_instance(self.dir, self.buffer_kb)
        try:
            for ev in EVENTS:
                (self.dir / "events" / ev / "filter").write_text("family == 2")
                (self.dir / "events" / ev / "enable").write_text("1")
            self.clear()
        except OSError as e:
            raise GridsplitError(f"cannot set up tracefs instance {self.dir}: {e.strerror} (needs root and tracefs)") from None

    def clear(self) -> None:
        (self.dir / "trace").write_text("")

    def collect(self) -> TraceResult:
        """Everything recorded since the last clear, then clear."""
        res = parse((self.dir / "trace").read_text())
        res.overrun = overruns(self.dir)
        self.clear()
        return res

    def close(self) -> None:
        remove_instance(self.dir, EVENTS)


def missing_tracepoint(events, without: str) -> str | None:
    """None if tracefs has every one of `events`, else a one-line note naming the
    first missing one and what goes `without` it."""
    if not (TRACEFS / "instances").is_dir():
        # Mounting tracefs is harmless and idempotent; systemd does it at boot.
        subprocess.run(["mount", "-t", "tracefs", "nodev", str(TRACEFS)], capture_output=True)
    for ev in events:
        if not (TRACEFS / "events" / ev).is_dir():
            return f"tracepoint {ev} missing in this kernel ({without})"
    return None


def make_instance(path: Path, buffer_kb: int) -> None:
    """Create a tracefs instance (or reuse one of that name) with a per-CPU buffer of `buffer_kb`."""
    try:
        path.mkdir(exist_ok=True)
        (path / "buffer_size_kb").write_text(str(buffer_kb))
    except OSError as e:
        raise GridsplitError(f"cannot set up tracefs instance {path}: {e.strerror} (needs root and tracefs)") from None


def overruns(path: Path) -> int:
    """Events an instance lost to a full buffer since it was last cleared, over all CPUs."""
    lost = 0
    for stats in (path / "per_cpu").glob("cpu*/stats"):
        m = re.search(r"^overrun: (\d+)", stats.read_text(), re.M)
        lost += int(m.group(1)) if m else 0
    return lost


def remove_instance(path: Path, events=EVENTS) -> None:
    """Disable an instance's events and remove it (no error if it is gone)."""
    if not path.exists():
        return
    for ev in events:
        try:
            (path / "events" / ev / "enable").write_text("0")
        except OSError:
            pass
    try:
        path.rmdir()  # tracefs instances are removed with rmdir, contents and all
    except OSError:
        shutil.rmtree(path, ignore_errors=True)


def remove_instances(prefix: str) -> None:
    """Remove trace instances a crashed run of this lab left behind (`lab down`):
    rmdir of an instance disables whatever events it still had enabled."""
    inst = TRACEFS / "instances"
    if inst.is_dir():
        for d in inst.glob(f"{prefix}-*"):
            remove_instance(d)
