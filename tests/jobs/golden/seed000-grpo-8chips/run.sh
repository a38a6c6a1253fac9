#!/bin/bash
# provision job qwen25-7b-grpo (mindspeed-rl-grpo: GRPO with MindSpeed-RL (integrated actor/reference/rollout workers on Ray)) - the driver.
# Every node of the job runs this script; NODE_RANK (default 0) says which node it is. It runs the steps
# in order and skips a step whose outputs exist, so running it again resumes a job that was stopped.
# Rendered by provision from templates/jobs/run.sh.j2 for seed000-grpo-qwen25-7b.yaml; do not edit, render again.
set -uo pipefail
JOB_DIR=/output/qwen25-7b-grpo/provision-job
NODE_RANK="${NODE_RANK:-0}"
STORAGE=shared
WAIT_TIMEOUT=21600
# launch variables of the job kind and the job file (the container's own values win)
[ -n "${CUDA_DEVICE_MAX_CONNECTIONS+x}" ] || export CUDA_DEVICE_MAX_CONNECTIONS=1
[ -n "${HCCL_ASYNC_ERROR_HANDLING+x}" ] || export HCCL_ASYNC_ERROR_HANDLING=1
[ -n "${HCCL_CONNECT_TIMEOUT+x}" ] || export HCCL_CONNECT_TIMEOUT=1800
[ -n "${HCCL_IF_BASE_PORT+x}" ] || export HCCL_IF_BASE_PORT=48000
[ -n "${HCCL_WHITELIST_DISABLE+x}" ] || export HCCL_WHITELIST_DISABLE=1
[ -n "${HYDRA_FULL_ERROR+x}" ] || export HYDRA_FULL_ERROR=1
[ -n "${PYTORCH_NPU_ALLOC_CONF+x}" ] || export PYTORCH_NPU_ALLOC_CONF=expandable_segments:True
[ -n "${RAY_DEDUP_LOGS+x}" ] || export RAY_DEDUP_LOGS=0
[ -n "${RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES+x}" ] || export RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES=true
[ -n "${TASK_QUEUE_ENABLE+x}" ] || export TASK_QUEUE_ENABLE=2
[ -n "${TOKENIZERS_PARALLELISM+x}" ] || export TOKENIZERS_PARALLELISM=true

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

say "job qwen25-7b-grpo: node $NODE_RANK of 1, 5 steps"

# step 1: convert - HF -> Megatron-mcore weights for the actor's TP/PP (once)
if have /output/qwen25-7b-grpo/weights/mcore-tp4-pp1/latest_checkpointed_iteration.txt; then
  say "step convert: skip (outputs present)"
elif [ "$NODE_RANK" != 0 ] && [ "$STORAGE" = shared ]; then
  wait_for convert /output/qwen25-7b-grpo/weights/mcore-tp4-pp1/latest_checkpointed_iteration.txt || exit $?
else
  run_step convert steps/01-convert.sh || exit $?
  if ! have /output/qwen25-7b-grpo/weights/mcore-tp4-pp1/latest_checkpointed_iteration.txt; then
    say "step convert: exited 0 but its outputs are missing: /output/qwen25-7b-grpo/weights/mcore-tp4-pp1/latest_checkpointed_iteration.txt"
    exit 1
  fi
fi
[ "$stopping" = 1 ] && exit 143

# step 2: data - data -> prompt/answer JSON lines (formats the handler cannot read as they are) (once)
if have /output/qwen25-7b-grpo/data-orz/orz.jsonl; then
  say "step data: skip (outputs present)"
elif [ "$NODE_RANK" != 0 ] && [ "$STORAGE" = shared ]; then
  wait_for data /output/qwen25-7b-grpo/data-orz/orz.jsonl || exit $?
else
  run_step data steps/02-data.sh || exit $?
  if ! have /output/qwen25-7b-grpo/data-orz/orz.jsonl; then
    say "step data: exited 0 but its outputs are missing: /output/qwen25-7b-grpo/data-orz/orz.jsonl"
    exit 1
  fi
fi
[ "$stopping" = 1 ] && exit 143

# step 3: preprocess - prompts -> indexed dataset (R1 handler) (once)
if have /output/qwen25-7b-grpo/data/orz_packed_input_ids_document.idx; then
  say "step preprocess: skip (outputs present)"
elif [ "$NODE_RANK" != 0 ] && [ "$STORAGE" = shared ]; then
  wait_for preprocess /output/qwen25-7b-grpo/data/orz_packed_input_ids_document.idx || exit $?
else
  run_step preprocess steps/03-preprocess.sh || exit $?
  if ! have /output/qwen25-7b-grpo/data/orz_packed_input_ids_document.idx; then
    say "step preprocess: exited 0 but its outputs are missing: /output/qwen25-7b-grpo/data/orz_packed_input_ids_document.idx"
    exit 1
  fi
fi
[ "$stopping" = 1 ] && exit 143

# step 4: train - Ray cluster + cli/train_grpo.py on the head (ray)
if have /output/qwen25-7b-grpo/provision-job/train.complete; then
  say "step train: skip (outputs present)"
else
  run_step train steps/04-train.sh || exit $?
  if ! have /output/qwen25-7b-grpo/provision-job/train.complete; then
    say "step train: exited 0 but its outputs are missing: /output/qwen25-7b-grpo/provision-job/train.complete"
    exit 1
  fi
fi
[ "$stopping" = 1 ] && exit 143

# step 5: export - Megatron-mcore -> HF weights (once)
if have /output/qwen25-7b-grpo/hf/config.json; then
  say "step export: skip (outputs present)"
elif [ "$NODE_RANK" != 0 ] && [ "$STORAGE" = shared ]; then
  wait_for export /output/qwen25-7b-grpo/hf/config.json || exit $?
else
  run_step export steps/05-export.sh || exit $?
  if ! have /output/qwen25-7b-grpo/hf/config.json; then
    say "step export: exited 0 but its outputs are missing: /output/qwen25-7b-grpo/hf/config.json"
    exit 1
  fi
fi
[ "$stopping" = 1 ] && exit 143
say "job qwen25-7b-grpo: all steps done"
