#!/usr/bin/env python3
"""fake_gateway.py - a stand-in for gridsplitd used only by the preload tests.

It implements the LAN side of docs/protocol.md (sections 1-3) on loopback, playing
both gateways at once: it accepts a GSq1 request from a node (as the local
gateway), connects to the destination from --remote-src (as the remote gateway,
whose LAN address the destination's libgridsplit recognises), sends the GSo1
origin header there, answers GSa1 to the node and then splices bytes both ways.
There is no WAN and no authentication: that is gridsplitd's business.

Test hooks, chosen by the destination address (so the C tests can ask for them):
  127.0.2.201 .. 127.0.2.206  reply that status (1..6) without connecting
  127.0.2.210                 reply OK in two pieces, 300 ms apart (partial reads)
  127.0.2.211                 wait 300 ms, then behave normally (reply latency)
  127.0.2.212                 reply with a bad magic
  127.0.2.213                 reply OK, then reset the node's connection 100 ms
                              later (as gridsplitd does when it gives up on a flow)

With --hang it plays a gateway that accepts and reads the request (logged as
REQ) but never replies: a hung gridsplitd, for the failover tests.

Every accepted connection is logged as a "CONN" line before anything else is done
with it, and every request as a "REQ" line, so that tests can prove which
connections did (not) reach the gateway. Standard library only.
"""
import argparse
import ipaddress
import os
import signal
import socket
import struct
import sys
import threading
import time

REQ = struct.Struct("!4sBBH16s")  # magic, version, family, port, address
assert REQ.size == 24

log_lock = threading.Lock()


def log(f, line):
    with log_lock:
        f.write(line + "\n")
        f.flush()


def recv_exact(sock, n, timeout=5.0):
    sock.settimeout(timeout)
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    sock.settimeout(None)
    return buf


def pump(src, dst):
    """Copy src -> dst until EOF, then half-close dst (a FIN stays a FIN)."""
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    try:
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def reply(sock, status):
    sock.sendall(b"GSa1" + bytes([status, 0, 0, 0]))


def handle(conn, peer, args, logf):
    far = None
    try:
        data = recv_exact(conn, REQ.size)
        if data is None:
            log(logf, "SHORT %s:%d" % peer[:2])
            return
        magic, version, family, port, raw = REQ.unpack(data)
        if magic != b"GSq1" or version != 1 or family not in (4, 6):
            log(logf, "BADREQ %s:%d" % peer[:2])
            reply(conn, 6)
            return
        if family == 4:
            dst = str(ipaddress.IPv4Address(raw[:4]))
        else:
            dst = str(ipaddress.IPv6Address(raw))
        log(logf, "REQ %s:%d %s:%d" % (peer[0], peer[1], dst, port))
        if args.hang:
            while conn.recv(4096):  # hold the connection until the node drops it
                pass
            return

        if not ipaddress.ip_address(dst).is_loopback:
            # Tests run on loopback only; never become a relay to anywhere else.
            log(logf, "FORBIDDEN %s:%d" % (dst, port))
            reply(conn, 3)
            return
        last = int(ipaddress.ip_address(dst)) & 0xFF if family == 4 else 0
        if dst.startswith("127.0.2.") and 201 <= last <= 206:
            reply(conn, last - 200)
            return
        if dst.startswith("127.0.2.") and last == 212:
            conn.sendall(b"XXXX\0\0\0\0")
            return
        if dst.startswith("127.0.2.") and last == 213:
            reply(conn, 0)
            time.sleep(0.1)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            log(logf, "RESET %s:%d" % peer[:2])
            return
        if dst.startswith("127.0.2.") and last == 211:
            time.sleep(0.3)
        if dst.startswith("127.0.2.") and last in (210, 211):
            dst = "127.0.2.5"  # the hooks only change timing; the test server is there

        fam = socket.AF_INET if family == 4 else socket.AF_INET6
        far = socket.socket(fam, socket.SOCK_STREAM)
        far.settimeout(3.0)
        try:
            if family == 4 and args.remote_src:
                far.bind((args.remote_src, 0))
            far.connect((dst, port))
        except ConnectionRefusedError:
            log(logf, "REFUSED %s:%d" % (dst, port))
            reply(conn, 1)
            return
        except socket.timeout:
            reply(conn, 4)
            return
        except OSError:
            reply(conn, 2)
            return
        far.settimeout(None)
        # Origin header first, so the destination's accept() can complete, then
        # the OK to the node: the order a real pair of gateways produces.
        src_ip = ipaddress.ip_address(peer[0])
        if src_ip.version == 4:
            origin = REQ.pack(b"GSo1", 1, 4, peer[1], src_ip.packed + bytes(12))
        else:
            origin = REQ.pack(b"GSo1", 1, 6, peer[1], src_ip.packed)
        far.sendall(origin)
        if dst.startswith("127.0.2.") and last == 210:
            conn.sendall(b"GSa")
            time.sleep(0.3)
            conn.sendall(b"1\0\0\0\0")
        else:
            reply(conn, 0)
        log(logf, "OK %s:%d" % (dst, port))
        t = threading.Thread(target=pump, args=(far, conn), daemon=True)
        t.start()
        pump(conn, far)
        t.join()
    except OSError as e:
        log(logf, "ERR %s" % e)
    finally:
        conn.close()
        if far is not None:
            far.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--listen", required=True, help="LAN address to listen on (port 0)")
    ap.add_argument("--port-file", required=True, help="written with the port once listening")
    ap.add_argument("--log", required=True)
    ap.add_argument("--remote-src", default="", help="source address towards destinations")
    ap.add_argument("--hang", action="store_true", help="read requests, never reply")
    args = ap.parse_args()

    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    logf = open(args.log, "a")
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((args.listen, 0))
    srv.listen(256)
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % srv.getsockname()[1])
    os.rename(tmp, args.port_file)
    while True:
        conn, peer = srv.accept()
        log(logf, "CONN %s:%d" % peer[:2])
        threading.Thread(target=handle, args=(conn, peer, args, logf), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
