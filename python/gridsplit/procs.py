"""Long-running helper processes of a benchmark (gateways, servers, load
generators): each started in a session of its own with its output in a log
file, checked while the benchmark runs, and stopped by PID in reverse start
order, also on Ctrl-C and SIGTERM. Shared by `bench relay` and `bench scale`."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from .errors import GridsplitError


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def sigterm_interrupts() -> None:
    """Makes SIGTERM raise KeyboardInterrupt, as Ctrl-C does: a benchmark stopped by
    SIGTERM (e.g. under nohup, where SIGINT is ignored) still stops its MPI jobs and
    gateways and removes what it set up."""
    signal.signal(signal.SIGTERM, _interrupt)


def raise_nofile(n: int) -> None:
    """RLIMIT_NOFILE to n (soft and hard), or as far as the hard limit allows
    without CAP_SYS_RESOURCE. Runs in the child, before exec."""
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))
    except (ValueError, OSError):
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


@dataclass
class Processes:
    """The processes of one run, stopped by PID in reverse start order.
    `nofile`: RLIMIT_NOFILE for each (0: inherited)."""

    logdir: Path
    nofile: int = 0
    procs: list[tuple[str, subprocess.Popen]] = field(default_factory=list)

    def start(self, name: str, argv: list[str], env: dict | None = None, pipes: bool = False) -> subprocess.Popen:
        """Starts `name`; its stderr (and stdout, unless `pipes` gives the caller
        text pipes to its stdin and stdout) goes to LOGDIR/NAME.log."""
        log = open(self.logdir / f"{name}.log", "wb")
        n = self.nofile
        # A session of its own: the terminal's Ctrl-C reaches only us, and we
        # stop the children in order instead of racing them.
        p = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if pipes else subprocess.DEVNULL,
            stdout=subprocess.PIPE if pipes else log,
            stderr=log if pipes else subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
            preexec_fn=(lambda: raise_nofile(n)) if n else None,
            text=pipes,
        )
        log.close()
        self.procs.append((name, p))
        return p

    def pid(self, name: str) -> int:
        return next(p.pid for n, p in self.procs if n == name)

    def tail(self, name: str) -> str:
        """The last line of NAME's log."""
        t = (self.logdir / f"{name}.log").read_text(errors="replace").strip()
        return t.splitlines()[-1] if t else "(no output)"

    def check(self) -> None:
        """Raises GridsplitError, with the last line of its log, if one has exited."""
        for name, p in self.procs:
            if p.poll() is not None:
                raise GridsplitError(f"{name} exited with status {p.returncode}: {self.tail(name)}")

    def stop(self, grace_s: float = 5.0) -> None:
        """SIGTERM to each, then SIGKILL to those still running after `grace_s`."""
        for _, p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + grace_s
        for _, p in reversed(self.procs):
            try:
                p.wait(timeout=max(0.05, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.kill(p.pid, signal.SIGKILL)
                p.wait()
        self.procs.clear()


def wait_gateway_link(admin: str, procs: Processes, timeout: float = 15) -> None:
    """Waits until the gridsplitd whose admin endpoint is `admin` reports a WAN
    link, checking meanwhile that none of `procs` has exited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        procs.check()
        try:
            with urllib.request.urlopen(f"http://{admin}/status", timeout=1) as r:
                if json.load(r).get("links"):
                    return
        except (OSError, ValueError):
            pass
        time.sleep(0.1)
    raise GridsplitError(f"the gateways did not bring up their WAN link in {timeout:.0f} s")


def zombie(pid: int) -> bool:
    """Has `pid` exited without being reaped (or is it gone)? /proc/PID/stat's state field."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True
