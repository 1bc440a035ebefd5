"""How much of a process's CPU time was the kernel's softirq work run in its context.

Linux runs pending softirqs on the way out of a system call, wherever they
were raised. In the lab every host is a namespace of one kernel, and a veth
transmit queues the packet for the receive softirq of the same CPU; so when a
gateway's recvmsg sends a window update, the softirq that follows can carry
that ACK through the emulated switch to the node, run the node's TCP, which
sends its next segments, and bring them back through the switch into the
gateway's socket, all charged to the gateway (this kernel accounts CPU by tick,
without CONFIG_IRQ_TIME_ACCOUNTING, so softirq time lands in the interrupted
task's stime). A real gateway does its own packets' receive work in softirq too,
but not its switch's or its peers'. The bench reports this part beside the
process total so that the gateway's CPU target can be read for what it is
(docs/bench.md, "CPU").

Measured from the kernel's irq:softirq_entry/softirq_exit tracepoints, filtered
on the watched threads, in a tracefs instance of our own.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

from .tcptrace import TRACEFS, make_instance, missing_tracepoint, overruns, remove_instance

EVENTS = ("irq/softirq_entry", "irq/softirq_exit")
# `  gridsplitd-27410  [001] ..s1. 6093.123456: softirq_entry: vec=3 [action=NET_RX]`
_LINE = re.compile(r"-(\d+)\s+\[(\d+)\][^:]*?\s(\d+\.\d+): softirq_(entry|exit): vec=\d+")


def parse(text: str) -> dict[int, float]:
    """Seconds of softirq per thread id. Softirqs do not nest on a CPU, so each
    exit closes the last entry seen on its CPU; an exit without one (the trace
    started inside a softirq) is skipped."""
    opened: dict[str, tuple[int, float]] = {}
    out: dict[int, float] = defaultdict(float)
    for m in _LINE.finditer(text):
        tid, cpu, ts, ev = int(m[1]), m[2], float(m[3]), m[4]
        if ev == "entry":
            opened[cpu] = (tid, ts)
        elif cpu in opened:
            t0_tid, t0 = opened.pop(cpu)
            out[t0_tid] += ts - t0
    return dict(out)


class SoftirqClock:
    """Usage: `c = SoftirqClock(name); c.start(); c.watch(pids); ...; c.collect(); c.close()`.

    Its own instance, apart from tcptrace's: a busy gateway runs hundreds of
    thousands of softirqs per run, and their events must not push the
    retransmission events out of a shared buffer.
    """

    def __init__(self, name: str, buffer_kb: int = 32768):
        self.dir = TRACEFS / "instances" / name
        self.buffer_kb = buffer_kb
        self.tids: dict[int, int] = {}

    @staticmethod
    def available() -> str | None:
        return missing_tracepoint(EVENTS, "gateway CPU not split into process and softirq")

    def start(self) -> None:
        make_instance(self.dir, self.buffer_kb)

    def watch(self, pids) -> None:
        """Record the softirqs run while any thread of `pids` is current, from now on."""
        self.tids = {}
        for pid in pids:
            try:
                self.tids |= {int(t.name): pid for t in Path(f"/proc/{pid}/task").iterdir()}
            except OSError:
                continue  # a gateway that is gone has no CPU to split
        flt = " || ".join(f"common_pid == {t}" for t in self.tids) or "common_pid == 0"
        for ev in EVENTS:
            (self.dir / "events" / ev / "filter").write_text(flt)
            (self.dir / "events" / ev / "enable").write_text("1")
        (self.dir / "trace").write_text("")

    def stop(self) -> None:
        """Stop recording; `collect` then reads what was recorded until now."""
        for ev in EVENTS:
            (self.dir / "events" / ev / "enable").write_text("0")

    def collect(self) -> tuple[dict[int, float], int]:
        """(softirq seconds per watched pid, events lost to a full buffer), recording stopped."""
        self.stop()
        by_tid = parse((self.dir / "trace").read_text())
        lost = overruns(self.dir)
        (self.dir / "trace").write_text("")
        out: dict[int, float] = defaultdict(float)
        for tid, s in by_tid.items():
            if tid in self.tids:
                out[self.tids[tid]] += s
        return dict(out), lost

    def close(self) -> None:
        remove_instance(self.dir, EVENTS)
