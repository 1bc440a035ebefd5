"""Where the lab dropped packets: the drop counters of every queue it built.

A retransmission counter says that a segment was lost, and the bench's trace
says on which connection; neither says where. The lab's queues are its tbf
qdiscs (each host's NIC, each switch output port and uplink, each WAN link's
entry at the router) and the delay line's own queue and socket. Their drop
counters, read before and after a run, tell a switch-port overflow from a
WAN-buffer one, or from the emulator falling behind its schedule: which is
what decides whether a loss is the network being emulated or the machine.

Labels name a queue by what it feeds ("bordeaux switch → bordeaux-gw"), so a
result row reads without knowing the lab's interface names.
"""

from __future__ import annotations

import json
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from . import names as N
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


def _qdisc_drops(ns: str, devs: dict[str, str]) -> dict[str, int]:
    cp = run(["tc", "-n", ns, "-s", "-j", "qdisc", "show"], check=False)
    if cp.returncode != 0:
        return {}
    try:
        qdiscs = json.loads(cp.stdout or "[]")
    except ValueError:
        return {}
    return {devs[q["dev"]]: int(q.get("drops", 0)) for q in qdiscs
            if q.get("root") and q.get("dev") in devs}


def _fresh_delay_line_stats(state: LabState) -> dict[str, Any] | None:
    """The delay line's statistics as of now: it rewrites them on SIGUSR1 (within 20 ms)."""
    pid = state.wanem_pid
    if pid is None or not os.path.exists(f"/proc/{pid}"):
        return None
    try:
        old = state.wanem_stats().get("uptime_s")
        os.kill(pid, signal.SIGUSR1)
    except Exception:  # unreadable or gone: the run's other records still stand
        return None
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        time.sleep(0.02)
        try:
            st = state.wanem_stats()
        except Exception:
            continue
        if st.get("uptime_s") != old:
            return st
    return None


def snapshot(state: LabState) -> dict[str, int]:
    """Cumulative drops per queue label (the delay line's counters included when it answers)."""
    lab = labels(state)
    # One tc per namespace; threads because each is a fork and exec, and a run's
    # snapshot sits between two measurements.
    with ThreadPoolExecutor(max_workers=8) as pool:
        parts = list(pool.map(lambda item: _qdisc_drops(*item), lab.items()))
    out = {k: v for p in parts for k, v in p.items()}
    # The delay line names a direction by the WAN-side devices it reads and writes.
    side = {N.wan_if(w.index, s): site for w in state.topo.wans for s, site in (("a", w.a), ("b", w.b))}
    st = _fresh_delay_line_stats(state)
    for link in (st or {}).get("links", []):
        a, b = side.get(link.get("from"), link.get("from")), side.get(link.get("to"), link.get("to"))
        for key, what in DELAY_LINE_DROPS.items():
            out[f"delay line {a} → {b}: {what}"] = int(link.get(key, 0))
    return out


def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """Drops during a run, queues that dropped nothing left out. A queue missing
    from either side (its namespace did not answer) is left out, not counted from 0."""
    return {k: after[k] - before[k] for k in sorted(after) if k in before and after[k] > before[k]}
