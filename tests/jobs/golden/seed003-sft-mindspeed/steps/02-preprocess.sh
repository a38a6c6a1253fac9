#!/bin/bash
# provision job qwen25-7b-sft: step preprocess - instruction data -> indexed dataset
# Rendered by provision from templates/jobs/mindspeed-llm-sft/preprocess.sh.j2; run.sh runs it on every node
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
# alpaca instructions -> Megatron indexed dataset (<prefix>_packed_{input_ids,attention_mask,labels}_document),
# after MindSpeed-LLM's examples/mcore/qwen25/data_convert_qwen25_instruction.sh.
out=/output/qwen25-7b-sft/data
partial="$out.partial"
rm -rf "$partial"
mkdir -p "$partial"
python preprocess_data.py \
    --input /data/alpaca/alpaca_data.json \
    --tokenizer-name-or-path /models/Qwen2.5-7B \
    --output-prefix "$partial/alpaca" \
    --handler-name AlpacaStyleInstructionHandler \
    --tokenizer-type PretrainedFromHF \
    --prompt-type qwen \
    --workers 4 \
    --log-interval 1000
publish "$partial" "$out"
