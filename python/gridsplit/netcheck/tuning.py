"""What to change: buffer sizes from the measured BDP, sysctl lines, setsockopt, congestion control.

Pure functions over a measured cell, shared by the terminal report, the JSON,
and `gridsplit gateway config --from-netcheck` (which takes a WAN link's socket
buffer and pacing rate from here, so the gateway and the advice never disagree).
"""

from __future__ import annotations

import math
from typing import Any

from .diagnose import backlog_ceiling_mbps, least

DEFAULT_HEADROOM = 2.0
MIN_BUFFER = 1 << 16
LINUX_TCP_RMEM = (4096, 131072)   # Linux's own min/default, used when a host's are unknown
LINUX_TCP_WMEM = (4096, 16384)


def buffer_for(bdp_bytes: float, headroom: float = DEFAULT_HEADROOM) -> int:
    """headroom x BDP, rounded up to a power of two (1.25 MB x 2 -> 4 MiB, Guillier et al. 2006's value).

    The headroom covers what Linux keeps of each buffer for itself (about half
    with tcp_adv_win_scale = 1) and RTT growth while a queue builds.
    """
    need = max(headroom * bdp_bytes, MIN_BUFFER)
    return 1 << math.ceil(math.log2(need))


def backlog_for(capacity_mbps: float, hz: int | None) -> int | None:
    """A netdev_max_backlog that lifts Guillier et al. 2006 §3's ceiling to twice the capacity (at least 1000)."""
    if not hz:
        return None
    need = capacity_mbps * 1e6 / 8 / 1500 / hz
    return max(1000, 1000 * math.ceil(2 * need / 1000))


def congestion_for(rtt_ms: float, bdp_bytes: float, mss: int, loss_limited: bool) -> dict[str, str]:
    """A congestion control for this path, with the arithmetic that motivates it.

    After one loss at full rate, Reno needs W/2 RTTs to regain its window; CUBIC
    needs K = cbrt(W x beta / C) seconds (C = 0.4, beta = 0.3), independent of
    the RTT, but never more than Reno, since its Reno-friendly region follows
    Reno's growth where that is faster (short RTTs).
    """
    w = max(bdp_bytes / mss, 1.0)                 # window in segments at full rate
    reno_s = w / 2 * rtt_ms / 1000
    cubic_s = min((w * 0.3 / 0.4) ** (1 / 3), reno_s)
    recovery = f"after one loss Reno needs W/2 = {w / 2:.0f} RTTs ({reno_s:.1f} s) to return to full rate, CUBIC {cubic_s:.1f} s"
    if loss_limited:
        return {"algorithm": "bbr", "why": (
            f"the path loses packets without congestion; {recovery}, and both halve their rate again at the next loss. "
            f"BBR paces at the measured bottleneck rate and does not back off on every loss (use it with the fq qdisc)")}
    if rtt_ms < 1.0:
        return {"algorithm": "cubic", "why": f"RTT {rtt_ms:.2f} ms: any algorithm refills this path within milliseconds"}
    if rtt_ms >= 30.0:
        return {"algorithm": "bbr", "why": (
            f"RTT {rtt_ms:.0f} ms, BDP {w:.0f} segments: {recovery}; BBR does not wait for loss-free RTTs "
            f"(use it with the fq qdisc; CUBIC is the alternative if BBR's unfairness to loss-based flows matters)")}
    return {"algorithm": "cubic", "why": (
        f"RTT {rtt_ms:.1f} ms, BDP {w:.0f} segments: {recovery}; on a dedicated path losses are rare and "
        f"Linux's default CUBIC is enough (BBR if the path shows random loss)")}


def sysctl_lines(buffer: int, facts: dict[str, Any] | None = None, backlog: int | None = None,
                 congestion: str | None = None) -> list[str]:
    """The exact /etc/sysctl.d lines; a host's own min/default values are kept, only the maxima change."""
    facts = facts or {}
    rmin, rdef = (facts.get("net.ipv4.tcp_rmem") or LINUX_TCP_RMEM)[:2]
    wmin, wdef = (facts.get("net.ipv4.tcp_wmem") or LINUX_TCP_WMEM)[:2]
    lines = [f"net.core.rmem_max = {buffer}", f"net.core.wmem_max = {buffer}",
             f"net.ipv4.tcp_rmem = {rmin} {rdef} {buffer}", f"net.ipv4.tcp_wmem = {wmin} {wdef} {buffer}"]
    if backlog:
        lines.append(f"net.core.netdev_max_backlog = {backlog}")
    if congestion:
        lines.append(f"net.ipv4.tcp_congestion_control = {congestion}")
        if congestion == "bbr":
            lines.append("net.core.default_qdisc = fq")
    return lines


def setsockopt_text(buffer: int) -> str:
    """The per-application alternative, with the kernel's two surprises spelled out."""
    return (
        f"int sz = {buffer};  /* before connect() or listen(), so that window scaling is negotiated */\n"
        f"setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);\n"
        f"setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);\n"
        f"/* Linux doubles the value (getsockopt returns {2 * buffer}: half is kept for bookkeeping), clamps the\n"
        f"   request to net.core.wmem_max / rmem_max (so those two lines are still needed, as root), and turns\n"
        f"   off buffer autotuning for this socket. */")


def cell_advice(cell: dict[str, Any], src_facts: dict[str, Any], dst_facts: dict[str, Any],
                headroom: float = DEFAULT_HEADROOM) -> dict[str, Any] | None:
    """Advice for one measured cell, or None when nothing was measured to base it on."""
    rtt = cell.get("rtt", {})
    base = rtt.get("min_ms") or (cell.get("tuned") or {}).get("min_rtt_ms") or (cell.get("untuned") or {}).get("min_rtt_ms")
    cap = cell.get("capacity_mbps")
    if not base or not cap:
        return None
    bdp = cap * 1e6 / 8 * base / 1000
    buf = buffer_for(bdp, headroom)
    verdicts = {k: (cell.get("diagnosis", {}).get(k) or {}).get("verdict") for k in ("untuned", "tuned")}
    # Loss seen with buffers fitted to the path is the path's; loss of an
    # untuned flow alone may be its own window bursts into a shallow buffer.
    judged = verdicts["tuned"] if verdicts["tuned"] not in (None, "unmeasured") else verdicts["untuned"]
    loss = judged == "loss-limited"
    mss = (cell.get("tuned") or cell.get("untuned") or {}).get("mss") or 1448
    cc = congestion_for(base, bdp, mss, loss)
    hz = least("hz", src_facts, dst_facts)
    ceiling = backlog_ceiling_mbps(least("net.core.netdev_max_backlog", src_facts, dst_facts), hz)
    backlog = backlog_for(cap, hz) if ceiling is not None and ceiling < cap else None
    # What the flows actually used (the lab sets CC per route, over the sysctl).
    current = [(cell.get(k) or {}).get("congestion") for k in ("untuned", "tuned")] or \
        [f.get("net.ipv4.tcp_congestion_control") for f in (src_facts, dst_facts)]
    return {"bdp_bytes": int(bdp), "buffer_bytes": buf, "headroom": headroom,
            "netdev_max_backlog": backlog, "congestion": cc,
            "sysctl": sysctl_lines(buf, src_facts, backlog, cc["algorithm"] if cc["algorithm"] not in current else None),
            "setsockopt": setsockopt_text(buf)}


def site_advice(cells: list[dict[str, Any]], facts: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """One set of sysctl lines per site: a host's settings serve all its paths, so the largest need wins."""
    out: dict[str, dict[str, Any]] = {}
    for c in cells:
        adv = c.get("advice")
        if not adv:
            continue
        for role in ("src", "dst"):
            site, host = c[f"{role}_site"], c[role]
            cur = out.get(site)
            if cur is None or adv["buffer_bytes"] > cur["buffer_bytes"] or (
                    adv["buffer_bytes"] == cur["buffer_bytes"] and adv["bdp_bytes"] > cur["bdp_bytes"]):
                used = (c.get("tuned") or c.get("untuned") or {}).get("congestion")
                out[site] = {"host": host, "buffer_bytes": adv["buffer_bytes"], "bdp_bytes": adv["bdp_bytes"], "used_cc": used,
                             "worst_pair": f"{c['src_site']}->{c['dst_site']}",
                             "netdev_max_backlog": adv["netdev_max_backlog"], "congestion": adv["congestion"]}
    for site, a in out.items():
        f = facts.get(a["host"], {})
        cc = a["congestion"]["algorithm"]
        a["sysctl"] = sysctl_lines(a["buffer_bytes"], f, a["netdev_max_backlog"],
                                   None if cc in (a.pop("used_cc"), f.get("net.ipv4.tcp_congestion_control")) else cc)
        a["current"] = {k: f.get(k) for k in ("net.core.rmem_max", "net.core.wmem_max", "net.ipv4.tcp_rmem",
                                               "net.ipv4.tcp_wmem", "net.ipv4.tcp_congestion_control")}
    return out


def gateway_links(report: dict[str, Any], site: str) -> dict[str, dict[str, Any]]:
    """gridsplitd [[link]] settings for `site`'s gateway from a netcheck report.

    Per peer site: rtt_ms is the smallest idle RTT measured either way, the
    socket buffer is the advice's (headroom x BDP, both directions), and the
    pacing rate is the path's capacity, or the best tuned rate measured when the
    tuned flow stayed below `ok` of the capacity with nothing but the path to
    blame (a policer or a slower hop than assumed: pacing above it would only
    fill a queue).
    """
    ok = report.get("settings", {}).get("thresholds", {}).get("ok", 0.8)
    links: dict[str, dict[str, Any]] = {}
    for c in report.get("cells", []):
        if site not in (c["src_site"], c["dst_site"]) or not c.get("advice"):
            continue
        peer = c["dst_site"] if c["src_site"] == site else c["src_site"]
        cap = c["capacity_mbps"]
        best = max([(c.get("tuned") or {}).get("goodput_mbps") or 0] +
                   [p.get("goodput_mbps") or 0 for p in c.get("parallel", [])])
        best_wire = best / c["max_goodput_mbps"] * cap if c.get("max_goodput_mbps") else 0
        # Only a path that delivered less with nothing else to blame ("unexplained":
        # a standing queue, a policer, a slower hop) lowers the pacing rate.
        path_limited = (c.get("diagnosis", {}).get("tuned") or {}).get("verdict") == "unexplained"
        pacing = best_wire if path_limited and 0 < best_wire < ok * cap else cap
        rtt = (c.get("rtt") or {}).get("min_ms") or c["advice"]["bdp_bytes"] * 8 / (cap * 1e3)
        cur = links.get(peer)
        # Random loss as the untuned single flow saw it (retransmits per
        # segment): what `gateway config` stripes the link against.
        loss = ((c.get("diagnosis", {}).get("untuned") or {}).get("evidence") or {}).get("retransmit_rate") or 0.0
        entry = {"rtt_ms": round(rtt, 3), "bandwidth_bps": int(cap * 1e6),
                 "socket_buffer": c["advice"]["buffer_bytes"], "pacing_bps": int(pacing * 1e6),
                 "congestion": c["advice"]["congestion"]["algorithm"], "loss": loss}
        if cur is None:
            links[peer] = entry
        else:
            cur["rtt_ms"] = min(cur["rtt_ms"], entry["rtt_ms"])
            cur["socket_buffer"] = max(cur["socket_buffer"], entry["socket_buffer"])
            cur["pacing_bps"] = min(cur["pacing_bps"], entry["pacing_bps"])
            cur["bandwidth_bps"] = min(cur["bandwidth_bps"], entry["bandwidth_bps"])
            cur["loss"] = max(cur["loss"], entry["loss"])
            if entry["congestion"] == "bbr":
                cur["congestion"] = "bbr"
    return links
