"""`gridsplit bench outage`: a checked MPI job, direct and split side by side,
through WAN blackouts of several lengths.

Each round runs the same job (a collective of `mpi/coll.c` with payloads
verified by `--check`) once per mode, interleaved, with a blackout of the
site pair's WAN path (`gridsplit lab fault blackout`: packets silently
dropped) starting a few seconds into the job. Blackout 0 is the undisturbed
reference. A row per run: completed or not, data verified, wall time, time
lost against the mode's undisturbed median, and the gateways' outage counters.

Goals (issue "WAN outages"): split completes every case direct completes, and
loses no more time than direct; it should lose less where the gateways resume
the flows while direct TCP's retransmission timer backs off past the end of
the blackout. Design: docs/design/wan-sessions.md.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import click
from rich.table import Table

from .. import machine, sysdeps
from ..console import out
from ..errors import GridsplitError
from ..lab.names import LabNames
from ..lab.gateways import gateway_status
from ..lab.realize import load_state
from ..units import int_list, parse_size

KIND = "gridsplit-bench-outage"


def _counters(names: LabNames, site: str) -> dict:
    c = gateway_status(names, site).get("counters", {})
    keys = ("wan_connections_lost", "wan_reconnects", "wan_bytes_replayed", "flows_reset", "flows_reset_outage",
            "sessions_expired")
    return {k: c.get(k, 0) for k in keys}


def _run(cmd: list[str], timeout: float) -> tuple[int | None, float, str]:
    """Runs the launcher in its own process group; None as the code if it was stopped at the timeout."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
        code: int | None = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)  # the launcher and the ranks this command started
        out, _ = p.communicate()
        code = None
    return code, time.monotonic() - t0, out


@click.command()
@click.option("--impl", type=click.Choice(["openmpi", "mpich"]), default="openmpi", show_default=True)
@click.option("--op", type=click.Choice(["alltoall", "gather_mpi", "bcast", "scatter"]), default="alltoall",
              show_default=True, help="The checked collective (mpi/coll.c).")
@click.option("--size", default="100K", show_default=True, help="Bytes per rank pair (K, M suffixes).")
@click.option("--pair", default=None, metavar="A:B", help="The WAN link to black out (default: the first one).")
@click.option("--blackouts", default="0,5,30,90", show_default=True,
              help="Blackout lengths in seconds; 0 is the undisturbed reference.")
@click.option("--repeat", type=click.IntRange(1, 20), default=1, show_default=True, help="Rounds per blackout length.")
@click.option("--job-seconds", type=float, default=15.0, show_default=True,
              help="Undisturbed length of each job (its repetition count is calibrated to it).")
@click.option("--at", "at_s", type=float, default=3.0, show_default=True, help="Seconds into the job the blackout starts.")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), default="gridsplit-out/outage.jsonl",
              show_default=True, help="JSONL result file (appended).")
def outage(impl: str, op: str, size: str, pair: str | None, blackouts: str, repeat: int, job_seconds: float,
           at_s: float, out_path: str) -> None:
    """A checked MPI collective, direct vs split, through WAN blackouts (needs a lab up with gateways).

    \b
      gridsplit lab up --topology mini
      gridsplit bench outage --blackouts 0,5,30,90 --repeat 1
    """
    lengths = int_list(blackouts, "--blackouts", 0, "0,5,30")
    names = LabNames.from_env()
    state = load_state(names)
    topo = state.topo
    gw_sites = [s.name for s in topo.sites if s.gateway]
    if len(gw_sites) < 2:
        raise GridsplitError(f"lab {topo.name!r} has fewer than two sites with gateways; "
                             "bring up one with gateways: gridsplit lab up --topology mini")
    if pair is None:
        pair = f"{topo.wans[0].a}:{topo.wans[0].b}"
    a, _, b = pair.partition(":")
    # The job spans every node of the grid; the blackout hits one site pair.
    nodes = [h.name for h in topo.hosts() if h.role == "node"]
    sites_with_nodes = {h.site for h in topo.hosts() if h.role == "node"}
    if a not in sites_with_nodes or b not in sites_with_nodes:
        raise GridsplitError(f"--pair {pair}: both sites need nodes in lab {topo.name!r} "
                             f"(sites: {', '.join(s.name for s in topo.sites)})")
    prog = sysdeps.mpi_program(impl, "coll")
    nbytes = parse_size(size)
    gridsplit = [sys.executable, "-m", "gridsplit"]

    def job(mode: str, reps: int, timeout: float) -> list[str]:
        return [*gridsplit, "lab", "mpirun", "--impl", impl, f"--{mode}", "--hosts", ",".join(nodes),
                "--timeout", f"{timeout:g}", "--", str(prog), "-o", op, "-s", str(nbytes), "-r", str(reps), "--check"]

    # Calibrate the repetitions to --job-seconds on the faster mode, so that a
    # blackout at --at falls inside the job in both modes.
    per_rep = float("inf")
    for mode in ("direct", "split"):
        code, took, text = _run(job(mode, 20, 120), 180)
        if code != 0:
            raise GridsplitError(f"the undisturbed {mode} calibration job failed (exit {code}): "
                                 f"{text.strip().splitlines()[-1] if text.strip() else 'no output'}")
        per_rep = min(per_rep, took / 20)
    reps = max(20, int(job_seconds / per_rep))
    out.print(f"outage bench: {impl} {op} {size} on {len(nodes)} nodes, blackouts of {pair}, {reps} repetitions "
              f"(about {job_seconds:g} s undisturbed), blackouts {lengths} s at +{at_s:g} s, {repeat} round(s)")
    meta = {"kind": KIND, "row": "meta", "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "machine": machine.facts(), "command": sys.argv, "topology": topo.to_dict(), "impl": impl, "op": op,
            "size": nbytes, "pair": pair, "reps": reps, "at_s": at_s, "blackouts": lengths, "repeat": repeat}
    path = Path(out_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    with path.open("a") as f:
        f.write(json.dumps(meta) + "\n")
        for length in lengths:
            for rnd in range(repeat):
                for mode in ("direct", "split"):
                    before = {s: _counters(names, s) for s in gw_sites}
                    limit = 3 * job_seconds + length + 300
                    p_cmd = job(mode, reps, limit)
                    t0 = time.monotonic()
                    p = subprocess.Popen(p_cmd, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                         start_new_session=True)
                    fault_at = None
                    if length:
                        time.sleep(at_s)
                        subprocess.run([*gridsplit, "lab", "fault", "blackout", "--pair", pair, "--seconds",
                                        str(length), "--background"], check=True, capture_output=True, text=True)
                        # In force from about here (the command returns once the routes are in).
                        fault_at = round(time.monotonic() - t0, 2)
                    try:
                        text, _ = p.communicate(timeout=limit + 30)
                        code: int | None = p.returncode
                    except subprocess.TimeoutExpired:
                        os.killpg(p.pid, signal.SIGKILL)
                        text, _ = p.communicate()
                        code = None
                    took = time.monotonic() - t0
                    if length:
                        # The next run starts on a clean path, whatever this one did.
                        rest = (fault_at or at_s) + length - took
                        if rest > 0:
                            time.sleep(rest + 1)
                        subprocess.run([*gridsplit, "lab", "fault", "clear"], capture_output=True, text=True)
                    after = {s: _counters(names, s) for s in gw_sites}
                    delta = {s: {k: after[s][k] - before[s][k] for k in after[s]} for s in gw_sites}
                    row = {"kind": KIND, "row": "run", "mode": mode, "blackout_s": length, "round": rnd,
                           "exit": code, "completed": code == 0, "verified": code == 0 and "mismatch" not in text,
                           "wall_s": round(took, 3), "fault_at_s": fault_at,
                           "inside": fault_at is not None and fault_at < took, "gateways": delta,
                           "tail": text.strip().splitlines()[-3:] if code != 0 else []}
                    rows.append(row)
                    f.write(json.dumps(row) + "\n")
                    f.flush()
                    out.print(f"  blackout {length:>3} s  {mode:6}  "
                              f"{'ok' if row['completed'] else 'FAILED (exit ' + str(code) + ')'}  {took:7.1f} s")
    summarize(rows, out)
    out.print(f"rows appended to {path}")


def summarize(rows: list[dict], out) -> None:
    """Per blackout length and mode: completion, verification, median time and time lost."""
    base = {m: statistics.median([r["wall_s"] for r in rows if r["mode"] == m and r["blackout_s"] == 0
                                  and r["completed"]] or [float("nan")]) for m in ("direct", "split")}
    t = Table("blackout", "mode", "completed", "verified", "wall s, median (min–max)", "time lost s, median",
              "reconnects", "flows reset", title="checked job through WAN blackouts")
    for length in sorted({r["blackout_s"] for r in rows}):
        for mode in ("direct", "split"):
            rs = [r for r in rows if r["blackout_s"] == length and r["mode"] == mode]
            if not rs:
                continue
            walls = [r["wall_s"] for r in rs]
            lost = statistics.median(walls) - base[mode] - length
            gw = [g for r in rs for g in r["gateways"].values()]
            t.add_row(f"{length} s", mode, f"{sum(r['completed'] for r in rs)}/{len(rs)}",
                      f"{sum(r['verified'] for r in rs)}/{len(rs)}",
                      f"{statistics.median(walls):.1f} ({min(walls):.1f}–{max(walls):.1f})",
                      "" if length == 0 else f"{lost:+.1f}",
                      str(sum(g["wan_reconnects"] for g in gw)), str(sum(g["flows_reset"] for g in gw)))
    out.print(t)
    out.print("time lost = median wall time − the mode's undisturbed median − the blackout itself")
    outside = [r for r in rows if r["blackout_s"] and not r.get("inside", True)]
    if outside:
        out.print(f"[yellow]{len(outside)} run(s) ended before their blackout began: make --job-seconds longer[/yellow]")
