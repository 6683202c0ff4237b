"""Drawing shared by every chapter: the course's colours, a figure as PNG bytes for a widget, and a
notebook that shows the course's figures as pictures.

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


def show_figures_in_notebooks() -> None:
    """In a notebook, show a bare ``matplotlib.figure.Figure`` as a picture (called on importing ``helpers``).

    The course builds its figures as ``Figure(...)``, never through pyplot, so that a cell leaves no figure
    open behind it. IPython draws a Figure as PNG only once matplotlib's inline backend has loaded, and it
    loads at the first pyplot call: in a notebook whose cells make no such call (lab 2) ``display(fig)``
    showed "<Figure size 1300x440 with 3 Axes>" instead of the figure. Registered by name, so matplotlib is
    not imported for it; the inline backend's own formatter, once loaded, takes precedence.
    """
    import sys

    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None or not hasattr(shell, "display_formatter"):
        return  # a script or a test: nothing displays figures
    png = shell.display_formatter.formatters["image/png"]
    png.for_type_by_name("matplotlib.figure", "Figure", _figure_as_png)


def _figure_as_png(fig: Any) -> bytes | None:
    from IPython.core.pylabtools import print_figure

    return print_figure(fig, "png", bbox_inches="tight")


def figure_png(fig: Any, dpi: int = 80) -> bytes:
    """The figure as PNG bytes: what an animation's ``ipywidgets.Image`` shows."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()
