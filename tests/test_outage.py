"""WAN outages in the lab, split mode: a checked MPI all-to-all rides out a
blackout shorter than the gateways' outage limit (the WAN link reconnects and
resumes its flows), and a longer one ends the job with an error, not a hang.

The lab is `mini` with `outage_limit_s = 15`, so that both cases fit in a
test run. Each job is a real Open MPI job whose payloads are verified
(`--check`); the blackout is `gridsplit lab fault blackout` (packets silently
dropped, as on a path that went dark).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import gridsplit, needs_root

ROOT = Path(__file__).resolve().parent.parent
COLL = ROOT / "build" / "mpi" / "openmpi" / "coll"
LIMIT_S = 15
HOSTS = "east-1,east-2,west-1,west-2"


@pytest.fixture(scope="module")
def outage_lab(tmp_path_factory):
    needs_root()
    preset = (ROOT / "python" / "gridsplit" / "presets" / "mini.toml").read_text()
    topo = tmp_path_factory.mktemp("outage") / "mini-outage.toml"
    assert "[gateways]\n" in preset   # mini's own table (a TOML table is declared once)
    topo.write_text(preset.replace('name = "mini"', 'name = "mini-outage"')
                    .replace("[gateways]\n", f"[gateways]\noutage_limit_s = {LIMIT_S}\n", 1))
    gridsplit("lab", "down")
    gridsplit("lab", "up", "--topology", str(topo))
    yield
    gridsplit("lab", "down")


def gateway_status(site: str) -> dict:
    return json.loads(gridsplit("gateway", "status", "--lab", site, "--json").stdout)


def start_job(reps: int, timeout: float) -> subprocess.Popen:
    """A checked all-to-all of 100 KB per pair over both sites, through the gateways."""
    return subprocess.Popen(
        [sys.executable, "-m", "gridsplit", "lab", "mpirun", "--impl", "openmpi", "--split", "--hosts", HOSTS,
         "--timeout", str(timeout), "--", str(COLL), "-o", "alltoall", "-s", "100K", "-r", str(reps), "--check"],
        text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def blackout(seconds: float) -> None:
    gridsplit("lab", "fault", "blackout", "--pair", "east:west", "--seconds", str(seconds), "--background")


def test_a_checked_alltoall_survives_a_10s_blackout(outage_lab):
    before = gateway_status("east")["counters"]
    job = start_job(reps=400, timeout=120)
    time.sleep(2.0)
    assert job.poll() is None, "the job ended before the blackout: make it longer"
    t0 = time.monotonic()
    blackout(10)
    out, err = job.communicate(timeout=150)
    took = time.monotonic() - t0
    assert job.returncode == 0, f"job failed after the blackout ({took:.1f} s):\n{out}\n{err}"
    assert "mismatch" not in (out + err).lower()
    after = gateway_status("east")
    c = after["counters"]
    # The gateways noticed the silence, reconnected and resumed: no flow was reset.
    assert c["wan_connections_lost"] > before["wan_connections_lost"], c
    assert c["wan_reconnects"] > before["wan_reconnects"], c
    assert c["flows_reset_outage"] == before["flows_reset_outage"], c
    assert after["links"][0]["state"] == "up"


def test_a_blackout_past_the_outage_limit_ends_the_job_with_an_error(outage_lab):
    """The ranks end themselves, saying why, within the limit plus 10 s; the
    launcher then ends the job with an error. It needs the path back to stop
    the far site's daemons (Open MPI's control plane crosses the same WAN), so
    the job as a whole ends soon after the blackout, not at a timeout."""
    blackout_s = LIMIT_S + 20
    job = start_job(reps=100000, timeout=200)
    lines: list[tuple[float, str]] = []
    reader = threading.Thread(target=lambda: [lines.append((time.monotonic(), l)) for l in job.stderr], daemon=True)
    reader.start()
    time.sleep(2.0)
    assert job.poll() is None, "the job ended before the blackout"
    t0 = time.monotonic()
    blackout(blackout_s)
    try:
        job.wait(timeout=blackout_s + 30)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)  # the launcher and ranks we started, by their group
        job.wait()
        pytest.fail(f"the job still ran 30 s after a {blackout_s} s blackout (outage_limit_s={LIMIT_S}):\n"
                    + "".join(l for _, l in lines[-30:]))
    reader.join(timeout=5)
    took = time.monotonic() - t0
    err = "".join(l for _, l in lines)
    assert job.returncode != 0, f"the job 'succeeded' through a {blackout_s} s blackout:\n{err}"
    assert "did not finish" not in err, f"the job hung until lab mpirun's timeout:\n{err}"
    lost = [t - t0 for t, l in lines if "lost: Connection reset by peer" in l and "status 75" in l]
    assert lost, f"no rank said why it ended:\n{err[-3000:]}"
    assert min(lost) <= LIMIT_S + 10, f"first rank ended {min(lost):.1f} s into the blackout (limit {LIMIT_S} s)"
    c = gateway_status("east")["counters"]
    assert c["flows_reset_outage"] > 0 and c["sessions_expired"] > 0, c
    print(f"ranks ended {min(lost):.1f}-{max(lost):.1f} s into the blackout (outage_limit_s {LIMIT_S}), "
          f"the job {took:.1f} s (blackout {blackout_s} s), exit {job.returncode}")
    gridsplit("lab", "fault", "clear")


def test_a_killed_gateway_ends_the_job_with_an_error(outage_lab):
    """A gateway process that dies cannot resume: its LAN legs are reset by its
    kernel (SO_LINGER 0 while relaying), the other gateway ends the session when
    the dead one refuses its SYN, and every rank ends itself; no hang."""
    job = start_job(reps=100000, timeout=200)
    time.sleep(3.0)
    assert job.poll() is None, "the job ended before the gateway was killed"
    t0 = time.monotonic()
    gridsplit("lab", "fault", "kill-gateway", "--site", "west", "--restart-after", "20", "--background")
    try:
        out, err = job.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        out, err = job.communicate()
        pytest.fail(f"the job still ran 30 s after its west gateway was killed:\n{err[-3000:]}")
    took = time.monotonic() - t0
    assert job.returncode != 0, f"the job 'succeeded' without its gateway:\n{err}"
    assert "status 75" in err, err[-3000:]
    print(f"job ended {took:.1f} s after the west gateway was killed, exit {job.returncode}")
    gridsplit("lab", "fault", "clear")
