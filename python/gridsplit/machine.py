"""Facts about the machine and the code a measurement ran on, for result files.

Every committed result carries these, so that a number can always be traced to
the hardware, kernel and source revision that produced it.
"""

from __future__ import annotations

import errno
import os
import platform
import socket
import subprocess
import time
from pathlib import Path

from . import __version__
from .sysdeps import repo_root


def facts() -> dict:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    rev = ""
    root = repo_root()
    if root is not None:
        cp = subprocess.run(["git", "-C", str(root), "describe", "--always", "--dirty"], text=True, capture_output=True)
        rev = cp.stdout.strip()
    load = os.getloadavg()
    return {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "hostname": platform.node(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "kernel": platform.release(),
        "lan_timers": lan_timers_supported(),
        "gridsplit": __version__,
        "git": rev,
        "loadavg_1m_at_start": round(load[0], 2),
    }


# TCP_RTO_MIN_US (Linux 6.15); Python's socket module does not name it yet.
TCP_RTO_MIN_US = 45


def lan_timers_supported() -> bool:
    """Whether this kernel knows the LAN timers the gateways and the node library set
    (TCP_RTO_MIN_US, TCP_DELACK_MAX_US: Linux 6.15). A kernel without them answers
    ENOPROTOOPT; the ranks then say nothing (one line each would flood a job's
    stderr) and `gridsplit run` says it once."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.setsockopt(socket.IPPROTO_TCP, TCP_RTO_MIN_US, 200000)
        except OSError as e:
            return e.errno != errno.ENOPROTOOPT
    return True
