"""The pieces every HTML report page is made of: a figure saved beside the page and
embedded in it, and a table. Shared by the sweep report (report.py), the application
report (appresults.py) and the report of several grids (matrix.py)."""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path
from typing import Any


def png(fig, outdir: Path, name: str) -> str:
    """Save `fig` as outdir/name and return it as an embedded <figure>."""
    import matplotlib.pyplot as plt  # loaded only by the commands that draw
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    data = buf.getvalue()
    (outdir / name).write_bytes(data)
    return f'<figure><img alt="{name}" src="data:image/png;base64,{base64.b64encode(data).decode()}"/>' \
           f'<figcaption>{name}</figcaption></figure>'


def table(headers: list[str], rows: list[list[Any]]) -> str:
    """An HTML table; a cell that is already markup (starts with '<') is kept as is."""
    h = "".join(f"<th>{html.escape(str(x))}</th>" for x in headers)
    body = "".join("<tr>" + "".join(f"<td>{c if isinstance(c, str) and c.startswith('<') else html.escape(str(c))}</td>"
                                    for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{h}</tr>{body}</table>"
