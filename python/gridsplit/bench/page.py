"""The pieces every HTML report page is made of: a figure saved beside the page and
embedded in it, a table, and the split/direct heat map. Shared by the sweep report (report.py), the application
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


def ratio_heatmap(fig, ax, cells: list[list[float]], origin: str = "upper"):
    """Draw a grid of split/direct ratios (NaN: no cell) on `ax`, each cell labelled, with a
    colour bar. The colour scale is symmetric in log(ratio) around 1, so 2x slower is as
    red as 2x faster is green, and reaches at least 2x either way: a 1.04 beside a 0.2
    is then nearly neutral, as it is (a scale stretched to the data's own extremes had
    painted it as red as a real loss)."""
    import math

    import numpy as np
    from matplotlib.colors import FuncNorm
    vals = [v for row in cells for v in row if not math.isnan(v) and v > 0]
    half = max([2.0] + [max(v, 1 / v) for v in vals])
    # The colour bar evaluates the scale at 0 too: clip before the log (no warning, no -inf).
    norm = FuncNorm((lambda x: np.log(np.clip(x, 1e-9, None)), np.exp), vmin=1 / half, vmax=half)
    im = ax.imshow(cells, cmap="RdYlGn_r", norm=norm, aspect="auto", origin=origin)
    for i, row in enumerate(cells):
        for j, v in enumerate(row):
            if not math.isnan(v):
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=8)
    bar = fig.colorbar(im, ax=ax, shrink=0.8)
    ticks = [t for t in (0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0) if 1 / half <= t <= half]
    bar.set_ticks(ticks, labels=[f"{t:g}" for t in ticks])
    return im
