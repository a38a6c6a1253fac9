#!/bin/bash
# provision job qwen25-7b-sft-ms (mindspore-sft: full-parameter SFT with MindSpore Transformers (msrun, parallel_config)) - the driver.
# Every node of the job runs this script; NODE_RANK (default 0) says which node it is. It runs the steps
# in order and skips a step whose outputs exist, so running it again resumes a job that was stopped.
# Rendered by provision from templates/jobs/run.sh.j2 for seed003-sft-qwen25-7b-mindspore.yaml; do not edit, render again.
set -uo pipefail
JOB_DIR=/output/qwen25-7b-sft-ms/provision-job
NODE_RANK="${NODE_RANK:-0}"
STORAGE=shared
WAIT_TIMEOUT=21600
# launch variables of the job kind and the job file (the container's own values win)

say() { printf '[provision-job] %s\n' "$*"; }
have() { local f; for f in "$@"; do [ -e "$f" ] || return 1; done; }

# Ctrl-C / docker stop / pod deletion: pass SIGTERM to the running step's whole process group
# (torchrun, msrun, ray and their workers), wait for it, then stop.
child=0
stopping=0
on_signal() {
  stopping=1
  if [ "$child" -ne 0 ]; then kill -TERM -- "-$child" 2>/dev/null || kill -TERM "$child" 2>/dev/null; fi
}
trap on_signal TERM INT HUP

pause() {  # sleep that a signal interrupts
  sleep "$1" & child=$!
  wait "$child"
  child=0
}

run_step() {  # id script
  local id=$1 script=$2 rc start=$SECONDS
  local log="$JOB_DIR/logs/$id.node$NODE_RANK.log"
  mkdir -p "$JOB_DIR/logs" "$JOB_DIR/status"
  [ "$NODE_RANK" = 0 ] && rm -f "$JOB_DIR/status/$id.failed"
  say "step $id: start (log: $log)"
  setsid bash "$JOB_DIR/$script" > >(tee -a "$log") 2>&1 &
  child=$!
  wait "$child"
  rc=$?
  while kill -0 "$child" 2>/dev/null; do wait "$child"; rc=$?; done
  child=0
  if [ "$rc" -eq 0 ]; then
    say "step $id: ok ($((SECONDS - start)) s)"
  elif [ "$stopping" = 1 ]; then
    say "step $id: stopped (exit $rc); run the job again to resume"
  else
    say "step $id: failed (exit $rc)"
    [ "$NODE_RANK" = 0 ] && echo "$rc" > "$JOB_DIR/status/$id.failed"
  fi
  return "$rc"
}

wait_for() {  # id outputs...: another node's step, on shared storage
  local id=$1 waited=0
  shift
  say "step $id: waiting for node 0 (shared storage)"
  until have "$@"; do
    if [ -e "$JOB_DIR/status/$id.failed" ]; then say "step $id: failed on node 0"; return 1; fi
    if [ "$waited" -ge "$WAIT_TIMEOUT" ]; then say "step $id: node 0 did not finish it in $WAIT_TIMEOUT s"; return 1; fi
    pause 5
    [ "$stopping" = 1 ] && return 143
    waited=$((waited + 5))
  done
  say "step $id: done on node 0"
}

say "job qwen25-7b-sft-ms: node $NODE_RANK of 1, 2 steps"

# step 1: preprocess - alpaca -> messages -> MindRecord (once)
if have /output/qwen25-7b-sft-ms/data/alpaca.mindrecord /output/qwen25-7b-sft-ms/data/alpaca.records; then
  say "step preprocess: skip (outputs present)"
elif [ "$NODE_RANK" != 0 ] && [ "$STORAGE" = shared ]; then
  wait_for preprocess /output/qwen25-7b-sft-ms/data/alpaca.mindrecord /output/qwen25-7b-sft-ms/data/alpaca.records || exit $?
else
  run_step preprocess steps/01-preprocess.sh || exit $?
  if ! have /output/qwen25-7b-sft-ms/data/alpaca.mindrecord /output/qwen25-7b-sft-ms/data/alpaca.records; then
    say "step preprocess: exited 0 but its outputs are missing: /output/qwen25-7b-sft-ms/data/alpaca.mindrecord /output/qwen25-7b-sft-ms/data/alpaca.records"
    exit 1
  fi
fi
[ "$stopping" = 1 ] && exit 143

# step 2: train - msrun run_mindformer.py --run_mode finetune (distributed)
if have /output/qwen25-7b-sft-ms/provision-job/train.complete; then
  say "step train: skip (outputs present)"
else
  run_step train steps/02-train.sh || exit $?
  if ! have /output/qwen25-7b-sft-ms/provision-job/train.complete; then
    say "step train: exited 0 but its outputs are missing: /output/qwen25-7b-sft-ms/provision-job/train.complete"
    exit 1
  fi
fi
[ "$stopping" = 1 ] && exit 143
say "job qwen25-7b-sft-ms: all steps done"
