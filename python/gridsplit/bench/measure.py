"""What every `gridsplit bench` that runs an MPI job in the lab records around it.

Shared by the sweeps (sweep.py: gather, alltoall, …, and `bench ab` through them)
and by `bench app` (app.py):

- TCP counter deltas of every host involved, attributed to *local* (inside a
  site) or *distant* (across the WAN) connections with the kernel's
  per-connection retransmission trace (lab/tcptrace.py);
- the drops and traffic of every queue the lab built, and whether the delay
  line kept its schedule (lab/queues.py);
- each gateway daemon's CPU from /proc, and, where traced, the part of it the
  kernel spent in softirq in its context (lab/softirq.py);
- in split mode, each WAN link's own TCP figures from its gateway's /status
  (`wan_links`): what its streams retransmitted and sent during the run, and their
  windows at its end, so that a WAN link's losses are told from the LAN legs'.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console

from ..lab import counters as C
from ..lab import queues, realize
from ..lab.gateways import gateway_status
from ..lab.names import LabNames
from ..lab.softirq import SoftirqClock
from ..lab.tcptrace import Trace
from ..topology import Host, Topology

# Counters attributed to local/distant in every row (Alter and Glück Tables 1-2 and neighbours).
ATTRIBUTED = ("RetransSegs", "TCPFastRetrans", "TCPTimeouts", "TCPLossProbes", "TCPSlowStartRetrans",
              "TCPLostRetransmit", "TCPSackRecovery", "TCPSpuriousRTOs", "TCPSynRetrans")


# tcp_info counters of a WAN stream whose change over a run a row records (gridsplitd /status).
LINK_COUNTERS = ("total_retrans", "bytes_retrans", "bytes_sent")


def wan_link_snapshot(statuses: dict[str, dict[str, Any] | None]) -> dict[str, list[dict[str, int]]]:
    """Each WAN link's streams' tcp_info, keyed "SITE→PEER", from each gateway's /status
    (by its site or label; a gateway that did not answer is left out)."""
    out: dict[str, list[dict[str, int]]] = {}
    for gw, st in statuses.items():
        for link in (st or {}).get("links", []):
            if link.get("peer"):
                out[f"{gw}→{link['peer']}"] = [dict(i) for i in link.get("tcp_info") or []]
    return out


def wan_link_delta(before: dict[str, list[dict[str, int]]],
                   after: dict[str, list[dict[str, int]]]) -> dict[str, dict[str, Any]]:
    """Per WAN link present at the run's end: its counters' change over the run, summed over its
    streams, and each stream's congestion window and ssthresh (segments) at the end. A stream
    whose counters went back (it reconnected during the run) counts from zero, and says so."""
    out: dict[str, dict[str, Any]] = {}
    for link, streams in after.items():
        old = before.get(link, [])
        row: dict[str, Any] = {k: 0 for k in LINK_COUNTERS}
        reconnected = len(old) != len(streams)
        for i, s in enumerate(streams):
            o = old[i] if i < len(old) else {}
            back = any(s.get(k, 0) < o.get(k, 0) for k in LINK_COUNTERS)
            reconnected |= back
            for k in LINK_COUNTERS:
                row[k] += s.get(k, 0) - (0 if back else o.get(k, 0))
        row.update(streams=len(streams), cwnd_end=[s.get("snd_cwnd") for s in streams],
                   ssthresh_end=[s.get("snd_ssthresh") for s in streams], reconnected=reconnected)
        out[link] = row
    return out


def attribute(topo: Topology, mode: str, deltas: dict[str, dict[str, int]], hosts: dict[str, Host],
              traced_by_source: dict[str, dict[str, int]] | None) -> dict[str, dict[str, int]]:
    """Split each host's counter deltas into local and distant.

    A host's share is the fraction of its traced retransmitted segments that
    went on local connections. Hosts with no traced retransmission (or without
    tracing) fall back to their role: in direct mode a node's data connections
    cross the WAN, in split mode they end at its gateway; a gateway's data
    connections are its WAN links.
    """
    out = {"local": {k: 0.0 for k in ATTRIBUTED}, "distant": {k: 0.0 for k in ATTRIBUTED}}
    for name, d in deltas.items():
        h = hosts[name]
        t = (traced_by_source or {}).get(str(h.ip), {})
        loc, dist = t.get("local", 0), t.get("distant", 0)
        if loc + dist:
            share = loc / (loc + dist)
        elif h.role == "gateway":
            share = 0.0
        else:
            share = 1.0 if mode == "split" else 0.0
        for k in ATTRIBUTED:
            v = d.get(k, 0)
            out["local"][k] += v * share
            out["distant"][k] += v * (1 - share)
    return {cls: {k: int(round(v)) for k, v in c.items()} for cls, c in out.items()}


def proc_cpu_s(pid: int) -> float:
    """utime+stime of a process (all its threads), in seconds."""
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return math.nan
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def gw_cpu(cpu_s: float, softirq_s: float | None, window: float) -> dict[str, Any]:
    """A gateway's CPU seconds and percent of one core over `window`, with its softirq part when traced."""
    def pct(v: float) -> float | None:
        return round(100 * v / window, 2) if window > 0 else None

    out = {"cpu_s": round(cpu_s, 4), "pct": pct(cpu_s)}
    if softirq_s is not None:
        out |= {"softirq_s": round(softirq_s, 4), "softirq_pct": pct(softirq_s)}
    return out


def _started(cls, name: str, con: Console):
    """A tracer of `cls` (Trace, SoftirqClock) started as `name`, or None with a note saying why not."""
    why_not = cls.available()
    if why_not:
        con.print(f"[yellow]note:[/yellow] {why_not}")
        return None
    t = cls(name)
    t.start()
    return t


@contextmanager
def tracers(names: LabNames, split: bool, con: Console) -> Iterator[tuple[Trace | None, SoftirqClock | None]]:
    """The retransmission trace and (when split mode runs) the gateways' softirq clock,
    each started if this kernel has it (else a note says why not), and removed at the end."""
    trace = _started(Trace, f"{names.prefix}-bench", con)
    sirq = None
    try:
        if split:
            sirq = _started(SoftirqClock, f"{names.prefix}-bench-softirq", con)
        yield trace, sirq
    finally:
        if trace:
            trace.close()
        if sirq:
            sirq.close()


class Probe:
    """Counters, queues, trace and gateway CPU around one MPI job: start(), then
    at_result() when the job's result is out (given to mpirun as on_result), then stop()."""

    def __init__(self, state: realize.LabState, watched: dict[str, Host], trace: Trace | None,
                 sirq: SoftirqClock | None, wan_links: bool = False):
        self.state, self.watched, self.trace, self.sirq = state, watched, trace, sirq
        self.wan_links = wan_links
        self.gw_pids = {k[3:]: v for k, v in state.data.get("pids", {}).items() if k.startswith("gw-")}
        self._gw_before: dict[str, float] = {}
        self._gw_after: dict[str, float] = {}
        self._links_before: dict[str, list[dict[str, int]]] = {}
        self.links: dict[str, dict[str, Any]] = {}

    def _links(self) -> dict[str, list[dict[str, int]]]:
        if not self.wan_links:
            return {}
        return wan_link_snapshot({label: gateway_status(self.state.names, label, quiet=True)
                                  for label in self.gw_pids})

    def _nss(self) -> list[str]:
        return [self.state.ns(h) for h in self.watched.values()]

    def start(self) -> None:
        self._before = C.snapshot_many(self._nss())
        self._q_before = queues.snapshot(self.state, new_window=True)
        self._gw_before = {s: proc_cpu_s(pid) for s, pid in self.gw_pids.items()}
        self._gw_after = {}
        self._links_before = self._links()
        if self.trace:
            self.trace.clear()
        if self.sirq:
            self.sirq.watch(self.gw_pids.values())

    def at_result(self) -> None:
        # The gateways' CPU and softirq stop counting when the result is out:
        # MPICH's exit can hang for the grace period with its connections
        # open, and the daemon's upkeep then (the incast tick) is not the
        # measurement's. Counters and traces run to the end: losses are.
        self._gw_after.update((s, proc_cpu_s(pid)) for s, pid in self.gw_pids.items())
        if self.sirq:
            self.sirq.stop()

    def stop(self) -> None:
        if not self._gw_after:
            self.at_result()
        after = C.snapshot_many(self._nss())
        self._q_after = queues.snapshot(self.state)
        self.tr = self.trace.collect() if self.trace else None
        self.softirq, self.softirq_lost = self.sirq.collect() if self.sirq else ({}, 0)
        self.deltas = {name: C.delta(self._before[self.state.ns(h)], after[self.state.ns(h)])
                       for name, h in self.watched.items()}
        self.links = wan_link_delta(self._links_before, self._links())

    def counters(self, mode: str) -> dict[str, Any]:
        """The row's `counters`: local/distant, the traced classes and the per-host headline counters."""
        topo, tr = self.state.topo, self.tr
        traced = tr.by_class(topo) if tr else None
        return {
            **attribute(topo, mode, self.deltas, self.watched, tr.by_source(topo) if tr else None),
            "traced": traced, "attribution": "trace" if tr else "role",
            "traced_retrans_segs": sum(c.get("retrans_segs", 0) for c in traced.values()) if traced else None,
            "counted_retrans_segs": sum(d.get("RetransSegs", 0) for d in self.deltas.values()),
            "trace_overrun": tr.overrun if tr else None,
            "by_host": {name: {k: v for k, v in d.items() if k in C.HEADLINE} for name, d in self.deltas.items()},
        }

    def network(self) -> dict[str, Any]:
        """The row's `drops`, `frames` and `emulator`, and in split mode `wan_links`."""
        qb, qa = self._q_before, self._q_after
        return {"drops": queues.delta(qb, qa), "frames": queues.traffic(qb, qa), "emulator": queues.emulator(qb, qa),
                **({"wan_links": self.links} if self.links else {})}

    def gw_cpu_s(self) -> dict[str, float]:
        """Each gateway's CPU seconds from start() to the result."""
        return {s: self._gw_after[s] - self._gw_before[s] for s in self._gw_before}

    def gw_softirq_s(self) -> dict[str, float] | None:
        """Each gateway's softirq seconds, or None when not traced or the trace lost events
        (softirq time is then left out, not zero)."""
        if not self.sirq or self.softirq_lost:
            return None
        return {s: self.softirq.get(pid, 0.0) for s, pid in self.gw_pids.items()}

    def softirq_note(self) -> dict[str, Any]:
        return {"softirq_trace_lost": self.softirq_lost} if self.softirq_lost else {}
