#!/usr/bin/env bash
# One background job of scripts/gpu_reference_run.sh across several calls of the lent device machine, whose calls
# last at most 10 minutes and whose machine goes back 30 s after a call: each call returns within WAIT_S seconds
# with the job's log and its results so far under $OUT, and the next call (issued at once) waits on.
#   stage cNN               copy a carried .devkit/cNN (a chunk made by scripts/stage_device.sh) to /tmp/stage;
#                           "stage head" carries .devkit/head/head.tgz (git archive --format=tar.gz HEAD), which start
#                           then runs instead of the checkout as it is
#   start "STEPS" [VAR=VAL ...]   unpack the staged vLLM once, copy the checkout to /tmp/course, run the steps there
#   wait                    wait for the running job
# start and wait: WAIT_S (default 560) bounds the wait; $OUT gets job.log and gpu.tgz (build/gpu, build/tuning, build/route, build/lab2: lab 2's sweep files).
# Back here: tar xzf the last gpu.tgz, then python scripts/import_gpu_runs.py build/gpu/... for the executed copies.
set -uo pipefail
began=$(date +%s)
mode=${1:?stage PART | start STEPS [VAR=VAL ...] | wait}; shift
job=/tmp/gpujob
mkdir -p /tmp/stage "$job"
running() { pgrep -f "scripts/gpu_reference_run.sh" > /dev/null; }
case $mode in
    stage) cp -r ".devkit/${1:?which part}" /tmp/stage/ && ls /tmp/stage; exit ;;
    start)
        if running; then echo "a job is running already: call wait"; exit 1; fi
        for part in .devkit/part*; do [[ -d $part ]] && cp -r "$part" /tmp/stage/; done
        # the chunks of stage_device.sh, carried one a call: joined in order (chunk.00, chunk.01, ...), unpacked once
        if compgen -G "/tmp/stage/c[0-9]*/chunk.*" > /dev/null; then
            cat /tmp/stage/c[0-9]*/chunk.* | tar xf - -C /tmp/stage && rm -rf /tmp/stage/c[0-9]* || exit 1
        fi
        if [[ ! -d /tmp/site/vllm ]]; then
            bash /tmp/stage/part01/device_unpack.sh > "$job/unpack.log" 2>&1 || { tail -30 "$job/unpack.log"; exit 1; }
        fi
        tail -3 "$job/unpack.log"
        # the job runs from its own copy: the next call's checkout may be copied over this one. A staged
        # .devkit/head/head.tgz (git archive of a commit) is used instead of the checkout, whose files may be mid-edit
        rm -rf /tmp/course && mkdir /tmp/course
        if [[ -f /tmp/stage/head/head.tgz ]]; then tar xzf /tmp/stage/head/head.tgz -C /tmp/course && echo "course: the staged commit"
        else cp -a . /tmp/course/ && rm -rf /tmp/course/.devkit; fi
        steps=$1; shift
        (cd /tmp/course && setsid nohup env PYTHONPATH=/tmp/site SMOLLM2_DIR=/tmp/smollm2 VLLM_USE_FLASHINFER_SAMPLER=0 \
            STEPS="$steps" "$@" bash scripts/gpu_reference_run.sh > "$job/log" 2>&1 < /dev/null &) ;;
    wait) ;;
    *) echo "unknown mode $mode: stage, start or wait"; exit 2 ;;
esac
sleep 5
while running && (( $(date +%s) - began < ${WAIT_S:-560} )); do sleep 5; done
running && echo "JOB STILL RUNNING: call wait again at once" || echo "JOB FINISHED"
grep -v "WARNING\|Warning" "$job/log" | tail -60
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
cp "$job/log" "$OUT/job.log"
(cd /tmp/course && tar czf "$OUT/gpu.tgz" $(ls -d build/gpu build/tuning build/route build/lab2 2>/dev/null))
ls -la "$OUT"
