"""A pytest plugin for the run on Colab's versions (``tests/test_colab_versions.py``): an ipywidgets
API that the installed ipywidgets lacks fails the test instead of doing nothing.

ipywidgets is built on traitlets, which lets both slips through: a keyword argument that is no
trait of the widget (``HTML(description_allow_html=True)``, ``Play(playing=True)`` on ipywidgets
7.7.1) only warns, and setting an attribute that is no trait (``play.playing = True`` on 7.7.1,
where it is ``_playing``) makes a plain Python attribute the browser never hears of. Either way
a control on Colab would be dead. Loaded with ``-p tests.strict_widgets``.
"""

from __future__ import annotations

import sys
from typing import Any

# traitlets' warning for a keyword argument that is no trait (a DeprecationWarning in traitlets 5)
UNKNOWN_ARGUMENT = "error:Passing unrecognized arguments:DeprecationWarning"


def pytest_configure(config: Any) -> None:
    config.addinivalue_line("filterwarnings", UNKNOWN_ARGUMENT)
    import ipywidgets

    plain_setattr = ipywidgets.Widget.__setattr__

    def only_traits(widget: Any, name: str, value: Any) -> None:
        # Only ipywidgets' own classes (a course widget, PagedKVPlayer, keeps its parts as attributes),
        # and only where the course sets it: ipywidgets 7 keeps plain attributes of its own (``equals``).
        own = type(widget).__module__.startswith("ipywidgets.")
        caller = sys._getframe(1).f_globals.get("__name__", "")
        if (own and not caller.startswith(("ipywidgets.", "traitlets.")) and not name.startswith("_")
                and not widget.has_trait(name) and not hasattr(type(widget), name)):
            raise AttributeError(f"{type(widget).__name__} has no trait {name!r} in ipywidgets "
                                 f"{ipywidgets.__version__}: setting it would do nothing in the browser")
        plain_setattr(widget, name, value)

    ipywidgets.Widget.__setattr__ = only_traits
