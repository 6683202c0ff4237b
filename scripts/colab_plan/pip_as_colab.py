"""Run pip as if on Colab: its environment markers read as Colab's Python, not this one's.

pip's ``--python-version`` picks wheels and checks Requires-Python for the target, but pip
evaluates environment markers (``; python_version > "3.11"``) with the interpreter that runs
it (pip's own installation report says so). Run by the stub environment's interpreter,
with only the image's stub packages and Colab's pip on its path:

    python pip_as_colab.py '{"python_version": "3.13", ...}' install --dry-run ...

Standalone on purpose: it must not import anything the stub environment lacks.
"""

import json
import sys

from pip._internal.cli.main import main
from pip._vendor.packaging import markers

colab = json.loads(sys.argv[1])


def colab_environment():
    return {**colab}


# pip 24's packaging computes the environment in default_environment(); later ones cache it in
# _cached_default_environment(). Marker.evaluate looks the function up by name each time.
markers.default_environment = colab_environment
if hasattr(markers, "_cached_default_environment"):
    markers._cached_default_environment = colab_environment

sys.exit(main(sys.argv[2:]))
