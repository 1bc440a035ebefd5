"""A microsecond-resolution ICMP echo prober, run inside a lab namespace.

iputils' ping prints each RTT with three significant digits, i.e. 0.1 ms at
10-100 ms: too coarse to test a 0.2 ms bound on a median. This prober sends
echo requests on a raw socket and takes the receive time from the kernel
(SO_TIMESTAMPNS), so samples carry the same precision ping's summary line has.

Usage (as root, inside a namespace): python3 -m gridsplit.lab.pinger DST COUNT INTERVAL_S
Prints one JSON object: {"dst":..., "sent":N, "rtt_ms":[...]}. `ping()` runs it in a
namespace and returns the samples.
"""

from __future__ import annotations

import json
import os
import select
import socket
import struct
import sys
import time

from ..errors import GridsplitError
from .sh import in_ns

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)


def ping(ns: str, dst: str, count: int, interval: float) -> list[float]:
    """RTT samples (ms, µs precision) from namespace `ns` to dst."""
    cp = in_ns(ns, [sys.executable, "-m", "gridsplit.lab.pinger", dst, str(count), str(interval)],
               check=False, timeout=count * interval + 15)
    try:
        return json.loads(cp.stdout)["rtt_ms"]
    except (ValueError, KeyError):
        raise GridsplitError(f"RTT probe from {ns} to {dst} failed: {(cp.stderr or cp.stdout).strip()[-200:]}") from None


def checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


def probe(dst: str, count: int, interval: float, timeout: float = 2.0) -> list[float]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    ident = os.getpid() & 0xFFFF
    sent: dict[int, int] = {}
    rtts: list[float] = []
    next_send = time.monotonic()
    seq = 0
    deadline = None
    while True:
        now = time.monotonic()
        if seq < count and now >= next_send:
            payload = struct.pack("!d", 0.0) + bytes(48)
            hdr = struct.pack("!BBHHH", 8, 0, 0, ident, seq)
            pkt = struct.pack("!BBHHH", 8, 0, checksum(hdr + payload), ident, seq) + payload
            sent[seq] = time.clock_gettime_ns(time.CLOCK_REALTIME)
            sock.sendto(pkt, (dst, 0))
            seq += 1
            next_send += interval
            if seq == count:
                deadline = time.monotonic() + timeout
        if deadline is not None and (time.monotonic() > deadline or len(rtts) == count):
            break
        wait = max(0.0, (next_send if seq < count else deadline) - time.monotonic())
        r, _, _ = select.select([sock], [], [], wait)
        if not r:
            continue
        data, anc, _, _ = sock.recvmsg(2048, 64)
        rx = None
        for level, typ, val in anc:
            if level == socket.SOL_SOCKET and typ == SO_TIMESTAMPNS:
                sec, nsec = struct.unpack("qq", val[:16])
                rx = sec * 1_000_000_000 + nsec
        ihl = (data[0] & 0x0F) * 4
        typ, _, _, rid, rseq = struct.unpack("!BBHHH", data[ihl:ihl + 8])
        if typ == 0 and rid == ident and rseq in sent:
            rtts.append(((rx or time.clock_gettime_ns(time.CLOCK_REALTIME)) - sent.pop(rseq)) / 1e6)
    return rtts


def main() -> None:
    dst, count, interval = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    print(json.dumps({"dst": dst, "sent": count, "rtt_ms": [round(x, 4) for x in probe(dst, count, interval)]}))


if __name__ == "__main__":
    main()
