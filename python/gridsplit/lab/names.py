"""Names of everything the lab creates, all derived from one prefix.

The prefix (default "gs", or $GRIDSPLIT_LAB_PREFIX) starts every namespace name
and the lab's directories, so that `lab down` removes exactly what a lab made and
nothing of the host, even after a crash left no state file behind.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import GridsplitError
from ..topology import Host

PREFIX_RE = re.compile(r"^[a-z][a-z0-9]{0,5}$")


@dataclass(frozen=True)
class LabNames:
    prefix: str

    @classmethod
    def from_env(cls, prefix: str | None = None) -> "LabNames":
        p = prefix or os.environ.get("GRIDSPLIT_LAB_PREFIX", "gs")
        if not PREFIX_RE.match(p):
            raise GridsplitError(f"lab prefix {p!r} must be 1-6 lowercase letters/digits starting with a letter (GRIDSPLIT_LAB_PREFIX)")
        return cls(p)

    # namespaces
    def host_ns(self, host: Host | str) -> str:
        return f"{self.prefix}-{host if isinstance(host, str) else host.name}"

    def switch_ns(self, site: str) -> str:
        return f"{self.prefix}-{site}-sw"

    def router_ns(self, site: str) -> str:
        return f"{self.prefix}-{site}-rt"

    @property
    def wan_ns(self) -> str:
        return f"{self.prefix}-wan"

    def owns_ns(self, ns: str) -> bool:
        return ns.startswith(self.prefix + "-")

    # files
    @property
    def state_dir(self) -> Path:
        return Path(os.environ.get("GRIDSPLIT_RUN_DIR", "/run/gridsplit")) / "lab" / self.prefix

    @property
    def state_file(self) -> Path:
        return self.state_dir / "state.json"

    @staticmethod
    def netns_etc(ns: str) -> Path:
        """`ip netns exec` bind-mounts files of /etc/netns/NS over /etc (used for hosts)."""
        return Path("/etc/netns") / ns


# Interface names inside namespaces (only unique per namespace).
HOST_IF = "eth0"
BRIDGE = "br0"
SW_UPLINK = "uplink"
RT_LAN = "lan0"


def sw_port(host: Host) -> str:
    """The switch port toward a host: h<k> for nodes, hgw, hgw2, ... for the gateways."""
    return "h" + host.name.rsplit("-", 1)[1]


def rt_wan_if(peer_site: str) -> str:
    return f"to-{peer_site}"


def wan_if(link_index: int, side: str) -> str:
    return f"l{link_index}{side}"
