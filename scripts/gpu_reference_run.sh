#!/usr/bin/env bash
# Executes the course on a GPU machine where vLLM is already importable but `make setup` cannot
# run (no network), e.g. the lent H200, and leaves executed notebooks and lab results under
# build/gpu/. The notebooks run through scripts/run_course.py: the same code path as `make course`.
#   SMOLLM2_DIR=/tmp/smollm2   an already converted embedded model (skips the conversion)
#   STEPS="lab-smollm2 lab-dummy notebooks"   what to run, in this order; also "dummy:PATH" (a notebook
#       on the 8B shape, e.g. dummy:labs/02_serving_real_traffic.ipynb, whose sweep lands in build/lab2/; run
#       dummy:notebooks/04_continuous_batching.ipynb before lab-dummy, whose comparison reads its prediction),
#       "capture" (vLLM's
#       flags and /metrics text), "sweep-smollm2" / "sweep-dummy" (the lab's sweep, scripts/lab_sweep.py,
#       at the lab's GPU output length), "bench-vs-vllm" (scripts/bench_vs_vllm.py: the course client against
#       `vllm bench serve`, results in build/gpu/bench_vs_vllm, this vLLM's raw result file in
#       tests/data/bench_serve/; BENCH_ARGS adds to its arguments, e.g. "--requests 2000"), "bench-open" (the
#       same at one request rate, open loop: BENCH_OPEN_ARGS, by default lab 2's GPU cross-check, 8 slots at
#       13 requests/s, 128 output tokens, 320 requests a run), "clock-slots" (scripts/bench_step_clock_slots.py:
#       the same decode batches timed on 8-slot and 64-slot servers), "lab-pairs" (scripts/bench_lab_pairs.py: the
#       lab's loads in alternating pairs on an 8-slot and a 64-slot server up at once, against notebook 04's
#       prediction; LAB_PAIRS_ARGS adds to its arguments), "prefill-clocks" / "prefill-clocks-dummy"
#       (scripts/bench_prefill_clocks.py: prompts alone and in groups timed on the server's clock and the client's at
#       once, on SmolLM2 / the 8B shape; PREFILL_CLOCKS_ARGS adds to its arguments, e.g. "--max-num-seqs 8", or
#       "--lengths 256,1024 --groups 1,8" for prefills that fill a GPU's step budget) or a notebook path
#   SWEEP_SETTINGS="1 2 4 16 32"   the sweep's max_num_seqs values (default: all of them)
#   SWEEP_REPETITIONS=2           load tests per sweep setting
#   "test" runs `make test-gpu`'s pytest (the tests, then nbval over notebooks/ and labs/); "nbval" only the
#       notebooks and labs; "test-part:PATH[,PATH...]" the same pytest over one piece of it (tests/ files, tests/,
#       a notebook, a lab), for a machine lent for less time than the whole takes; "test-no-server" the tests that
#       start no server, a few minutes. Every test step leaves out the tests that read PyPI (marked network: the lent
#       machine reaches nothing); TEST_MARKS (default "not browser and not network") is pytest's -m for every test
#       step. Each writes its results with every test's time to
#       build/gpu/test-results/ (JUnit XML). VLLM_COURSE_GPU_AS=t4 in the environment
#       makes the course choose a T4's flags (float16, Triton attention, no FP8 KV cache) on a bigger GPU (vLLM still picks
#       its kernels and defaults from that GPU); "t4:STEP" only that
#       step (its results file named t4-...), e.g. STEPS="t4:test-part:notebooks/06_beyond_one_server.ipynb lab-smollm2".
# On a normal GPU machine use `make course` instead, and
# `VLLM_COURSE_MODEL=dummy:llama-3.1-8b .venv/bin/python scripts/run_course.py labs/01_concurrency_lab.ipynb`.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD
export VLLM_COURSE_CACHE=${VLLM_COURSE_CACHE:-/tmp/vllm-course-cache}

if [[ -n ${SMOLLM2_DIR:-} ]]; then
    # Present the converted checkpoint as the course's prepared embedded model.
    mkdir -p "$VLLM_COURSE_CACHE"
    ln -sfn "$SMOLLM2_DIR" "$VLLM_COURSE_CACHE/SmolLM2-135M-Instruct"
    echo '{"from": "converted elsewhere from the same GGUF"}' > "$SMOLLM2_DIR/.course-complete.json"
fi
"$PY" -m helpers.serve.model || exit 1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
"$PY" -c 'import vllm, torch; print("vllm", vllm.__version__, "torch", torch.__version__)'
"$PY" -m helpers.serve.gpu || exit 1

on_8b_shape() {  # notebooks on Llama-3.1-8B's shape with random weights (helpers/serve/dummy_model.py)
    VLLM_COURSE_MODEL=dummy:llama-3.1-8b "$PY" scripts/run_course.py --out build/gpu/dummy-llama-3.1-8b "$@"
}

gpu_pytest() {  # NAME PATHS...: make test-gpu's pytest over PATHS, its results in build/gpu/test-results/NAME.xml
    local name=$1; shift
    mkdir -p build/gpu/test-results
    "$PY" -m pytest "$@" --nbval-lax -p no:cacheprovider -v -m "${TEST_MARKS:-not browser and not network}" --ignore=labs/learner \
        --junitxml="build/gpu/test-results/${VLLM_COURSE_GPU_AS:+$VLLM_COURSE_GPU_AS-}$name.xml"
}

# The lab's GPU output length (OUTPUT_TOKENS in labs/01_concurrency_lab.ipynb), so sweep and lab compare.
sweep_args=(--output-tokens 256 --repetitions "${SWEEP_REPETITIONS:-2}")
[[ -n ${SWEEP_SETTINGS:-} ]] && sweep_args+=(--settings $SWEEP_SETTINGS)

run_step() {
    local step=$1
    case $step in
        t4:*) VLLM_COURSE_GPU_AS=t4 run_step "${step#t4:}" ;;
        lab-smollm2) "$PY" scripts/run_course.py --out build/gpu/smollm2 labs/01_concurrency_lab.ipynb ;;
        lab-dummy) on_8b_shape labs/01_concurrency_lab.ipynb ;;
        dummy:*) on_8b_shape "${step#dummy:}" ;;
        notebooks) "$PY" scripts/run_course.py --out build/gpu/notebooks notebooks/0*.ipynb
            cp build/tuning/startup.json build/gpu/notebooks/ 2>/dev/null ;;  # -> results/gpu/startup.json
        test) gpu_pytest all tests notebooks labs ;;
        test-part:*) IFS=, read -ra part <<< "${step#test-part:}"  # PATH or PATH,PATH,...: one results file
            gpu_pytest "$(basename "${part[0]}")$( (( ${#part[@]} > 1 )) && echo "+$(( ${#part[@]} - 1 ))")" "${part[@]}" ;;
        test-no-server) TEST_MARKS="not browser and not network and not server" gpu_pytest no-server tests ;;
        nbval) "$PY" -m pytest notebooks labs --nbval-lax -p no:cacheprovider -v ;;
        sweep-smollm2) "$PY" scripts/lab_sweep.py "${sweep_args[@]}" --out build/gpu/sweep/smollm2 ;;
        sweep-dummy) VLLM_COURSE_MODEL=dummy:llama-3.1-8b \
            "$PY" scripts/lab_sweep.py "${sweep_args[@]}" --out build/gpu/sweep/dummy-llama-3.1-8b ;;
        bench-vs-vllm) "$PY" scripts/bench_vs_vllm.py --out build/gpu/bench_vs_vllm ${BENCH_ARGS:-} \
            --capture tests/data/bench_serve/ ;;
        lab-pairs) "$PY" scripts/bench_lab_pairs.py --out build/gpu/lab_pairs.json ${LAB_PAIRS_ARGS:-} ;;
        clock-slots) "$PY" scripts/bench_step_clock_slots.py --out build/gpu/step_clock_slots.json \
            ${CLOCK_SLOTS_ARGS:---prefill-pairs 32:512,256:1024} ;;
        bench-open) "$PY" scripts/bench_vs_vllm.py --out build/gpu/bench_open ${BENCH_OPEN_ARGS:---max-num-seqs 8 \
            --request-rate 13 --output-tokens 128 --requests 320} ;;
        prefill-clocks) "$PY" scripts/bench_prefill_clocks.py --out build/gpu/prefill_clocks/smollm2.json \
            ${PREFILL_CLOCKS_ARGS:-} ;;
        prefill-clocks-dummy) VLLM_COURSE_MODEL=dummy:llama-3.1-8b "$PY" scripts/bench_prefill_clocks.py \
            --out build/gpu/prefill_clocks/dummy-llama-3.1-8b.json ${PREFILL_CLOCKS_ARGS:-} ;;
        capture)  # this vLLM's flags and a /metrics text after one request, for tests/test_vllm_versions.py
            mkdir -p build/gpu/capture
            "$PY" -m vllm.entrypoints.openai.api_server --help=all 2>/dev/null > build/gpu/capture/help.txt
            "$PY" -c 'from helpers.files import write_atomically
from helpers.serve.server import start_server
with start_server(max_num_seqs=4) as server:
    server.client().completions.create(model=server.model_name, prompt="Hello", max_tokens=8)
    write_atomically("build/gpu/capture/metrics.txt", server.get("/metrics"))' ;;
        *) "$PY" scripts/run_course.py --out build/gpu/notebooks "$step" ;;
    esac
}

for step in ${STEPS:-lab-smollm2 lab-dummy notebooks}; do
    echo "=== $step $(date -u +%T)"
    run_step "$step"
done
echo "=== done $(date -u +%T)"
