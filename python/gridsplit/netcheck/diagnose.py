"""Why a TCP flow got the throughput it got: pure rules over iperf3 JSON and host facts.

No I/O here, so the rules are tested on recorded iperf3 output (tests/data/netcheck).
A cell's verdict is one of:

- ok: the flow reached `ok` (default 80 %, Primet 2006's "G > 80 % of C") of the
  goodput the path's capacity allows;
- window-limited: Primet 2006's "insufficient buffer size signature". The bytes in
  flight (goodput x smoothed RTT) sit at the buffer maximum of one end while
  the path's bandwidth-delay product is larger, and loss does not explain the
  shortfall: throughput ~ buffer / RTT;
- loss-limited: retransmissions at a rate whose Mathis et al. bound,
  MSS / RTT x sqrt(3/2) / sqrt(p), is below what the path could carry;
- host-limited: an iperf3 end used a whole CPU, or the flow sits at the
  netdev_max_backlog x timer-rate ceiling of Guillier et al. 2006 §3 (backlog x HZ packets
  of 1500 bytes per second);
- unexplained: below `ok` with none of those signatures (cross traffic, a
  slower hop than the assumed capacity, an application-limited sender).

The Mathis bound is Reno's; CUBIC and BBR can beat it, so it is used only to say
that loss is *enough* to explain a shortfall, never as a prediction.
"""

from __future__ import annotations

import math
from typing import Any

from ..lab.iperf import receiver_intervals_mbps
from ..tcpbound import mathis_mbps
CPU_BOUND_PERCENT = 90.0          # an iperf3 process (one thread) this busy is the bottleneck
BACKLOG_PACKET_BYTES = 1500       # Guillier et al. 2006 §3's average packet
# In-flight / buffer maximum between these bounds counts as "at the buffer":
# Linux keeps part of each buffer for its own bookkeeping (tcp_adv_win_scale,
# skb overhead), so a window-limited flow carries ~50-75 % of the maximum.
WINDOW_FILL_MIN, WINDOW_FILL_MAX = 0.3, 1.15
# The receive window the receiver advertised is already the usable window, so
# a flow limited by it keeps nearly all of it in flight.
RWND_FILL_MIN = 0.75
DEFAULT_THRESHOLDS = {"ok": 0.8, "critical": 0.2}


def jain(xs: list[float]) -> float | None:
    """Jain's fairness index: 1 when all shares are equal, 1/n when one takes all."""
    xs = [x for x in xs if x is not None]
    if not xs or sum(xs) == 0:
        return None
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs))


def summarize_iperf(raw: dict[str, Any]) -> dict[str, Any]:
    """The numbers the rules need from one iperf3 -J client run (with --get-server-output)."""
    if not isinstance(raw, dict) or "end" not in raw or "sum_received" not in raw.get("end", {}):
        err = raw.get("error") if isinstance(raw, dict) else None
        return {"error": f"iperf3: {err}" if err else "iperf3 produced no result"}
    start, end = raw.get("start", {}), raw["end"]
    sent, recv = end["sum_sent"], end["sum_received"]
    mss = start.get("tcp_mss_default") or 1448
    senders = [s["sender"] for s in end.get("streams", []) if "sender" in s]
    per_stream = [s["receiver"]["bits_per_second"] / 1e6 for s in end.get("streams", []) if "receiver" in s]
    segments = sent.get("bytes", 0) / mss
    retrans = sent.get("retransmits", 0) or 0
    intervals = sorted(receiver_intervals_mbps(raw))
    cpu = end.get("cpu_utilization_percent", {})
    rtts = [s.get("mean_rtt") for s in senders if s.get("mean_rtt")]
    test = start.get("test_start", {})
    return {
        "goodput_mbps": round(recv["bits_per_second"] / 1e6, 3),
        "sent_mbps": round(sent["bits_per_second"] / 1e6, 3),
        "interval_median_mbps": round(intervals[len(intervals) // 2], 3) if intervals else None,
        "interval_min_mbps": round(intervals[0], 3) if intervals else None,
        "interval_max_mbps": round(intervals[-1], 3) if intervals else None,
        "seconds": round(recv.get("seconds", 0), 3),
        "streams": len(per_stream) or test.get("num_streams", 1),
        "per_stream_mbps": [round(x, 3) for x in per_stream],
        "jain": round(jain(per_stream), 6) if len(per_stream) > 1 else None,
        "retransmits": retrans,
        "segments": int(segments),
        "retransmit_rate": retrans / segments if segments else 0.0,
        "mss": mss,
        "mean_rtt_ms": round(sum(rtts) / len(rtts) / 1000, 3) if rtts else None,
        "min_rtt_ms": min((s["min_rtt"] for s in senders if s.get("min_rtt")), default=0) / 1000 or None,
        "max_snd_cwnd": max((s.get("max_snd_cwnd", 0) for s in senders), default=0) or None,
        "max_snd_wnd": max((s.get("max_snd_wnd", 0) for s in senders), default=0) or None,
        "cpu_sender_percent": round(cpu["host_total"], 1) if "host_total" in cpu else None,
        "cpu_receiver_percent": round(cpu["remote_total"], 1) if "remote_total" in cpu else None,
        "sndbuf_actual": start.get("sndbuf_actual"),
        "rcvbuf_actual": start.get("rcvbuf_actual"),
        "window_request": start.get("sock_bufsize") or None,
        "congestion": end.get("sender_tcp_congestion"),
    }


def least(key: str, *facts: dict[str, Any]) -> Any:
    """The smallest value of a host fact among the hosts that report it (None if none does)."""
    return min((f[key] for f in facts if f.get(key)), default=None)


def backlog_ceiling_mbps(backlog: int | None, hz: int | None) -> float | None:
    """Guillier et al. 2006 §3: at most backlog packets per timer tick, i.e. backlog x HZ x 1500 B per second."""
    if not backlog or not hz:
        return None
    return backlog * hz * BACKLOG_PACKET_BYTES * 8 / 1e6


def buffer_limits(flow: dict[str, Any], src: dict[str, Any], dst: dict[str, Any]) -> dict[str, Any]:
    """The largest window each end allows this flow, from its settings (bytes), and which one binds."""
    if flow.get("window_request"):
        # iperf3 -w: fixed SO_SNDBUF/SO_RCVBUF; the kernel reports twice what it
        # grants (half is bookkeeping), after clamping to [rw]mem_max.
        w = flow["window_request"]
        send = min(w, (flow.get("sndbuf_actual") or 2 * w) // 2)
        recv = min(w, (dst.get("net.core.rmem_max") or w))
        names = {"send": f"SO_SNDBUF {send} B on the sender", "recv": f"SO_RCVBUF {recv} B on the receiver"}
    else:
        # A socket starts at the middle value and autotuning grows it up to the
        # maximum, never below the start: the larger of the two is the limit.
        wm, rm = src.get("net.ipv4.tcp_wmem") or [None] * 3, dst.get("net.ipv4.tcp_rmem") or [None] * 3
        send = max(wm[1], wm[2]) if wm[2] else None
        recv = max(rm[1], rm[2]) if rm[2] else None
        names = {"send": f"tcp_wmem {'max' if send == wm[2] else 'default'} {send} B on the sender",
                 "recv": f"tcp_rmem {'max' if recv == rm[2] else 'default (above its max)'} {recv} B on the receiver"}
    known = {k: v for k, v in (("send", send), ("recv", recv)) if v}
    if not known:
        return {"bytes": None, "which": None, "text": "buffer maxima unknown"}
    which = min(known, key=known.get)
    text = names[which]
    if len(known) == 2 and send == recv:
        which, text = "both", f"{names['send']} and {names['recv']}"
    return {"bytes": known[min(known, key=known.get)], "which": which, "text": text, "send": send, "recv": recv,
            "names": names}


def _fmt_bytes(n: float | None) -> str:
    if n is None:
        return "?"
    for unit, k in (("MB", 1e6), ("KB", 1e3)):
        if n >= k:
            return f"{n / k:.{0 if n >= 100 * k else 1}f} {unit}"
    return f"{n:.0f} B"


def _rwnd_text(flow: dict[str, Any], in_flight: float) -> str:
    rwnd = flow.get("max_snd_wnd")
    if rwnd and rwnd <= 1.15 * in_flight:
        return f"; the receiver never advertised more than {_fmt_bytes(rwnd)}"
    cwnd = flow.get("max_snd_cwnd")
    if cwnd and cwnd > 1.3 * in_flight:
        return f"; the congestion window ({_fmt_bytes(cwnd)}) was not the limit"
    return ""


def diagnose(flow: dict[str, Any], *, rtt: dict[str, Any], capacity_mbps: float, max_goodput_mbps: float,
             src: dict[str, Any], dst: dict[str, Any], ok: float = DEFAULT_THRESHOLDS["ok"]) -> dict[str, Any]:
    """The verdict on one measured flow, with the numbers behind it and one plain sentence."""
    if "error" in flow:
        return {"verdict": "unmeasured", "why": flow["error"]}
    g = flow["goodput_mbps"]
    frac = g / max_goodput_mbps if max_goodput_mbps else 0.0
    base_rtt = rtt.get("min_ms") or flow.get("min_rtt_ms") or 0.0
    srtt = flow.get("mean_rtt_ms") or rtt.get("avg_ms") or base_rtt
    in_flight = g * 1e6 / 8 * srtt / 1000
    bdp = capacity_mbps * 1e6 / 8 * base_rtt / 1000
    p = flow.get("retransmit_rate", 0.0)
    # Per stream; n parallel streams each get their own share of the bound.
    mathis = mathis_mbps(flow.get("mss", 1448), srtt, p) * max(flow.get("streams", 1), 1)
    buf = buffer_limits(flow, src, dst)
    backlog = backlog_ceiling_mbps(least("net.core.netdev_max_backlog", src, dst), least("hz", src, dst))
    cpu = max(flow.get("cpu_sender_percent") or 0, flow.get("cpu_receiver_percent") or 0)
    ev = {"fraction": round(frac, 4), "goodput_mbps": g, "max_goodput_mbps": round(max_goodput_mbps, 2),
          "capacity_mbps": capacity_mbps, "rtt_ms": round(srtt, 3), "base_rtt_ms": round(base_rtt, 3),
          "bdp_bytes": int(bdp), "in_flight_bytes": int(in_flight), "buffer_bytes": buf["bytes"],
          "buffer_limit": buf["text"], "retransmits": flow.get("retransmits", 0),
          "retransmit_rate": p, "mathis_mbps": None if math.isinf(mathis) else round(mathis, 2),
          "backlog_ceiling_mbps": round(backlog, 1) if backlog else None,
          "cpu_percent": cpu or None, "cwnd_bytes": flow.get("max_snd_cwnd"), "rwnd_bytes": flow.get("max_snd_wnd")}
    notes = []
    if (flow.get("emulator") or {}).get("ok") is False:
        e = flow["emulator"]
        notes.append(f"the lab's delay line fell behind during this test ({e.get('late_fraction', 0):.1%} of frames "
                     f"> 200 µs late): figures include this machine's load")
    if backlog and backlog < capacity_mbps:
        notes.append(f"latent host limit: netdev_max_backlog x HZ x 1500 B = {backlog:.0f} Mb/s is below the "
                     f"{capacity_mbps:g} Mb/s capacity (Guillier et al. 2006 §3)")

    def verdict(v: str, why: str) -> dict[str, Any]:
        return {"verdict": v, "fraction": round(frac, 4), "why": why, "evidence": ev, "notes": notes}

    pct = f"{g:.1f} Mb/s, {frac:.0%} of the {max_goodput_mbps:.0f} Mb/s the path allows"
    emu = flow.get("emulator") or {}
    if frac >= ok:
        if emu and not emu.get("ok", True):
            # Even a good figure from an emulator that fell behind is not a
            # measurement of the emulated path (lateness, not loss or rate, is
            # what the delay line failed on), so it cannot pass as "ok".
            return verdict("host-limited", (
                f"{pct}, but measured while the lab's WAN delay line fell behind its schedule "
                f"({emu.get('late_fraction', 0):.1%} of frames > 200 µs late): host-limited, by the lab's own "
                f"machine. Rerun on a quieter machine, or at a lower --scale rate."))
        return verdict("ok", f"{pct}")

    # The window a flow may keep in flight: what the receiver advertised when
    # iperf3 saw it, else what the settings allow. When the bytes in flight
    # exceed the settings' figure, the kernel allowed more than it (a default
    # above the maximum, minimum buffer sizes): the advertised window is then
    # the better witness.
    rwnd = flow.get("max_snd_wnd")
    window, wtext, fill_min = buf["bytes"], buf["text"], WINDOW_FILL_MIN
    # An advertised window far below the receiver's buffer maximum only shows
    # that autotuning had no need to grow it: then it is no limit.
    recv_max = buf.get("recv")
    rwnd_capped = not recv_max or rwnd is None or rwnd >= 0.45 * recv_max
    if rwnd and rwnd_capped and (window is None or rwnd < window or in_flight > WINDOW_FILL_MAX * window):
        window, wtext, fill_min = rwnd, f"receive window the receiver advertised ({_fmt_bytes(rwnd)} at most)", RWND_FILL_MIN
    if window and flow.get("streams", 1) > 1:
        # Every parallel stream has its own buffers: together they allow n windows.
        window, wtext = window * flow["streams"], f"{flow['streams']} x {wtext}"
    window_bound = window * 8 / (srtt / 1000) / 1e6 if window and srtt else math.inf
    fill = in_flight / window if window else None
    ev["window_bytes"], ev["window_bound_mbps"] = window, None if math.isinf(window_bound) else round(window_bound, 2)
    retr = flow.get("retransmits", 0)
    # Each of window and loss caps the rate; the lower cap is the cause, if the
    # flow got reasonably close to it and it is below what the path carries.
    window_caps = window is not None and window < bdp and fill is not None and fill_min <= fill <= WINDOW_FILL_MAX
    loss_caps = retr > 0 and mathis < max_goodput_mbps
    if window_caps and (not loss_caps or window_bound <= mathis):
        also = (f" There were also {retr} retransmits (p = {p:.1e}, Mathis bound {mathis:.0f} Mb/s), a lesser limit."
                if loss_caps else f" {retr} retransmits: loss is not the cause.")
        return verdict("window-limited", (
            f"{pct}: window-limited. {_fmt_bytes(in_flight)} were in flight ({g:.1f} Mb/s x {srtt:.2f} ms), "
            f"{fill:.0%} of the {wtext} (window / RTT = {window_bound:.0f} Mb/s; Linux keeps part of each buffer "
            f"for bookkeeping){_rwnd_text(flow, in_flight) if window == buf['bytes'] else ''}, while the path's "
            f"bandwidth-delay product is {_fmt_bytes(bdp)}, {bdp / window:.1f}x that window.{also} "
            f"Raise the buffer maxima to at least the BDP (advice below)."))
    # A lab whose delay line fell behind measured its machine: RTT, loss and
    # rate all inherit the stall, so nothing below may be blamed on the path.
    # (A window limit above stands: the flow kept its window in flight.)
    if emu and not emu.get("ok", True):
        return verdict("host-limited", (
            f"{pct}: host-limited, by the lab's own machine. The WAN delay line fell behind its schedule during "
            f"this test ({emu.get('late_fraction', 0):.1%} of frames > 200 µs late, worst "
            f"{emu.get('worst_late_us', 0) / 1000:.1f} ms): this measured the emulating machine's load, not the "
            f"emulated path. Rerun on a quieter machine, or at a lower --scale rate."))
    if loss_caps:
        wnote = (f" The window alone would allow {window_bound:.0f} Mb/s." if not math.isinf(window_bound) else "")
        return verdict("loss-limited", (
            f"{pct}: loss-limited. {retr} of {flow.get('segments', 0)} segments were retransmitted "
            f"(p = {p:.2e}); at that rate and {srtt:.2f} ms a Reno flow gets at most MSS/RTT x 1.22/sqrt(p) = "
            f"{mathis:.0f} Mb/s (Mathis), below the path's {max_goodput_mbps:.0f} Mb/s.{wnote} Bigger buffers alone "
            f"will not help: find the loss (a congested or faulty link, a shallow switch buffer overrun by bursts), "
            f"or use a loss-tolerant congestion control (BBR)."))
    send = buf.get("send")
    cwnd = flow.get("max_snd_cwnd")
    if send and send < bdp and cwnd and cwnd >= 1.3 * in_flight and (not rwnd or rwnd >= 1.2 * in_flight):
        # Neither the congestion window nor the receiver held the flow back and
        # nothing was lost: the sender could not keep more unacknowledged data.
        return verdict("window-limited", (
            f"{pct}: window-limited by the sender's buffer. {_fmt_bytes(in_flight)} were in flight "
            f"({g:.1f} Mb/s x {srtt:.2f} ms) while the congestion window reached {_fmt_bytes(cwnd)} and the receiver "
            f"offered {_fmt_bytes(rwnd)}: the sender's buffer ({buf['names']['send'] if 'names' in buf else send}) "
            f"is the limit, against a bandwidth-delay product of {_fmt_bytes(bdp)}. {retr} retransmits. "
            f"Raise the buffer maxima to at least the BDP (advice below)."))
    if cpu >= CPU_BOUND_PERCENT:
        side = "sender" if (flow.get("cpu_sender_percent") or 0) >= (flow.get("cpu_receiver_percent") or 0) else "receiver"
        return verdict("host-limited", (
            f"{pct}: host-limited. The {side}'s iperf3 used {cpu:.0f} % of a CPU: the host, not the network, "
            f"sets the pace (CPU speed, interrupt coalescing, offloads, write size)."))
    if backlog and backlog < capacity_mbps and g >= 0.8 * backlog * 1448 / 1500:
        return verdict("host-limited", (
            f"{pct}: host-limited. netdev_max_backlog x HZ x 1500 B = {backlog:.0f} Mb/s (Guillier et al. 2006 §3) is below the "
            f"{capacity_mbps:g} Mb/s capacity and the flow sits at that ceiling; raise net.core.netdev_max_backlog."))
    if base_rtt and srtt > 2 * base_rtt and flow.get("retransmits", 0) == 0:
        queue = g * 1e6 / 8 * (srtt - base_rtt) / 1000
        return verdict("unexplained", (
            f"{pct}: the path itself delivered no more. The RTT under load was {srtt:.1f} ms against {base_rtt:.1f} ms "
            f"idle: a standing queue of about {_fmt_bytes(queue)} at the bottleneck, so the bottleneck was busy at "
            f"{g:.0f} Mb/s. A hop is slower than the assumed {capacity_mbps:g} Mb/s, or shared with cross traffic."))
    return verdict("unexplained", (
        f"{pct}, and none of the signatures fits: {_fmt_bytes(in_flight)} in flight against the "
        f"{buf['text']}, cwnd {_fmt_bytes(flow.get('max_snd_cwnd'))}, receive window "
        f"{_fmt_bytes(flow.get('max_snd_wnd'))}, {flow.get('retransmits', 0)} retransmits, CPU {cpu:.0f} %. "
        f"Look for cross traffic, a hop slower than the assumed {capacity_mbps:g} Mb/s, or a paced sender."))


def grid_status(fraction: float | None, thresholds: dict[str, float] = DEFAULT_THRESHOLDS) -> str:
    """MaDDash-like status of one cell: ok, warning, critical, or unmeasured."""
    if fraction is None:
        return "unmeasured"
    if fraction >= thresholds["ok"]:
        return "ok"
    return "warning" if fraction >= thresholds["critical"] else "critical"
