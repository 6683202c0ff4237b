"""Drawing shared by every chapter: the course's colours, and a figure as PNG bytes for a widget.

Colours keep a request's phases and the settings alike from one chapter's plots to the next.

>>> sorted(setting_colors([8, 64])) == [8, 64]
True
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

WAIT_COLOR = "#f4a259"  # send -> first token: waiting for a slot, then prefill
GENERATE_COLOR = "#3d5a80"  # first token -> last token: decoding
ERROR_COLOR = "#d62828"  # failed requests, and notes about them


def setting_colors(settings: Sequence[Any]) -> dict[Any, Any]:
    """One colour per setting (e.g. max_num_seqs), ordered along matplotlib's viridis map."""
    from matplotlib import colormaps

    cmap = colormaps["viridis"]
    return {s: cmap(0.15 + 0.7 * i / max(1, len(settings) - 1)) for i, s in enumerate(settings)}


def figure_png(fig: Any, dpi: int = 80) -> bytes:
    """The figure as PNG bytes: what an animation's ``ipywidgets.Image`` shows."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()
