"""Running the model's MPI programs (plogp, collalgo) in the lab and reading their JSON lines.

Open MPI is the default library here, run with mpi_yield_when_idle=1
(lab.mpi.RANK_ENV says why). The model parameters and the collectives they
predict must be measured with the same setting, so every run of this module
uses it and the result files record it.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from .. import sysdeps
from ..errors import GridsplitError
from ..lab.mpi import RANK_ENV, mpirun, split_env
from ..lab.realize import LabState
from ..topology import Host



@dataclass(frozen=True)
class Pairs:
    """The hosts of the three measured paths: one site's two nodes, and a cross-site pair."""

    lan: tuple[Host, Host]
    wan: tuple[Host, Host]


def nodes_by_site(state: LabState) -> dict[str, list[Host]]:
    """The lab's compute nodes per site, in topology order (sites without nodes left out)."""
    by_site: dict[str, list[Host]] = {}
    for h in state.topo.nodes():
        by_site.setdefault(h.site, []).append(h)
    return by_site


def pick_pairs(state: LabState) -> Pairs:
    topo = state.topo
    by_site = nodes_by_site(state)
    big = max(by_site.values(), key=len)
    if len(big) < 2:
        raise GridsplitError(f"the lab's topology {topo.name!r} has no site with two nodes; the LAN pair needs one (try `gridsplit lab up --topology mini`)")
    other = [hs for s, hs in by_site.items() if s != big[0].site]
    if not other:
        raise GridsplitError(f"the lab's topology {topo.name!r} has a single site; the WAN pair needs two")
    return Pairs((big[0], big[1]), (big[0], other[0][0]))


def layout(state: LabState, n_remote: int) -> list[Host]:
    """Root on one site, then n_remote nodes of the other (the MPI5000 gather layout).

    The root's site is the one with the fewest nodes (sophia in `paper`).
    """
    by_site = nodes_by_site(state)
    if len(by_site) < 2:
        raise GridsplitError("the grid layout needs nodes on two sites")
    sites = sorted(by_site, key=lambda s: len(by_site[s]))
    root, remote = by_site[sites[0]][0], by_site[sites[-1]]
    if n_remote > len(remote):
        raise GridsplitError(f"{n_remote} nodes wanted on site {sites[-1]}, the lab has {len(remote)}; "
                             f"bring it up with more (`gridsplit lab up --topology {state.topo.name} --nodes {n_remote}`)")
    return [root, *remote[:n_remote]]


def run_json(state: LabState, impl: str, hosts: list[Host], prog: list[str], split: bool = False,
             timeout: float = 900) -> list[dict[str, Any]]:
    """One MPI job; its stdout's JSON lines. A MPICH finalize hang (pmodels/mpich#6596) is retried once."""
    env = split_env(state) if split else None  # mpirun gives the ranks RANK_ENV
    argv = [sysdeps.mpi_program(impl, prog[0]), *prog[1:]]
    for attempt in (1, 2):
        try:
            cp = mpirun(state, impl, len(hosts), hosts, argv, env=env, capture=True, timeout=timeout)
        except GridsplitError as e:
            if impl == "mpich" and attempt == 1 and "did not finish" in str(e):
                time.sleep(1)
                continue
            raise
        if cp.returncode != 0:
            tail = (cp.stderr or "").strip().splitlines()[-3:]
            raise GridsplitError(f"{prog[0]} on {','.join(h.name for h in hosts)} failed (exit {cp.returncode}): {' | '.join(tail)}")
        out = []
        for line in cp.stdout.splitlines():
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    raise GridsplitError(f"{prog[0]} printed a malformed JSON line: {line[:120]}") from None
        return out
    raise GridsplitError("unreachable")
