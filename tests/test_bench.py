"""`gridsplit bench` and `gridsplit report`: real sweeps on the mini lab, counter attribution, rendering.

The attribution test makes losses of its own with a drop-tail queue that it
controls, so the number of dropped segments per connection class is known
from the queue's own drop counter, and the bench's local/distant split must
put the retransmissions where the drops were.
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import time
from pathlib import Path

import pytest

from conftest import PREFIX, gridsplit

from gridsplit.bench.results import read_rows, summarize
from gridsplit.tcpbound import FULL_FRAME
from gridsplit.bench.measure import attribute
from gridsplit.lab import counters as C
from gridsplit.lab.names import LabNames, sw_port
from gridsplit.lab.realize import load_state, tbf_line
from gridsplit.lab import queues, softirq
from gridsplit.lab.tcptrace import Trace, parse

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data" / "bench"


@pytest.mark.lab
@pytest.mark.mpi
def test_gather_sweep_records_verified_points(lab, tmp_path):
    """Both modes and both MPI libraries, received data checked, every documented field present."""
    out = tmp_path / "sweep.jsonl"
    cp = gridsplit("bench", "gather", "-t", "mini", "-n", "1,2", "-s", "1K,200K", "-r", "5", "--check",
                   "--out", str(out), "--no-report", timeout=600)
    assert "split/direct" in cp.stdout
    rows = read_rows(out)
    meta, points = rows[0], [r for r in rows if r["kind"] == "point"]
    assert meta["kind"] == "meta" and meta["machine"]["cores"] >= 1 and meta["topology"]["name"] == "mini"
    assert meta["rank_env"]["openmpi"] == {"OMPI_MCA_mpi_yield_when_idle": "1"}
    assert len(points) == 2 * 2 * 2 * 2
    for r in points:
        assert r["verified"] is True, r
        assert r["reps"] == 5 and r["total_s"] > 0
        assert set(r["counters"]) >= {"local", "distant"}
        assert r["counters"]["local"].keys() >= {"TCPFastRetrans", "TCPTimeouts", "RetransSegs"}
        assert r["cpu"]["senders"]["mean_pct"] is not None and r["cpu"]["root"]["pct"] is not None
        # The bound is physics: no run can beat it.
        assert r["bound_per_rep_s"] * r["reps"] <= r["total_s"]
        assert 0 < r["efficiency"] <= 1
        # Where losses happened and whether the delay line kept time are recorded for every run.
        assert isinstance(r["drops"], dict) and all(v > 0 for v in r["drops"].values())
        # Every run's data went through the root's switch port, in frames no larger than full size.
        port = r["frames"]["west switch → west-1"]
        assert port["bytes"] > r["nodes"] * r["size_bytes"] * r["reps"] and port["bytes"] <= FULL_FRAME * port["packets"]
        assert r["emulator"]["packets"] > 0 and 0 <= r["emulator"]["late_fraction"] <= 1
        assert ("wan_links" in r) == (r["mode"] == "split")
        if r["mode"] == "split":
            # Each WAN link's own counters: the gathered bytes crossed east's link toward west.
            assert set(r["wan_links"]) == {"east→west", "west→east"}, r["wan_links"]
            link = r["wan_links"]["east→west"]
            assert link["bytes_sent"] >= r["nodes"] * r["size_bytes"] * r["reps"] and link["streams"] >= 1
            assert len(link["cwnd_end"]) == link["streams"] and all(c > 0 for c in link["cwnd_end"])
            assert set(r["cpu"]["gateways"]) == {"east", "west"}
            assert all(g["softirq_s"] >= 0 and g["softirq_pct"] is not None for g in r["cpu"]["gateways"].values())
            assert r["variant"] == {"strategy": "fair", "congestion": "cubic", "lan_tuning": True, "lan_pacing": "auto",
                                    "wan_streams": 0, "split": "policy"}
    # 200 KB from two nodes moves 400 KB per gather across the WAN: in split mode that
    # is the gateways' data, so their CPU was used. /proc counts it in 10 ms ticks, which one
    # point's 2 MB may not fill on a quiet machine: summed over the big points (both MPIs).
    big = [r for r in points if r["mode"] == "split" and r["size_bytes"] == 200_000 and r["nodes"] == 2]
    assert len(big) == 2 and sum(g["cpu_s"] for r in big for g in r["cpu"]["gateways"].values()) > 0
    # ... and the kernel ran softirqs in their context (their sends and window updates).
    assert all(sum(g["softirq_s"] for g in r["cpu"]["gateways"].values()) > 0 for r in big)
    s = summarize(points)
    assert len(s) == 2 * 2 * 2 and all(x["ratio"] is not None for x in s)

    # Resume: the same command again measures nothing new and keeps the file's points.
    cp = gridsplit("bench", "gather", "-t", "mini", "-n", "1,2", "-s", "1K,200K", "-r", "5", "--check",
                   "--out", str(out), "--no-report", timeout=120)
    assert "16 of 16 points already measured" in cp.stdout
    assert len([r for r in read_rows(out) if r["kind"] == "point"]) == 16


def _tbf_counts(ns: str, dev: str) -> tuple[int, int, int]:
    """(dropped, packets sent, bytes sent) as tc's text output gives them."""
    out = subprocess.run(["ip", "netns", "exec", ns, "tc", "-s", "qdisc", "show", "dev", dev], text=True,
                         capture_output=True, check=True).stdout
    m = re.search(r"Sent (\d+) bytes (\d+) pkt \(dropped (\d+)", out)
    assert m, out
    return int(m.group(3)), int(m.group(2)), int(m.group(1))


@pytest.mark.lab
def test_attribution_puts_known_losses_where_they_happened(lab):
    """east-1 sends to east-2 (local) and to west-1 (distant) through switch ports made tiny.

    The drops happen in the switches (a sender's own qdisc drops are not
    losses to TCP, which simply sends again), and each port's drop counter
    says how many segments each connection class lost.
    """
    if Trace.available():
        pytest.skip(Trace.available())
    names = LabNames.from_env()
    state = load_state(names)
    topo = state.topo
    src, loc, dist = (topo.host(n) for n in ("east-1", "east-2", "west-1"))
    ports = [(names.switch_ns(h.site), sw_port(h), topo.site(h.site)) for h in (loc, dist)]

    def tc(ns, line):
        subprocess.run(["ip", "netns", "exec", ns, "tc", *line.split()], check=True)

    for ns, port, _ in ports:
        tc(ns, f"qdisc replace dev {port} root tbf rate 20mbit burst 16k limit 8000")
    servers = [subprocess.Popen(["ip", "netns", "exec", state.ns(h), "iperf3", "-s", "-1", "-p", "5301"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for h in (loc, dist)]
    trace = Trace(f"{PREFIX}-test-attr")
    trace.start()
    try:
        time.sleep(0.5)
        before = C.snapshot(state.ns(src))
        counts0 = [_tbf_counts(ns, port) for ns, port, _ in ports]
        q0 = queues.snapshot(state)
        trace.clear()
        clients = [subprocess.Popen(["ip", "netns", "exec", state.ns(src), "iperf3", "-c", str(h.ip), "-p", "5301",
                                     "-t", "3", "-C", "cubic"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    text=True) for h in (loc, dist)]
        for c in clients:
            assert c.wait(timeout=30) == 0, c.stderr.read()
        after = C.snapshot(state.ns(src))
        tr = trace.collect()
        counts = [tuple(a - b for a, b in zip(_tbf_counts(ns, port), c0)) for (ns, port, _), c0 in zip(ports, counts0)]
        (drops_local, *_), (drops_distant, *_) = counts
        q1 = queues.snapshot(state)
        q, sent = queues.delta(q0, q1), queues.traffic(q0, q1)
    finally:
        trace.close()
        for s in servers:
            s.kill()
            s.wait()
        for ns, port, site in ports:  # back to the lab's own switch ports for the tests that follow
            tc(ns, tbf_line(port, site.nic_mbps, site.switch_buffer_bytes, "switch"))
    assert drops_local > 5 and drops_distant > 5, (drops_local, drops_distant)
    # The bench's per-queue record names the same two ports with the same counts.
    assert q.get(f"{loc.site} switch → {loc.name}") == drops_local, q
    assert q.get(f"{dist.site} switch → {dist.name}") == drops_distant, q
    # ... and what they sent: iperf3's full-size data frames (the hosts' segmentation
    # offloads are off), a few of its control frames and nothing else.
    for h, (_, packets, nbytes) in zip((loc, dist), counts):
        rec = sent[f"{h.site} switch → {h.name}"]
        assert rec == {"packets": packets, "bytes": nbytes}, (rec, packets, nbytes)
        assert packets > 1000 and 1400 < nbytes / packets <= FULL_FRAME, (packets, nbytes)
    by_class = tr.by_class(topo)
    # Every segment lost in a switch is sent again on its own connection. (Another lab
    # running at the same time could add events, never remove them.)
    assert by_class["local"]["retrans_segs"] >= 0.8 * drops_local, (by_class, drops_local)
    assert by_class["distant"]["retrans_segs"] >= 0.8 * drops_distant, (by_class, drops_distant)
    mine = {(sa, da) for (sa, _, da, _), st in tr.conns.items() if st.retrans and sa == str(src.ip)}
    assert mine == {(str(src.ip), str(loc.ip)), (str(src.ip), str(dist.ip))}, mine
    # The host's counters are then split in the same proportion as its traced segments.
    deltas = {src.name: C.delta(before, after)}
    att = attribute(topo, "direct", deltas, {src.name: src}, tr.by_source(topo))
    total = deltas[src.name]["RetransSegs"]
    mine_by = tr.by_source(topo)[str(src.ip)]
    share = mine_by["local"] / (mine_by["local"] + mine_by["distant"])
    assert att["local"]["RetransSegs"] + att["distant"]["RetransSegs"] == total
    assert abs(att["local"]["RetransSegs"] - share * total) <= 1


def test_trace_parser_counts_state_entries_once():
    line = ("  <idle>-0  [001] ..s2. 10.0: tcp_cong_state_set: family=AF_INET sport=1 dport=2 saddr=10.71.1.1 "
            "daddr=10.71.2.1 saddrv6=::ffff:10.71.1.1 daddrv6=::ffff:10.71.2.1 cong_state={}")
    rtx = ("  <idle>-0  [001] ..s2. 10.0: tcp_retransmit_skb: skbaddr=0 skaddr=0 family=AF_INET sport=1 dport=2 "
           "saddr=10.71.1.1 daddr=10.71.2.1 saddrv6=::ffff:10.71.1.1 daddrv6=::ffff:10.71.2.1 state=TCP_ESTABLISHED err=0")
    text = "\n".join([line.format(3), rtx, line.format(3), line.format(0), line.format(4), line.format(4), rtx])
    st = parse(text).conns[("10.71.1.1", 1, "10.71.2.1", 2)]
    assert (st.retrans, st.recoveries, st.losses) == (2, 1, 1)


def test_softirq_parser_pairs_entries_and_exits_per_cpu():
    lines = [
        "     gridsplitd-700     [000] .Ns1. 10.000500: softirq_exit: vec=3 [action=NET_RX]",  # opened before the trace
        "     gridsplitd-700     [000] ..s1. 10.001000: softirq_entry: vec=3 [action=NET_RX]",
        "  gridsplit-node-701    [001] ..s1. 10.001100: softirq_entry: vec=2 [action=NET_TX]",
        "     gridsplitd-700     [000] .Ns1. 10.001400: softirq_exit: vec=3 [action=NET_RX]",
        "  gridsplit-node-701    [001] ..s1. 10.003100: softirq_exit: vec=2 [action=NET_TX]",
        "     gridsplitd-700     [001] d.s2. 10.004000: softirq_entry: vec=9 [action=RCU]",
        "     gridsplitd-700     [001] ..s1. 10.004250: softirq_exit: vec=9 [action=RCU]",
    ]
    got = softirq.parse("\n".join(lines))
    assert got.keys() == {700, 701}
    assert got[700] == pytest.approx(0.00065) and got[701] == pytest.approx(0.002)


def test_report_renders_from_recorded_file(tmp_path):
    """A real sweep recorded on the paper lab (tests/data/bench) renders with every section and plot."""
    src = DATA / "paper-n4-openmpi.jsonl"
    cp = gridsplit("report", str(src), "--out", str(tmp_path / "rep"))
    html = (tmp_path / "rep" / "index.html").read_text()
    for section in ("Targets", "Summary", "Table 1: fast retransmits", "Table 2: retransmission timeouts",
                    "Physical bound"):
        assert section in html, section
    pngs = sorted(p.name for p in (tmp_path / "rep").glob("*.png"))
    assert any(p.startswith("time-gather") for p in pngs) and any(p.startswith("ratio-") for p in pngs)
    assert any(p.startswith("cpu-") for p in pngs)
    assert html.count("data:image/png;base64,") == len(pngs)
    assert str(tmp_path / "rep" / "index.html") in cp.stdout
    assert "Warning" not in cp.stderr, cp.stderr  # e.g. numpy's, from a colour scale taking log(0)


def test_relay_report_renders_a_committed_run():
    """bench relay's summary, table and write-up (relayreport.py) from the committed run's raw rounds."""
    from rich.console import Console
    from gridsplit.bench import relayreport as R
    doc = json.loads((ROOT / "results/relay/2026-11-22-vm-run4.json").read_text())
    s = R.summarize(doc["runs"])
    con = Console(record=True, width=200)
    con.print(R.table(s, 5))
    text = con.export_text()
    assert "added RTT per relay hop" in text and "gridsplitd" in text
    md = R.markdown(doc)
    assert md.startswith("# Relay benchmark") and "haproxy" in md.lower()


def test_a_point_of_all_nodes_finds_its_row():
    """`--nodes all` rows record the sender count they ran with and the point they belong to,
    so a resumed sweep and `bench ab`'s table match them (row_key reads nodes_requested)."""
    from gridsplit.bench.options import ALL_NODES
    from gridsplit.bench.points import Point
    from gridsplit.bench.results import row_key
    p = Point("alltoall", "mpich", ALL_NODES, 10_000, 0, "direct", None, None)
    row = {"op": "alltoall", "impl": "mpich", "nodes": 11, "nodes_requested": ALL_NODES, "size_bytes": 10_000,
           "repeat": 0, "mode": "direct", "variant": None}
    assert row_key(row) == p.key
    old = {k: v for k, v in row.items() if k != "nodes_requested"}
    assert row_key(old)[2] == 11   # rows written before the field: their own count


def test_rows_from_before_lan_pacing_ran_it_off():
    """Rows written before [gateways] lan_pacing existed ran without LAN pacing: they resume as a point with
    lan_pacing "off" and keep their variant tags; a paced variant gets a tag and a key of its own."""
    from gridsplit.bench.points import Point
    from gridsplit.bench.results import row_key, variant_tag
    rows = [r for r in read_rows(ROOT / "results/matrix/2026-11-26-holdout/gather.jsonl") if r.get("kind") == "point"]
    split = next(r for r in rows if r["mode"] == "split")
    v = split["variant"]
    assert "lan_pacing" not in v
    p = Point(split["op"], split["impl"], split["nodes"], split["size_bytes"], split["repeat"], "split",
              v["strategy"], v["congestion"], v["lan_tuning"], v["wan_streams"], v["split"], pacing="off")
    assert row_key(split) == p.key and p.variant == {**v, "lan_pacing": "off"}
    assert {variant_tag(r) for r in rows} == {"direct", "fair:cubic"}
    assert {s["variant"] for s in summarize(rows)} == {"fair:cubic"}
    on = {**split, "variant": {**v, "lan_pacing": "on"}}
    assert variant_tag(on) == "fair:cubic:lan-pacing-on" and row_key(on) != row_key(split)
    assert row_key({**split, "variant": {**v, "lan_pacing": "off"}}) == row_key(split)
    direct = next(r for r in rows if r["mode"] == "direct")
    assert row_key(direct) == Point(direct["op"], direct["impl"], direct["nodes"], direct["size_bytes"],
                                    direct["repeat"], "direct", None, None).key


def test_report_of_several_grids_keeps_them_apart(tmp_path):
    """Files of more than one topology make one matrix page: a heat map row per grid, cells that
    never pool two grids' points, and files of one grid (gather and alltoall) pooled."""
    m = ROOT / "results/matrix"
    files = [m / "2026-11-26-holdout/gather.jsonl", m / "2026-11-26-holdout/alltoall.jsonl",
             m / "2026-11-26-lossy-gather/gather.jsonl"]
    gridsplit("report", *map(str, files), "--out", str(tmp_path / "rep"))
    html = (tmp_path / "rep" / "index.html").read_text()
    assert "Split vs direct on 2 grids" in html and "holdout: 2 sites, RTT 16 ms, loss 0.01 %" in html
    assert {p.name for p in (tmp_path / "rep").glob("*.png")} >= {"matrix-openmpi-fair-cubic.png", "matrix-mpich-fair-cubic.png"}
    from gridsplit.bench.matrix import summarize_grids
    cells = summarize_grids(files)
    alone = summarize([r for r in read_rows(files[2]) if r.get("kind") == "point"])
    lossy = [c for c in cells if c["grid"].startswith("lossy")]
    assert [(c["op"], c["size_bytes"], c["ratio"]) for c in lossy] == [(c["op"], c["size_bytes"], c["ratio"]) for c in alone]
    assert {c["op"] for c in cells if c["grid"].startswith("holdout")} == {"gather", "alltoall"}
    # Two files naming one grid with different physics are refused in one line.
    rows = [json.loads(l) for l in files[2].read_text().splitlines()]
    rows[0]["topology"]["name"] = "holdout"
    other = tmp_path / "other.jsonl"
    other.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cp = gridsplit("report", str(files[0]), str(other), "--out", str(tmp_path / "x"), check=False)
    assert cp.returncode != 0 and "differs from another file's of the same name" in cp.stderr
    # A later gridsplit's record of the same grid (it adds gateways.encryption; an A/B varies
    # gateway settings, which its rows carry as variants) is the same grid.
    ab = m / "2026-11-26-holdout/alltoall-10K-lan-tuning-ab.jsonl"
    assert "encryption" not in json.loads(files[0].read_text().splitlines()[0])["topology"]["gateways"]
    assert "encryption" in json.loads(ab.read_text().splitlines()[0])["topology"]["gateways"]
    assert {c["grid"] for c in summarize_grids([files[1], ab])} == {c["grid"] for c in summarize_grids([files[1]])}


def test_summary_counts_lan_timeouts_apart_from_the_wan():
    """The summary's LAN timeouts are the runs' local TCPTimeouts (medians per mode), apart from the
    WAN's: in the committed clamp A/B on `paper`, the 4-sender 100 KB gather timed out inside
    bordeaux only without the gateways' clamps, and never on the WAN; the table shows both."""
    from rich.console import Console
    from gridsplit.bench.results import render_summary
    rows = read_rows(ROOT / "results/matrix/2026-12-04-clamp-rule/paper-gather.jsonl")
    cells = {(s["nodes"], s["size_bytes"], s["variant"]): s for s in summarize(rows)}
    clamped = cells[(4, 100_000, "fair:cubic:lan-pacing-auto")]
    free = cells[(4, 100_000, "fair:cubic:no-lan-tuning:lan-pacing-auto")]
    assert (clamped["lan_rto_direct"], clamped["lan_rto_split"], free["lan_rto_split"]) == (0, 0, 4)
    assert clamped["wan_rto_split"] == free["wan_rto_split"] == 0
    points = [r for r in rows if r.get("kind") == "point" and r["mode"] == "split" and r["nodes"] == 4
              and r["size_bytes"] == 100_000 and r["variant"]["lan_tuning"] is False]
    assert free["lan_rto_split"] == statistics.median(r["counters"]["local"]["TCPTimeouts"] for r in points)
    con = Console(width=300, record=True)
    render_summary(summarize(rows), con, "t")
    text = con.export_text()
    assert "LAN RTO direct→split" in text and "0 → 4" in text


def test_report_says_which_queues_dropped_and_the_ratio_floor(tmp_path):
    """Rows carrying per-queue drops get them in the report (scaled to 200 operations), and the data
    path's shortest frames with the efficiency they allow; ratio misses get their floor."""
    rows = [json.loads(l) for l in (DATA / "paper-n4-openmpi.jsonl").read_text().splitlines() if l.strip()]
    for r in rows:
        if r.get("kind") == "point":
            r["drops"] = {"sophia switch → sophia-1": 2 * r["reps"]} if r["mode"] == "direct" else {}
            # Full frames into the root; in split mode short ones into the sending gateway;
            # and many acknowledgments, which are not the data path whatever their number.
            p = 1000 * r["reps"]
            r["frames"] = {"sophia switch → sophia-1": {"packets": p, "bytes": p * 1514},
                           "sophia switch → router": {"packets": 5 * p, "bytes": 5 * p * 66}}
            if r["mode"] == "split":
                r["frames"]["bordeaux switch → bordeaux-gw"] = {"packets": 2 * p, "bytes": 2 * p * 641}
    f = tmp_path / "sweep.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    gridsplit("report", str(f), "--out", str(tmp_path / "rep"))
    page = (tmp_path / "rep" / "index.html").read_text()
    assert "Where packets were dropped" in page and "sophia switch → sophia-1: 400" in page
    # 575 bytes of payload in a 641-byte frame is 0.897 of it, against 0.956 in a full one.
    assert "Frame sizes on the data path" in page
    assert "641 B at bordeaux switch → bordeaux-gw (ceiling 0.94)" in page
    assert "1514 B at sophia switch → sophia-1 (ceiling 1.00)" in page and "66 B" not in page
    points = [r for r in rows if r.get("kind") == "point"]
    floors = {(s["nodes"], s["size_bytes"]): s["ratio_floor"] for s in summarize(points)}
    direct = [r for r in points if r["mode"] == "direct"]
    n, m = direct[0]["nodes"], direct[0]["size_bytes"]
    effs = [r["efficiency"] for r in direct if (r["nodes"], r["size_bytes"]) == (n, m)]
    assert floors[(n, m)] == pytest.approx(statistics.median(effs))


def test_report_lists_runs_that_failed(tmp_path):
    """A failure row without a later result is said in the report; one made good by a resume is not."""
    src = (DATA / "paper-n4-openmpi.jsonl").read_text()
    point = next(json.loads(l) for l in src.splitlines() if '"kind": "point"' in l)
    fail = {"kind": "failure", "schema": point["schema"], "op": "gather", "mode": "split",
            "variant": point.get("variant"), "impl": "mpich", "nodes": 20, "size_bytes": 1000, "repeat": 0,
            "error": "MPI job failed twice (timed out)"}
    healed = {**fail, "impl": point["impl"], "nodes": point["nodes"], "size_bytes": point["size_bytes"],
              "repeat": point["repeat"], "mode": point["mode"], "variant": point.get("variant")}
    f = tmp_path / "sweep.jsonl"
    f.write_text(src + json.dumps(fail) + "\n" + json.dumps(healed) + "\n")
    gridsplit("report", str(f), "--out", str(tmp_path / "rep"))
    page = (tmp_path / "rep" / "index.html").read_text()
    assert "1 run(s) failed" in page and "mpich split n=20 1K #0" in page


@pytest.mark.parametrize("content,msg", [
    ("", "no measured points"),
    ('{"kind":"point"\n{"x":1}\n', "not a JSON line"),
    ('{"kind":"meta","schema":"other/1"}\n', "schema"),
    ('[1, 2]\n', "not a result row"),
    ('{"schema":"gridsplit.bench/1","kind":"point"}\n', "a point row without op"),
    (b"\x00\x01\xff\xfe garbage", "not text"),
])
def test_report_rejects_bad_files_in_one_line(tmp_path, content, msg):
    f = tmp_path / "bad.jsonl"
    f.write_bytes(content) if isinstance(content, bytes) else f.write_text(content)
    cp = gridsplit("report", str(f), check=False)
    assert cp.returncode != 0 and msg in cp.stderr and "Traceback" not in cp.stderr
    assert len(cp.stderr.strip().splitlines()) == 1


def test_report_reads_a_file_cut_mid_write_and_says_so(tmp_path):
    """A run killed mid-write leaves a cut last line: the rows before it are read, and stderr says one was left out."""
    good = (DATA / "paper-n4-openmpi.jsonl").read_text()
    cut = tmp_path / "cut.jsonl"
    cut.write_text(good.rstrip("\n")[:-40])
    cp = gridsplit("report", str(cut), "--out", str(tmp_path / "rep"), check=False)
    assert cp.returncode == 0, cp.stderr
    notes = [x for x in cp.stderr.splitlines() if "last line is cut" in x]
    assert len(notes) == 1 and f"{cut}:{len(good.splitlines())}" in notes[0], cp.stderr


def test_report_refuses_to_pair_runs_of_two_rank_envs(tmp_path):
    """Direct and split rows are paired without their --rank-env, so two settings in one report are refused."""
    src = (DATA / "paper-n4-openmpi.jsonl").read_text()
    eager = tmp_path / "eager.jsonl"
    eager.write_text("".join(json.dumps({**json.loads(l), "rank_env": {"OMPI_MCA_btl_tcp_eager_limit": "1048576"}})
                             + "\n" for l in src.splitlines() if l.strip()))
    gridsplit("report", str(eager), "--out", str(tmp_path / "one"))
    assert "OMPI_MCA_btl_tcp_eager_limit=1048576" in (tmp_path / "one" / "index.html").read_text()
    cp = gridsplit("report", str(DATA / "paper-n4-openmpi.jsonl"), str(eager), "--out", str(tmp_path / "two"),
                   check=False)
    assert cp.returncode != 0 and "different --rank-env" in cp.stderr and "Traceback" not in cp.stderr
    assert len(cp.stderr.strip().splitlines()) == 1


def test_bench_refuses_to_resume_a_file_of_another_rank_env(tmp_path):
    f = tmp_path / "sweep.jsonl"
    f.write_text((DATA / "paper-n4-openmpi.jsonl").read_text())
    cp = gridsplit("bench", "gather", "-n", "4", "-s", "1K", "--impl", "openmpi", "--out", str(f),
                   "--rank-env", "OMPI_MCA_btl_tcp_eager_limit=1048576", check=False)
    assert cp.returncode != 0 and "--rank-env (none)" in cp.stderr and "give another --out" in cp.stderr
    assert "Traceback" not in cp.stderr


def test_bench_outage_rejects_bad_flags_in_one_line():
    for args, msg in ((["--blackouts", "5,x"], "whole numbers"), (["--blackouts", "-5"], "0 or more"),
                      (["--repeat", "0"], "repeat"), (["--impl", "lam"], "lam")):
        cp = gridsplit("bench", "outage", *args, check=False)
        assert cp.returncode == 2 and msg in cp.stderr and "Traceback" not in cp.stderr, cp.stderr


def test_bench_rejects_bad_flags_in_one_line():
    # -n 999: refused from the topology before a running lab would be taken down to rebuild it.
    for args, msg in ((["-s", "10Q"], "size"), (["-s", "0"], "at least 1 byte"), (["-n", "999"], "takes 1 to 20 nodes"),
                      (["--impl", "lam"], "lam"), (["-n", "0"], "'0' is not a node count"),
                      (["-n", "4,x"], "'x' is not a node count"),
                      (["--rank-env", "EAGER"], "NAME=VALUE"), (["--rank-env", "LD_PRELOAD=/x.so"], "split mode"),
                      (["--rank-env", "GRIDSPLIT_CONFIG=/x"], "split mode"),
                      (["--lan-pacing", "yes"], "'yes' is not one of auto, on, off")):
        cp = gridsplit("bench", "gather", *args, check=False)
        assert cp.returncode != 0 and msg in cp.stderr and "Traceback" not in cp.stderr, cp.stderr
    cp = gridsplit("bench", "pingpong", "-n", "8", check=False)
    assert cp.returncode != 0 and "takes no node count" in cp.stderr and "Traceback" not in cp.stderr, cp.stderr


def test_wan_link_delta_counts_a_reconnected_stream_from_zero():
    """A row's `wan_links`: each link's counters over the run; a stream that reconnected (its
    counters went back) counts from zero, and the row says so."""
    from gridsplit.bench.measure import wan_link_delta, wan_link_snapshot

    def status(retrans, sent, cwnd):
        return {"links": [{"peer": "west", "tcp_info": [
            {"total_retrans": r, "bytes_retrans": 1448 * r, "bytes_sent": s, "snd_cwnd": c, "snd_ssthresh": c // 2}
            for r, s, c in zip(retrans, sent, cwnd)]}, {"peer": None}]}
    before = wan_link_snapshot({"east": status([5, 7], [10_000, 20_000], [300, 300]), "north": None})
    after = wan_link_snapshot({"east": status([9, 2], [30_000, 4_000], [60, 10])})
    assert set(before) == set(after) == {"east→west"}
    d = wan_link_delta(before, after)["east→west"]
    # stream 0: 4 more; stream 1 went back (a new socket): its 2 and 4,000 bytes count whole
    assert (d["total_retrans"], d["bytes_retrans"], d["bytes_sent"]) == (6, 6 * 1448, 24_000)
    assert d["streams"] == 2 and d["cwnd_end"] == [60, 10] and d["ssthresh_end"] == [30, 5] and d["reconnected"]
    same = wan_link_delta(before, before)["east→west"]
    assert same["total_retrans"] == same["bytes_sent"] == 0 and not same["reconnected"]
