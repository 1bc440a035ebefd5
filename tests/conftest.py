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
