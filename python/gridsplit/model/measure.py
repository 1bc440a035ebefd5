"""`gridsplit model measure`: pLogP parameters of the lab's LAN, WAN and split paths.

Runs mpi/plogp.c on three pairs of the running lab: two nodes of one site
(lan), a node of that site and one of another, connected directly (wan), and
the same two through the site gateways with libgridsplit.so preloaded
(split). The result is one parameter file (plogp.ParamSet) that every other
model command reads.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from .. import machine
from ..errors import GridsplitError
from ..lab.realize import LabState
from .labrun import RANK_ENV, pick_pairs, run_json
from .plogp import ParamSet, PLogP

PATH_KINDS = ("lan", "wan", "split")


def base_sizes(max_size: int, extra: list[int] | None = None) -> list[int]:
    """Powers of four from 1 byte up to max_size, plus `extra` (plogp refines where curves bend).

    The sizes a validation will use are worth measuring exactly: a protocol
    switch (Open MPI's TCP eager limit is 64 KiB) is a step, and a 64 KB
    message interpolated between 46 KB and 64 KiB would land on the wrong side.
    """
    out, s = [], 1
    while s < max_size:
        out.append(s)
        s *= 4
    return sorted({*out, max_size, *(x for x in (extra or []) if 0 < x <= max_size)})


def measure(state: LabState, impl: str, kinds: list[str], max_size: int, ci: float, max_reps: int,
            refine: float, progress: Callable[[str], None] = lambda m: None, extra_sizes: list[int] | None = None) -> ParamSet:
    for k in kinds:
        if k not in PATH_KINDS:
            raise GridsplitError(f"--pairs: unknown path {k!r}; choose from {', '.join(PATH_KINDS)}")
    if "split" in kinds and not state.data.get("gateways"):
        raise GridsplitError("--pairs split needs the lab's gateways (a topology with gateway = true, without --no-gateways); or leave split out")
    pairs = pick_pairs(state)
    sizes = ",".join(str(s) for s in base_sizes(max_size, extra_sizes))
    paths = {}
    for kind in kinds:
        hosts = list(pairs.lan if kind == "lan" else pairs.wan)
        progress(f"pLogP {kind}: {hosts[0].name} -> {hosts[1].name}{' through the gateways' if kind == 'split' else ''}")
        lines = run_json(state, impl, hosts, ["plogp", "-s", sizes, "-r", str(max_reps), "-w", "3",
                                              "--ci", str(ci), "--refine", str(refine)],
                         split=kind == "split", timeout=1800)
        p = PLogP.from_plogp_lines(kind, lines, {"impl": impl, "split": kind == "split"})
        summary = [d for d in lines if d.get("op") == "plogp_L"][-1]
        progress(f"  L = {p.L * 1e6:.1f} us, g(1 B) = {p.g(1) * 1e6:.1f} us, g({max_size} B) = {p.g(max_size) * 1e3:.2f} ms "
                 f"({len(p.sizes)} sizes, {summary['elapsed_s']:.0f} s)")
        paths[kind] = p
    meta = {**machine.facts(), "topology": state.topo.to_dict(), "impl": impl, "rank_env": RANK_ENV.get(impl, {}),
            "ci": ci, "max_reps": max_reps, "refine": refine, "max_size": max_size,
            "hosts": {k: [h.name for h in (pairs.lan if k == "lan" else pairs.wan)] for k in kinds}}
    return ParamSet(paths, meta)


def default_out(state: LabState, impl: str, outdir: Path) -> Path:
    return outdir / f"plogp-{time.strftime('%Y-%m-%d')}-{state.topo.name}-{impl}.json"
