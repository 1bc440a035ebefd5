"""One MPI rank's program, run as a child, with its CPU time written at its exit.

Usage: python3 rankcpu.py OUTDIR PROGRAM ARGS...

`gridsplit bench app` starts every rank through this wrapper, because an
application does not report its own CPU the way the project's MPI programs do
(mpi/common.c). The child inherits everything, the MPI launcher's file
descriptors included (MPICH's PMI_FD), and signals the launcher sends reach it.
At its exit the wrapper writes OUTDIR/rank-R-PID.json (rank, host, user_s,
sys_s, wall_s, status) and exits with the child's status. Standalone on purpose:
it imports nothing of gridsplit, so it costs a rank no start-up time.
"""

import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time


def main() -> int:
    outdir, cmd = sys.argv[1], sys.argv[2:]
    t0 = time.monotonic()
    try:
        child = subprocess.Popen(cmd, close_fds=False)
    except OSError as e:
        print(f"gridsplit rank wrapper: cannot start {cmd[0]}: {e.strerror}", file=sys.stderr)
        return 127
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, lambda s, _f: child.send_signal(s))
    rc = child.wait()
    wall = time.monotonic() - t0
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    rank = next((os.environ[k] for k in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK") if k in os.environ), "-1")
    rec = {"rank": int(rank), "host": socket.gethostname(), "user_s": ru.ru_utime, "sys_s": ru.ru_stime,
           "wall_s": wall, "status": rc}
    try:
        with open(os.path.join(outdir, f"rank-{rank}-{os.getpid()}.json"), "w") as f:
            json.dump(rec, f)
    except OSError:
        pass
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main())
