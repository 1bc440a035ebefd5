"""Running real MPI jobs across the lab's nodes.

Both launchers think they start remote daemons with ssh; the lab gives them a
launcher script instead that enters the target host's network namespace (and a
UTS namespace carrying the host's name, so each "machine" has its own hostname
as MPI libraries expect). Name resolution comes from /etc/netns/NS/hosts, which
`ip netns exec` mounts over /etc/hosts.

MPICH from Debian is ch4:ucx: without UCX_TLS=tcp,self, ranks on one physical
machine talk through shared memory and nothing crosses the emulated network.
Open MPI is pinned to ob1/tcp for the same reason.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from .. import sysdeps
from ..errors import GridsplitError
from ..gateway import nodes_conf
from ..launch import library_mode, rank_env_args, ranks_split_env
from ..topology import Host
from .realize import LabState, stop_pids

IMPLS = ("mpich", "openmpi")


def launcher(state: LabState) -> Path:
    """Write (once) the ssh stand-in: `rsh [opts] HOST CMD...` runs CMD in HOST's namespace."""
    path = state.names.state_dir / "rsh"
    if path.exists():
        return path
    cases = "\n".join(f"  {h.name}|{h.ip}) ns={state.ns(h)} ;;" for h in state.topo.hosts())
    path.write_text(f"""#!/bin/sh
# gridsplit lab launcher (generated): an ssh stand-in for mpiexec/mpirun.
# Usage like ssh: rsh [-x ...] HOST COMMAND...; COMMAND is run by sh -c in HOST's
# network namespace, with HOST as hostname. With --exec, COMMAND is argv, not a string.
mode=sh
while [ $# -gt 0 ]; do
  case "$1" in --exec) mode=exec; shift ;; -l|-p|-o|-i) shift 2 ;; -*) shift ;; *) break ;; esac
done
host=$1; shift
case "$host" in
{cases}
  *) echo "gridsplit lab launcher: unknown host '$host'" >&2; exit 255 ;;
esac
if [ "$mode" = exec ]; then
  exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$host" "$@"
fi
exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec sh -c "$1"' "$host" "$*"
""")
    path.chmod(0o755)
    return path


def split_env(state: LabState, split: str = "policy", root: Host | None = None) -> dict[str, str]:
    """What a rank needs to send its cross-site connections through the gateways: those of the
    site pairs the split policy splits ("policy"), all of them ("all"), none ("none"), the pairs
    named ("a-b+c-d"; Topology.with_split), or those with an end at the job's first host, `root`
    ("root": the node library's host rule, docs/design/host-rule.md). Pairs other than the
    policy's get a node file of their own beside the lab's; the gateways relay whatever their
    nodes send them."""
    if not state.data.get("gateways"):
        raise GridsplitError("--split needs gateways: this lab has none running (topology without gateway = true, or `lab up --no-gateways`)")
    conf = state.names.state_dir / "nodes.conf"  # the policy's: lab.gateways.start_gateways writes it
    if split not in ("policy", "all", "root"):
        conf = state.names.state_dir / f"nodes-split-{split}.conf"
        conf.write_text(nodes_conf(state.topo.with_split(split)))
    return ranks_split_env(sysdeps.built("libgridsplit.so"), str(conf), library_mode(split, root and str(root.ip)))


def refuse_direct(state: LabState, hosts: list[Host], env: dict[str, str] | None) -> None:
    """Refuse, in one line, a job without the gateways (direct mode) across the sites of an
    unroutable grid: its nodes cannot reach each other, and the job would fail or hang."""
    sites = sorted({h.site for h in hosts})
    if state.topo.routed or len(sites) < 2 or "GRIDSPLIT_CONFIG" in (env or {}):
        return
    raise GridsplitError(f"direct mode cannot run across sites {', '.join(sites)} of topology {state.topo.name!r}: "
                         "its sites are unroutable ([addressing] routed = false), so nodes reach other sites only "
                         "through the gateways; use --split")


def command(state: LabState, impl: str, n: int, hosts: list[Host], prog: list[str],
            env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """The argv (run from the first host) and environment of one MPI job.

    `env` goes to the ranks only, not to the launcher and its daemons: the node
    library must steer the application's connections, not the launcher's.
    """
    rsh = str(launcher(state))
    names = ",".join(h.name for h in hosts)
    topo = state.topo
    block = ",".join([str(topo.sites_block), *(str(s.subnet) for s in topo.sites
                                               if not s.subnet.subnet_of(topo.sites_block))])
    full_env = dict(os.environ)
    if not topo.routed and "GRIDSPLIT_CONFIG" in env:
        # On an unroutable grid the launcher's own connections across sites (MPICH's
        # proxies and Open MPI's daemons calling back to the launcher) need the
        # gateways too: the launcher, and with it everything the ssh stand-in
        # starts, loads the library as well (preload/README.md: "their launchers").
        full_env.update({k: v for k, v in env.items() if k.startswith(("LD_PRELOAD", "GRIDSPLIT_"))})
    if impl == "mpich":
        sysdeps.need_tool("mpiexec.mpich")
        full_env.setdefault("UCX_TLS", "tcp,self")
        full_env.setdefault("UCX_NET_DEVICES", "eth0")
        argv = ["mpiexec.mpich", "-launcher", "ssh", "-launcher-exec", rsh, "-hosts", names, "-n", str(n),
                *rank_env_args("mpich", env), *prog]
    elif impl == "openmpi":
        sysdeps.need_tool("mpirun.openmpi")
        argv = ["mpirun.openmpi", "--allow-run-as-root", "--oversubscribe", "--map-by", "node",
                "--host", names, "-n", str(n),
                "--mca", "plm_rsh_agent", rsh, "--mca", "plm_rsh_no_tree_spawn", "1",
                "--mca", "pml", "ob1", "--mca", "btl", "tcp,self,vader",
                "--mca", "btl_tcp_if_include", block, "--mca", "oob_tcp_if_include", block,
                *rank_env_args("openmpi", env), *prog]
    else:
        raise GridsplitError(f"--impl {impl!r}: choose one of {', '.join(IMPLS)}")
    return [rsh, "--exec", hosts[0].name, *argv], full_env


# Per-library settings every rank gets from `mpirun` below (unless `poll`):
# bench, model and `lab mpirun` alike. On this
# 2-vCPU machine every Open MPI rank busy-polls unless told to yield, and a rank
# waiting for a message takes the CPU its peer, the gateways and the delay line
# need, and a small message's round trip grows by orders of magnitude (measured:
# docs/lab.md, "Running MPI in the lab"). MPICH's UCX has no
# equivalent setting; its runs keep polling (the result files record this).
RANK_ENV = {"openmpi": {"OMPI_MCA_mpi_yield_when_idle": "1"}, "mpich": {}}

TIMED_OUT = -9  # returncode of a job stopped at its timeout when keep_partial is set


def mpirun(state: LabState, impl: str, n: int, hosts: list[Host], prog: list[str],
           env: dict[str, str] | None = None, capture: bool = False, timeout: float | None = None,
           keep_partial: bool = False, expect_lines: int = 0, grace: float = 15.0,
           on_result: Callable[[], None] | None = None, poll: bool = False) -> subprocess.CompletedProcess:
    """Run one MPI job in the lab, its ranks given RANK_ENV (unless `poll`) and then `env`.

    With keep_partial, a job stopped at its timeout returns what it printed
    (returncode TIMED_OUT) instead of raising: a benchmark whose results are
    complete but whose MPICH hung in MPI_Finalize (see mpi/common.c) still
    measured something valid. With expect_lines, the job is also given only
    `grace` seconds to exit once it has printed that many JSON lines, so such
    a hang costs seconds instead of the whole timeout. `on_result` is called
    once, within 50 ms of the job printing those lines (or when it ends):
    what a measurement samples there leaves out the job's exit, which for
    MPICH can be a hang of `grace` seconds.
    """
    if not prog:
        raise GridsplitError("no program given; usage: gridsplit lab mpirun -n N -- PROG ARGS")
    if not hosts:
        raise GridsplitError("no hosts to run on")
    refuse_direct(state, hosts, env)
    argv, full_env = command(state, impl, n, hosts, prog, {**({} if poll else RANK_ENV.get(impl, {})), **(env or {})})
    return watch(argv, full_env, shlex.join(prog), capture=capture, timeout=timeout, keep_partial=keep_partial,
                 expect_lines=expect_lines, grace=grace, on_result=on_result)


def watch(argv: list[str], env: dict[str, str] | None, what: str, capture: bool = False,
          timeout: float | None = None, keep_partial: bool = False, expect_lines: int = 0, grace: float = 15.0,
          on_result: Callable[[], None] | None = None, stdin_pipe: bool = False) -> subprocess.CompletedProcess:
    """Run a launcher `argv` and watch it as `mpirun` describes (timeout, keep_partial,
    expect_lines, grace, on_result); shared with the real-host runs (bench/hosts.py),
    whose launcher is ssh. `stdin_pipe`: give the launcher a pipe that stays open
    while it runs and closes when it is stopped (a remote job watches it)."""
    # A session of its own, so that a timeout can find everything the launcher
    # started (proxies make sessions of their own, hence the tree walk below).
    proc = subprocess.Popen(argv, env=env, text=True, start_new_session=True,
                            stdin=subprocess.PIPE if stdin_pipe else None,
                            stdout=subprocess.PIPE if capture else None,
                            stderr=subprocess.PIPE if capture else None)
    out: list[str] = []
    err: list[str] = []
    readers = []
    if capture:
        # Reader threads instead of communicate(): the output must be watched
        # while the job runs (expect_lines) and kept if the job is stopped.
        for stream, sink in ((proc.stdout, out), (proc.stderr, err)):
            t = threading.Thread(target=lambda s=stream, k=sink: k.extend(iter(s.readline, "")), daemon=True)
            t.start()
            readers.append(t)
    deadline = None if timeout is None else time.monotonic() + timeout
    done_at = None
    try:
        while proc.poll() is None:
            now = time.monotonic()
            if expect_lines and done_at is None and sum(l.startswith("{") for l in out) >= expect_lines:
                done_at = now
                if on_result:
                    on_result()
                    on_result = None
            if (deadline is not None and now > deadline) or (done_at is not None and now > done_at + grace):
                _stop_group(proc)
                for t in readers:
                    t.join(timeout=5)
                if keep_partial:
                    return subprocess.CompletedProcess(argv, TIMED_OUT, "".join(out), "".join(err))
                raise GridsplitError(f"MPI job did not finish within {timeout:.0f} s and was stopped: {what}")
            time.sleep(0.05)
    except KeyboardInterrupt:
        _stop_group(proc)
        raise
    finally:
        if proc.stdin:
            proc.stdin.close()
    if on_result:
        on_result()
    for t in readers:
        t.join(timeout=5)
    return subprocess.CompletedProcess(argv, proc.returncode, "".join(out) if capture else None,
                                       "".join(err) if capture else None)


def descendants(root: int) -> list[int]:
    """PIDs of every live descendant of `root` (from /proc's parent links)."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _stop_group(proc: subprocess.Popen) -> None:
    """Stop the launcher and everything it started, by PID, and nothing else.

    The tree is listed before the first signal: once the launcher dies its
    children are re-parented and could no longer be told from other processes.
    """
    stop_pids([proc.pid, *descendants(proc.pid)])
    try:
        proc.wait(timeout=1)
    except subprocess.TimeoutExpired:
        pass
