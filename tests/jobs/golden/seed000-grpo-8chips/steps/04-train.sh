#!/bin/bash
# provision job qwen25-7b-grpo: step train - Ray cluster + cli/train_grpo.py on the head
# Rendered by provision from templates/jobs/mindspeed-rl-grpo/train.sh.j2; run.sh runs it on every node
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
cd /opt/MindSpeed-RL
# The framework's packages import from its checkout (cli/, research/ scripts run from subfolders).
export PYTHONPATH=/opt/MindSpeed-RL"${PYTHONPATH:+:$PYTHONPATH}"
# GRPO on a Ray cluster, after MindSpeed-RL's examples/grpo/grpo_trainer_qwen25_7b.sh: node 0 starts the
# Ray head, waits until every node's NPUs have joined, then runs cli/train_grpo.py (the Ray driver); the
# other nodes join the head and stay until training is complete. Under KubeRay (RAY_ADDRESS set) the
# cluster exists already and this runs on the head only.
save=/output/qwen25-7b-grpo/checkpoints/tp4-pp1
tracker="$save/latest_checkpointed_iteration.txt"
marker=/output/qwen25-7b-grpo/provision-job/train.complete
nodes=1
npus_per_node=8
head="${MASTER_ADDR:-localhost}:6379"
ip_args=()
if [ -n "${HCCL_IF_IP:-}" ]; then ip_args=(--node-ip-address "$HCCL_IF_IP"); fi
# Ray frees memory reliably with jemalloc (MindSpeed-RL install guide): preload it when the image has it.
for lib in "/usr/lib/$(uname -m)-linux-gnu/libjemalloc.so.2" /usr/lib64/libjemalloc.so.2 /usr/local/lib/libjemalloc.so.2; do
  if [ -f "$lib" ]; then export LD_PRELOAD="$lib${LD_PRELOAD:+ $LD_PRELOAD}"; break; fi
done

# As MindSpeed-RL's examples/grpo/grpo_trainer_qwen25_7b.sh: Ray and the workers hold many files open.
if ! ulimit -n 32768 2>/dev/null; then
  ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
  echo "[provision-job] note: open files limited to $(ulimit -n) (ulimit -n 32768 refused)" >&2
fi
# TensorBoard: MindSpeed-RL's trainer opens SummaryWriter() without a log_dir (mindspeed_rl/trainer/base.py),
# so it writes runs/<time>_<host> in its Ray worker's working directory, the one ray start ran in (here, the
# checkout, on whichever node runs it): runs/ there is a link to <output>/tensorboard, kept with the job.
tensorboard=/output/qwen25-7b-grpo/tensorboard
mkdir -p "$tensorboard"
if [ -L runs ] || [ ! -e runs ]; then
  ln -sfn "$tensorboard" runs 2>/dev/null || echo "[provision-job] note: no runs link in $PWD: TensorBoard events stay in the container" >&2
fi

cluster_npus() {
  python - <<'PY' 2>/dev/null
import ray
ray.init(address="auto", logging_level="ERROR")
print(int(sum(n["Resources"].get("NPU", 0) for n in ray.nodes() if n.get("Alive"))))
PY
}

if [ "$NODE_RANK" != 0 ] && [ -z "${RAY_ADDRESS:-}" ]; then
  # A worker node: join the head (it may not be up yet), then stay until the head finishes.
  for try in $(seq 1 120); do
    if ray start --address="$head" --resources="{\"NPU\": $npus_per_node}" "${ip_args[@]}"; then break; fi
    if [ "$try" = 120 ]; then echo "[provision-job] could not join the Ray head at $head" >&2; exit 1; fi
    sleep 5
  done
  echo "[provision-job] joined the Ray cluster at $head with $npus_per_node NPUs"
  lost=0
  until [ -e "$marker" ]; do
    sleep 10
    if ray status --address="$head" >/dev/null 2>&1; then lost=0; else lost=$((lost + 1)); fi
    if [ "$lost" -ge 6 ] && [ ! -e "$marker" ]; then
      echo "[provision-job] the Ray head at $head is gone and training did not complete" >&2
      ray stop --force >/dev/null 2>&1 || true
      exit 1
    fi
  done
  ray stop >/dev/null 2>&1 || true
  exit 0
fi

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
started=0
if [ -z "${RAY_ADDRESS:-}" ]; then
  ray stop --force >/dev/null 2>&1 || true
  ray start --head --port=6379 --dashboard-host=0.0.0.0 --dashboard-port=8265 \
      --resources="{\"NPU\": $npus_per_node}" "${ip_args[@]}"
  started=1
  trap 'stop_pruner; ray stop >/dev/null 2>&1 || true' EXIT
fi
want=$((nodes * npus_per_node))
for try in $(seq 1 360); do
  have_npus="$(cluster_npus || echo 0)"
  if [ "${have_npus:-0}" -ge "$want" ]; then break; fi
  if [ "$try" = 360 ]; then echo "[provision-job] only $have_npus of $want NPUs joined the Ray cluster" >&2; exit 1; fi
  echo "[provision-job] waiting for the Ray cluster: $have_npus of $want NPUs"
  sleep 5
done
echo "[provision-job] Ray cluster ready: $want NPUs on $nodes node(s)"

overrides=()
if [ -f "$tracker" ]; then
  # MindSpeed-RL resumes through Megatron: the last checkpoint brings the iteration, optimizer and RNG.
  echo "[provision-job] resuming GRPO from iteration $(cat "$tracker") of 800"
  overrides=(actor_config.load="$save" actor_config.finetune=false actor_config.no_load_optim=false
             actor_config.no_load_rng=false)
fi
mkdir -p "$save"
start_pruner
python cli/train_grpo.py \
    --config-path /output/qwen25-7b-grpo/provision-job/configs \
    --config-name grpo \
    hydra.run.dir=/output/qwen25-7b-grpo/provision-job/hydra/train \
    "${overrides[@]}"
stop_pruner
prune_checkpoints
# Training is complete when Megatron's tracker names the last iteration (node 0 always sees it; other
# nodes do with shared storage). Then the step's output marker is written.
if [ -f "$tracker" ]; then
  it="$(cat "$tracker")"
  if [ "$it" != "800" ]; then
    echo "[provision-job] training stopped at iteration $it of 800 (checkpoints: $save)" >&2
    exit 1
  fi
elif [ "$NODE_RANK" = 0 ]; then
  echo "[provision-job] no $tracker after training: nothing was saved" >&2
  exit 1
fi
marker=/output/qwen25-7b-grpo/provision-job/train.complete
echo "800" > "$marker.node$NODE_RANK"
mv -f "$marker.node$NODE_RANK" "$marker"
