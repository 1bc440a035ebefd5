"""Finding the programs gridsplit drives, and refusing clearly when one is missing.

Every external tool is looked up here, with the Debian package (or make target)
that provides it, so that a missing tool gives one line naming the fix.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from .errors import GridsplitError

# tool -> how to get it
TOOLS = {
    "ip": "apt-get install iproute2",
    "tc": "apt-get install iproute2",
    "ethtool": "apt-get install ethtool",
    "ping": "apt-get install iputils-ping",
    "iperf3": "apt-get install iperf3",
    "unshare": "apt-get install util-linux",
    "nsenter": "apt-get install util-linux",
    "chrt": "apt-get install util-linux",
    "hostname": "apt-get install hostname",
    "sysctl": "apt-get install procps",
    "mpiexec.mpich": "apt-get install mpich libmpich-dev",
    "mpicc.mpich": "apt-get install mpich libmpich-dev",
    "mpirun.openmpi": "apt-get install openmpi-bin libopenmpi-dev",
    "mpicc.openmpi": "apt-get install openmpi-bin libopenmpi-dev",
    "haproxy": "apt-get install haproxy",
}

# Binaries this repository builds -> where `make build` leaves them.
# binary -> (where `make build` leaves it, environment variable that overrides it)
BUILT = {
    "gridsplit-wanem": ("target/release/gridsplit-wanem", "GRIDSPLIT_WANEM"),
    "gridsplitd": ("target/release/gridsplitd", "GRIDSPLITD"),
    "gsload": ("target/release/gsload", "GSLOAD"),
    "libgridsplit.so": ("build/libgridsplit.so", "GRIDSPLIT_LIB"),
}


def repo_root() -> Path | None:
    """The source checkout this package runs from (editable install), if any."""
    here = Path(__file__).resolve().parent
    root = here.parent.parent
    return root if (root / "Cargo.toml").exists() else None


def need_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        fix = TOOLS.get(name, f"install {name}")
        raise GridsplitError(f"required tool {name!r} not found in PATH; install it with: {fix} (or run `make demo`, which installs everything)")
    return path


def need_root(what: str) -> None:
    if os.geteuid() != 0:
        raise GridsplitError(f"{what} needs root (it creates network namespaces and qdiscs); run it as root, e.g. `sudo gridsplit ...`")


def override(name: str) -> Path | None:
    """The binary that `name`'s environment variable (BUILT) names, if it is set."""
    env = BUILT[name][1]
    if not os.environ.get(env):
        return None
    p = Path(os.environ[env])
    if not p.is_file():
        raise GridsplitError(f"{env}={p} does not exist; unset it or point it at a built {name}")
    return p


def build_path(name: str) -> Path | None:
    """Where this checkout's build leaves `name` (cargo's output in $CARGO_TARGET_DIR when that
    is set, as cargo itself does), whether or not it is built yet; None outside a checkout."""
    root = repo_root()
    if root is None:
        return None
    rel = BUILT[name][0]
    if rel.startswith("target/"):
        target = Path(os.environ.get("CARGO_TARGET_DIR") or "target")
        return (target if target.is_absolute() else root / target) / rel.removeprefix("target/")
    return root / rel


def own_build(name: str) -> tuple[Path, bool]:
    """For a benchmark that builds what it runs: the binary `name`'s variable names (True), else
    where this checkout's build leaves it, built yet or not (False)."""
    named = override(name)
    if named is not None:
        return named, True
    return build_path(name) or Path(BUILT[name][0]), False


def built(name: str) -> str:
    """Path of a binary built by this repository, or of the one its variable names."""
    p = override(name)
    if p is not None:
        return str(p)
    p = build_path(name)
    if p is not None and p.exists():
        return str(p)
    found = shutil.which(name)
    if found:
        return found
    raise GridsplitError(f"{name} is not built; run `make build` in the gridsplit checkout (or set {BUILT[name][1]})")


def mpi_program(impl: str, prog: str) -> str:
    """Path of one of the repository's MPI programs built for `impl`."""
    root = repo_root()
    if root is not None:
        p = root / "build" / "mpi" / impl / prog
        if p.exists():
            return str(p)
    raise GridsplitError(f"MPI program {prog!r} for {impl} is not built; run `make build`")
