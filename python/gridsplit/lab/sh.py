"""Running commands in the lab's namespaces.

Thin wrappers over iproute2 and `ip netns exec`. Failures become GridsplitError
with the command and the tool's own message, because a half-applied network
setup must never pass silently.
"""

from __future__ import annotations

import subprocess
from typing import Sequence

from ..errors import GridsplitError


def run(args: Sequence[str], *, check: bool = True, timeout: float = 60, input: str | None = None,
        capture: bool = True) -> subprocess.CompletedProcess:
    try:
        cp = subprocess.run(list(args), input=input, text=True, timeout=timeout,
                            stdout=subprocess.PIPE if capture else None,
                            stderr=subprocess.PIPE if capture else None)
    except FileNotFoundError:
        raise GridsplitError(f"cannot run {args[0]!r}: not installed (run `make demo` to install dependencies)") from None
    except subprocess.TimeoutExpired:
        raise GridsplitError(f"command timed out after {timeout:.0f} s: {' '.join(args)}") from None
    if check and cp.returncode != 0:
        msg = (cp.stderr or cp.stdout or "").strip().splitlines()
        raise GridsplitError(f"command failed ({cp.returncode}): {' '.join(args)}: {msg[-1] if msg else 'no output'}")
    return cp


def in_ns(ns: str, args: Sequence[str], **kw) -> subprocess.CompletedProcess:
    """Run a command inside network namespace `ns`."""
    return run(["ip", "netns", "exec", ns, *args], **kw)


def ip_batch(ns: str, lines: Sequence[str]) -> None:
    """Apply many `ip` commands inside one namespace with a single process."""
    if lines:
        run(["ip", "-n", ns, "-batch", "-"], input="\n".join(lines) + "\n")


def tc_batch(ns: str, lines: Sequence[str]) -> None:
    if lines:
        run(["tc", "-n", ns, "-batch", "-"], input="\n".join(lines) + "\n")


def list_netns() -> list[str]:
    cp = run(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in cp.stdout.splitlines() if line.strip()]


def netns_pids(ns: str) -> list[int]:
    cp = run(["ip", "netns", "pids", ns], check=False)
    return [int(x) for x in cp.stdout.split() if x.isdigit()]
