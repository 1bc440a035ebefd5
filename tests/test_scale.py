"""`gridsplit bench scale` at a tiny size: every flow opened, relayed and echoed
correctly, and the result file holds what docs/bench.md says. Correctness only:
no timing is asserted (the machine is shared)."""

from __future__ import annotations

import json

from conftest import gridsplit


def test_scale_opens_and_echoes_every_flow(tmp_path):
    # Its own second octet, so that a full `bench scale` (127.21.x.x) may run meanwhile.
    gridsplit("bench", "scale", "--flows", "100,200", "--seconds", "2", "--repeat", "1", "--active", "2",
              "--probe-flows", "40", "--octet", "121", "--out", str(tmp_path),
              # The LAN controls on, so their ticks run over every flow as in a deployed gateway.
              "--lan-window-budget", "65536", "--lan-rate-bps", "100000000", "--lan-burst-bytes", "30000", timeout=180)
    files = list(tmp_path.glob("*.jsonl"))
    assert len(files) == 1 and files[0].with_suffix(".md").exists()
    rows = [json.loads(l) for l in files[0].read_text().splitlines()]
    kinds = [r["kind"] for r in rows]
    assert kinds[0] == "meta" and kinds[-1] == "summary" and kinds.count("run") == 1 and kinds.count("probe") == 1
    meta = rows[0]
    assert meta["schema"] == "gridsplit.scale/1"
    req = meta["requested"]
    for k in ("steps", "active", "seconds", "msg_size", "concurrency", "rate", "repeat", "per_flow_buffer",
              "total_buffer", "nofile", "octet", "strategy", "threads", "open_timeout_ms", "probe_defaults", "no_build"):
        assert k in req, k
    assert req["steps"] == [100, 200] and meta["command"].startswith("gridsplit bench scale")
    assert meta["lan"] == {"window_budget": 65536, "rate_bps": 100000000, "burst_bytes": 30000}

    steps = [r for r in rows if r["kind"] == "step"]
    assert [s["idle_flows"] for s in steps] == [100, 200]
    for s in steps:
        assert s["failed"] == 0 and s["opened"] == s["requested"] == 100, s["failures"]
        for g in ("alpha", "beta"):
            gw = s["gateways"][g]
            # Every idle flow plus the active ones is open in both gateways, one descriptor each.
            assert gw["flows_active"] == s["idle_flows"] + 2
            assert gw["fds_per_flow"] >= 0.9
            assert gw["rss_bytes_per_flow"] is not None and gw["vmsize_bytes_per_flow"] is not None
            assert gw["idle_cpu_pct"] >= 0
        lat = s["latency"]
        assert lat["round_trips"] > 0 and lat["mismatched"] == 0 and not lat["errors"]
        assert {"p50", "p99", "p999"} <= set(lat["rtt_us"])

    run = next(r for r in rows if r["kind"] == "run")["summary"]
    assert run["flows_opened"] == 202
    assert run["sink"]["accepted"] == 202 and run["sink"]["origin_ok"] == 202 and run["sink"]["origin_bad"] == 0
    assert run["all_checked"] and not run["stopped_early"]
    assert all(v["flows_active"] == 0 for v in run["after_close"].values())

    probe = next(r for r in rows if r["kind"] == "probe")
    assert probe["requested"] == 40 and 0 < probe["opened"] <= 40
    summary = rows[-1]
    assert summary["all_checked"] and summary["max_concurrent_flows"] == 200
