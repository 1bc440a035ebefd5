"""`gridsplit lab fault`: WAN events that look real, and that are always undone."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import PREFIX, gridsplit, netns_list

from gridsplit.errors import GridsplitError
from gridsplit.lab import fault as F
from gridsplit.topology_file import load_topology

STATE = Path(os.environ.get("GRIDSPLIT_RUN_DIR", "/run/gridsplit")) / "lab" / PREFIX / "state.json"


def state() -> dict:
    return json.loads(STATE.read_text())


def faults() -> list[dict]:
    return json.loads(gridsplit("lab", "status", "--json").stdout)["faults"]


def ping(count: int, interval: float = 0.05, src: str = "east-1", dst: str = "10.71.2.1") -> subprocess.CompletedProcess:
    """ICMP from a lab host, with a 1 s wait for the last reply."""
    return subprocess.run(["ip", "netns", "exec", f"{PREFIX}-{src}", "ping", "-n", "-c", str(count), "-i", str(interval),
                           "-W", "1", dst], text=True, capture_output=True, timeout=60)


def received(cp: subprocess.CompletedProcess) -> int:
    return int(re.search(r"(\d+) received", cp.stdout).group(1))


def rtts(cp: subprocess.CompletedProcess) -> list[float]:
    return [float(x) for x in re.findall(r"time=([\d.]+) ms", cp.stdout)]


def rules(site: str) -> str:
    return subprocess.run(["ip", "-n", f"{PREFIX}-{site}-rt", "rule"], text=True, capture_output=True).stdout


def wait_for(cond, seconds: float, what: str):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"not within {seconds} s: {what}")


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


# -- no lab needed -----------------------------------------------------------


class _State:
    def __init__(self, topo):
        self.topo = topo


def test_pair_and_site_resolution_refuses_what_the_lab_does_not_have():
    topo = load_topology("mini")
    label, links = F.resolve_links(_State(topo), "west:east", None)
    assert label == "west:east" and [w.name for w in links] == ["east-west"]
    no_wan = _State(replace(topo, wans=()))
    with pytest.raises(GridsplitError, match=r"--pair 'east:west': no WAN link between east and west; links: none"):
        F.resolve_links(no_wan, "east:west", None)
    with pytest.raises(GridsplitError, match=r"site 'east' has no WAN link"):
        F.resolve_links(no_wan, None, "east")
    with pytest.raises(GridsplitError, match=r"no site named 'north' in this lab; sites: east, west"):
        F.resolve_links(_State(topo), "east:north", None)
    with pytest.raises(GridsplitError, match=r"either --pair SITE_A:SITE_B or --site SITE"):
        F.resolve_links(_State(topo), None, None)
    with pytest.raises(GridsplitError, match=r"over 0"):
        F.check_seconds(-1)


def test_loss_program_threshold():
    assert F.loss_bytecode(100) == "1,6 0 0 2"
    code = F.loss_bytecode(25).split(",")
    assert code[0] == "4" and code[1] == f"32 0 0 {0xFFFFF000 + 56}" and code[2] == f"53 0 1 {2 ** 30}"


def test_no_lab_is_one_line():
    cp = subprocess.run([sys.executable, "-m", "gridsplit", "lab", "fault", "blackout", "--pair", "east:west",
                         "--seconds", "3"], text=True, capture_output=True, env={**os.environ, "GRIDSPLIT_LAB_PREFIX": "gstx"})
    assert cp.returncode == 2 and "Traceback" not in cp.stderr, cp.stderr
    assert cp.stderr.strip() == "gridsplit: error: no lab is up (prefix 'gstx'); start one with `gridsplit lab up`"


# -- on a lab ----------------------------------------------------------------


@pytest.mark.parametrize("args, says", [
    (["blackout", "--pair", "east:mars", "--seconds", "2"], "--pair 'east:mars': no site named 'mars' in this lab; sites: east, west"),
    (["blackout", "--pair", "east-west", "--seconds", "2"], "give two sites as SITE_A:SITE_B"),
    (["blackout", "--site", "mars", "--seconds", "2"], "--site 'mars': no site named 'mars'"),
    (["blackout", "--pair", "east:west", "--seconds", "-1"], "--seconds -1: give a duration in seconds, over 0"),
    (["loss", "--pair", "east:west", "--percent", "120", "--seconds", "2"], "--percent 120: give a loss over 0 and at most 100"),
    (["delay", "--pair", "east:west", "--add-ms", "0", "--seconds", "2"], "--add-ms 0: give an added delay over 0"),
    (["kill-gateway", "--site", "mars"], "--site 'mars': no site named 'mars'"),
])
def test_bad_input_is_one_line_and_changes_nothing(lab, args, says):
    cp = gridsplit("lab", "fault", *args, check=False)
    assert cp.returncode == 2 and "Traceback" not in cp.stderr, cp.stderr
    assert cp.stderr.count("\n") == 1 and says in cp.stderr, cp.stderr
    assert faults() == []


def test_blackout_drops_silently_then_the_path_comes_back(lab):
    # 4 s, the rules checked before the ping: on a loaded VM the ping alone has outlasted 2.5 s, and the
    # rules were already gone when read after it.
    cp = gridsplit("lab", "fault", "blackout", "--pair", "east:west", "--seconds", "4", "--background")
    assert "undo process" in " ".join(cp.stdout.split())
    [f] = faults()
    assert f["kind"] == "blackout" and f["target"] == "east:west" and f["undo_alive"]
    assert 0 < f["remaining_s"] <= 4 and f["ends_at"] - f["started_at"] == pytest.approx(4, abs=0.01)
    assert f"{F.FAULT_BASE + f['id']}:" in rules("east") and f"{F.FAULT_BASE + f['id']}:" in rules("west")
    p = ping(5, 0.1)
    # Gone without a word: no reply, no ICMP error ("Destination Host Unreachable"), ping exits 1 (not 2).
    assert received(p) == 0 and "nreachable" not in p.stdout + p.stderr and p.returncode == 1, p.stdout + p.stderr
    wait_for(lambda: faults() == [], 7, "the blackout ends on time")
    assert not alive(f["undo_pid"])
    assert "lookup 1" not in rules("east").replace("lookup local", "")
    assert received(ping(5, 0.05)) == 5


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_fault_is_undone_at_once(lab, sig):
    p = subprocess.Popen([sys.executable, "-m", "gridsplit", "lab", "fault", "blackout", "--site", "east",
                          "--seconds", "60"], text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    wait_for(lambda: STATE.exists() and state().get("faults"), 10, "the fault is recorded")
    [f] = state()["faults"]
    wait_for(lambda: f"{F.FAULT_BASE + f['id']}:" in rules("west"), 5, "the blackout is in place")
    t0 = time.monotonic()
    p.send_signal(sig)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 130 and "Traceback" not in err, out + err
    assert time.monotonic() - t0 < 10 and "(interrupted)" in " ".join(out.split())
    assert faults() == [] and not alive(f["undo_pid"])
    assert f"{F.FAULT_BASE + f['id']}:" not in rules("west") + rules("east")
    assert received(ping(3, 0.05)) == 3


def test_fault_outlives_a_killed_command(lab):
    """The undo process, not the command, owns the undo: SIGKILL the command and the fault still ends on time."""
    p = subprocess.Popen([sys.executable, "-m", "gridsplit", "lab", "fault", "loss", "--pair", "east:west",
                          "--percent", "100", "--seconds", "3"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: STATE.exists() and state().get("faults") and state()["faults"][0]["undo_pid"], 10, "the fault is recorded")
    p.kill()
    p.wait()
    assert received(ping(3, 0.1)) == 0
    wait_for(lambda: faults() == [], 6, "the loss ends on time")
    assert received(ping(3, 0.05)) == 3


def test_loss_burst_loses_packets_then_stops(lab):
    gridsplit("lab", "fault", "loss", "--pair", "east:west", "--percent", "40", "--seconds", "30", "--background")
    lossy = ping(100, 0.01)
    # 40 % each way loses 64 % of round trips; 100 probes keep well within these bounds.
    assert 35 <= 100 - received(lossy) <= 90, lossy.stdout
    assert "nreachable" not in lossy.stdout
    cp = gridsplit("lab", "fault", "clear")
    assert "loss 40 % on east:west: undone" in " ".join(cp.stdout.split())
    assert received(ping(30, 0.01)) >= 29
    out = subprocess.run(["tc", "-n", f"{PREFIX}-east-rt", "qdisc", "show", "dev", "to-west"], text=True, capture_output=True).stdout
    assert "clsact" not in out


def test_delay_spike_adds_to_the_rtt_then_goes(lab):
    before = min(rtts(ping(5, 0.05)))
    gridsplit("lab", "fault", "delay", "--pair", "east:west", "--add-ms", "20", "--seconds", "30", "--background")
    during = rtts(ping(5, 0.05))
    assert len(during) == 5 and min(during) >= before + 39, (before, during)
    stats = json.loads((STATE.parent / "wanem-stats.json").read_text())
    assert {x["extra_delay_us"] for x in stats["links"]} == {20000}
    gridsplit("lab", "fault", "clear")
    after = rtts(ping(5, 0.05))
    assert max(after) < before + 5, (before, after)


def test_kill_gateway_kills_that_gateway_and_restarts_it(lab):
    pids = state()["pids"]
    east, west = pids["gw-east"], pids["gw-west"]
    assert alive(east) and alive(west)
    cp = gridsplit("lab", "fault", "kill-gateway", "--site", "east", "--restart-after", "1")
    assert "undone" in " ".join(cp.stdout.split()), cp.stdout
    assert not alive(east) and alive(west)
    new = state()["pids"]
    assert new["gw-west"] == west and new["gw-east"] != east and alive(new["gw-east"])
    assert faults() == []
    # Without --restart-after it stays dead, shown as a fault, until `fault clear`.
    gridsplit("lab", "fault", "kill-gateway", "--site", "west")
    assert not alive(west) and alive(new["gw-east"])
    [f] = faults()
    assert f["kind"] == "kill-gateway" and f["ends_at"] is None
    cp = gridsplit("lab", "fault", "kill-gateway", "--site", "west", check=False)
    assert cp.returncode == 2 and "is not running; `gridsplit lab fault clear` restarts it" in " ".join(cp.stderr.split())
    gridsplit("lab", "fault", "clear")
    assert faults() == [] and alive(state()["pids"]["gw-west"])


def test_lab_down_removes_faults_and_undo_processes(lab):
    """Last in this module: it takes the lab down."""
    gridsplit("lab", "fault", "blackout", "--pair", "east:west", "--seconds", "60", "--background")
    gridsplit("lab", "fault", "delay", "--pair", "east:west", "--add-ms", "5", "--seconds", "60", "--background")
    undoers = [f["undo_pid"] for f in faults()]
    assert len(undoers) == 2 and all(alive(p) for p in undoers)
    t0 = time.monotonic()
    gridsplit("lab", "down")
    assert time.monotonic() - t0 < 10
    assert not any(alive(p) for p in undoers)
    assert not [ns for ns in netns_list() if ns.startswith(PREFIX + "-")] and not STATE.exists()
