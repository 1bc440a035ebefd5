"""Message sizes as the MPI programs spell them (K=1e3, M=1e6, G=1e9; mpi/common.c).

One parser for the CLI and one formatter for tables and plots, so that a size
typed as 100K is the same number of bytes in Python and in C.
"""

from __future__ import annotations

import re

from .errors import GridsplitError

_MULT = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9}


def parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMG]?)B?\s*", text, re.I)
    if not m:
        raise GridsplitError(f"size {text!r}: write a byte count with an optional K, M or G suffix (e.g. 100K)")
    v = float(m.group(1)) * _MULT[m.group(2).upper()]
    if v != int(v) or v < 0:
        raise GridsplitError(f"size {text!r}: must be a whole number of bytes")
    return int(v)


def fmt_size(n: int) -> str:
    for suf, mult in (("G", 10**9), ("M", 10**6), ("K", 10**3)):
        if n >= mult and n % mult == 0:
            return f"{n // mult}{suf}"
    return str(n)
