"""netcheck: diagnosis rules on recorded iperf3 JSON, bad input, and a small real lab.

The recordings in tests/data/netcheck/ are real iperf3 runs made in the lab by
tests/data/netcheck/record.sh (each file holds the raw iperf3 JSON and the context
netcheck measured with it: ping RTT, capacity, both hosts' settings). The lab
test reproduces Guillier et al.'s finding on a 1 Gb/s x 10 ms path: untuned hosts
(170 KB buffer maxima) are window-limited and told how to fix it; tuned, the
same path is OK.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import PREFIX, dropbear_hosts, gridsplit, needs_root
from gridsplit.netcheck import diagnose as D
from gridsplit.netcheck import measure, tuning
from gridsplit.netcheck.runner import parse_facts, parse_ping, rtt_stats

DATA = Path(__file__).parent / "data" / "netcheck"
ROOT = Path(__file__).parent.parent


def recorded(name: str) -> tuple[dict, dict]:
    d = json.loads((DATA / name).read_text())
    return d["iperf3"], d["context"]


def judge(name: str, **override) -> tuple[dict, dict, dict]:
    raw, ctx = recorded(name)
    flow = D.summarize_iperf(raw)
    if "emulator" in override:
        flow["emulator"] = override.pop("emulator")
    src, dst = ctx["src_facts"], ctx["dst_facts"]
    if ctx["phase"] != "untuned" and ctx.get("tuned_buffer_bytes"):
        # As measure.finish_cell does: the tuned flows ran with raised maxima.
        n = ctx["tuned_buffer_bytes"]
        src = {**src, "net.ipv4.tcp_wmem": src["net.ipv4.tcp_wmem"][:2] + [n]}
        dst = {**dst, "net.ipv4.tcp_rmem": dst["net.ipv4.tcp_rmem"][:2] + [n]}
    src = {**src, **override.pop("src", {})}
    dst = {**dst, **override.pop("dst", {})}
    cap = override.pop("capacity_mbps", ctx["capacity_mbps"])
    mss = flow.get("mss", 1448)
    kw = dict(rtt=ctx["rtt"], capacity_mbps=cap, max_goodput_mbps=cap * mss / (mss + measure.LAB_OVERHEAD),
              src=src, dst=dst)
    kw.update(override)
    return D.diagnose(flow, **kw), flow, ctx


# ---------------------------------------------------------------------------
# Rules on recorded iperf3 JSON (fast, no lab)
# ---------------------------------------------------------------------------


def test_untuned_170kb_on_1g_10ms_is_window_limited():
    v, flow, ctx = judge("window_untuned_1g.json")
    assert ctx["src_facts"]["net.ipv4.tcp_wmem"][2] == 174760
    assert v["verdict"] == "window-limited", v["why"]
    ev = v["evidence"]
    assert v["fraction"] < 0.2
    # Primet 2006's insufficient-buffer signature: throughput ~ window / RTT.
    assert 0.75 <= flow["goodput_mbps"] / ev["window_bound_mbps"] <= 1.15
    assert ev["bdp_bytes"] > 5 * 174760 / 1.5
    assert "Raise the buffer maxima" in v["why"]


def test_tuned_is_ok():
    v, flow, ctx = judge("ok_tuned.json")
    assert ctx["tuned_buffer_bytes"] >= 2 * v["evidence"]["bdp_bytes"]
    assert v["verdict"] == "ok", v["why"]
    assert v["fraction"] >= 0.8


def test_random_loss_is_loss_limited_not_window_limited():
    v, flow, ctx = judge("loss_tuned.json")
    assert flow["retransmits"] > 0
    assert v["verdict"] == "loss-limited", v["why"]
    assert v["evidence"]["mathis_mbps"] < v["evidence"]["max_goodput_mbps"]
    assert "Mathis" in v["why"]


def test_cpu_bound_end_is_host_limited():
    # A recorded flow, judged as if its sender's iperf3 had used a whole CPU
    # (iperf3 -l 64 / -l 1 did not saturate a core on this VM to record one).
    big = {"net.ipv4.tcp_rmem": [4096, 131072, 4194304], "net.ipv4.tcp_wmem": [4096, 16384, 4194304]}
    v, flow, ctx = judge("ok_tuned.json", capacity_mbps=1000, src=big, dst=big)
    assert v["verdict"] == "unexplained", v["why"]
    raw, _ = recorded("ok_tuned.json")
    flow = {**D.summarize_iperf(raw), "cpu_sender_percent": 97.0}
    v = D.diagnose(flow, rtt=ctx["rtt"], capacity_mbps=1000, max_goodput_mbps=956, src=big, dst=big)
    assert v["verdict"] == "host-limited" and "97 % of a CPU" in v["why"], v["why"]


def test_backlog_ceiling_of_seed_001():
    # Guillier et al. 2006 §3: netdev_max_backlog 300 at HZ 250 carries 300 x 250 x 1500 B/s = 900 Mb/s.
    assert D.backlog_ceiling_mbps(300, 250) == pytest.approx(900.0)
    assert tuning.backlog_for(1000, 250) == 1000     # the seed's advice for 1 GbE
    # The recorded OK flow (~90 Mb/s on a 100 Mb/s path) on hosts whose backlog
    # allows only 30 x 250 x 1500 B/s = 90 Mb/s, behind a 1 Gb/s NIC: at the ceiling.
    host = {"net.core.netdev_max_backlog": 30, "hz": 250,
            "net.ipv4.tcp_rmem": [4096, 131072, 4194304], "net.ipv4.tcp_wmem": [4096, 16384, 4194304]}
    v, flow, ctx = judge("ok_tuned.json", src=host, dst=host, capacity_mbps=1000)
    assert v["verdict"] == "host-limited", v["why"]
    assert "netdev_max_backlog" in v["why"]
    # On its own 100 Mb/s path the same flow is OK, with the latent limit noted.
    v, _, _ = judge("ok_tuned.json", src=host, dst=host)
    assert v["verdict"] == "ok"
    assert any("90 Mb/s" in n for n in v["notes"])


def test_emulator_falling_behind_is_blamed_not_the_path():
    # Ten recorded flows on what would be a 10 Gb/s path, while (as the lab
    # reported in such runs on this VM) the delay line released 90 % of frames late.
    raw, ctx = recorded("parallel10.json")
    flow = D.summarize_iperf(raw)
    flow["emulator"] = {"ok": False, "late_fraction": 0.9, "worst_late_us": 64000}
    n = ctx["tuned_buffer_bytes"]
    v = D.diagnose(flow, rtt=ctx["rtt"], capacity_mbps=10000, max_goodput_mbps=9564,
                   src={"net.ipv4.tcp_wmem": [4096, 16384, n]}, dst={"net.ipv4.tcp_rmem": [4096, 131072, n]})
    assert v["verdict"] == "host-limited" and "delay line" in v["why"], v["why"]


def test_a_good_figure_from_a_late_emulator_is_not_ok():
    # The recorded OK flow (~90 Mb/s on its 100 Mb/s path), had the delay line
    # fallen behind meanwhile: the figure does not describe the emulated path.
    v, _, _ = judge("ok_tuned.json")
    assert v["verdict"] == "ok", v["why"]
    v, _, _ = judge("ok_tuned.json", emulator={"ok": False, "late_fraction": 0.4, "worst_late_us": 9000})
    assert v["verdict"] == "host-limited" and "delay line" in v["why"], v["why"]


def test_parallel_flows_summary_and_jain():
    raw, ctx = recorded("parallel10.json")
    flow = D.summarize_iperf(raw)
    assert flow["streams"] == 10 and len(flow["per_stream_mbps"]) == 10
    assert sum(flow["per_stream_mbps"]) == pytest.approx(flow["goodput_mbps"], rel=0.02)
    assert 0.1 <= flow["jain"] <= 1.0
    assert D.jain([1, 1, 1, 1]) == pytest.approx(1.0)
    assert D.jain([1, 0, 0, 0]) == pytest.approx(0.25)


def test_failed_test_is_unmeasured_with_the_reason():
    raw, ctx = recorded("refused.json")
    flow = D.summarize_iperf(raw)
    assert "refused" in flow["error"]
    v = D.diagnose(flow, rtt={}, capacity_mbps=1000, max_goodput_mbps=956, src={}, dst={})
    assert v["verdict"] == "unmeasured" and "refused" in v["why"]


def test_advice_lines_from_bdp():
    # 1 Gb/s x 10.6 ms = 1.3 MB; x2 headroom rounds up to Guillier et al.'s 4 MB.
    buf = tuning.buffer_for(1e9 / 8 * 0.0106)
    assert buf == 4194304
    facts = {"net.ipv4.tcp_rmem": [4096, 87380, 174760], "net.ipv4.tcp_wmem": [4096, 16384, 174760]}
    assert tuning.sysctl_lines(buf, facts) == [
        "net.core.rmem_max = 4194304", "net.core.wmem_max = 4194304",
        "net.ipv4.tcp_rmem = 4096 87380 4194304", "net.ipv4.tcp_wmem = 4096 16384 4194304"]
    text = tuning.setsockopt_text(buf)
    assert "SO_RCVBUF" in text and "8388608" in text and "rmem_max" in text
    assert tuning.congestion_for(10.0, 1.3e6, 1448, False)["algorithm"] == "cubic"
    assert tuning.congestion_for(80.0, 1e7, 1448, False)["algorithm"] == "bbr"
    assert tuning.congestion_for(10.0, 1.3e6, 1448, True)["algorithm"] == "bbr"


def test_grid_thresholds():
    thr = {"ok": 0.8, "critical": 0.2}
    assert [D.grid_status(f, thr) for f in (0.95, 0.5, 0.1, None)] == ["ok", "warning", "critical", "unmeasured"]


def test_ping_and_facts_parsing():
    out = ("PING 10.0.0.2 (10.0.0.2) 56(84) bytes of data.\n64 bytes from 10.0.0.2: icmp_seq=1 ttl=63 time=10.6 ms\n"
           "64 bytes from 10.0.0.2: icmp_seq=2 ttl=63 time=10.7 ms\n\n--- 10.0.0.2 ping statistics ---\n"
           "2 packets transmitted, 2 received, 0% packet loss, time 1001ms\nrtt min/avg/max/mdev = 10.612/10.655/10.698/0.043 ms\n")
    p = parse_ping(out, 2)
    assert p["min_ms"] == 10.612 and p["mdev_ms"] == 0.043 and p["received"] == 2
    assert "error" in parse_ping("2 packets transmitted, 0 received, 100% packet loss", 2)
    s = rtt_stats([10.0, 10.2, 10.4], 3)
    assert s["avg_ms"] == pytest.approx(10.2) and s["mdev_ms"] == pytest.approx(0.1633, abs=1e-3)
    f = parse_facts("net.ipv4.tcp_rmem=4096 131072 174760\nnet.core.rmem_max=\nhz=250\niperf3=\n")
    assert f["net.ipv4.tcp_rmem"] == [4096, 131072, 174760] and f["net.core.rmem_max"] is None and f["hz"] == 250
    assert not f["iperf3"]


# ---------------------------------------------------------------------------
# Bad input: one line, no traceback
# ---------------------------------------------------------------------------


def gs(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    # The lab prefix is conftest's (GRIDSPLIT_LAB_PREFIX), like every other lab test's.
    return gridsplit(*args, check=False, timeout=timeout)


@pytest.mark.parametrize("args,expect", [
    (["netcheck"], "nothing to measure"),
    (["netcheck", "--hosts", "/nonexistent.toml"], "no such hosts file"),
    (["netcheck", "--lab", "--hosts", "x.toml"], "exclude each other"),
    (["netcheck", "--from", "pyproject.toml"], "not a netcheck JSON report"),
    (["netcheck", "--from", "x.json", "--ok", "0.1", "--critical", "0.5"], "critical must be the lower"),
    (["netcheck", "--hosts", "HOSTS", "--pairs", "rennes-nancy"], "is not SITE:SITE"),
    (["netcheck", "--hosts", "HOSTS", "--pairs", "rennes:nancyy"], "did you mean 'nancy'"),
    (["netcheck", "--hosts", "BADHOSTS"], "site[0].hosts: give one or more hosts"),
    (["netcheck", "--hosts", "HOSTS", "--streams", "1,x"], "--streams"),
    (["netcheck", "--from", "x.json", "--pairs", "a:b"], "--from shows a saved report"),
    (["netcheck", "--from", "CUT"], "without its settings or cells"),
])
def test_bad_input_is_one_line(tmp_path, args, expect):
    good = tmp_path / "hosts.toml"
    good.write_text('[[site]]\nname = "rennes"\nhosts = ["127.0.0.1"]\n[[site]]\nname = "nancy"\nhosts = ["127.0.0.1"]\n')
    bad = tmp_path / "bad.toml"
    bad.write_text('[[site]]\nname = "rennes"\nhosts = []\n')
    cut = tmp_path / "cut.json"  # the right schema, the rest cut off
    cut.write_text('{"schema": "%s"}' % measure.SCHEMA)
    args = [str(good) if a == "HOSTS" else str(bad) if a == "BADHOSTS" else str(cut) if a == "CUT" else a for a in args]
    cp = subprocess.run([sys.executable, "-m", "gridsplit", *args], text=True, capture_output=True, cwd=ROOT, timeout=60)
    assert cp.returncode == 2, cp.stdout + cp.stderr
    assert expect in cp.stderr
    assert "Traceback" not in cp.stderr and len(cp.stderr.strip().splitlines()) == 1


def test_ssh_refused_is_unmeasured_with_reason(tmp_path):
    # Loopback only: nothing listens on port 1, so ssh is refused at once.
    hosts = tmp_path / "hosts.toml"
    hosts.write_text('[ssh]\noptions = ["-p", "1"]\nconnect_timeout = 2\n'
                     '[[site]]\nname = "a"\nhosts = ["127.0.0.1"]\n[[site]]\nname = "b"\nhosts = ["localhost", "127.0.0.2"]\n')
    out = tmp_path / "nc.json"
    cp = gs("netcheck", "--hosts", str(hosts), "--out", str(out))
    assert cp.returncode == 0, cp.stderr
    rep = json.loads(out.read_text())
    assert [c["status"] for c in rep["cells"]] == ["unmeasured", "unmeasured"]
    for c in rep["cells"]:
        assert "Connection refused" in c["reason"] and "site a" in c["reason"] and "127.0.0.2" in c["reason"]
    assert "unmeasured" in cp.stdout and "Connection refused" in cp.stdout


# ---------------------------------------------------------------------------
# A real lab: wizard gap reproduced, ssh failures, missing iperf3, gateway config
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def wizard_lab():
    needs_root()
    gs("lab", "down")
    cp = gs("lab", "up", "--topology", str(DATA / "wizard2.toml"))
    assert cp.returncode == 0, cp.stderr
    yield
    gs("lab", "down")


@pytest.mark.lab
def test_lab_untuned_window_limited_tuned_ok(wizard_lab, tmp_path):
    out = tmp_path / "nc.json"
    # A tuned run during which the delay line fell behind (CI, a noisy VM host: 235
    # against 83 Mb/s untuned) measured the machine, not the path; it is run once more.
    for attempt in (1, 2):
        t0 = time.monotonic()
        cp = gs("netcheck", "--lab", "--pairs", "bordeaux:lyon", "--one-way", "--streams", "none", "--duration", "4",
                "--out", str(out), "--png", str(tmp_path))
        assert cp.returncode == 0, cp.stdout + cp.stderr
        rep = json.loads(out.read_text())
        (cell,) = rep["cells"]
        if (cell.get("tuned", {}).get("emulator") or {}).get("ok", True):
            break
    assert cell["status"] == "measured", cell["reason"]
    assert cell["capacity_mbps"] == 1000
    u, t = cell["diagnosis"]["untuned"], cell["diagnosis"]["tuned"]
    # Untuned (170 KB maxima, Guillier et al. 2006): ~ window / RTT, far below the path.
    assert u["verdict"] == "window-limited", u["why"]
    assert u["fraction"] < 0.2
    assert 0.75 <= cell["untuned"]["goodput_mbps"] / u["evidence"]["window_bound_mbps"] <= 1.15
    # ... and netcheck gives the fix: buffers >= the measured BDP, as exact sysctl lines.
    adv = cell["advice"]
    assert adv["buffer_bytes"] >= adv["bdp_bytes"] >= 1.1e6
    assert f"net.ipv4.tcp_rmem = 4096 131072 {adv['buffer_bytes']}" in adv["sysctl"]
    assert "window-limited" in cp.stdout and f"net.core.rmem_max = {adv['buffer_bytes']}" in cp.stdout
    # Tuned: OK (>= 80 % of the path, the grid's threshold) -- unless this machine's
    # delay line fell behind, which netcheck must then say instead of blaming the path.
    emu = cell["tuned"].get("emulator") or {}
    if emu.get("ok", True):
        assert t["verdict"] == "ok", t["why"]
        assert cell["tuned"]["goodput_mbps"] > 3 * cell["untuned"]["goodput_mbps"]
    else:  # the machine was measured, not the path: no claim on the tuned rate
        assert t["verdict"] == "host-limited" and "delay line" in t["why"], t["why"]
    assert (tmp_path / "netcheck-heatmaps.png").stat().st_size > 10000
    # Resume: the measured cell is kept, nothing is measured again.
    t1 = time.monotonic()
    cp = gs("netcheck", "--resume", str(out), "--pairs", "bordeaux:lyon", "--one-way", "--json")
    assert cp.returncode == 0, cp.stderr
    again = json.loads(cp.stdout)["cells"][0]
    assert again["untuned"]["goodput_mbps"] == cell["untuned"]["goodput_mbps"]
    assert time.monotonic() - t1 < (t1 - t0) / 2


@pytest.mark.lab
def test_ssh_unreachable_and_refused_are_unmeasured(wizard_lab, tmp_path):
    # ssh runs from inside a lab host, so its traffic stays in the lab: lyon-1 has
    # no sshd (connection refused), 10.71.2.77 is no host at all (no route).
    hosts = tmp_path / "hosts.toml"
    hosts.write_text(f'[ssh]\ncommand = ["ip", "netns", "exec", "{PREFIX}-bordeaux-1", "ssh"]\nconnect_timeout = 3\n'
                     '[[site]]\nname = "refused"\nhosts = ["10.71.2.1"]\n'
                     '[[site]]\nname = "nohost"\nhosts = ["10.71.2.77", "10.71.2.78"]\n')
    t0 = time.monotonic()
    cp = gs("netcheck", "--hosts", str(hosts), "--json", timeout=120)
    assert cp.returncode == 0, cp.stderr
    rep = json.loads(cp.stdout)
    assert time.monotonic() - t0 < 60
    cells = {(c["src_site"], c["dst_site"]): c for c in rep["cells"]}
    assert len(cells) == 2
    for c in cells.values():
        assert c["status"] == "unmeasured"
        assert "Connection refused" in c["reason"] or "No route to host" in c["reason"] or "timed out" in c["reason"], c["reason"]
    assert "Connection refused" in rep["hosts"]["10.71.2.1"]["error"]
    assert "10.71.2.78" in cells[("refused", "nohost")]["reason"] or "10.71.2.1" in cells[("refused", "nohost")]["reason"]


@pytest.fixture()
def sshd_on_lab_hosts(wizard_lab, tmp_path):
    """A real ssh server on each wizard host, listening only on its lab address (conftest.dropbear_hosts)."""
    with dropbear_hosts(tmp_path, {"bordeaux-1": "10.71.1.1", "lyon-1": "10.71.2.1"}) as key:
        yield key


@pytest.mark.lab
def test_hosts_mode_over_real_ssh_reproduces_the_wizard_gap(sshd_on_lab_hosts, tmp_path):
    # The --hosts path end to end: ssh (from inside bordeaux-1, so its traffic stays in
    # the lab) to two sshd hosts, facts, ping, iperf3 untuned then tuned by sysctl.
    key = sshd_on_lab_hosts
    hosts = tmp_path / "hosts.toml"
    hosts.write_text(
        f'[ssh]\ncommand = ["ip", "netns", "exec", "{PREFIX}-bordeaux-1", "ssh"]\nuser = "root"\n'
        f'options = ["-i", "{key}", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", '
        f'"-o", "LogLevel=ERROR"]\nconnect_timeout = 5\ntune = "sysctl"\n'
        '[[site]]\nname = "bordeaux"\nhosts = ["10.71.1.1"]\ncapacity_mbps = 1000\n'
        '[[site]]\nname = "lyon"\nhosts = ["10.71.2.1"]\ncapacity_mbps = 1000\n')
    out = tmp_path / "nc.json"
    # Over ssh netcheck cannot see the lab's delay line, so the test watches it: a
    # run measured while it fell behind (a busy VM host: one stall-bunched loss and
    # an RTT inflated to 21 ms made a window-limited flow read "loss-limited")
    # measured the machine, and is run once more.
    from gridsplit.lab import queues
    from gridsplit.lab.names import LabNames
    from gridsplit.lab.realize import load_state
    state = load_state(LabNames.from_env())
    for attempt in (1, 2):
        before = queues.snapshot(state, new_window=True)
        cp = gs("netcheck", "--hosts", str(hosts), "--pairs", "bordeaux:lyon", "--one-way", "--streams", "2",
                "--duration", "3", "--out", str(out), timeout=240)
        emu = queues.emulator(before, queues.snapshot(state))
        assert cp.returncode == 0, cp.stdout + cp.stderr
        rep = json.loads(out.read_text())
        (cell,) = rep["cells"]
        verdict = cell.get("diagnosis", {}).get("untuned", {}).get("verdict")
        if verdict == "window-limited" or not (emu and queues.fell_behind(emu)):
            break
    assert rep["mode"] == "hosts"
    assert cell["status"] == "measured", cell.get("reason")
    u = cell["diagnosis"]["untuned"]
    assert u["verdict"] == "window-limited", (u["why"], emu)
    assert f"net.core.rmem_max = {cell['advice']['buffer_bytes']}" in cp.stdout
    assert cell["tuning"]["method"] == "sysctl"
    if not (emu and queues.fell_behind(emu)):  # else the machine was measured, not the path
        assert cell["tuned"]["goodput_mbps"] > 3 * cell["untuned"]["goodput_mbps"]
    assert 9.5 <= cell["rtt"]["min_ms"] <= 12, cell["rtt"]
    assert cell["parallel"][0]["streams"] == 2 and cell["parallel"][0]["goodput_mbps"] > 0
    # The tuned pass restored the hosts' own settings.
    for ns in ("bordeaux-1", "lyon-1"):
        cur = subprocess.run(["ip", "netns", "exec", f"{PREFIX}-{ns}", "sysctl", "-n", "net.ipv4.tcp_rmem"],
                             capture_output=True, text=True, check=True).stdout.split()
        assert cur[-1] == "174760"


@pytest.mark.lab
def test_missing_iperf3_is_unmeasured(wizard_lab, tmp_path):
    # A real host without iperf3: lyon-1's commands run with a PATH that has
    # every tool netcheck uses except iperf3.
    from gridsplit.lab.names import LabNames
    from gridsplit.lab.realize import load_state
    from gridsplit.netcheck.runner import LabRunner
    import shutil
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "cat", "tr", "uname", "nproc", "sed", "head", "zcat", "gzip", "ping", "timeout"):
        if shutil.which(tool):
            (bin_dir / tool).symlink_to(shutil.which(tool))

    class NoIperfOnLyon(LabRunner):
        def argv(self, ep, cmd, timeout):
            argv = super().argv(ep, cmd, timeout)
            return argv[:4] + ["env", f"PATH={bin_dir}"] + argv[4:] if ep.site == "lyon" else argv

    state = load_state(LabNames.from_env(PREFIX))
    target = measure.lab_target(state)
    target.runner = NoIperfOnLyon(state)
    s = measure.Session(target, measure.Settings(duration=1, streams=(), interval=0.05, count=5))
    cell = s.measure_cell("bordeaux", "lyon")
    assert cell["status"] == "unmeasured"
    assert "iperf3 is not installed on lyon-1" in cell["reason"]


def test_gateway_config_from_netcheck(tmp_path):
    """gridsplitd accepts the WAN buffer and pacing netcheck derived (committed g5k9 report)."""
    rep = sorted((ROOT / "results" / "netcheck").glob("*-g5k9-scaled.json"))[-1]
    psk = tmp_path / "psk"
    psk.write_text("0" * 64 + "\n")
    psk.chmod(0o600)
    cp = gs("gateway", "config", "--topology", "g5k9", "--site", "rennes", "--psk-file", str(psk),
            "--from-netcheck", str(rep))
    assert cp.returncode == 0, cp.stderr
    links = tuning.gateway_links(json.loads(rep.read_text()), "rennes")
    nancy = links["nancy"]
    assert f"socket_buffer = {nancy['socket_buffer']}" in cp.stdout and f"pacing_bps = {nancy['pacing_bps']}" in cp.stdout
    assert "sysctl -w net.ipv4.tcp_pacing_ss_ratio=1000" in cp.stdout  # the host settings gridsplitd expects
    cfg = tmp_path / "gw.toml"
    cfg.write_text(cp.stdout)
    gridsplitd = ROOT / "target" / "release" / "gridsplitd"
    if not gridsplitd.exists():
        pytest.skip("gridsplitd is not built (make build)")
    chk = subprocess.run([str(gridsplitd), "--config", str(cfg), "--check-config"], text=True, capture_output=True, timeout=30)
    assert chk.returncode == 0, chk.stderr
    assert str(nancy["socket_buffer"]) in chk.stdout + chk.stderr
