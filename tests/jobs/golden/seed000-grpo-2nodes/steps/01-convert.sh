#!/bin/bash
# provision job qwen25-7b-grpo-2nodes: step convert - HF -> Megatron-mcore weights for the actor's TP/PP
# Rendered by provision from templates/jobs/mindspeed-rl-grpo/convert.sh.j2; run.sh runs it on every node
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
# Hugging Face -> Megatron-mcore, split for TP4 x PP1 (after MindSpeed-LLM's
# examples/mcore/qwen25/ckpt_convert_qwen25_hf2mcore.sh).
export CUDA_DEVICE_MAX_CONNECTIONS=1
out=/output/qwen25-7b-grpo-2nodes/weights/mcore-tp4-pp1
partial="$out.partial"
rm -rf "$partial"
python cli/convert_ckpt.py \
    --use-mcore-models \
    --model-type GPT \
    --load-model-type hf \
    --save-model-type mg \
    --target-tensor-parallel-size 4 \
    --target-pipeline-parallel-size 1 \
    --add-qkv-bias \
    --load-dir /models/Qwen2.5-7B \
    --save-dir "$partial" \
    --tokenizer-model /models/Qwen2.5-7B/tokenizer.json \
    --model-type-hf llama2 \
    --params-dtype bf16
publish "$partial" "$out"
