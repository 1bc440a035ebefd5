"""The node file: the sites libgridsplit.so steers connections between.

A versioned header, then one line per site (docs/protocol.md §5):

    gridsplit-nodes 1
    routed no                       (only where the sites are not routed to each other)
    site NAME SUBNET GATEWAY_LAN [direct_to=SITE,SITE]

Nodes read it, not the gateway's TOML config: the library is C, loaded into
every MPI process, and this format takes a few dozen lines of C to read safely
where TOML needed a hand-written parser (preload/nodefile.c says why).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import GridsplitError

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
               routed: bool = True) -> str:
    """The text of a node file for `sites`, `notes` as comments before them; `source` says who wrote it.
    `routed` False ([addressing] routed = false) adds `routed no`: the library then names a destination
    that is in no site, which only a route outside the grid could carry."""
    lines = ["# gridsplit node file: the sites libgridsplit.so (GRIDSPLIT_CONFIG) steers connections between.",
             f"# Written by {source}. Gateways read their own TOML config.", HEADER,
             *([] if routed else ["# the sites' subnets are not routed to each other, only through the gateways",
                                  "routed no"]),
             "# site NAME SUBNET GATEWAY_LAN [direct_to=SITE,...]", *(f"# {n}" for n in notes)]
    for s in sites:
        lines += [f"# {w}" for w in s.why]
        lines.append(f"site {s.name} {s.subnet} {s.gateway_lan}"
                     + (f" direct_to={','.join(s.direct_to)}" if s.direct_to else ""))
    return "\n".join(lines) + "\n"


def check_nodes_file(path: str) -> None:
    """Refuse, in one line, a file that is not a node file (a gateway's TOML config
    above all), before a job's ranks each log it and run unsplit. The library
    checks the rest of the file itself."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                words = line.split()
                if not words or words[0].startswith("#"):
                    continue
                if " ".join(words) == HEADER:
                    return
                what = ("a TOML file (a gateway's config?)" if words[0].startswith("[") or "=" in line
                        else f"not a node file (expected the header {HEADER!r})")
                raise GridsplitError(f"{path}: line {n}: {what}; give --config the node file written by "
                                     f"`{WRITER} --topology ...`")
    except OSError as e:
        raise GridsplitError(f"{path}: {e.strerror}") from None
    raise GridsplitError(f"{path}: no {HEADER!r} header (empty file?); give --config the node file written by "
                         f"`{WRITER} --topology ...`")
