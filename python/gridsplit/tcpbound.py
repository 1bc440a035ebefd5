"""Steady-state TCP throughput bounds, shared by netcheck (diagnosis), gateway
config (how many WAN streams) and the model.

Kept apart from those packages so that each can use it without importing the
others (gateway config is imported by the lab, which netcheck imports)."""

from __future__ import annotations

import math

# Mathis, Semke, Mahdavi and Ott, "The macroscopic behavior of the TCP
# congestion avoidance algorithm" (1997): C = sqrt(3/2) for periodic loss.
MATHIS_C = math.sqrt(1.5)


def mathis_mbps(mss: int, rtt_ms: float, p: float) -> float:
    """Mathis et al.'s steady-state bound for a Reno flow at loss rate p (Mb/s);
    infinite without loss."""
    if p <= 0 or rtt_ms <= 0:
        return math.inf
    return mss * 8 / (rtt_ms / 1000) * MATHIS_C / math.sqrt(p) / 1e6
