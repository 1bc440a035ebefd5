"""The applications `gridsplit bench app` runs: a user's command, or a preset from the ecosystem.

Presets are installed by the project's setup (`make apps`), never vendored:

- `lammps-lj`, `lammps-pppm`: Debian's LAMMPS (`lmp`, built with Open MPI) on two
  inputs of ours (bench/apps/): a Lennard-Jones melt (halo exchange each step) and
  a charged system with PPPM long-range electrostatics (halo exchange plus the
  3-D FFTs' all-to-all transposes, and a reduction every step);
- `hpcc`: Debian's HPC Challenge (`hpcc`, Open MPI) with an input sized for the
  lab; its MPI parts' figures (PTRANS, MPIRandomAccess, MPIFFT, b_eff latency and
  bandwidth) and verification are read from its hpccoutf.txt;
- `mpi4py`: mpi4py's own test suite from its PyPI source distribution, built
  against each MPI on first use into a cache outside the source tree
  (~/.cache/gridsplit, or $GRIDSPLIT_CACHE); the outcome of every test on every
  rank is recorded, so the pass/fail/skip sets of direct and split can be diffed.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from rich.console import Console

from ..errors import GridsplitError

DATA = Path(__file__).resolve().parent / "apps"
MAKE_APPS = "`make apps` in the gridsplit checkout"


def cache_dir() -> Path:
    return Path(os.environ.get("GRIDSPLIT_CACHE") or Path.home() / ".cache" / "gridsplit")


@dataclass(frozen=True)
class App:
    """One application as run in each mode. Patterns are Python regexes searched in the
    job's stdout and stderr (and `output_file`, written in the run's directory)."""

    name: str
    argv: tuple[str, ...]
    preset: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    # First group (or the group named `time`): the app's own time in seconds; the last match counts.
    time_pattern: str | None = None
    # Found: the run verified itself.
    pass_pattern: str | None = None
    # Its matches must be the same in every run (e.g. a final energy): a correctness check.
    same_pattern: str | None = None
    # Figures to record: NAME for a NAME=VALUE line (hpccoutf.txt's summary), or (NAME, REGEX)
    # whose first group is the value (its last match counts).
    figures: tuple[str | tuple[str, str], ...] = ()
    output_file: str | None = None
    files: tuple[Path, ...] = ()  # copied into the run's directory
    # Reads the run's directory after the job: extra row fields (e.g. mpi4py's outcomes).
    collect: Callable[[Path, int], dict[str, Any]] | None = field(default=None, compare=False)
    timeout: float = 600.0
    ranks: int = 4


# -- which MPI a program is built for ----------------------------------------------

def linked_mpi(path: str) -> str | None:
    """"openmpi" or "mpich" from the MPI library a binary links (ldd), or None."""
    try:
        out = subprocess.run(["ldd", path], text=True, capture_output=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    if re.search(r"libmpi\.so\.4\d|libopen-rte|libopen-pal", out):
        return "openmpi"
    if re.search(r"libmpich\.so|libmpi\.so\.12", out):
        return "mpich"
    return None


def check_built_for(app: App, impl: str, binary: str | None = None) -> None:
    """One line when the app's binary links another MPI than the one chosen."""
    exe = binary or shutil.which(app.argv[0]) or app.argv[0]
    if not os.path.exists(exe):
        raise GridsplitError(f"{app.name}: program {app.argv[0]!r} not found (give a path, or install it)")
    got = linked_mpi(exe)
    if got and got != impl:
        raise GridsplitError(f"{app.name}: {exe} is built for {got}, not {impl}; run it with --impl {got}")


# -- presets ------------------------------------------------------------------------

def _need(binary: str, package: str, preset: str) -> str:
    path = shutil.which(binary)
    if path is None:
        raise GridsplitError(f"preset {preset} needs Debian's {package} package ({binary} not found): "
                             f"apt-get install {package}, or {MAKE_APPS}")
    return path


# The last thermo line before "Loop time": the final state, to be identical in every run.
LAMMPS_THERMO_LAST = r"(?m)^([ \t]*\d+(?:[ \t]+-?[0-9.]+(?:[eE][-+]?\d+)?)+)[ \t]*\nLoop time"


# LAMMPS's "MPI task timing breakdown": each section's average time over the ranks (s), so
# that a result shows where a split run's extra time goes (communication or computation).
LAMMPS_FIGURES = tuple((f"{sec}_s", rf"(?m)^{sec}\s*\|\s*[0-9.eE+-]+\s*\|\s*([0-9.eE+-]+)")
                       for sec in ("Pair", "Kspace", "Neigh", "Comm", "Output", "Modify", "Other"))


def _lammps(preset: str, infile: str, impl: str, con: Console) -> App:
    lmp = _need("lmp", "lammps", preset)
    app = App(preset, ("lmp", "-log", "none", "-in", infile),
              preset=preset, time_pattern=r"Loop time of ([0-9.eE+-]+) on", pass_pattern=r"Total wall time:",
              same_pattern=LAMMPS_THERMO_LAST, figures=LAMMPS_FIGURES, files=(DATA / infile,), timeout=600,
              ranks=4)
    check_built_for(app, impl, lmp)
    return app


HPCC_FIGURES = ("PTRANS_GBs", "PTRANS_time", "PTRANS_residual", "MPIRandomAccess_GUPs", "MPIRandomAccess_time",
                "MPIRandomAccess_ErrorsFraction", "MPIRandomAccess_LCG_GUPs", "MPIFFT_Gflops", "MPIFFT_maxErr",
                "MaxPingPongLatency_usec", "RandomlyOrderedRingLatency_usec", "MinPingPongBandwidth_GBytes",
                "NaturallyOrderedRingBandwidth_GBytes", "RandomlyOrderedRingBandwidth_GBytes", "HPL_Tflops",
                "HPL_time")


def _hpcc(impl: str, con: Console) -> App:
    hpcc = _need("hpcc", "hpcc", "hpcc")
    app = App("hpcc", ("hpcc",), preset="hpcc", pass_pattern=r"(?m)^Success=1$", figures=HPCC_FIGURES,
              output_file="hpccoutf.txt", files=(DATA / "hpccinf.txt",), timeout=900, ranks=4,
              collect=_hpcc_checks)
    check_built_for(app, impl, hpcc)
    return app


HPCC_CHECKED = ("HPL", "PTRANS", "MPIRandomAccess", "MPIRandomAccess_LCG", "MPIFFT")


def _hpcc_checks(workdir: Path, ranks: int) -> dict[str, Any]:
    """HPCC's own verification, from hpccoutf.txt: each part's PASSED/FAILED (HPL, PTRANS) or
    "(passed)"/"(failed)" (RandomAccess) lines; MPIFFT by its reported maximum error. A part
    that printed no verdict counts as failed (e.g. PTRANS skipped for its input)."""
    try:
        text = (workdir / "hpccoutf.txt").read_text(errors="replace")
    except OSError:
        return {"checks": {}, "verified": False}
    checks: dict[str, str] = {}
    section = None
    for line in text.splitlines():
        m = re.match(r"Begin of (\w+) section", line)
        if m:
            section = m.group(1)
        m = re.search(r"\b(PASSED|FAILED)\b|\((passed|failed)\)", line)
        if m and section in HPCC_CHECKED:
            verdict = (m.group(1) or m.group(2)).lower()
            checks[section] = "failed" if "failed" in (verdict, checks.get(section)) else "passed"
    m = re.search(r"(?m)^MPIFFT_maxErr=(\S+)$", text)
    try:
        checks["MPIFFT"] = "passed" if m and float(m.group(1)) < 1e-10 else "failed"
    except ValueError:
        checks["MPIFFT"] = "failed"
    checks = {k: checks.get(k, "no verdict") for k in HPCC_CHECKED}
    return {"checks": checks, "verified": all(v == "passed" for v in checks.values())}


# -- mpi4py ------------------------------------------------------------------------------

M4P_EXCLUDE = ("spawn", "dynproc")  # MPI_Comm_spawn and connect/accept: process management, not the network
# The suite's modules that move data between ranks, run by default: the whole suite takes tens of
# minutes across the lab's WAN. `bench app --mpi4py-tests all` runs all of it, or names other modules.
M4P_MODULES = ("p2p_obj", "cco_obj", "comm", "msgzero")


def mpi4py_selection(spec: str | None = None) -> list[str]:
    """main.py options choosing the modules of `spec` ("all", or module names; None: M4P_MODULES):
    -i per module (none: the whole suite), and the exclusions."""
    spec = (spec or ",".join(M4P_MODULES)).strip()
    mods = [] if spec == "all" else [m.strip().removeprefix("test_") for m in spec.split(",") if m.strip()]
    return sum((["-i", rf"test_{re.escape(m)}\.py$"] for m in mods), []) + sum((["-e", e] for e in M4P_EXCLUDE), [])


def mpi4py_sdist(con: Console) -> Path:
    """mpi4py's source distribution in the cache, downloaded from PyPI with pip once."""
    d = cache_dir() / "sdist"
    found = sorted(glob.glob(str(d / "mpi4py-*.tar.gz")))
    if found:
        return Path(found[-1])
    d.mkdir(parents=True, exist_ok=True)
    con.print(f"[dim]·[/dim] downloading mpi4py's source distribution into {d}")
    cp = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                         "mpi4py", "-d", str(d)], text=True, capture_output=True)
    found = sorted(glob.glob(str(d / "mpi4py-*.tar.gz")))
    if cp.returncode != 0 or not found:
        last = (cp.stderr.strip().splitlines() or ["no output"])[-1]
        raise GridsplitError(f"preset mpi4py: pip download of mpi4py's sdist failed ({last}); "
                             f"run {MAKE_APPS} where PyPI is reachable")
    return Path(found[-1])


def mpi4py_build(impl: str, con: Console) -> tuple[Path, Path]:
    """(site dir with mpi4py built against `impl`, its test directory), building once per MPI and version."""
    sdist = mpi4py_sdist(con)
    version = sdist.name[len("mpi4py-"):-len(".tar.gz")]
    root = cache_dir() / "mpi4py"
    src = root / f"{version}-src"
    if not (src / "test" / "main.py").exists():
        root.mkdir(parents=True, exist_ok=True)
        with tarfile.open(sdist) as t:
            members = [m for m in t.getmembers() if m.name.startswith(f"mpi4py-{version}/test/")]
            t.extractall(root / ".extract", members=members, filter="data")
        shutil.rmtree(src, ignore_errors=True)
        (root / ".extract" / f"mpi4py-{version}").rename(src)
        shutil.rmtree(root / ".extract", ignore_errors=True)
    site = root / f"{version}-{impl}"
    if not glob.glob(str(site / "mpi4py" / "MPI*.so")):
        cc = f"mpicc.{impl}"
        if shutil.which(cc) is None:
            raise GridsplitError(f"preset mpi4py: {cc} not found; install {impl} (`make build` installs both MPIs)")
        con.print(f"[dim]·[/dim] building mpi4py {version} against {impl} into {site} (a few minutes, once)")
        tmp = root / f".build-{version}-{impl}"
        shutil.rmtree(tmp, ignore_errors=True)
        log = root / f"build-{version}-{impl}.log"
        with log.open("w") as f:
            cp = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-binary", ":all:",
                                 "--target", str(tmp), str(sdist)], env={**os.environ, "MPICC": cc},
                                stdout=f, stderr=subprocess.STDOUT)
        if cp.returncode != 0:
            raise GridsplitError(f"preset mpi4py: building mpi4py against {impl} failed; see {log}")
        shutil.rmtree(site, ignore_errors=True)
        tmp.rename(site)
    so = glob.glob(str(site / "mpi4py" / "MPI*.so"))
    got = linked_mpi(so[0]) if so else None
    if got and got != impl:
        raise GridsplitError(f"preset mpi4py: {site} is built for {got}, not {impl}; remove it to rebuild")
    return site, src / "test"


def _mpi4py(impl: str, con: Console, tests_spec: str | None = None) -> App:
    site, tests = mpi4py_build(impl, con)
    return App("mpi4py", (sys.executable, str(DATA / "mpi4py_suite.py"), str(tests), ".",
                          *mpi4py_selection(tests_spec)),
               preset="mpi4py",
               env=(("PYTHONPATH", str(site)), ("PYTHONDONTWRITEBYTECODE", "1")),
               time_pattern=r"mpi4py suite: \d+ tests in ([0-9.]+) s", collect=_mpi4py_outcomes, timeout=1200,
               ranks=4)


def _mpi4py_outcomes(workdir: Path, ranks: int) -> dict[str, Any]:
    """Each test's outcome over the ranks: `tests` maps outcome -> sorted test ids, where a test
    counts as failed if it failed on any rank, skipped if skipped on any (and failed on none)."""
    per_rank = {}
    for p in sorted(workdir.glob("mpi4py-*.json")):
        try:
            d = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        per_rank[d["rank"]] = d["outcomes"]
    merged: dict[str, str] = {}
    for outcomes in per_rank.values():
        for tid, o in outcomes.items():
            prev = merged.get(tid)
            order = ("failed", "skipped", "xfail", "passed")
            if prev is None or order.index(o if o in order else "failed") < order.index(prev):
                merged[tid] = o if o in order else "failed"
    tests = {k: sorted(t for t, o in merged.items() if o == k) for k in ("passed", "failed", "skipped", "xfail")}
    missing = sorted(set(range(ranks)) - set(per_rank))
    return {"tests": tests, "tests_ranks_reported": sorted(per_rank),
            "verified": not tests["failed"] and not missing and bool(merged)}


PRESETS: dict[str, Callable[..., App]] = {
    "lammps-lj": lambda impl, con: _lammps("lammps-lj", "lj-melt.in", impl, con),
    "lammps-pppm": lambda impl, con: _lammps("lammps-pppm", "charged-pppm.in", impl, con),
    "hpcc": _hpcc,
    "mpi4py": _mpi4py,
}


def preset_names(spec: str) -> list[str]:
    names = list(PRESETS) if spec == "all" else [s.strip() for s in spec.split(",") if s.strip()]
    for n in names:
        if n not in PRESETS:
            raise GridsplitError(f"--preset {n!r}: no such preset; choose from {', '.join(PRESETS)} or all")
    return names
