"""helpers/__init__.py's docstring is the map of the helpers: it names every room and every shared module."""

from __future__ import annotations

from pathlib import Path

import helpers
from tests.test_layout import ROOMS

HELPERS = Path(helpers.__file__).resolve().parent


def test_the_docstring_names_every_room_in_its_order():
    doc = helpers.__doc__
    missing = [room for room in ROOMS if f"``helpers.{room}``" not in doc]
    assert not missing, f"helpers/__init__.py's docstring lists no room {missing}: add a line for each"
    assert sorted(ROOMS, key=lambda room: doc.index(f"``helpers.{room}``")) == list(ROOMS)


def test_the_docstring_names_every_shared_module():
    shared = {path.stem for path in HELPERS.glob("*.py") if path.stem != "__init__"}
    missing = sorted(name for name in shared if f"``{name}``" not in helpers.__doc__.split("Shared:", 1)[1])
    assert not missing, f"helpers/__init__.py's docstring leaves out the shared modules {missing}"
