"""Where a small message's time goes inside each gateway, during an MPI ping-pong through them.

Traces, for the gridsplitd threads of both gateways only, in a tracefs instance
of its own: sched_waking/sched_wakeup (a packet reached its socket, or a
timer fired), sched_switch (it got a CPU, it gave it up), and every system
call's entry and exit. Each stretch from a wake-up to the thread sleeping
again is one episode; an episode that writes is a relay (a message, or an ACK
frame, passed through). For relay episodes it prints the median and p90 of:

  wake  time from the wake-up being raised to the thread running
  work  time from running to the end of its last write
  run   time from running to sleeping again

Tracing system calls turns on the syscall tracepoint for every task on the
machine (filters apply afterwards), and the MPI ranks make millions of
sched_yield calls: that slowed the ping-pong by 2 ms per half round trip here.
`--no-syscalls` traces the scheduler events only (then an episode that ran at
all counts, and `work` is not measured).

Usage (lab `paper` up under GRIDSPLIT_LAB_PREFIX, from the repository root):
    python3 results/bench/2026-11-23-relay-latency/trace.py [--size 8] [--reps 2000] [--no-syscalls]
Prints one JSON line with the figures, after a human-readable summary.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

from gridsplit import sysdeps
from gridsplit.lab.mpi import mpirun, split_env
from gridsplit.lab.names import LabNames
from gridsplit.lab.realize import load_state
from gridsplit.lab.tcptrace import TRACEFS, make_instance, overruns, remove_instance

EVENTS = ("sched/sched_waking", "sched/sched_switch", "raw_syscalls/sys_enter", "raw_syscalls/sys_exit")
WRITES = {1, 20, 44, 46, 307}  # write, writev, sendto, sendmsg, sendmmsg (x86-64)
# "  gridsplitd-123  [001] d..2. 1234.567890: sched_switch: prev_comm=... next_pid=123 ..."
LINE = re.compile(r"-(\d+)\s+\[\d+\][^:]*?\s(\d+\.\d+): (\w+): (.*)")


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))] if v else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="8")
    ap.add_argument("--reps", type=int, default=2000)
    ap.add_argument("--no-syscalls", action="store_true")
    a = ap.parse_args()
    events = EVENTS[:2] if a.no_syscalls else EVENTS
    state = load_state(LabNames.from_env())
    pids = {k[3:]: v for k, v in state.data["pids"].items() if k.startswith("gw-")}
    tids = {int(t.name): site for site, pid in pids.items() for t in Path(f"/proc/{pid}/task").iterdir()}
    inst = TRACEFS / "instances" / f"{state.names.prefix}-relay-latency"
    make_instance(inst, 65536)
    try:
        own = " || ".join(f"common_pid == {t}" for t in tids)
        flt = {"sched/sched_waking": " || ".join(f"pid == {t}" for t in tids),
               "sched/sched_switch": " || ".join(f"next_pid == {t} || prev_pid == {t}" for t in tids),
               "raw_syscalls/sys_enter": own, "raw_syscalls/sys_exit": own}
        for ev in events:
            (inst / "events" / ev / "filter").write_text(flt[ev])
        (inst / "trace").write_text("")
        for ev in events:
            (inst / "events" / ev / "enable").write_text("1")
        # As the bench runs it: mpirun has the ranks yield when idle (RANK_ENV), so
        # that two busy-polling ranks do not take both CPUs from the gateways.
        hosts = [state.topo.host(state.topo.sites[1].name + "-1"), state.topo.host(state.topo.sites[0].name + "-1")]
        cp = mpirun(state, "openmpi", 2, hosts, [sysdeps.mpi_program("openmpi", "pingpong"), "-s", a.size,
                                                 "-r", str(a.reps), "-w", "50"],
                    env=split_env(state), capture=True, timeout=600, expect_lines=1)
        for ev in events:
            (inst / "events" / ev / "enable").write_text("0")
        text = (inst / "trace").read_text()
        lost = overruns(inst)
    finally:
        remove_instance(inst, EVENTS)
    res = next((json.loads(l) for l in cp.stdout.splitlines() if l.startswith("{")), None)
    if res is None:
        print(f"ping-pong failed: {cp.stderr.strip()[-400:]}", file=sys.stderr)
        return 1

    # Episodes per thread: waking -> switch in -> syscalls -> switch out.
    per_site: dict[str, dict[str, list[float]]] = {s: {"wake": [], "work": [], "run": []} for s in pids}
    episodes = {s: 0 for s in pids}
    state_by_tid: dict[int, dict] = {}
    for m in LINE.finditer(text):
        ctx, ts, ev, rest = int(m[1]), float(m[2]), m[3], m[4]
        if ev == "sched_waking":
            tid = int(re.search(r"\bpid=(\d+)", rest)[1])
            st = state_by_tid.setdefault(tid, {})
            if not st.get("running"):
                st["woken"] = ts
        elif ev == "sched_switch":
            nxt = int(re.search(r"next_pid=(\d+)", rest)[1])
            prv = int(re.search(r"prev_pid=(\d+)", rest)[1])
            if prv in tids:
                st = state_by_tid.setdefault(prv, {})
                # Sleeping (not preempted: prev_state S) ends an episode.
                if re.search(r"prev_state=S", rest) and st.get("running"):
                    site = tids[prv]
                    episodes[site] += 1
                    if (st.get("last_write") or a.no_syscalls) and st.get("woken"):
                        per_site[site]["wake"].append((st["in"] - st["woken"]) * 1e6)
                        if st.get("last_write"):
                            per_site[site]["work"].append((st["last_write"] - st["in"]) * 1e6)
                        per_site[site]["run"].append((ts - st["in"]) * 1e6)
                    state_by_tid[prv] = {}
            if nxt in tids:
                st = state_by_tid.setdefault(nxt, {})
                if not st.get("running"):
                    st["running"], st["in"] = True, ts
        elif ev == "sys_enter" and ctx in tids:
            st = state_by_tid.setdefault(ctx, {})
            st["nr"] = int(re.search(r"NR (\d+)", rest)[1])
        elif ev == "sys_exit" and ctx in tids:
            st = state_by_tid.setdefault(ctx, {})
            if st.get("running") and st.get("nr") in WRITES:
                st["last_write"] = ts
    out = {"size": a.size, "reps": a.reps, "syscalls_traced": not a.no_syscalls, "half_rtt_median_ms": res.get("median_s", 0) * 1e3,
           "trace_lost": lost, "episodes": episodes, "relay": {}}
    for site, d in per_site.items():
        out["relay"][site] = {k: {"n": len(v), "median_us": round(statistics.median(v), 1) if v else None,
                                  "p90_us": round(pct(v, 0.9), 1) if v else None} for k, v in d.items()}
        print(f"{site}: {len(d['wake'])} relay episodes of {episodes[site]}; " + ", ".join(
            f"{k} median {out['relay'][site][k]['median_us']} µs (p90 {out['relay'][site][k]['p90_us']})" for k in d))
    print(f"ping-pong half round trip, median: {out['half_rtt_median_ms']:.3f} ms; trace events lost: {lost}")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
