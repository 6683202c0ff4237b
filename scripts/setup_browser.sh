#!/usr/bin/env bash
# What the browser test (tests/test_browser_widgets.py) needs beyond `make setup`: Chromium, and the
# `playwright` package in .venv (listed in requirements/common.txt). It installs Debian's `chromium` package
# where apt has one (Debian; Ubuntu has none: its Chromium is a snap). Elsewhere install Chrome or Chromium yourself
# and name it with VLLM_COURSE_CHROMIUM.
# Safe to run again: it installs nothing that is already there. Fails loudly when it cannot.
#   VLLM_COURSE_CHROMIUM=/path/to/chromium   use another Chromium build (default /usr/bin/chromium)
set -euo pipefail
cd "$(dirname "$0")/.."

CHROMIUM=${VLLM_COURSE_CHROMIUM:-/usr/bin/chromium}
PY=.venv/bin/python
say() { printf '\n==> %s\n' "$*"; }
fail() { printf 'error: %s\n' "$*" >&2; exit 1; }
YOURSELF="       Install Google Chrome or Chromium yourself, then run again with its path, e.g.
         VLLM_COURSE_CHROMIUM=/usr/bin/google-chrome make test"

if [[ -x $CHROMIUM ]]; then
    say "Chromium already installed: $CHROMIUM ($("$CHROMIUM" --version 2>/dev/null || echo 'version unknown'))"
else
    [[ $CHROMIUM == /usr/bin/chromium ]] || fail "VLLM_COURSE_CHROMIUM=$CHROMIUM is not an executable file."
    command -v apt-get >/dev/null 2>&1 || fail "Chromium is missing and this system has no apt-get.
$YOURSELF"
    if [[ $(id -u) -eq 0 ]]; then
        apt=(apt-get)
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        apt=(sudo apt-get)
    else
        fail "Chromium is missing and installing it needs root. On Debian run 'sudo apt-get install chromium', then
       try again. On Ubuntu (no chromium package: its Chromium is a snap) or elsewhere:
$YOURSELF"
    fi
    say "installing Debian's chromium for the browser test (about a minute)"
    export DEBIAN_FRONTEND=noninteractive
    "${apt[@]}" update -q >/dev/null || fail "apt-get update failed; see the messages above."
    # Ubuntu's apt knows only chromium-browser, a wrapper that installs the snap: no package named chromium.
    candidate=$(apt-cache policy chromium 2>/dev/null | awk '/Candidate:/ {print $2}')
    [[ -n $candidate && $candidate != "(none)" ]] || fail "apt has no 'chromium' package here (Ubuntu has none: its
       Chromium is a snap). Debian's package is the one this script installs.
$YOURSELF"
    "${apt[@]}" install -y -q --no-install-recommends chromium fonts-dejavu-core >/dev/null \
        || fail "apt-get install chromium failed; see the messages above.
$YOURSELF"
    [[ -x $CHROMIUM ]] || fail "apt-get installed chromium, but $CHROMIUM is still missing."
    say "installed $("$CHROMIUM" --version 2>/dev/null || echo chromium)"
fi

[[ -x $PY ]] || fail "$PY is missing: run 'make setup' first."
if ! "$PY" -c 'import playwright.sync_api' 2>/dev/null; then
    say "installing playwright into .venv (requirements/common.txt lists it)"
    "$PY" -m pip install -q --disable-pip-version-check "$(grep -E '^playwright' requirements/common.txt)" \
        || fail "pip could not install playwright."
fi
say "browser test ready: $CHROMIUM, playwright $("$PY" -c 'import importlib.metadata as m; print(m.version("playwright"))')"
