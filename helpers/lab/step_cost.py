"""The per-step cost and hardware findings of the lab's explanation: step growth read against batch growth.

Pure text, like :mod:`helpers.lab.findings`. Both findings rest on one measured comparison: how many times
longer the mean time per output token got (``growth``) against how many times more requests generated at once
(``batch``). Nothing else here is measured, so the cause of a step's cost is named only as far as that ratio
shows it: a step that grew about in proportion to the batch is one whose per-request part dominates (on a CPU,
compute-bound); one that grew much less is one whose shared part dominates. Read as a shared part plus a part
per request (``t(k) = S + k * P``), the two settings give the shared part's share of the lower setting's step,
``(batch - growth) / (batch - 1)``.

Example::

    >>> shape(1.21, 2.0), shape(1.75, 2.0), shape(15.0, 0.62), shape(3.0, 2.0)
    ('less', 'proportional', 'no batch growth', 'more')
    >>> shared_part(1.21, 2.0)  # the CPU sweep's 1 -> 2 slots: most of a single request's step is shared
    0.79
"""

from __future__ import annotations

from helpers.lab.findings import CHANGE, ratio
from helpers.lab.table import ResultRow
from helpers.load.summary import RunSummary
from helpers.units import duration, share

PROPORTIONAL = (0.75, 1.25)  # step growth within these multiples of the batch growth is "about in proportion"
BATCH_GREW = 1 + CHANGE  # a batch that grew less than this did not grow: the step time then tells nothing of it


def batch_growth(low: RunSummary, high: RunSummary) -> float | None:
    """How many times more requests generated at once at the high setting; None where a peak is 0."""
    return ratio(high.peak_generating, low.peak_generating) if high.peak_generating else None


def shape(growth: float, batch: float) -> str:
    """How step growth compares with batch growth: ``"no batch growth"``, ``"more"`` (than the batch),
    ``"proportional"`` or ``"less"``."""
    if batch < BATCH_GREW:
        return "no batch growth"
    if growth > PROPORTIONAL[1] * batch:
        return "more"
    if growth >= PROPORTIONAL[0] * batch:
        return "proportional"
    return "less"


def shared_part(growth: float, batch: float) -> float | None:
    """The share of the lower setting's step that the whole batch shares, if a step is a shared part plus a part
    per request; None where the numbers leave that model (a batch that did not grow, a step that got shorter
    or grew more than the batch)."""
    if batch < BATCH_GREW or not 1 <= growth <= batch:
        return None
    return round((batch - growth) / (batch - 1), 6)


def step_text(low: ResultRow, high: ResultRow, growth: float, speedup: float | None) -> str:
    a, b = low.max_num_seqs, high.max_num_seqs
    batch = batch_growth(low.summary, high.summary) or 0.0
    tpot_low, tpot_high = low.summary.tpot_mean_ms, high.summary.tpot_mean_ms
    grew = round(growth, 2) > 1  # as printed: a step "1.00x longer" did not grow
    longer = f"{growth:.2f}x longer" if grew else f"{growth:.2f}x as long"
    sized = f"a {batch:.2f}x larger batch" if batch > 1 else f"a batch {batch:.2f}x the size"
    rate_low, rate_high = 1000 / tpot_low, 1000 / tpot_high
    moved = (f"fell from {rate_low:.1f} to" if rate_high < rate_low else
             f"rose from {rate_low:.1f} to" if rate_high > rate_low else "stayed at")
    text = (f"The mean time per output token (one decode step, as each request sees it) was "
            f"{duration(tpot_low / 1000)} at {a} and {duration(tpot_high / 1000)} at {b}: {longer} for {sized}. "
            f"Tokens/s per running request {moved} {rate_high:.1f}.")
    kind, shared = shape(growth, batch), shared_part(growth, batch)
    if kind == "no batch growth":
        text += (f" The batch did not grow (peak {low.summary.peak_generating} -> {high.summary.peak_generating} "
                 "requests generating at once), so these steps say nothing about what more requests per step cost")
        text += (": the step time changed for a reason other than the batch size, which these numbers do not show."
                 if abs(growth - 1) > CHANGE else ".")
    elif kind == "more":
        text += (f" Step time grew more than the batch: each request cost more per step at {b} than at {a}, so "
                 "something besides the number of requests made the steps slower (these numbers do not show what; "
                 "the prefill finding says whether prompt chunks stalled decoding).")
    elif kind == "proportional":
        text += (f" Step time grew about in proportion to the batch: each request cost about as much per step at "
                 f"{b} as at {a}, so the part of a step that the batch shares is the smaller one, and a larger batch "
                 "bought little.") + (_shared_sentence(shared, a) if shared is not None else "")
    elif shared is None or not grew:  # the step got no longer while the batch grew
        text += (" Step time did not grow although the batch did: here a step for more requests cost no more than "
                 "one for fewer, which is where batching pays most.")
    else:
        text += (" Step time grew much less than the batch: the part of a step that the whole batch shares "
                 "dominates it, which is where batching pays." if shared >= 0.5 else
                 " Step time grew, but less than the batch: part of each step is shared by the requests in it, "
                 "and the rest grows with each request.")
        text += _shared_sentence(shared, a)
    expected = batch / growth
    text += f" Batch growth over step growth predicts {expected:.2f}x the throughput"
    if speedup is None:
        text += "."
    elif abs(expected - speedup) / speedup <= 0.2:
        text += f"; measured {speedup:.2f}x, consistent: slots used and step cost account for the gain."
    else:
        text += f"; measured {speedup:.2f}x, so other effects (below) matter too."
    return text


def hardware_text(device: str, growth: float | None, low: ResultRow, high: ResultRow,
                  cpu_count: int | None) -> str:
    """What the device does with a bigger batch, then what the measured growth says about these runs: a claim
    about what bounds a step is made only where the growth shows it."""
    a = low.max_num_seqs
    batch = batch_growth(low.summary, high.summary)
    kind = shape(growth, batch) if growth is not None and batch is not None else None
    shared = shared_part(growth, batch) if kind is not None else None
    grew = f"grew {growth:.2f}x" if growth is not None and growth >= 1 else f"took {growth:.2f}x as long"
    measured = f"step time {grew} for a {batch:.2f}x batch" if kind is not None else ""
    if device == "cpu":
        cores = f"{cpu_count} CPU cores" if cpu_count else "CPU cores"
        text = (f"On {cores} every request in a step adds its own matrix arithmetic on the same few cores: once that "
                "arithmetic outweighs the part of a step the batch shares (reading the weights, the server's own "
                "work per step), a step over k requests costs about k times one over a single request, and the "
                "step is compute-bound. A GPU has arithmetic to spare, so there a decode step for a few requests is "
                "mostly shared cost and more requests ride along almost free.")
        if kind == "proportional":
            text += (f" Here {measured}, about in proportion: the work per request dominated the step, so at these "
                     "settings the cores were compute-bound.")
        elif kind == "less":
            text += f" Here {measured}, less than in proportion: " + (
                "a step for more requests cost no more, so these steps were not compute-bound." if shared is None else
                f"about {share(shared)} of a step at {a} was shared, so the steps at {a} were not compute-bound."
                if shared >= 0.5 else
                f"about {share(shared)} of a step at {a} was shared and the rest grew with each request, so the "
                "work per request was already the larger part.")
        elif kind is not None:
            text += f" Here {measured}, which does not show what bounds a step (see the per-step cost)."
        return text
    text = ("On a GPU, a decode step has a cost the whole batch shares: reading every weight once (most of a step for "
            "a large model) and the host's work of scheduling, launching kernels and streaming tokens (most of a step "
            "for a small one), so more requests per step cost little until the GPU's arithmetic or the host's work "
            "per request catches up.")
    if kind == "proportional":
        text += (f" Yet here {measured}, about in proportion: the work per request dominated the step, so the GPU "
                 "(or the server process feeding it) had no room left to take more requests per step for free.")
    elif kind == "less":
        text += (f" Here {measured}, less than in proportion, as expected"
                 + (f": about {share(shared)} of a step at {a} was shared." if shared is not None else "."))
    elif kind is not None:
        text += f" Here {measured}, which does not show what bounds a step (see the per-step cost)."
    return text


def _shared_sentence(shared: float, seqs: int | None) -> str:
    return (f" Read as a part the batch shares plus a part per request, these two settings put the shared part at "
            f"about {share(shared)} of a step at {seqs}.")
