"""Giving the split environment to an MPI job's ranks, and only to them: `gridsplit run`.

libgridsplit.so must steer the application's cross-site connections, not the
launcher's own (its ssh, its daemons, Slurm's step daemons): each launcher has
a flag that sets a variable in the ranks alone, and this module knows them:

- MPICH's hydra (`mpiexec`): `-genv NAME VALUE`;
- Open MPI (`mpirun`): `-x NAME=VALUE`;
- Slurm (`srun`): `--export=ALL,NAME=VALUE,...`, merged with the job's own
  `--export` (or SLURM_EXPORT_ENV); srun runs without them, its tasks with them.

Shared by `gridsplit run`, the lab's launcher (lab/mpi.py) and the bench on
real hosts (bench/hosts.py).
"""

from __future__ import annotations

import os
import platform
import shlex
import shutil
import socket
import subprocess
from pathlib import Path

import click

from . import machine, sysdeps
from .errors import GridsplitError
from .gateway.nodes import check_nodes_file


def ranks_split_env(lib: str, config: str, mode: str = "policy") -> dict[str, str]:
    """What a rank needs to send its cross-site connections through the gateways: the library,
    the node file (which also carries the LAN timers, its `lan_timers` line), and the library's
    split mode (GRIDSPLIT_SPLIT: "policy", the node file's direct_to; "all", every pair;
    "hosts:A+B", the host rule: only connections with an end at A or B)."""
    env = {"LD_PRELOAD": lib, "GRIDSPLIT_CONFIG": config}
    if mode != "policy":
        env["GRIDSPLIT_SPLIT"] = mode  # over the node file's direct_to (preload/README.md)
    return env


def library_mode(split: str, root: str | None = None) -> str:
    """GRIDSPLIT_SPLIT for a split choice (topology.SPLIT_SPEC) of a job whose first rank runs on
    host `root` (an address or a name): "all"; "root", the host rule on the root's addresses; else
    "policy" (site pairs are chosen by the node file given with it)."""
    if split == "root":
        if not root:
            raise GridsplitError("split root needs the job's first host")
        return hosts_mode([root], "split root")
    return "all" if split == "all" else "policy"


def rank_env_args(kind: str, env: dict[str, str]) -> list[str]:
    """The launcher flags that set `env` in the ranks only (mpich: hydra, openmpi)."""
    if kind == "mpich":
        return [x for k, v in env.items() for x in ("-genv", k, v)]
    if kind == "openmpi":
        return [x for k, v in env.items() for x in ("-x", f"{k}={v}")]
    raise GridsplitError(f"no rank-only environment flag known for launcher kind {kind!r}")


def srun_argv(argv: list[str], env: dict[str, str], environ: dict[str, str]) -> list[str]:
    """srun's command line with `env` exported to its tasks, merged with the job's own --export
    (or SLURM_EXPORT_ENV, which an --export option overrides)."""
    for k, v in env.items():
        if "," in v:
            raise GridsplitError(f"{k}={v}: srun --export separates variables by commas; use a path without one")
    ours = ",".join(f"{k}={v}" for k, v in env.items())
    # The job's own --export (the first, before any "--") is merged into ours, not repeated.
    rest, given, i = [], None, 1
    while i < len(argv):
        a = argv[i]
        if a == "--":
            rest += argv[i:]
            break
        if given is None and a.startswith("--export="):
            given = a.split("=", 1)[1]
        elif given is None and a == "--export" and i + 1 < len(argv):
            given = argv[i + 1]
            i += 1
        else:
            rest.append(a)
        i += 1
    if given is None:
        given = environ.get("SLURM_EXPORT_ENV", "ALL")
    # NONE: only SLURM_* and the listed variables reach the tasks, as a list without ALL does.
    merged = ours if given.upper() == "NONE" else f"{given},{ours}"
    return [argv[0], f"--export={merged}", *rest]


def launcher_kind(argv0: str) -> str | None:
    """'srun', 'mpich' (hydra), 'openmpi', or None for a command that is not a launcher."""
    base = os.path.basename(argv0)
    if base == "srun":
        return "srun"
    if not base.startswith(("mpiexec", "mpirun", "orterun")):
        return None
    exe = shutil.which(argv0)
    if exe is None:
        raise GridsplitError(f"{argv0}: not found in PATH")
    try:
        ver = subprocess.run([exe, "--version"], text=True, capture_output=True, timeout=20).stdout
    except subprocess.TimeoutExpired:
        return None
    if "Open MPI" in ver or "OpenRTE" in ver:
        return "openmpi"
    if "HYDRA" in ver or "MPICH" in ver:
        return "mpich"
    return None


def split_command(argv: list[str], env: dict[str, str], environ: dict[str, str],
                  kind: str | None) -> tuple[list[str], dict[str, str], str]:
    """The command line and environment that give `env` to the ranks of `argv` (launcher_kind
    `kind`), and what they were given to."""
    environ = dict(environ)
    if kind == "srun":
        return srun_argv(argv, env, environ), environ, "tasks of srun"
    if kind in ("mpich", "openmpi"):
        return [argv[0], *rank_env_args(kind, env), *argv[1:]], environ, f"ranks of the {kind} launcher"
    environ.update(env)
    return argv, environ, "command"


# The launcher options that name its hosts, by launcher kind: a hostfile, or a list.
# Both launchers place rank 0 on the first host they list unless a rankfile or a
# mapping option says otherwise (then `--split hosts:HOST` names it).
HOSTFILE_OPTS = {"mpich": ("-f", "-hostfile", "-machinefile"),
                 "openmpi": ("--hostfile", "-hostfile", "--machinefile", "-machinefile", "--default-hostfile")}
HOSTLIST_OPTS = {"mpich": ("-hosts", "-host"), "openmpi": ("--host", "-host", "-H"), "srun": ("-w", "--nodelist")}


def _first_of_hostlist(text: str) -> str:
    """The first host of a host list: "a,b", Open MPI's "a:4,b", hydra's "a:4", or a Slurm
    hostlist "n[01-04,7],m" (its first name only: the one rank 0 gets, so no expansion needed)."""
    first = text.split(",")[0]
    if "[" in first:
        prefix, rest = first.split("[", 1)
        return prefix + rest.split("-")[0].rstrip("]")
    return first.split(":")[0]


def first_host(kind: str | None, argv: list[str], environ: dict[str, str]) -> tuple[str, str] | None:
    """Rank 0's host under the launcher's default placement, and where it was read: the first
    host of its hostfile or host-list option, or of srun's node list (SLURM_JOB_NODELIST).
    The launcher's options end at the program: the first argument that is an executable."""
    args = argv[1:]
    for i, a in enumerate(args):
        if not a.startswith("-") and shutil.which(a) and (i == 0 or args[i - 1] not in
                                                           HOSTFILE_OPTS.get(kind or "", ())):
            break
        opt, eq, val = a.partition("=")
        value = val if eq else (args[i + 1] if i + 1 < len(args) else "")
        if opt in HOSTFILE_OPTS.get(kind or "", ()) and value:
            try:
                text = Path(value).read_text(encoding="utf-8", errors="replace")
            except OSError as e:
                raise GridsplitError(f"{a} {value}: cannot read the hostfile ({e.strerror})") from None
            first = next((w[0] for w in (l.split("#")[0].split() for l in text.splitlines()) if w), None)
            return (first.split(":")[0], f"the first line of {value}") if first else None
        if opt in HOSTLIST_OPTS.get(kind or "", ()) and value:
            return _first_of_hostlist(value), f"{opt} {value}"
    if kind == "srun" and environ.get("SLURM_JOB_NODELIST"):
        return _first_of_hostlist(environ["SLURM_JOB_NODELIST"]), "SLURM_JOB_NODELIST"
    return None


def run_split_mode(split: str) -> str:
    """`gridsplit run --split` as the library's GRIDSPLIT_SPLIT: policy, all, or hosts: with each
    host resolved here to its addresses (the library compares addresses, not names)."""
    if split in ("policy", "all"):
        return split
    if not split.startswith("hosts:") or not split[6:]:
        raise GridsplitError(f"--split {split}: give policy, all, root, or hosts:HOST[+HOST...] (the job's first host)")
    return hosts_mode(split[6:].split("+"), f"--split {split}")


MAX_SPLIT_HOSTS = 16  # GS_MAX_SPLIT_HOSTS in preload/gs_internal.h


def hosts_mode(hosts: list[str], what: str) -> str:
    """The host rule's GRIDSPLIT_SPLIT for `hosts` (names or addresses), each resolved here to its
    addresses: the library compares addresses, not names."""
    addrs: list[str] = []
    for h in hosts:
        try:
            infos = socket.getaddrinfo(h, None, type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError) as e:
            raise GridsplitError(f"{what}: host {h!r} does not resolve ({e}); give its name or address") from None
        addrs += [a for a in dict.fromkeys(i[4][0].split("%")[0] for i in infos) if a not in addrs]
    if len(addrs) > MAX_SPLIT_HOSTS:
        raise GridsplitError(f"{what}: {len(addrs)} addresses; the node library takes {MAX_SPLIT_HOSTS} "
                             "(name the root host)")
    return "hosts:" + "+".join(addrs)


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--config", "config_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help="The node file (as written by `gridsplit gateway nodes-config`).")
@click.option("--lib", default=None, help="Path of libgridsplit.so (default: the built one).")
@click.option("--split", "split", default="policy", show_default=True, metavar="policy|all|root|hosts:HOST[+HOST]",
              help="policy: the config's split policy (site pairs listed in a direct_to stay direct); all: split "
                   "every cross-site connection; root: split only the connections with an end at rank 0's host (the "
                   "first of the launcher's hostfile or host list, or of srun's node list): its gathers and "
                   "broadcasts go through the gateways, exchanges among the other hosts stay direct "
                   "(docs/design/host-rule.md); hosts:HOST: the same for the hosts named.")
@click.option("--dry-run", is_flag=True, help="Print the command line it would run, and run nothing.")
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
def run(config_path: str, lib: str | None, split: str, dry_run: bool, cmd: tuple[str, ...]) -> None:
    """Run CMD (mpiexec, mpirun or srun) with the ranks' connections split at the gateways.

    \b
    The library and the node file go to the ranks only: -genv for MPICH's
    mpiexec, -x for Open MPI's mpirun, --export=ALL,... for Slurm's srun (merged
    with the job's own --export), so the launcher's own connections are left
    alone; any other command gets them in its environment.
      gridsplit run --config /etc/gridsplit/nodes.conf -- mpiexec -f hosts -n 64 ./app
      gridsplit run --config /etc/gridsplit/nodes.conf -- srun -N 4 -n 64 ./app
    """
    argv = list(cmd[1:] if cmd and cmd[0] == "--" else cmd)
    if not argv:
        raise GridsplitError("no command given; usage: gridsplit run --config FILE -- mpiexec ...")
    libpath = os.path.abspath(lib or sysdeps.built("libgridsplit.so"))
    if not os.path.isfile(libpath):
        # ld.so would only warn, per process, and run every rank unsplit.
        raise GridsplitError(f"--lib {libpath}: no such file; give the libgridsplit.so that `make build` leaves in build/")
    cfg = os.path.abspath(config_path)
    if any(check_nodes_file(cfg)) and not machine.lan_timers_supported():
        click.echo(f"gridsplit run: this kernel ({platform.release()}) lacks the LAN timers (TCP_RTO_MIN_US, "
                   "Linux 6.15+): if the nodes' kernels do too, their LAN connections keep Linux's 200 ms minimum "
                   "RTO (docs/design/lan-legs.md#lan-timers)", err=True)
    kind = launcher_kind(argv[0])
    if split == "root":
        found = first_host(kind, argv, dict(os.environ))
        if found is None:
            raise GridsplitError("--split root: the command names no hosts (no hostfile or host-list option of "
                                 "mpiexec/mpirun, no srun node list); give --split hosts:HOST, rank 0's host")
        click.echo(f"gridsplit run: rank 0's host is {found[0]} ({found[1]}): only its cross-site connections "
                   "are split", err=True)
        split = f"hosts:{found[0]}"
    mode = run_split_mode(split)
    env = {"LD_PRELOAD": libpath, "GRIDSPLIT_CONFIG": cfg, "GRIDSPLIT_SPLIT": mode}
    argv, environ, who = split_command(argv, env, dict(os.environ), kind)
    click.echo(f"gridsplit run: {who} {'gets' if who == 'command' else 'get'} LD_PRELOAD={libpath} GRIDSPLIT_CONFIG={cfg} GRIDSPLIT_SPLIT={mode}",
               err=True)
    if dry_run:
        extra = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) + " " if who == "command" else ""
        click.echo(extra + shlex.join(argv))
        return
    try:
        os.execvpe(argv[0], argv, environ)
    except FileNotFoundError:
        raise GridsplitError(f"{argv[0]}: not found in PATH") from None
