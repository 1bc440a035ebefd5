"""The processes that undo the lab's timed faults (`lab fault ... --seconds`), as the
lab's teardown and `lab fault` both need to recognise them: by their command line,
so that a PID reused by another process is never signalled."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from ..procs import zombie


def is_undoer(pid: int) -> bool:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"gridsplit.lab.fault" in cmd and not zombie(pid)


def kill_undoers(data: dict[str, Any]) -> None:
    """SIGKILL the faults' undo processes (for `lab down`), each checked to be one by its command line."""
    for f in data.get("faults", []):
        pid = f.get("undo_pid")
        if pid and is_undoer(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
