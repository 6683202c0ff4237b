"""The largest engine step a GPU server runs as a captured CUDA graph, read from its log.

vLLM's GPU engine captures CUDA graphs for steps of up to ``max_cudagraph_capture_size``
tokens (by default min(2 x max_num_seqs, 512): 16 for a server with 8 slots, 128 with 64) and
runs larger steps without them. A step in a graph skips most of the CPU's work of launching
kernels, so on an H200 a 32-token prefill in a graph and a 512-token one outside it were 14.7 ms
apart on a 64-slot server, against 2.0 ms on an 8-slot one where neither ran in a graph
(``results/gpu/step_clock_slots.json``). Anything that times steps of different sizes against
each other has to know where that line is.

The engine's config line carries the number (``'max_cudagraph_capture_size': 16``); vLLM's CPU
build logs ``None`` and an eager GPU server ``0``: no step runs in a graph.

    >>> cuda_graph_tokens("... 'cudagraph_capture_sizes': [1, 2, 4, 8, 16], 'max_cudagraph_capture_size': 16, ...")
    16
    >>> cuda_graph_tokens("... 'max_cudagraph_capture_size': None, ...")
    0
    >>> cuda_graph_tokens("INFO starting") is None
    True
"""

from __future__ import annotations

import re

_CAPTURE_SIZE = re.compile(r"'max_cudagraph_capture_size': (\d+|None)")


def cuda_graph_tokens(log_text: str) -> int | None:
    """Tokens of the largest step the server runs in a CUDA graph: 0 where none does (a CPU,
    an eager GPU server), None where the log does not say (the engine's config line not written yet)."""
    found = _CAPTURE_SIZE.findall(log_text)
    if not found:
        return None
    return 0 if found[-1] == "None" else int(found[-1])
