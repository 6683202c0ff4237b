"""One frame of a KV-allocator run, drawn: the pool as a grid of token slots, block tables, counters.

Taught in the PagedAttention notebook; :mod:`helpers.paged.figures` (static figures) and
:mod:`helpers.paged.player` (the animation) are built from :func:`draw_kv_frame`.

How the pool is drawn: the whole pool is a grid of token slots, `row_slots` per row.
A request's colour marks its slots: solid where a slot holds a token, pale where it is
reserved but empty. Paged blocks have black borders; shared blocks are dark gold with
their reference count; cached blocks are grey and hatched; free slots are white; in the
contiguous pool, free holes too short for a new max_model_len request are hatched red.
"""

from __future__ import annotations

import math

import matplotlib
from matplotlib.axes import Axes
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from helpers.paged.sim import KVFrame
from helpers.paged.usage import BlockStatus, PoolCell

# tab10's saturated hues only, its grey left for cached blocks: a pale hue drawn solid
# looked like another request's reserved-but-empty slots (its colour at RESERVED_ALPHA).
_PALETTE = [matplotlib.colormaps["tab10"](i) for i in range(10) if i != 7]
RESERVED_ALPHA = 0.3  # reserved, no token yet: the request's colour, pale
_SHARED = "#b8860b"  # dark gold: a block in several block tables
_CACHED = "#bdbdbd"
_FRAGMENT = "#d62728"


def request_color(request_id: str) -> tuple[float, float, float, float]:
    """A stable colour per request: its number picks one of 9 saturated hues (r00 -> first hue).

    >>> request_color("r03") == request_color("r12")  # 9 hues, so they repeat
    True
    """
    digits = "".join(ch for ch in request_id if ch.isdigit())
    index = int(digits) if digits else sum(map(ord, request_id))
    return _PALETTE[index % len(_PALETTE)]


def default_row_slots(capacity_slots: int, block_size: int = 16) -> int:
    """Slots per drawn row: about sqrt(capacity / 16) rows, each a whole number of blocks.

    >>> default_row_slots(1024, 16)  # 8 rows of 8 blocks
    128
    """
    num_rows = max(1, round(math.sqrt(capacity_slots / 16)))
    return block_size * math.ceil(capacity_slots / num_rows / block_size)


def _segments(first: int, length: int, row_slots: int):
    """Split slots first .. first+length-1 at row ends: (row, column, width) pieces."""
    while length > 0:
        row, col = divmod(first, row_slots)
        width = min(length, row_slots - col)
        yield row, col, width
        first, length = first + width, length - width


def _draw_cell(ax: Axes, cell: PoolCell, frame: KVFrame, row_slots: int, row_h: float) -> None:
    """One block (paged) or run (contiguous): its face, the part holding tokens, outline, label."""
    pieces = list(_segments(cell.first_slot, cell.num_slots, row_slots))

    def boxes(parts, **style) -> None:
        for row, col, width in parts:
            ax.add_patch(Rectangle((col, -(row + 1) * row_h), width, row_h * 0.9, **style))

    if cell.status is BlockStatus.FREE:
        fragment = frame.max_model_len is not None and cell.num_slots < frame.max_model_len
        edge, hatch = (_FRAGMENT, "\\\\\\") if fragment else ("0.75", None)
        boxes(pieces, facecolor="white", edgecolor=edge, hatch=hatch, linewidth=0.5)
        return
    if cell.status is BlockStatus.CACHED:
        boxes(pieces, facecolor=_CACHED, edgecolor="0.5", hatch="///", linewidth=0.6)
        return
    shared = len(cell.owners) > 1  # only full blocks are shared, so all of it holds tokens
    color = _SHARED if shared else request_color(cell.owners[0])
    boxes(pieces, facecolor=to_rgba(color, RESERVED_ALPHA), edgecolor="none")  # reserved
    boxes(_segments(cell.first_slot, cell.num_tokens, row_slots), facecolor=color, edgecolor="none")  # holds tokens
    boxes(pieces, facecolor="none", edgecolor="black", linewidth=0.6)
    row, col, width = pieces[0]
    if width >= 6:  # slots; narrower pieces have no room for a label
        label = f"×{len(cell.owners)}" if shared else cell.owners[0]
        ax.text(col + width / 2, -(row + 0.55) * row_h, label, ha="center", va="center", fontsize=7,
                color="white" if shared else "black")


def _table_lines(frame: KVFrame, max_rows: int) -> list[str]:
    """The block tables (or reserved runs) as text, one request per line."""
    lines = []
    ids = list(frame.block_tables)
    for rid in ids[:max_rows]:
        table, n = frame.block_tables[rid], frame.num_tokens[rid]
        done = " done" if rid in frame.finished_now else ""
        if frame.block_size == 1:  # contiguous: the table is one run of slots
            lines.append(f"{rid} slots {table[0]}-{table[-1]}: {n}/{len(table)} tok{done}")
        else:
            shown = " ".join(map(str, table[:8])) + (" …" if len(table) > 8 else "")
            lines.append(f"{rid} [{shown}] {n} tok{done}")
    if len(ids) > max_rows:
        lines.append(f"… and {len(ids) - max_rows} more")
    return lines


def _counter_lines(frame: KVFrame) -> list[str]:
    u = frame.usage
    if frame.block_size == 1:
        lines = [
            f"reserved {u.reserved_slots} of {u.capacity_slots} slots",
            f"  hold tokens  {u.token_slots}",
            f"  reserved, empty {u.reserved_unused_slots}",
            f"free {u.free_slots}, in short holes {u.external_fragmentation_slots}",
        ]
    else:
        bs = frame.block_size
        lines = [
            f"blocks: {u.reserved_slots // bs} used, {u.free_slots // bs} free, {u.cached_blocks} cached",
            f"  hold tokens  {u.token_slots} slots",
            f"  partial-block waste {u.internal_waste_slots} slots",
            f"shared blocks {u.shared_blocks}; tokens seen by requests {u.logical_tokens}",
        ]
    waiting = " ".join(frame.waiting[:6]) + (" …" if frame.num_waiting > 6 else "")
    lines.append(f"waiting {frame.num_waiting}: {waiting}" if frame.waiting else "waiting 0")
    lines.append(f"finished {frame.num_finished}, preemptions {frame.num_preemptions}")
    return lines


def _legend_handles(frame: KVFrame) -> list[Patch]:
    handles = [
        Patch(facecolor=request_color("r00"), label="slot holds a token"),
        Patch(facecolor=to_rgba(request_color("r00"), RESERVED_ALPHA), label="reserved, no token yet"),
    ]
    if frame.block_size == 1:
        handles.append(Patch(facecolor="white", edgecolor=_FRAGMENT, hatch="\\\\\\", label="hole < max_model_len"))
    else:
        handles.append(Patch(facecolor=_SHARED, label="shared block (×refs)"))
        handles.append(Patch(facecolor=_CACHED, edgecolor="0.5", hatch="///", label="cached, evictable"))
    handles.append(Patch(facecolor="white", edgecolor="0.6", label="free"))
    return handles


def draw_kv_frame(
    target: Axes | Figure,
    frame: KVFrame,
    row_slots: int | None = None,
    show_tables: bool = True,
    max_table_rows: int = 12,
    legend: bool = True,
    title: str | None = None,
) -> Axes:
    """Draw one `KVFrame`: the pool as a slot grid, and (right) block tables and counters.

    `target` is an Axes to draw into, or a Figure (cleared, one Axes added). `row_slots`
    sets slots per drawn row; give both schemes the same value to compare them. The
    default title states the step and the share of reserved slots that hold tokens.
    Leaves out per-layer detail: one slot stands for one token's keys and values.

    Example: a paged frame with one request of 37 tokens at block size 16 shows three
    bordered blocks, two solid and one 5/16 solid, and the line "r00 [0 1 2] 37 tok":

    >>> from helpers.paged.cache import PagedKVCache
    >>> from helpers.paged.sim import simulate_allocator
    >>> from helpers.paged.trace import KVRequest
    >>> frames = simulate_allocator([KVRequest("r00", 0, tuple(range(36)), 2)], PagedKVCache(8, 16))
    >>> ax = draw_kv_frame(Figure(), frames[0])
    >>> "r00 [0 1 2] 37 tok" in ax.texts[-1].get_text()
    True
    """
    if isinstance(target, Figure):
        target.clear()
        ax = target.add_subplot()
    else:
        ax = target
    capacity = frame.usage.capacity_slots
    row_slots = row_slots or default_row_slots(capacity, max(frame.block_size, 16))
    num_rows = math.ceil(capacity / row_slots)
    row_h = row_slots / max(num_rows, 4) * 0.75  # rows a bit flatter than square
    for cell in frame.pool:
        _draw_cell(ax, cell, frame, row_slots, row_h)

    width = row_slots * (1.9 if show_tables else 1.0)
    ax.set_xlim(0, width)
    ax.set_ylim(-num_rows * row_h - row_h * 0.2, row_h * 0.1)
    ax.set_xticks([0, row_slots // 2, row_slots])
    ax.set_yticks([-(r + 0.55) * row_h for r in range(num_rows)][:: max(1, num_rows // 8)])
    ax.set_yticklabels([str(r * row_slots) for r in range(num_rows)][:: max(1, num_rows // 8)], fontsize=7)
    ax.tick_params(axis="x", labelsize=7)
    xlabel = "slot within row (1 slot = 1 token's keys and values)" if show_tables else "slot in row (tokens)"
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylabel("first slot of row", fontsize=8)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    u = frame.usage
    ax.set_title(
        title
        or f"{frame.scheme}, step {frame.step}: {frame.num_running} running, "
        f"{u.utilization:.0%} of {u.reserved_slots} reserved slots hold tokens",
        fontsize=9,
    )
    if show_tables:
        header = "block tables" if frame.block_size > 1 else "reserved runs"
        text = "\n".join([header, *_table_lines(frame, max_table_rows), "", *_counter_lines(frame)])
        ax.text(row_slots * 1.04, row_h * 0.05, text, va="top", ha="left", fontsize=8, family="monospace")
    if legend:
        ax.legend(handles=_legend_handles(frame), loc="lower right", fontsize=7, frameon=False)
    return ax
