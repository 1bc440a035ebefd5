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
    """`gridsplit lab mpirun ...`, tolerating one MPICH 4.0.2 finalize hang.

    Debian's MPICH 4.0.2 (ch4:ucx) can hang in MPI_Finalize with or without
    gridsplit (fixed upstream by pmodels/mpich PR #6596; see mpi/common.c for
    the mitigation). A run that hit it is stopped by --timeout and run again
    once; a second failure fails the test.
    """
    cp = gridsplit("lab", "mpirun", "--timeout", "60", *args, check=False)
    if cp.returncode != 0 and "mpich" in args and "did not finish" in cp.stderr:
        print(f"MPICH finalize hang (known upstream bug), retrying once: {cp.stderr.strip()}")
        cp = gridsplit("lab", "mpirun", "--timeout", "60", *args, check=False)
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
