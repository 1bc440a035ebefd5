"""Shared fixtures: a real two-site lab (mini preset) built once per test module.

Lab tests need root, because they create network namespaces. They use their own
prefix (GRIDSPLIT_LAB_PREFIX, "gst" by default) so that a user's lab is never
touched by the test suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

os.environ.setdefault("GRIDSPLIT_LAB_PREFIX", "gst")
PREFIX = os.environ["GRIDSPLIT_LAB_PREFIX"]


def gridsplit(*args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
    cp = subprocess.run([sys.executable, "-m", "gridsplit", *args], text=True, capture_output=True, timeout=timeout)
    if check and cp.returncode != 0:
        raise AssertionError(f"gridsplit {' '.join(args)} failed ({cp.returncode}):\n{cp.stdout}\n{cp.stderr}")
    return cp


def mpirun(*args: str) -> subprocess.CompletedProcess:
    """`gridsplit lab mpirun ...`, tolerating MPICH 4.0.2's finalize hang.

    Debian's MPICH 4.0.2 (ch4:ucx) can hang in MPI_Finalize with or without
    gridsplit (fixed upstream by pmodels/mpich PR #6596; see mpi/common.c for
    the mitigation). Only a run that printed its complete result first counts as
    that hang: it is stopped by --timeout and run again, at most twice (CI once
    saw two in a row). A job that hangs before its result fails at once.
    """
    for attempt in range(3):
        cp = gridsplit("lab", "mpirun", "--timeout", "40", *args, check=False)
        finished_work = any(l.startswith("{") and '"total_s"' in l for l in cp.stdout.splitlines())
        if not (cp.returncode != 0 and "mpich" in args and "did not finish" in cp.stderr and finished_work):
            break
        print(f"MPICH finalize hang (known upstream bug) after its result, attempt {attempt + 1}: "
              f"{cp.stderr.strip().splitlines()[-1]}")
    if cp.returncode != 0:
        raise AssertionError(f"lab mpirun {' '.join(args)} failed ({cp.returncode}):\n{cp.stdout}\n{cp.stderr}")
    return cp


def netns_list() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], text=True, capture_output=True).stdout
    return [l.split()[0] for l in out.splitlines() if l.strip()]


def needs_root():
    if os.geteuid() != 0:
        pytest.skip("lab tests need root (network namespaces)")


@pytest.fixture(scope="module")
def lab():
    needs_root()
    gridsplit("lab", "down")
    gridsplit("lab", "up", "--topology", "mini")
    status = json.loads(gridsplit("lab", "status", "--json").stdout)
    yield status
    gridsplit("lab", "down")
