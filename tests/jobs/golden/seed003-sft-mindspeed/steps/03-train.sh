#!/bin/bash
# provision job qwen25-7b-sft: step train - torchrun posttrain_gpt.py --stage sft
# Rendered by provision from templates/jobs/mindspeed-llm-sft/train.sh.j2; run.sh runs it on every node
# (NODE_RANK), and so can you, by hand, inside the job's container.
set -euo pipefail
NODE_RANK="${NODE_RANK:-0}"
# The CANN and NNAL environment, when the image's entrypoint has not set it (a login shell, KubeRay's ray start).
if [ -z "${ASCEND_HOME_PATH:-}${ASCEND_TOOLKIT_HOME:-}" ]; then
  set +u
  for f in /usr/local/Ascend/ascend-toolkit/set_env.sh /usr/local/Ascend/cann/set_env.sh /usr/local/Ascend/nnal/atb/set_env.sh; do
    if [ -f "$f" ]; then source "$f"; fi
  done
  set -u
fi
# Outputs appear only when a step is complete: write into <path>.partial, then move it into place.
publish() { rm -rf "$2"; mv "$1" "$2"; }
cd /opt/MindSpeed-LLM
# The framework's packages import from its checkout (cli/, research/ scripts run from subfolders).
export PYTHONPATH=/opt/MindSpeed-LLM"${PYTHONPATH:+:$PYTHONPATH}"
# Full-parameter SFT: torchrun posttrain_gpt.py --stage sft with the NPU fused kernels, after MindSpeed-LLM's
# examples/mcore/qwen25/tune_qwen25_7b_4k_full_ptd.sh, the model flags from /models/Qwen2.5-7B/config.json.
save=/output/qwen25-7b-sft/checkpoints/tp2-pp1
tracker="$save/latest_checkpointed_iteration.txt"
mkdir -p "$save"
# Keep the newest 2 checkpoint(s) (train.keep_checkpoints): Megatron writes <save>/iter_NNNNNNN,
# names it in the tracker once every rank has saved, and never removes an older one, though each holds the
# optimizer and RNG state (14 bytes a parameter). Node 0 removes the oldest complete iterations (at or below
# the tracker's) beyond the newest kept, while training runs and once it has ended. With keep_checkpoints 0 the
# newest stays until the export step has written the final weights (a stopped job resumes from it).
keep_checkpoints=2
prune_checkpoints() {
  local latest d n i count=0
  local complete=()
  [ "$NODE_RANK" = 0 ] || return 0
  latest="$(cat "$tracker" 2>/dev/null || true)"
  case "$latest" in ''|*[!0-9]*) return 0 ;; esac
  for d in "$save"/iter_[0-9][0-9][0-9][0-9][0-9][0-9][0-9]; do
    [ -d "$d" ] || continue
    n=$((10#${d##*/iter_}))
    if [ "$n" -le "$latest" ]; then complete+=("$d"); count=$((count + 1)); fi
  done
  for ((i = 0; i + keep_checkpoints < count; i++)); do
    echo "[provision-job] removing checkpoint ${complete[i]##*/} (train.keep_checkpoints: $keep_checkpoints)"
    rm -rf "${complete[i]}"
  done
}
pruner=""
start_pruner() {
  if [ "$NODE_RANK" = 0 ]; then
    ( while sleep 60 </dev/null >/dev/null 2>&1; do prune_checkpoints; done ) &
    pruner=$!
  fi
}
# Wait only for a pruner the kill reached: after a SIGTERM to the step's group it may be gone already, and bash's
# `wait` for a pid it has reaped then waits on the process substitution (tee) that holds this script's output,
# which waits on this script: the step never ends.
stop_pruner() {
  if [ -n "$pruner" ] && kill "$pruner" 2>/dev/null; then wait "$pruner" 2>/dev/null || true; fi
  pruner=""
}
trap stop_pruner EXIT
if [ -f "$tracker" ]; then
  # Megatron's own resume: iteration, optimizer, RNG and data position come from the last checkpoint.
  echo "[provision-job] resuming training from iteration $(cat "$tracker") of 2000"
  load_args=(--load "$save")
else
  load_args=(--load /output/qwen25-7b-sft/weights/mcore-tp2-pp1 --finetune --no-load-optim --no-load-rng)
fi
start_pruner
torchrun \
    --nproc_per_node "${NPROC_PER_NODE:-4}" \
    --nnodes "${NNODES:-1}" \
    --node_rank "$NODE_RANK" \
    --master_addr "${MASTER_ADDR:-localhost}" \
    --master_port "${MASTER_PORT:-6000}" \
    posttrain_gpt.py \
    --stage sft \
    --is-instruction-dataset \
    --tokenizer-not-use-fast \
    --prompt-type qwen \
    --variable-seq-lengths \
    --no-pad-to-seq-lengths \
    --padded-samples \
    --use-mcore-models \
    --tensor-model-parallel-size 2 \
    --pipeline-model-parallel-size 1 \
    --sequence-parallel \
    --use-distributed-optimizer \
    --overlap-grad-reduce \
    --overlap-param-gather \
    --num-layers 28 \
    --hidden-size 3584 \
    --ffn-hidden-size 18944 \
    --num-attention-heads 28 \
    --group-query-attention \
    --num-query-groups 4 \
    --max-position-embeddings 4096 \
    --seq-length 4096 \
    --disable-bias-linear \
    --add-qkv-bias \
    --use-flash-attn \
    --swiglu \
    --use-fused-swiglu \
    --normalization RMSNorm \
    --norm-epsilon 1e-06 \
    --use-fused-rmsnorm \
    --position-embedding-type rope \
    --rotary-base 1000000 \
    --use-fused-rotary-pos-emb \
    --untie-embeddings-and-output-weights \
    --micro-batch-size 1 \
    --global-batch-size 64 \
    --make-vocab-size-divisible-by 1 \
    --padded-vocab-size 152064 \
    --tokenizer-type PretrainedFromHF \
    --tokenizer-name-or-path /models/Qwen2.5-7B \
    --attention-dropout 0.0 \
    --hidden-dropout 0.0 \
    --train-iters 2000 \
    --lr 1.25e-06 \
    --lr-decay-style cosine \
    --min-lr 1.25e-07 \
    --lr-warmup-fraction 0.01 \
    --init-method-std 0.01 \
    --weight-decay 0 \
    --clip-grad 1.0 \
    --adam-beta1 0.9 \
    --adam-beta2 0.95 \
    --bf16 \
    --no-gradient-accumulation-fusion \
    --no-masked-softmax-fusion \
    --attention-softmax-in-fp32 \
    --data-path /output/qwen25-7b-sft/data/alpaca \
    --split 100,0,0 \
    --seed 1234 \
    --log-interval 1 \
    --save-interval 500 \
    --eval-interval 2000 \
    --eval-iters 0 \
    --log-throughput \
    --save "$save" \
    "${load_args[@]}" \
    --distributed-backend nccl
stop_pruner
prune_checkpoints
# Training is complete when Megatron's tracker names the last iteration (node 0 always sees it; other
# nodes do with shared storage). Then the step's output marker is written.
if [ -f "$tracker" ]; then
  it="$(cat "$tracker")"
  if [ "$it" != "2000" ]; then
    echo "[provision-job] training stopped at iteration $it of 2000 (checkpoints: $save)" >&2
    exit 1
  fi
elif [ "$NODE_RANK" = 0 ]; then
  echo "[provision-job] no $tracker after training: nothing was saved" >&2
  exit 1
fi
marker=/output/qwen25-7b-sft/provision-job/train.complete
echo "2000" > "$marker.node$NODE_RANK"
mv -f "$marker.node$NODE_RANK" "$marker"
