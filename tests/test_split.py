"""Connection splitting in the lab: real gateways, real MPI, real iperf3, security."""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import tomllib
from pathlib import Path

import pytest

from conftest import PREFIX, gridsplit, mpirun

ROOT = Path(__file__).resolve().parent.parent
LIB = ROOT / "build" / "libgridsplit.so"


def state_dir() -> Path:
    return Path(f"/run/gridsplit/lab/{PREFIX}")


def gw_status(site: str) -> dict:
    return json.loads(gridsplit("gateway", "status", "--lab", site, "--json").stdout)


def in_ns(host: str, *args: str, preload: bool = False, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    env = ["env", f"LD_PRELOAD={LIB}", f"GRIDSPLIT_CONFIG={state_dir() / 'nodes.conf'}"] if preload else []
    return subprocess.run(["ip", "netns", "exec", f"{PREFIX}-{host}", *env, *args], text=True,
                          capture_output=True, timeout=timeout, **kw)


@pytest.mark.parametrize("impl", ["mpich", "openmpi"])
@pytest.mark.parametrize("prog,args", [
    ("gather", ["-s", "100K", "-r", "10"]),
    ("coll", ["-o", "alltoall", "-s", "50K", "-r", "10"]),
    ("pingpong", ["-s", "1K,64K", "-r", "50"]),
])
def test_mpi_through_gateways(lab, impl, prog, args):
    before = gw_status("east")["counters"]
    hosts = "west-1,east-1" if prog == "pingpong" else "west-1,east-1,east-2,west-2"
    cp = mpirun("--split", "--impl", impl, "--hosts", hosts, "--", str(ROOT / "build" / "mpi" / impl / prog),
                *args, "--check")
    rows = [json.loads(l) for l in cp.stdout.splitlines() if l.startswith("{")]
    assert rows and all(r["verified"] is True for r in rows), cp.stdout
    after = gw_status("east")["counters"]
    # The ranks' cross-site connections went through the east gateway...
    assert after["flows_opened"] > before["flows_opened"]
    # ...and so did the payload: at least one message per east rank and rep.
    moved = (after["wan_bytes_out"] - before["wan_bytes_out"]) + (after["wan_bytes_in"] - before["wan_bytes_in"])
    assert moved >= 10 * 50_000


def test_split_names_the_pairs_it_splits(lab):
    """`lab mpirun --split=PAIRS` splits the pairs named and leaves the others direct (`--split=none`:
    all of them), with a node file of its own; a pair that is no WAN link is one line."""
    prog = [str(ROOT / "build" / "mpi" / "openmpi" / "pingpong"), "-s", "64K", "-r", "20", "--check"]
    for split, through in (("none", False), ("east-west", True), ("west-east", True)):
        before = gw_status("east")["counters"]["flows_opened"]
        cp = mpirun(f"--split={split}", "--impl", "openmpi", "--hosts", "west-1,east-1", "--", *prog)
        assert all(json.loads(l)["verified"] for l in cp.stdout.splitlines() if l.startswith("{")), cp.stdout
        assert (gw_status("east")["counters"]["flows_opened"] > before) == through, split
    assert "10.71.1.254:7100 direct_to=west" in (state_dir() / "nodes-split-none.conf").read_text()
    cp = gridsplit("lab", "mpirun", "--split=east-north", "--hosts", "west-1,east-1", "--", *prog, check=False)
    assert cp.returncode != 0 and "east-north is no WAN link" in cp.stderr and "Traceback" not in cp.stderr


def test_host_rule_splits_only_the_connections_of_the_listed_host(lab):
    """GRIDSPLIT_SPLIT=hosts:ADDR (what `--split=root` sets): a host splits its connections to the
    listed host, and the listed host all of its own; the others stay direct. A server without the
    library tells which: a relayed connection comes from its site's gateway, a direct one from the
    client itself."""
    server = ("import socket,sys;s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);"
              "s.bind((sys.argv[1],6002));s.listen();c,a=s.accept();print(a[0],flush=True);c.recv(10)")
    client = ("import socket,sys,time\nfor i in range(50):\n try:\n  c=socket.create_connection((sys.argv[1],6002));"
              "break\n except OSError: time.sleep(0.1)\nc.sendall(b'x');c.close()")
    conf = state_dir() / "nodes.conf"
    # east-1 10.71.1.1; west-1 10.71.2.1, west-2 10.71.2.2; the west gateway's LAN address 10.71.2.254.
    for rule, dst_host, dst, via_gateway in (("hosts:10.71.2.1", "west-1", "10.71.2.1", True),
                                             ("hosts:10.71.2.1", "west-2", "10.71.2.2", False),
                                             ("hosts:10.71.1.1", "west-2", "10.71.2.2", True),
                                             ("hosts:10.71.1.2+10.71.2.9", "west-2", "10.71.2.2", False)):
        srv = subprocess.Popen(["ip", "netns", "exec", f"{PREFIX}-{dst_host}", "python3", "-c", server, dst],
                               stdout=subprocess.PIPE, text=True)
        try:
            cp = subprocess.run(["ip", "netns", "exec", f"{PREFIX}-east-1", "env", f"LD_PRELOAD={LIB}",
                                 f"GRIDSPLIT_CONFIG={conf}", f"GRIDSPLIT_SPLIT={rule}", "GRIDSPLIT_DEBUG=1",
                                 "python3", "-c", client, dst], text=True, capture_output=True, timeout=60)
            peer = srv.communicate(timeout=20)[0].strip()
        finally:
            if srv.poll() is None:
                srv.kill()
                srv.wait()
        assert peer == ("10.71.2.254" if via_gateway else "10.71.1.1"), (rule, dst, cp.stderr)
        assert ("redirected via gateway" in cp.stderr) == via_gateway, cp.stderr
        assert f"this host is {'one' if rule == 'hosts:10.71.1.1' else 'not one'}" in cp.stderr, cp.stderr


@pytest.mark.parametrize("impl", ["mpich", "openmpi"])
def test_split_root_relays_the_first_hosts_connections(lab, impl):
    """`lab mpirun --split=root`: an all-to-all across both sites is correct, and its first host's
    cross-site connections go through the gateways."""
    before = gw_status("east")["counters"]["flows_opened"]
    cp = mpirun("--split=root", "--impl", impl, "--hosts", "west-1,west-2,east-1,east-2", "--",
                str(ROOT / "build" / "mpi" / impl / "coll"), "-o", "alltoall", "-s", "20K", "-r", "5", "--check")
    rows = [json.loads(l) for l in cp.stdout.splitlines() if l.startswith("{")]
    assert rows and all(r["verified"] is True for r in rows), cp.stdout
    assert gw_status("east")["counters"]["flows_opened"] > before


def test_iperf3_through_gateways(lab):
    srv = subprocess.Popen(["ip", "netns", "exec", f"{PREFIX}-west-1", "env", f"LD_PRELOAD={LIB}",
                            f"GRIDSPLIT_CONFIG={state_dir() / 'nodes.conf'}", "iperf3", "-s", "-1", "-p", "5999"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        before = gw_status("east")["counters"]["relayed_bytes_out"]
        for _ in range(30):
            cp = in_ns("east-1", "iperf3", "-J", "-c", "10.71.2.1", "-p", "5999", "-t", "2", preload=True)
            if "refused" not in cp.stdout:
                break
        data = json.loads(cp.stdout)
        got = data["end"]["sum_received"]["bytes"]
        # Data crossed both gateways (its rate is the bench's business: `gridsplit
        # bench relay`, not a test's; iperf3's sent and received totals differ by design).
        assert got > 1_000_000
        assert gw_status("east")["counters"]["relayed_bytes_out"] - before >= got
    finally:
        srv.terminate()
        srv.wait(timeout=5)


def test_accept_reports_the_original_peer(lab):
    server = ("import socket;s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);"
              "s.bind(('10.71.2.1',6001));s.listen();c,a=s.accept();print(a[0],c.getpeername()[0]);"
              "print(c.recv(100).decode())")
    srv = subprocess.Popen(["ip", "netns", "exec", f"{PREFIX}-west-1", "env", f"LD_PRELOAD={LIB}",
                            f"GRIDSPLIT_CONFIG={state_dir() / 'nodes.conf'}", "python3", "-c", server],
                           stdout=subprocess.PIPE, text=True)
    client = ("import socket,time\nfor i in range(50):\n try:\n  c=socket.create_connection(('10.71.2.1',6001));break\n"
              " except OSError: time.sleep(0.1)\nc.sendall(b'hello');c.close()")
    in_ns("east-1", "python3", "-c", client, preload=True)
    out, _ = srv.communicate(timeout=20)
    peer, peer2, msg = out.split()
    assert peer == peer2 == "10.71.1.1"  # east-1, not the west gateway 10.71.2.254
    assert msg == "hello"


def gsq1(dst: str, port: int) -> bytes:
    return b"GSq1" + bytes([1, 4]) + struct.pack("!H", port) + socket.inet_aton(dst) + bytes(12)


def raw_request(host: str, gw: str, dst: str, port: int) -> bytes:
    code = ("import socket,sys;c=socket.create_connection((sys.argv[1],7100));"
            f"c.sendall(bytes.fromhex('{gsq1(dst, port).hex()}'));"
            "sys.stdout.write(c.recv(8).hex())")
    return bytes.fromhex(in_ns(host, "python3", "-c", code, gw).stdout.strip())


def test_gateway_is_not_an_open_relay(lab):
    # A destination outside every site subnet (here a WAN router address) is refused.
    reply = raw_request("east-1", "10.71.1.254", "10.72.0.2", 22)
    assert reply[:4] == b"GSa1" and reply[4] == 3  # FORBIDDEN
    # A client outside the gateway's own site is refused too.
    reply = raw_request("west-1", "10.71.1.254", "10.71.2.2", 22)
    assert reply[:4] == b"GSa1" and reply[4] == 3


def test_refused_far_connect_is_reported(lab):
    reply = raw_request("east-1", "10.71.1.254", "10.71.2.2", 1)  # nothing listens on port 1
    assert reply[:4] == b"GSa1" and reply[4] == 1  # REFUSED


def test_garbage_and_unauthenticated_peers_get_nothing(lab):
    before = gw_status("east")["counters"]
    # An intruder on the west LAN speaks to the east gateway's WAN port.
    code = ("import socket,sys\nfor payload in (b'GET / HTTP/1.0\\r\\n\\r\\n', bytes(range(256))*64):\n"
            " c=socket.create_connection(('10.71.1.254',7200));c.sendall(payload)\n"
            " c.settimeout(5)\n try:\n  while c.recv(65536): pass\n except OSError: pass\n c.close()\nprint('closed')")
    assert in_ns("west-2", "python3", "-c", code).stdout.strip() == "closed"
    after = gw_status("east")["counters"]
    rejected = sum(after.get(k, 0) - before.get(k, 0) for k in ("wan_protocol_errors", "auth_failures"))
    assert rejected >= 2
    assert after["relayed_bytes_out"] == before["relayed_bytes_out"]
    # ...and the real link still relays.
    assert raw_request("east-1", "10.71.1.254", "10.71.2.2", 1)[4] == 1


def test_lab_gateways_run_at_realtime_priority_below_the_delay_line(lab):
    """A gateway stands for a host of its own, so in the lab it must not queue behind the MPI ranks for a CPU."""
    state = json.loads(Path(f"/run/gridsplit/lab/{PREFIX}/state.json").read_text())
    assert state["gateway_rt_priority"] == 5 == lab["emulation"]["gateway_rt_priority"]
    for site in state["gateways"]:
        pid = state["pids"][f"gw-{site}"]
        assert "gridsplitd" in Path(f"/proc/{pid}/comm").read_text()
        for task in Path(f"/proc/{pid}/task").iterdir():
            out = subprocess.run(["chrt", "-p", task.name], text=True, capture_output=True).stdout
            if out:  # a thread may have exited meanwhile
                assert "SCHED_FIFO" in out and "priority: 5" in out, out


def test_lab_gateway_hosts_are_tuned_and_gridsplitd_reports_it(lab):
    """The gateway hosts carry the sysctls a real gateway host should have, and gridsplitd reads them back."""
    from gridsplit.gateway import GATEWAY_HOST_SYSCTLS
    for site in ("east", "west"):
        for key, want in GATEWAY_HOST_SYSCTLS.items():
            got = in_ns(f"{site}-gw", "sysctl", "-n", key).stdout.strip()
            assert got == want, (site, key, got)
        st = gw_status(site)
        # The WAN socket's low-water mark: 5 ms of its path (mini: 400 Mb/s, the gateways' NICs).
        assert st["links"][0]["applied"][0]["notsent_lowat"] == 250000, st["links"][0]["applied"]
        assert st["lan"]["sub_segment"] is True, st["lan"]  # the lab runs the gateway's defaults
        host = st["host"]
        assert host == {"slow_start_after_idle": 0, "pacing_ss_ratio": 1000, "pacing_ca_ratio": 1000}, host
        log = (state_dir() / f"gw-{site}.log").read_text()
        assert "sysctl -w" not in log, log  # no advice: nothing is left at a slower value
        route = in_ns(f"{site}-gw", "ip", "route", "show", "10.71.0.0/16").stdout
        lan = next(l for l in in_ns(f"{site}-gw", "ip", "route").stdout.splitlines() if "scope link" in l)
        assert "initrwnd 1" in lan, lan  # new LAN connections start inside the incast budget
        assert "initrwnd" not in route, route
    # A node is an ordinary host: the kernel's ratio.
    assert in_ns("east-1", "sysctl", "-n", "net.ipv4.tcp_pacing_ss_ratio").stdout.strip() == "200"


def test_gateway_status_tells_sub_segment_windows(capsys):
    """`gateway status` says how many LAN sockets hold windows under one segment, how many are wide,
    and when sub-segment windows are off."""
    from gridsplit.gateway.cli import render_status
    lan = {"window_budget": 23591, "sockets_clamped": 20, "window_clamp": 1179, "sockets_sub_segment": 19,
           "sockets_wide": 1, "sub_segment": True}
    render_status({"site": "b", "counters": {}, "lan": lan}, "b")
    said = lambda: " ".join(capsys.readouterr().out.split())  # noqa: E731 (rich wraps at 80 columns)
    first = said()
    assert "smallest window clamp 1179 B (19 under one segment); 1 offered two segments or more (wide)" in first, \
        first[:400]
    render_status({"site": "b", "counters": {}, "lan": dict(lan, sockets_sub_segment=0, sub_segment=False)}, "b")
    line = said()
    assert "under one segment" not in line and "sub-segment windows off" in line


def _check_config(tmp_path: Path, text: str) -> subprocess.CompletedProcess:
    """`gridsplitd --check-config` on a gateway config (written to tmp_path/gw.toml); skips the test
    where gridsplitd is not built."""
    gridsplitd = ROOT / "target" / "release" / "gridsplitd"
    if not gridsplitd.exists():
        pytest.skip("gridsplitd is not built (make build)")
    cfg = tmp_path / "gw.toml"
    cfg.write_text(text)
    return subprocess.run([str(gridsplitd), "--config", str(cfg), "--check-config"], text=True, capture_output=True,
                          timeout=30)


def test_lan_mss_fits_one_segment_per_node(tmp_path):
    """The MSS a gateway offers its LAN: full-size where full segments fit its switch port, else one whole
    segment from every node of the site fits (payload budget and wire bytes), and gridsplitd accepts it."""
    from gridsplit.capacity import lan_window_budget
    from gridsplit.gateway import gateway_toml, lan_mss
    from gridsplit.topology_file import load_topology
    assert lan_mss(load_topology("paper", nodes=16), "bordeaux") == 0
    topo = load_topology("paper", nodes=20)
    mss, site = lan_mss(topo, "bordeaux"), topo.site("bordeaux")
    seg = mss - 12  # timestamps
    assert 536 <= seg < 1448, mss
    assert site.nodes * seg <= lan_window_budget(topo, "bordeaux")
    assert site.nodes * (seg + 66) <= site.switch_buffer_bytes + 1250 - 1514  # + LAN BDP, - one frame of slack
    assert site.nodes * (seg + 8 + 66) > site.switch_buffer_bytes + 1250 - 1514  # the largest such segment (to 8 B)
    assert lan_mss(topo, "sophia") == 0  # one node there
    psk = tmp_path / "psk"
    psk.write_text("0" * 64 + "\n")
    psk.chmod(0o600)
    text = gateway_toml(topo, "bordeaux", str(psk), mss=mss)
    assert f"mss = {mss}" in text and "initrwnd 2 " in text  # two segments of it
    assert "mss =" not in gateway_toml(topo, "bordeaux", str(psk))  # the default: the interface's
    chk = _check_config(tmp_path, text)
    assert chk.returncode == 0, chk.stderr


def test_wan_streams_reach_the_link_rate_at_its_loss():
    """The fewest connections whose Mathis bounds add up to the link's rate; one without loss; capped at 16."""
    from gridsplit.capacity import wan_streams
    from gridsplit.tcpbound import mathis_mbps
    assert wan_streams(1000, 10, 0.0)[0] == 1
    one = mathis_mbps(1448, 20, 0.0005)  # about 31.6 Mb/s
    k, why = wan_streams(200, 20, 0.0005)
    assert (k - 1) * one < 200 <= k * one and "Mathis" in why, (k, one)
    assert wan_streams(20, 20, 0.0005)[0] == 1  # one connection already reaches a slow link
    k, why = wan_streams(10000, 40, 0.001)
    assert k == 16 and "reach only" in why


# Two sites of one node each over 20 ms, gateways at both.
TWO_SITES = ('[defaults]\nnic_mbps = 200\ngateway = true\n[[site]]\nname = "a"\nnodes = 1\n'
             '[[site]]\nname = "b"\nnodes = 1\n[[wan]]\nsites = ["a", "b"]\nrtt_ms = 20\nrate_mbps = 200\n')


def _site_a_config(tmp_path, text: str) -> str:
    """`gateway config` of site a for the topology `text` (its key file under tmp_path)."""
    from gridsplit.gateway import gateway_toml
    from gridsplit.topology_file import parse_topology
    psk = tmp_path / "psk"
    psk.write_text("0" * 64 + "\n")
    psk.chmod(0o600)
    return gateway_toml(parse_topology(tomllib.loads(text), "t"), "a", str(psk))


def test_gateway_config_stripes_lossy_links(tmp_path):
    """`gateway config` writes each link's stream count with its reason, from the topology's loss or
    [gateways] wan_streams, and gridsplitd accepts it."""
    clean = _site_a_config(tmp_path, TWO_SITES)
    assert "streams = 1\n" in clean and "no random loss" in clean
    lossy = _site_a_config(tmp_path, TWO_SITES + "loss = 0.0005\n")
    assert "streams = 7\n" in lossy and "Mathis" in lossy
    fixed = _site_a_config(tmp_path, TWO_SITES + "loss = 0.0005\n[gateways]\nwan_streams = 3\n")
    assert "streams = 3\n" in fixed and "fixed by the topology" in fixed
    chk = _check_config(tmp_path, lossy)
    assert chk.returncode == 0, chk.stderr
    chk = _check_config(tmp_path, lossy.replace("streams = 7", "streams = 0"))
    assert chk.returncode != 0 and "streams" in chk.stderr and len(chk.stderr.strip().splitlines()) == 1, chk.stderr


def test_wan_quickack_is_a_topology_key_gridsplitd_takes(tmp_path):
    """[gateways] wan_quickack = true becomes [wan] quickack = true (off, and unwritten, by default);
    a value that is not a boolean is one line naming the key."""
    from gridsplit.errors import GridsplitError
    default = _site_a_config(tmp_path, TWO_SITES)
    assert not any(l.startswith("quickack") for l in default.splitlines())
    on = _site_a_config(tmp_path, TWO_SITES + "[gateways]\nwan_quickack = true\n")
    assert "\nquickack = true\n" in on
    with pytest.raises(GridsplitError, match="wan_quickack"):
        _site_a_config(tmp_path, TWO_SITES + '[gateways]\nwan_quickack = "yes"\n')
    chk = _check_config(tmp_path, on)
    assert chk.returncode == 0, chk.stderr


def test_gateway_config_paces_wan_links_as_wan_pacing_says(tmp_path):
    """[gateways] wan_pacing: "full" (the default) paces a WAN link just under its path's slowest rate;
    "shared" at most at half of either end's gateway NIC, never under a node's NIC (a one-NIC gateway's
    port takes its nodes' sends and the WAN's arrivals at once); gridsplitd accepts the file."""
    from gridsplit.gateway import gateway_toml, pacing_bps
    from gridsplit.topology_file import parse_topology
    base = ('[defaults]\nnic_mbps = 100\ngateway = true\n[[site]]\nname = "a"\nnodes = 2\ngateway_nic_mbps = 400\n'
            '[[site]]\nname = "b"\nnodes = 2\ngateway_nic_mbps = 150\n[[wan]]\nsites = ["a", "b"]\nrtt_ms = 20\n'
            'rate_mbps = 1000\n')
    psk = tmp_path / "psk"
    psk.write_text("0" * 64 + "\n")
    psk.chmod(0o600)

    def link(pacing):
        topo = parse_topology(tomllib.loads(base + (f'[gateways]\nwan_pacing = "{pacing}"\n' if pacing else "")), "t")
        text = gateway_toml(topo, "a", str(psk))
        return tomllib.loads(text)["link"][0], text

    full, _ = link(None)
    assert full["pacing_bps"] == pacing_bps(150) and full["bandwidth_bps"] == 150_000_000
    assert link("full")[0] == full
    shared, text = link("shared")
    # a: max(100, 400 / 2) = 200; b: max(100, 150 / 2) = 100; the path: 150.
    assert shared["pacing_bps"] == pacing_bps(100) and shared["bandwidth_bps"] == 150_000_000
    chk = _check_config(tmp_path, text)
    assert chk.returncode == 0, chk.stderr
    # "adaptive": capped as "full", paced between b's node NIC and b's gateway port less what
    # b's nodes are seen sending back (gridsplitd link/pacer.rs); the fixed settings write neither key.
    adaptive, text = link("adaptive")
    assert adaptive["pacing_bps"] == full["pacing_bps"]
    assert (adaptive["pacing_far_port_bps"], adaptive["pacing_floor_bps"]) == (pacing_bps(150), pacing_bps(100))
    assert "pacing_far_port_bps" not in full and "pacing_far_port_bps" not in shared
    chk = _check_config(tmp_path, text)
    assert chk.returncode == 0, chk.stderr


def test_gateway_config_paces_lan_writes_as_lan_pacing_says(tmp_path):
    """[gateways] lan_pacing: "on" writes [lan] rate_bps at every site, "auto" only where the gateway's
    NIC is faster than the nodes' (the default), "off" nowhere. The rate is the nodes' NIC in IP bytes
    (1500 of every 1514 on the wire), after the lab's scale; gridsplitd accepts the file."""
    from dataclasses import replace
    from gridsplit.capacity import lan_pacing_rate_bps
    from gridsplit.gateway import gateway_toml
    from gridsplit.topology_file import load_topology, parse_topology
    base = ('[defaults]\nnic_mbps = 100\ngateway = true\n[[site]]\nname = "a"\nnodes = 1\ngateway_nic_mbps = 400\n'
            '[[site]]\nname = "b"\nnodes = 1\n[[wan]]\nsites = ["a", "b"]\nrtt_ms = 20\nrate_mbps = 200\n')
    psk = tmp_path / "psk"
    psk.write_text("0" * 64 + "\n")
    psk.chmod(0o600)
    rate = round(100e6 * 1500 / 1514)

    def lan(pacing, site):
        topo = parse_topology(tomllib.loads(base + (f'[gateways]\nlan_pacing = "{pacing}"\n' if pacing else "")), "t")
        return tomllib.loads(gateway_toml(topo, site, str(psk)))["lan"].get("rate_bps")

    assert [lan("off", "a"), lan("off", "b")] == [None] * 2
    assert (lan(None, "a"), lan(None, "b")) == (rate, None)  # the default is "auto"
    assert (lan("on", "a"), lan("on", "b")) == (rate, rate)
    assert (lan("auto", "a"), lan("auto", "b")) == (rate, None)  # only a's gateway outruns its nodes
    for scale, node_mbps in ((1, 1000), (10, 100)):  # `--scale` divides the nodes' NIC rate, and the pacing
        t = load_topology("paper", scale=scale)
        t = replace(t, gateways=replace(t.gateways, lan_pacing="on"))
        assert lan_pacing_rate_bps(t, "bordeaux") == round(node_mbps * 1e6 * 1500 / 1514)
    text = gateway_toml(parse_topology(tomllib.loads(base + '[gateways]\nlan_pacing = "on"\n'), "t"), "a", str(psk))
    assert "docs/design/lan-legs.md" in text.split("rate_bps =")[0].splitlines()[-1]
    # Below what a node's port absorbs (its 64 kB buffer and 100 µs at 100 Mb/s, in payload bytes, less
    # one frame), the sockets toward it are not divided.
    buffered = parse_topology(tomllib.loads(base.replace("nodes = 1\ngateway_nic", "nodes = 1\nswitch_buffer_bytes = 64000\ngateway_nic")
                                            + '[gateways]\nlan_pacing = "on"\n'), "t")
    assert tomllib.loads(gateway_toml(buffered, "a", str(psk)))["lan"]["burst_bytes"] == int(65250 * 1448 / 1514) - 1514
    chk = _check_config(tmp_path, text)
    assert chk.returncode == 0, chk.stderr


def test_split_policy_splits_pairs_whose_gateways_carry_the_direct_rate(tmp_path):
    """The capacity rule (capacity.split_pairs): a pair is split when both gateways carry their site's
    cross-site traffic at the nodes' direct rate, counted twice (one NIC, two legs). The configs follow the
    split model's policy: the sites of a pair kept direct list each other in direct_to, with the reason;
    `split = "all"` splits everything; and gridsplitd accepts the file."""
    from gridsplit.capacity import gateway_load_mbps, split_pairs
    from gridsplit.gateway import gateway_toml, nodes_conf, sites_toml
    from gridsplit.model.splitadvise import split_policy
    from gridsplit.topology_file import parse_topology
    three = ('[defaults]\nnic_mbps = 100\ngateway = true\n'
             '[[site]]\nname = "a"\nnodes = 3\n[[site]]\nname = "b"\nnodes = 2\n[[site]]\nname = "c"\nnodes = 1\n'
             '[[wan]]\nsites = ["a", "b"]\nrtt_ms = 4\nrate_mbps = 1000\n'
             '[[wan]]\nsites = ["a", "c"]\nrtt_ms = 12\nrate_mbps = 1000\n'
             '[[wan]]\nsites = ["b", "c"]\nrtt_ms = 20\nrate_mbps = 1000\n')
    topo = parse_topology(tomllib.loads(three), "t")
    # a's 3 nodes reach b's 2 and c's 1 (300 Mb/s), twice through one NIC; c's one node: 2 x 100.
    assert [gateway_load_mbps(topo, x) for x in "abc"] == [600, 400, 200]
    pol = split_pairs(topo)
    assert not any(s for s, _ in pol.values()) and "600 Mb/s" in pol[("a", "b")][1]
    gw4 = parse_topology(tomllib.loads(three.replace("gateway = true", "gateway = true\ngateway_nic_mbps = 400")), "t")
    pol = split_pairs(gw4)
    assert pol[("b", "c")][0] and not pol[("a", "b")][0] and not pol[("a", "c")][0]
    gw6 = parse_topology(tomllib.loads(three.replace("gateway = true", "gateway = true\ngateway_nic_mbps = 600")), "t")
    assert all(s for s, _ in split_pairs(gw6).values())
    # The configs follow the split model's policy (model.splitadvise.split_policy): a pair stays direct
    # unless splitting is predicted to gain somewhere and lose nowhere; one side of a pair lists it.
    text = sites_toml(gw4)
    direct = sorted(p for p, (s, _) in split_policy(gw4).items() if not s)
    for a in "abc":
        peers = " ".join(b for x, b in direct if x == a)
        assert (f'direct_to = "{peers}"' in text) if peers else True, text
    assert text.count("direct_to") == len({a for a, _ in direct})
    assert "direct_to" not in sites_toml(gw4, policy=False)
    nodes = nodes_conf(gw4)  # the nodes get the same policy
    for a in "abc":
        peers = ",".join(b for x, b in direct if x == a)
        line = next(l for l in nodes.splitlines() if l.startswith(f"site {a} "))
        assert line.endswith(f"direct_to={peers}") if peers else "direct_to" not in line, nodes
    assert not any("direct_to=" in l for l in nodes_conf(gw4, policy=False).splitlines() if l.startswith("site "))
    forced = parse_topology(tomllib.loads(three + '[gateways]\nsplit = "all"\n'), "t")
    assert all(s for s, _ in split_policy(forced).values()) and "direct_to" not in sites_toml(forced)
    psk = tmp_path / "psk"
    psk.write_text("0" * 64 + "\n")
    psk.chmod(0o600)
    chk = _check_config(tmp_path, gateway_toml(gw4, "a", str(psk)))
    assert chk.returncode == 0, chk.stderr
    assert 'direct_to = "' in gateway_toml(gw4, "a", str(psk))
    chk = _check_config(tmp_path, gateway_toml(gw4, "a", str(psk)).replace('direct_to = "', 'direct_to = "bee ', 1))
    assert chk.returncode != 0 and "direct_to" in chk.stderr and "'bee'" in chk.stderr, chk.stderr


def _library_says(cfg: Path, site: str) -> str:
    """What libgridsplit.so logs on its first connect with `cfg` as GRIDSPLIT_CONFIG (debug on)."""
    if not LIB.exists():
        pytest.skip("libgridsplit.so is not built (make -C preload)")
    code = "import socket; s = socket.socket(); s.settimeout(1); s.connect_ex(('127.0.0.1', 9))"
    cp = subprocess.run(["python3", "-c", code], text=True, capture_output=True, timeout=30,
                        env={"PATH": "/usr/bin:/bin", "LD_PRELOAD": str(LIB), "GRIDSPLIT_CONFIG": str(cfg),
                             "GRIDSPLIT_SITE": site, "GRIDSPLIT_DEBUG": "1"})
    return cp.stderr


def test_nodes_read_the_node_file_and_refuse_the_gateway_toml(tmp_path):
    """`gateway nodes-config` writes a file the node library reads (own site, gateway); the gateway's TOML
    config given instead is refused in one line that names the file, the line and the fix."""
    nodes = tmp_path / "nodes.conf"
    nodes.write_text(gridsplit("gateway", "nodes-config", "--topology", "paper").stdout)
    said = _library_says(nodes, "sophia")
    assert 'own site "sophia", gateway 10.71.2.254:7100, 2 site line(s) in the node file' in said, said
    toml = tmp_path / "gw.toml"
    toml.write_text(gridsplit("gateway", "config", "--topology", "paper", "--site", "sophia").stdout)
    said = _library_says(toml, "sophia")
    assert len(said.strip().splitlines()) == 1, said
    assert f"GRIDSPLIT_CONFIG={toml}: line 2: this is a TOML file" in said and "gateway nodes-config" in said, said
    assert "NOT redirected" in said


def test_run_refuses_what_is_not_a_node_file(tmp_path):
    """`gridsplit run --config` takes the node file; a gateway TOML config, another file or an empty one is
    refused in one line with the fix, before anything is launched."""
    toml = tmp_path / "gw.toml"
    toml.write_text(gridsplit("gateway", "config", "--topology", "mini", "--site", "east").stdout)
    other, empty = tmp_path / "hosts", tmp_path / "empty"
    other.write_text("node-1\nnode-2\n")
    empty.write_text("# nothing\n")
    good = gridsplit("gateway", "nodes-config", "--topology", "mini").stdout
    bad_subnet = tmp_path / "bad-subnet"
    bad_subnet.write_text(good.replace("10.", "notasubnet-10.", 1))
    bad_direct = tmp_path / "bad-direct"
    bad_direct.write_text(good.rstrip("\n").rsplit("\n", 1)[0] + "\n" + good.rstrip("\n").rsplit("\n", 1)[1].split(" direct_to=")[0]
                          + " direct_to=nosuchsite\n")
    for path, want in ((toml, "line 2: a TOML file"), (other, "line 1: not a node file"), (empty, "no 'gridsplit-nodes 1'"),
                       (bad_subnet, "is not a CIDR prefix"), (bad_direct, "'nosuchsite', which is no site")):
        cp = gridsplit("run", "--config", str(path), "--", "true", check=False)
        err = cp.stderr.strip()
        assert cp.returncode != 0 and len(err.splitlines()) == 1, err
        assert want in err and "gridsplit gateway nodes-config" in err and "Traceback" not in err, err
    nodes = tmp_path / "nodes.conf"
    nodes.write_text(gridsplit("gateway", "nodes-config", "--topology", "mini").stdout)
    cp = gridsplit("run", "--config", str(nodes), "--", "sh", "-c", "echo $GRIDSPLIT_CONFIG", check=False)
    assert cp.returncode == 0 and cp.stdout.strip() == str(nodes), (cp.stdout, cp.stderr)
    # A library that is not there: ld.so would only warn, per process, and run every rank unsplit.
    cp = gridsplit("run", "--config", str(nodes), "--lib", str(tmp_path / "no.so"), "--", "true", check=False)
    assert cp.returncode != 0 and "no such file" in cp.stderr and len(cp.stderr.strip().splitlines()) == 1, cp.stderr


def test_run_says_once_when_the_kernel_lacks_the_lan_timers(tmp_path, monkeypatch):
    """The ranks stay silent when their kernel lacks TCP_RTO_MIN_US (preload's gs_test checks that under a
    seccomp filter that answers as Linux < 6.15 does); `gridsplit run` says it once for the job instead. This
    kernel's answer matches its release; an old kernel's answer is stood in for by the function's result."""
    import platform

    from click.testing import CliRunner

    from gridsplit import launch, machine

    release = tuple(int(x) for x in platform.release().split(".")[:2])
    assert machine.lan_timers_supported() == (release >= (6, 15))
    nodes = tmp_path / "nodes.conf"
    nodes.write_text(gridsplit("gateway", "nodes-config", "--topology", "mini").stdout)
    assert "lan_timers 5000 5000" in nodes.read_text()
    monkeypatch.setattr(machine, "lan_timers_supported", lambda: False)
    said = CliRunner().invoke(launch.run, ["--config", str(nodes), "--dry-run", "--", "mpiexec", "-n", "2", "true"])
    assert said.exit_code == 0, said.output
    lines = [x for x in said.stderr.splitlines() if "LAN timers" in x]
    assert len(lines) == 1 and "200 ms minimum RTO" in lines[0], said.stderr
    # Without the node file's timers there is nothing to say.
    nodes.write_text("".join(x for x in nodes.read_text().splitlines(True) if not x.startswith("lan_timers")))
    said = CliRunner().invoke(launch.run, ["--config", str(nodes), "--dry-run", "--", "mpiexec", "-n", "2", "true"])
    assert said.exit_code == 0 and "LAN timers" not in said.stderr, said.stderr
