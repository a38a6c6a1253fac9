#!/bin/bash
# provision job qwen25-7b-grpo-2nodes: step export - Megatron-mcore -> HF weights
# Rendered by provision from templates/jobs/mindspeed-rl-grpo/export.sh.j2; run.sh runs it on every node
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
# Megatron-mcore -> Hugging Face (TP1 x PP1), after MindSpeed-LLM's ckpt_convert_qwen25_mcore2hf.sh.
# --load-hf-from-config builds the HF model from config.json alone, so only the model's configs are copied
# next to the output, not its weights; the converter writes the weights to <save-dir>/mg2hf.
export CUDA_DEVICE_MAX_CONNECTIONS=1
model=/models/Qwen2.5-7B
out=/output/qwen25-7b-grpo-2nodes/hf
partial="$out.partial"
rm -rf "$partial"
mkdir -p "$partial"
for f in config.json generation_config.json; do
  if [ -f "$model/$f" ]; then cp "$model/$f" "$partial/"; fi
done
python cli/convert_ckpt.py \
    --use-mcore-models \
    --model-type GPT \
    --model-type-hf llama2 \
    --load-model-type mg \
    --save-model-type hf \
    --target-tensor-parallel-size 1 \
    --target-pipeline-parallel-size 1 \
    --add-qkv-bias \
    --load-hf-from-config \
    --load-dir /output/qwen25-7b-grpo-2nodes/checkpoints/tp4-pp1 \
    --save-dir "$partial"
# The tokenizer travels with the weights, so the export loads with from_pretrained as it is.
for f in "$model"/tokenizer* "$model"/vocab.json "$model"/merges.txt "$model"/special_tokens_map.json \
         "$model"/added_tokens.json "$model"/generation_config.json; do
  if [ -f "$f" ]; then cp "$f" "$partial/mg2hf/"; fi
done
publish "$partial/mg2hf" "$out"
rm -rf "$partial"
