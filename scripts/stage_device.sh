#!/usr/bin/env bash
# Stage what the lent GPU machine needs (it reaches no network) into .devkit/, for scripts/device_job.sh:
# vLLM 0.26.0 with the deps its image lacks and the embedded model (the shared staging tool), plus the course's own
# packages that the image lacks. vllm-router is one of them: without it notebook 06, test_route_real.py and
# test_route_class_real.py fail with RouterNotInstalledError (2026-12-07, when it was left out).
# Then packs every part into 36 MiB chunks, .devkit/cNN/chunk.NN, small enough for one carry each. On the device,
# one call each: `device_job.sh stage head` (carrying .devkit/head, a git archive of HEAD), `device_job.sh stage cNN`
# (carrying .devkit/cNN) for every chunk, then `device_job.sh start "STEPS"`, which joins the chunks in order.
set -euo pipefail
cd "$(dirname "$0")/.."
tool=../shared/tools/stage_vllm_device_wheels.py
[[ -f $tool ]] || { echo "the shared staging tool is not at $tool"; exit 1; }
router=$(grep -o '^vllm-router==[0-9.]*' requirements/common.txt)
rm -rf .devkit/part* .devkit/c[0-9]* .devkit/chunk.* .devkit/stage
python3 "$tool" --out .devkit --extra nbclient ipykernel ipywidgets nbval "$router"
(cd .devkit && tar cf - part[0-9]* | split -b 36m -d -a 2 - chunk. \
    && for chunk in chunk.*; do mkdir -p "c${chunk#chunk.}" && mv "$chunk" "c${chunk#chunk.}/"; done)
ls .devkit
