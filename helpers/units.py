"""Numbers as the notebooks print them: a duration in the unit that shows it, a share with the digits it needs.

The same sentence runs on a CPU, where an engine step takes tens of milliseconds, and on a GPU,
where it takes a few hundred microseconds and a prompt token tens of microseconds: a format fixed
in one unit prints "0.0 ms" or "0 s" there. These keep three significant digits in any unit.

Example::

    >>> duration(0.0000341), duration(0.00167), duration(0.0325), duration(14.8), duration(150.0)
    ('34.1 µs', '1.67 ms', '32.5 ms', '14.8 s', '150 s')
    >>> share(0.26), share(0.0143), share(0.00023), share(0.0)
    ('26%', '1.4%', '0.023%', '0%')
"""

from __future__ import annotations

import math

_UNITS = ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns"))


def duration(seconds: float, digits: int = 3) -> str:
    """``seconds`` in s, ms, µs or ns, whichever puts it at 1 or more, to ``digits`` significant digits."""
    if seconds == 0 or not math.isfinite(seconds):
        return f"{seconds:g} s"
    seconds = float(f"{seconds:.{digits}g}")  # first, so that 0.9999 s becomes 1.00 s, not 1000 ms
    for scale, unit in _UNITS:
        if abs(seconds) >= scale or unit == "ns":
            value = seconds / scale
            decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
            return f"{value:.{decimals}f} {unit}"
    raise AssertionError("unreachable: the last unit takes any value")


def share(fraction: float) -> str:
    """A fraction as a percentage: whole percent from 10 %, else two significant digits (a GPU's KV
    pool is so large that a few requests fill 0.023 % of it, which a whole-percent format calls 0 %).
    Short of all, never "100%": 0.996 prints as 99.6% beside the 0.4% it leaves.

    >>> share(0.996), share(0.9999), share(1.0), share(0.994)
    ('99.6%', '99.99%', '100%', '99%')
    """
    percent = float(f"{100 * fraction:.2g}") if abs(fraction) < 0.1 else 100 * fraction
    if 99.5 <= percent < 100:  # whole percent would say "all"
        return f"{math.floor(percent * 100) / 100:.4g}%"
    if percent == 0 or abs(percent) >= 10:
        return f"{percent:.0f}%"
    decimals = max(0, 1 - math.floor(math.log10(abs(percent))))
    return f"{percent:.{decimals}f}%"


def factor(ratio: float) -> str:
    """A rough factor, to two significant digits, written as one ("1.6x"); from 100 on, "over 100x". Three digits
    would read as a measured ratio: a lab's diagnosis prints several of these, and one of them at three digits can
    equal, by chance, a ratio an exercise below asks for (lab 2's answer audit caught "1.63x" on 2026-12-06).

    >>> factor(1.627), factor(1.04), factor(0.934), factor(5.68), factor(12.3), factor(99.6), factor(123.0)
    ('1.6x', '1.0x', '0.93x', '5.7x', '12x', 'over 100x', 'over 100x')
    """
    if not math.isfinite(ratio) or ratio == 0:
        return f"{ratio:g}x"
    rounded = float(f"{ratio:.2g}")  # first, so that 9.96 becomes 10, not 10.0
    if rounded >= 100:  # "120x" has three digits as the audit counts them (helpers.answer_audit)
        return "over 100x"
    return f"{rounded:.{max(0, 1 - math.floor(math.log10(abs(rounded))))}f}x"
