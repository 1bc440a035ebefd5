"""Steady-state TCP throughput bounds and frame overheads, shared by netcheck
(diagnosis), the lab's check, bench results, gateway config (how many WAN
streams) and the model.

Kept apart from those packages so that each can use it without importing the
others (gateway config is imported by the lab, which netcheck imports)."""

from __future__ import annotations

import math

# Mathis, Semke, Mahdavi and Ott, "The macroscopic behavior of the TCP
# congestion avoidance algorithm" (1997): C = sqrt(3/2) for periodic loss.
MATHIS_C = math.sqrt(1.5)

# Bytes on the wire per TCP segment beyond its payload: Ethernet header 14, IPv4 20,
# TCP 20 + timestamps 12. tbf shapes frames, iperf3 counts payload.
FRAME_OVERHEAD = 14 + 20 + 20 + 12
# The IP MTU of Ethernet, and the MSS under it with TCP timestamps on.
IP_MTU = 1500
MSS = IP_MTU - 20 - 20 - 12
# A full-sized data frame: MSS 1448 in 1514 bytes at L2, and its payload share.
FULL_FRAME = MSS + FRAME_OVERHEAD
GOODPUT = MSS / FULL_FRAME


def mathis_mbps(mss: int, rtt_ms: float, p: float) -> float:
    """Mathis et al.'s steady-state bound for a Reno flow at loss rate p (Mb/s);
    infinite without loss."""
    if p <= 0 or rtt_ms <= 0:
        return math.inf
    return mss * 8 / (rtt_ms / 1000) * MATHIS_C / math.sqrt(p) / 1e6
