"""Does the delay line keep its schedule when the traffic shares its CPU?

A benchmark for a lab brought up with the delay line pinned and the routers'
receive work steered away from it (`[lab] wanem_steer = true` in the topology,
same GRIDSPLIT_LAB_PREFIX):
one single-flow iperf3 test across the longest WAN path, repeated, alternating
two placements of the traffic generators (iperf3 client and server):

- `shared`: anywhere (the scheduler's choice), as `gridsplit lab check` runs them;
- `apart`: on every CPU but the one the lab pins the delay line to.

This kernel is built PREEMPT_NONE: a thread woken on a CPU where another task
is inside a long syscall (iperf3 pushing a 128 KB write through the whole
emulated stack) waits for that syscall to finish, real-time priority or not.
Side by side, the two placements show how much of the delay line's lateness is
that, and what the throughput costs when the traffic gets one CPU fewer.

    GRIDSPLIT_LAB_PREFIX=gsd gridsplit lab up --topology paper-steer.toml --nodes 4 --scale 1   # paper + [lab] wanem_steer = true
    GRIDSPLIT_LAB_PREFIX=gsd python3 crates/wanem/scripts/placement.py --repeat 3 [--json FILE]
"""

from __future__ import annotations

import json
import os
import statistics
import time

import click
from rich.console import Console
from rich.table import Table

from gridsplit.lab import iperf
from gridsplit.lab.check import FRAME_OVERHEAD, emulator_watch_begin, emulator_watch_end, representative
from gridsplit.lab.names import LabNames
from gridsplit.lab.realize import load_state
from gridsplit.machine import facts


def pinned_cpu(pid: int) -> int | None:
    """The one CPU the delay line's forwarding threads may run on, if pinned."""
    for tid in sorted(os.listdir(f"/proc/{pid}/task"))[1:]:
        cpus = os.sched_getaffinity(int(tid))
        if len(cpus) == 1:
            return next(iter(cpus))
    return None


def one(state, src, dst, seconds: float, cpus: set[int] | None) -> dict:
    """One test; `cpus` restricts this process, hence the iperf3 it starts."""
    saved = os.sched_getaffinity(0)
    try:
        if cpus is not None:
            os.sched_setaffinity(0, cpus)
        watch = emulator_watch_begin(state)
        res = iperf.tcp(state, src, dst, seconds=seconds, tuned=True)
        emu = emulator_watch_end(state, watch)
    finally:
        os.sched_setaffinity(0, saved)
    if "error" in res:
        return {"error": res["error"], "emulator": emu}
    wire = statistics.median(res["interval_mbps"]) * (res["mss"] + FRAME_OVERHEAD) / res["mss"]
    rate = state.topo.bottleneck_mbps(src, dst)
    return {"fraction": round(wire / rate, 4), "retransmits": res["retransmits"],
            "late_fraction": emu["late_fraction"], "worst_late_us": emu["worst_late_us"],
            "delay_line_cpu_percent": emu["cpu_percent"]}


@click.command()
@click.option("--repeat", default=3, show_default=True, help="Tests per placement.")
@click.option("--seconds", default=6.0, show_default=True)
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Write the results here too.")
def main(repeat: int, seconds: float, json_path: str | None) -> None:
    state = load_state(LabNames.from_env())
    cpu = pinned_cpu(state.wanem_pid)
    if cpu is None:
        raise click.ClickException("the delay line is not pinned to a CPU; bring the lab up with `[lab] wanem_steer = true` in its topology")
    topo = state.topo
    a, b = max(((w.a, w.b) for w in topo.wans), key=lambda p: topo.rtt_ms(*p))
    src, dst = representative(state, a), representative(state, b)
    apart = set(range(os.cpu_count() or 1)) - {cpu}
    runs: dict[str, list[dict]] = {"shared": [], "apart": []}
    for _ in range(repeat):
        for name, cpus in (("shared", None), ("apart", apart)):
            runs[name].append(one(state, src, dst, seconds, cpus))
            time.sleep(1)

    table = Table(title=f"{src.name} -> {dst.name}, {topo.bottleneck_mbps(src, dst):g} Mb/s, "
                        f"delay line on CPU {cpu}; median (min-max) of {repeat}")
    for col in ("traffic", "throughput / bottleneck", "frames > 200 µs late", "worst late (µs)", "retransmits"):
        table.add_column(col)

    def cell(rows, key, fmt):
        xs = [r[key] for r in rows if key in r]
        return f"{fmt(statistics.median(xs))} ({fmt(min(xs))}-{fmt(max(xs))})" if xs else "-"
    for name, rows in runs.items():
        table.add_row(name, cell(rows, "fraction", lambda x: f"{x:.1%}"), cell(rows, "late_fraction", lambda x: f"{x:.1%}"),
                      cell(rows, "worst_late_us", lambda x: f"{x:.0f}"), cell(rows, "retransmits", lambda x: f"{x:.0f}"))
    Console().print(table)
    if json_path:
        out = {"what": "delay line schedule vs placement of the traffic generators", "src": src.name, "dst": dst.name,
               "delay_line_cpu": cpu, "seconds": seconds, "runs": runs, "machine": facts(),
               "topology": state.data.get("topology_name"), "scale": state.data.get("scale")}
        with open(json_path, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
