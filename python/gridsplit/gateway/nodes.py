"""The node file: the sites libgridsplit.so steers connections between.

A versioned header, then one line per site (docs/protocol.md §5):

    gridsplit-nodes 1
    routed no                       (only where the sites are not routed to each other)
    lan_timers RTO_MIN_US DELACK_MAX_US   (the ranks' LAN timers; absent: Linux's)
    site NAME SUBNET GATEWAY_LAN [direct_to=SITE,SITE]

Nodes read it, not the gateway's TOML config: the library is C, loaded into
every MPI process, and this format takes a few dozen lines of C to read safely
where TOML needed a hand-written parser (preload/nodefile.c says why).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field

from ..errors import GridsplitError
from ..topology_file import lan_timer

HEADER = "gridsplit-nodes 1"
WRITER = "gridsplit gateway nodes-config"


@dataclass
class NodeSite:
    name: str
    subnet: str  # CIDR
    gateway_lan: str  # ADDRESS:PORT
    direct_to: list[str] = field(default_factory=list)
    why: list[str] = field(default_factory=list)  # comment lines above the site's line


def nodes_file(sites: list[NodeSite], notes: tuple[str, ...] | list[str] = (), source: str = f"`{WRITER}`",
               routed: bool = True, lan_timers: tuple[int, int] = (0, 0)) -> str:
    """The text of a node file for `sites`, `notes` as comments before them; `source` says who wrote it.
    `routed` False ([addressing] routed = false) adds `routed no`: the library then names a destination
    that is in no site, which only a route outside the grid could carry. `lan_timers` (µs: minimum RTO,
    delayed-ACK bound; [gateways] lan_rto_min_us) adds `lan_timers`: the ranks' LAN connections get them."""
    lines = ["# gridsplit node file: the sites libgridsplit.so (GRIDSPLIT_CONFIG) steers connections between.",
             f"# Written by {source}. Gateways read their own TOML config.", HEADER,
             *([] if routed else ["# the sites' subnets are not routed to each other, only through the gateways",
                                  "routed no"]),
             *([] if not any(lan_timers) else
               ["# LAN timers of the ranks' connections within their site and to its gateway (µs): minimum RTO, "
                "delayed-ACK bound", f"lan_timers {lan_timers[0]} {lan_timers[1]}"]),
             "# site NAME SUBNET GATEWAY_LAN [direct_to=SITE,...]", *(f"# {n}" for n in notes)]
    for s in sites:
        lines += [f"# {w}" for w in s.why]
        lines.append(f"site {s.name} {s.subnet} {s.gateway_lan}"
                     + (f" direct_to={','.join(s.direct_to)}" if s.direct_to else ""))
    return "\n".join(lines) + "\n"


SITE_LINE = "site NAME SUBNET GATEWAY_LAN [direct_to=SITE,...]"
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def is_host_port(v: str) -> bool:
    """ADDRESS:PORT or [v6]:PORT, as the library's gs_parse_hostport and gridsplitd's config take it."""
    host, sep, port = v.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        return False
    bracketed = host.startswith("[") and host.endswith("]")
    try:
        ip = ipaddress.ip_address(host[1:-1] if bracketed else host)
    except ValueError:
        return False
    # IPv6 only in brackets, and brackets only around IPv6 ("::1:7300" is ambiguous).
    return bracketed == (ip.version == 6)


def _site_line_error(words: list[str], sites_seen: int) -> str | None:
    """What is wrong with one line after the header (the library's rules, preload/nodefile.c), or None."""
    if words[0] == "routed":
        if len(words) != 2 or words[1] not in ("yes", "no"):
            return 'expected "routed yes" or "routed no"'
        return '"routed" comes before the site lines' if sites_seen else None
    if words[0] == "lan_timers":
        try:
            ok = len(words) == 3 and all(str(lan_timer("lan_timers", w)) == w for w in words[1:])
        except ValueError:
            ok = False
        if not ok:
            return 'expected "lan_timers RTO_MIN_US DELACK_MAX_US", each 0 or 2000-200000'
        return '"lan_timers" comes before the site lines' if sites_seen else None
    if words[0] != "site":
        return f"unknown entry {words[0]!r}; expected: {SITE_LINE}"
    if len(words) < 4:
        return f"a site line needs a name, a subnet and a gateway: {SITE_LINE}"
    if not _NAME.fullmatch(words[1]):
        return f"site name {words[1]!r} is not 1-64 characters of [A-Za-z0-9_-]"
    addr, slash, length = words[2].partition("/")
    try:
        ip = ipaddress.ip_address(addr)
        if not slash or not length.isdigit() or int(length) > ip.max_prefixlen:
            raise ValueError
    except ValueError:
        return f"subnet {words[2]!r} is not a CIDR prefix"
    if not is_host_port(words[3]):
        return f"gateway_lan {words[3]!r} is not ADDRESS:PORT"
    if len(words) > 4 and not words[4].startswith("direct_to="):
        return f"unexpected {words[4]!r} after the gateway: {SITE_LINE}"
    if len(words) > 5:
        return f"unexpected {words[5]!r} after direct_to: {SITE_LINE}"
    if len(words) == 5 and words[4] == "direct_to=":
        return "direct_to= names no site (leave it out instead)"
    return None


def check_nodes_file(path: str) -> tuple[int, int]:
    """Refuse, in one line, a file that is not a valid node file (a gateway's TOML config
    above all), before a job's ranks each log it and run unsplit: the same rules the
    library applies when it loads it (preload/nodefile.c). Returns its `lan_timers`
    (µs; (0, 0) without the line)."""
    fix = f"give --config the node file written by `{WRITER} --topology ...`"
    header, sites, directs, timers = False, [], [], (0, 0)
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                words = line.split()
                if not words or words[0].startswith("#"):
                    continue
                if not header:
                    if " ".join(words) == HEADER:
                        header = True
                        continue
                    what = ("a TOML file (a gateway's config?)" if words[0].startswith("[") or "=" in line
                            else f"not a node file (expected the header {HEADER!r})")
                    raise GridsplitError(f"{path}: line {n}: {what}; {fix}")
                err = _site_line_error(words, len(sites))
                if err:
                    raise GridsplitError(f"{path}: line {n}: {err}; {fix}")
                if words[0] == "lan_timers":
                    timers = (int(words[1]), int(words[2]))
                if words[0] == "site":
                    sites.append(words[1])
                    if len(words) == 5:
                        # The library skips empty names ("a,,b", a trailing comma).
                        directs.append((n, [x for x in words[4].removeprefix("direct_to=").split(",") if x]))
    except OSError as e:
        raise GridsplitError(f"{path}: {e.strerror}") from None
    if not header:
        raise GridsplitError(f"{path}: no {HEADER!r} header (empty file?); {fix}")
    if not sites:
        raise GridsplitError(f"{path}: no site line; {fix}")
    for n, names in directs:
        for name in names:
            if name not in sites:
                raise GridsplitError(f"{path}: line {n}: direct_to names {name!r}, which is no site of this file; {fix}")
    return timers
