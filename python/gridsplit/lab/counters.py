"""Per-namespace TCP counters, as deltas.

Each lab host is its own network namespace, so /proc/net/netstat and
/proc/net/snmp read inside it count exactly that host's TCP events. nstat keeps
one history file for every namespace, so deltas are computed here from two raw
snapshots instead.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from .sh import in_ns

# The counters Alter and Glück reason with (Tables 1-2), and their neighbours.
HEADLINE = ("TCPFastRetrans", "TCPTimeouts", "TCPLossProbes", "TCPSlowStartRetrans",
            "RetransSegs", "TCPLostRetransmit", "TCPSackRecovery", "TCPSpuriousRTOs",
            "OutSegs", "InSegs")


def parse_proc(text: str) -> dict[str, int]:
    """Parse the header/value line pairs of /proc/net/netstat and /proc/net/snmp."""
    out: dict[str, int] = {}
    lines = text.splitlines()
    for head, vals in zip(lines[::2], lines[1::2]):
        hname, _, hfields = head.partition(":")
        vname, _, vfields = vals.partition(":")
        if hname != vname:
            continue
        for k, v in zip(hfields.split(), vfields.split()):
            try:
                out[k if hname in ("TcpExt", "Tcp") else f"{hname}.{k}"] = int(v)
            except ValueError:
                pass
    return out


def snapshot(ns: str) -> dict[str, int]:
    cp = in_ns(ns, ["cat", "/proc/net/netstat", "/proc/net/snmp"])
    return parse_proc(cp.stdout)


def snapshot_many(nss: list[str]) -> dict[str, dict[str, int]]:
    with ThreadPoolExecutor(max_workers=8) as pool:
        return dict(zip(nss, pool.map(snapshot, nss)))


def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in after if after[k] - before.get(k, 0) != 0}
