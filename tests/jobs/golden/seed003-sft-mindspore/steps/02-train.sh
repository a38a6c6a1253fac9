#!/bin/bash
# provision job qwen25-7b-sft-ms: step train - msrun run_mindformer.py --run_mode finetune
# Rendered by provision from templates/jobs/mindspore-sft/train.sh.j2; run.sh runs it on every node
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
cd /opt/mindformers
# The framework's packages import from its checkout (cli/, research/ scripts run from subfolders).
export PYTHONPATH=/opt/mindformers"${PYTHONPATH:+:$PYTHONPATH}"
# Full-parameter SFT with MindSpore Transformers under msrun (4 workers, 4 per node),
# parallel_config data 2 x model 2 x pipeline 1 in configs/finetune.yaml.
out=/output/qwen25-7b-sft-ms/mindformers
meta="$out/checkpoint/rank_0/meta.json"
logs=/output/qwen25-7b-sft-ms/provision-job/logs/msrun-node$NODE_RANK
mkdir -p "$out" "$logs"
if [ -f "$meta" ]; then
  # MindSpore Transformers' own resume: meta.json names the last checkpoint (safetensors, as
  # configs/finetune.yaml saves them), which carries the step, the optimizer state and the loss scale.
  echo "[provision-job] resuming from $meta"
  load_args=(--load_checkpoint "$out/checkpoint" --resume_training True --auto_trans_ckpt False)
else
  # The Hugging Face safetensors directory itself (MindFormers >= 1.5.0), sliced online for the strategy.
  load_args=(--load_checkpoint /models/Qwen2.5-7B --auto_trans_ckpt True)
fi
# msrun writes each worker's output to its log dir; show this node's first worker here.
# One epoch is one pass: MindDataset draws num_samples above the record count with replacement (some records
# twice, others never), so the job's steps x global batch samples are split into the fewest equal epochs
# (dividing the steps) that each fit the records; each epoch is a shuffled draw without repeats.
records="$(cat /output/qwen25-7b-sft-ms/data/alpaca.records)"
samples=128000
case "$records" in ''|*[!0-9]*) echo "[provision-job] no record count in /output/qwen25-7b-sft-ms/data/alpaca.records" >&2; exit 1 ;; esac
if [ "$records" -lt 64 ]; then
  echo "[provision-job] the data has $records records, fewer than one global batch (64)" >&2
  exit 1
fi
epochs=$(( (samples + records - 1) / records ))
while [ $(( 2000 % epochs )) -ne 0 ]; do epochs=$((epochs + 1)); done
per_epoch=$(( samples / epochs ))
echo "[provision-job] $records records: $epochs epoch(s) of $per_epoch samples (2000 steps x 64)"
# msrun names each worker's log by its global rank (node_rank x local_worker_num + index): this node's first.
local_workers="${NPROC_PER_NODE:-4}"
first_log="$logs/worker_$((NODE_RANK * local_workers)).log"
touch "$first_log"
tail -n 0 -F "$first_log" &
tailer=$!
trap 'kill "$tailer" 2>/dev/null || true' EXIT
# As MindFormers' scripts/msrun_launcher.sh: no per-user process limit (every worker starts many threads),
# each worker bound to its share of the CPU cores.
ulimit -u unlimited 2>/dev/null || echo "[provision-job] note: could not lift the process limit (ulimit -u: $(ulimit -u))" >&2
set +e
msrun \
    --bind_core=True \
    --worker_num=4 \
    --local_worker_num="$local_workers" \
    --master_addr="${MASTER_ADDR:-127.0.0.1}" \
    --master_port="${MASTER_PORT:-8118}" \
    --node_rank="$NODE_RANK" \
    --log_dir="$logs" \
    --join=True \
    --cluster_time_out=7200 \
    run_mindformer.py \
    --register_path research/qwen2_5 \
    --config /output/qwen25-7b-sft-ms/provision-job/configs/finetune.yaml \
    --run_mode finetune \
    --use_parallel True \
    --train_dataset_dir /output/qwen25-7b-sft-ms/data/alpaca.mindrecord \
    --epochs "$epochs" \
    --num_samples "$per_epoch" \
    --output_dir "$out" \
    "${load_args[@]}"
rc=$?
set -e
if [ "$rc" -ne 0 ]; then exit "$rc"; fi
# Complete when rank 0's checkpoint meta names the last step (one epoch of 2000 steps).
if [ -f "$meta" ]; then
  step="$(python -c 'import json, sys; print(json.load(open(sys.argv[1]))["last_step"])' "$meta")"
  if [ "$step" != "2000" ]; then
    echo "[provision-job] training stopped at step $step of 2000 (too few samples in the dataset?)" >&2
    exit 1
  fi
elif [ "$NODE_RANK" = 0 ]; then
  echo "[provision-job] no $meta after training: nothing was saved" >&2
  exit 1
fi
marker=/output/qwen25-7b-sft-ms/provision-job/train.complete
echo "2000" > "$marker.node$NODE_RANK"
mv -f "$marker.node$NODE_RANK" "$marker"
