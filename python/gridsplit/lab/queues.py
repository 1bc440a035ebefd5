"""Where the lab dropped packets, and what its queues carried: the counters of every queue it built.

A retransmission counter says that a segment was lost, and the bench's trace
says on which connection; neither says where. The lab's queues are its tbf
qdiscs (each host's NIC, each switch output port and uplink, each WAN link's
entry at the router) and the delay line's own queue and socket. Their drop
counters, read before and after a run, tell a switch-port overflow from a
WAN-buffer one, or from the emulator falling behind its schedule: which is
what decides whether a loss is the network being emulated or the machine.

Labels name a queue by what it feeds ("bordeaux switch → bordeaux-gw"), so a
result row reads without knowing the lab's interface names. A snapshot also
keeps the delay line's schedule (frames sent late, the worst lateness) and the
VM's steal time: a drop that follows a stall of the delay line is the machine's,
not the emulated network's.

The same counters give the frames and bytes each queue sent. Their ratio, the
mean frame, bounds a port's payload rate: a flow held to a window of one
segment or less sends short segments too (a window rounded up to its unit is
filled with a full segment and a sliver), each with a full set of headers, so a
port that carries them cannot reach the payload rate of full-size frames however
well it is kept busy.
"""

from __future__ import annotations

import json
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ..errors import GridsplitError
from . import names as N
from .check import LATE_FRACTION_MAX, emulator_health, steal_ticks
from .realize import LabState
from .sh import run

# The delay line's counters that are losses, by the label's suffix.
DELAY_LINE_DROPS = {"dropped_overflow": "queue overflow", "rx_socket_drops": "receive socket",
                    "dropped_loss": "random loss"}


def labels(state: LabState) -> dict[str, dict[str, str]]:
    """namespace -> device -> label, for every tbf the lab put on a queue."""
    topo, names = state.topo, state.names
    out: dict[str, dict[str, str]] = {}
    for site in topo.sites:
        sw = out.setdefault(names.switch_ns(site.name), {N.SW_UPLINK: f"{site.name} switch → router"})
        for h in (h for h in topo.hosts() if h.site == site.name):
            sw[N.sw_port(h)] = f"{site.name} switch → {h.name}"
            out[names.host_ns(h)] = {N.HOST_IF: f"{h.name} NIC"}
        out[names.router_ns(site.name)] = {N.rt_wan_if(w.peer(site.name)): f"{site.name} router → WAN to "
                                           f"{w.peer(site.name)}" for w in topo.wans if site.name in (w.a, w.b)}
    return out


def _qdisc_counts(ns: str, devs: dict[str, str]) -> dict[str, tuple[int, int, int]]:
    """label -> (drops, packets sent, bytes sent) of each root qdisc on `devs`."""
    cp = run(["tc", "-n", ns, "-s", "-j", "qdisc", "show"], check=False)
    if cp.returncode != 0:
        return {}
    try:
        qdiscs = json.loads(cp.stdout or "[]")
    except ValueError:
        return {}
    return {devs[q["dev"]]: (int(q.get("drops", 0)), int(q.get("packets", 0)), int(q.get("bytes", 0)))
            for q in qdiscs if q.get("root") and q.get("dev") in devs}


def _fresh_delay_line_stats(state: LabState, new_window: bool) -> dict[str, Any] | None:
    """The delay line's statistics as of now: it rewrites them on SIGUSR1, or on
    SIGUSR2, which also starts a new window for its worst lateness (within 20 ms)."""
    pid = state.wanem_pid
    if pid is None or not os.path.exists(f"/proc/{pid}"):
        return None
    try:
        old = state.wanem_stats().get("uptime_s")
        os.kill(pid, signal.SIGUSR2 if new_window else signal.SIGUSR1)
    except (GridsplitError, OSError):  # unreadable or gone: the run's other records still stand
        return None
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        time.sleep(0.02)
        try:
            st = state.wanem_stats()
        except GridsplitError:  # caught mid-rewrite
            continue
        if st.get("uptime_s") != old:
            return st
    return None


@dataclass
class Snapshot:
    drops: dict[str, int]  # cumulative, per queue label
    sent: dict[str, tuple[int, int]]  # cumulative (frames, bytes) per tbf queue label
    delay_line: dict[str, Any] | None  # its statistics, None if it did not answer
    steal: int  # the VM's steal time, clock ticks


def snapshot(state: LabState, new_window: bool = False) -> Snapshot:
    """Cumulative drops per queue label (the delay line's counters included when it
    answers); `new_window` at the start of a run, so that its worst lateness is the run's."""
    lab = labels(state)
    # One tc per namespace; threads because each is a fork and exec, and a run's
    # snapshot sits between two measurements.
    with ThreadPoolExecutor(max_workers=8) as pool:
        parts = list(pool.map(lambda item: _qdisc_counts(*item), lab.items()))
    out = {k: v[0] for p in parts for k, v in p.items()}
    sent = {k: v[1:] for p in parts for k, v in p.items()}
    # The delay line names a direction by the WAN-side devices it reads and writes.
    side = {N.wan_if(w.index, s): site for w in state.topo.wans for s, site in (("a", w.a), ("b", w.b))}
    st = _fresh_delay_line_stats(state, new_window)
    for link in (st or {}).get("links", []):
        a, b = side.get(link.get("from"), link.get("from")), side.get(link.get("to"), link.get("to"))
        for key, what in DELAY_LINE_DROPS.items():
            out[f"delay line {a} → {b}: {what}"] = int(link.get(key, 0))
    return Snapshot(out, sent, st, steal_ticks())


def delta(before: Snapshot, after: Snapshot) -> dict[str, int]:
    """Drops during a run, queues that dropped nothing left out. A queue missing
    from either side (its namespace did not answer) is left out, not counted from 0."""
    a, b = after.drops, before.drops
    return {k: a[k] - b[k] for k in sorted(a) if k in b and a[k] > b[k]}


def traffic(before: Snapshot, after: Snapshot) -> dict[str, dict[str, int]]:
    """Frames and bytes (Ethernet headers included, as tbf counts them) each queue
    sent during a run; queues that sent nothing, or that either side missed, left out."""
    a, b = after.sent, before.sent
    return {k: {"packets": a[k][0] - b[k][0], "bytes": a[k][1] - b[k][1]}
            for k in sorted(a) if k in b and a[k][0] > b[k][0]}


def emulator(before: Snapshot, after: Snapshot) -> dict[str, Any] | None:
    """Did the delay line keep its schedule between two snapshots (the first with a new window)?
    Frames sent, frames late by more than its threshold, the worst lateness, the VM's steal."""
    if before.delay_line is None or after.delay_line is None:
        return None
    steal_ms = (after.steal - before.steal) * 1000 / os.sysconf("SC_CLK_TCK")
    h = emulator_health(before.delay_line, after.delay_line, steal_ms)
    return {k: h[k] for k in ("packets", "late", "late_fraction", "worst_late_us", "stall", "steal_ms")}


def fell_behind(emu: dict[str, Any]) -> bool:
    """An `emulator` record outside the lab's own bound: too many late frames, or one stall.

    Stricter than `lab check`, which reports a stall without failing: its figures
    are medians over seconds, which a few ms do not move, while a benchmark's time
    is a sum that every late frame on its critical path adds to."""
    return emu["late_fraction"] > LATE_FRACTION_MAX or emu["stall"]
