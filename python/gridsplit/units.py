"""Message sizes as the MPI programs spell them (K=1e3, M=1e6, G=1e9; mpi/common.c), and
the comma-separated lists of whole numbers that several commands take.

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


def int_list(text: str, what: str, lo: int, example: str) -> list[int]:
    """Whole numbers separated by commas (10_000 as well as 10000), each at least `lo`, in the
    order given; else one line naming `what` (the flag) with an example."""
    try:
        vals = [int(t.strip().replace("_", "")) for t in text.split(",") if t.strip()]
    except ValueError:
        raise GridsplitError(f"{what} {text!r}: give whole numbers separated by commas, e.g. {example}") from None
    if not vals or min(vals) < lo:
        raise GridsplitError(f"{what} {text!r}: give whole numbers of {lo} or more, e.g. {example}")
    return vals
