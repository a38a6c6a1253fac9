#!/bin/bash
# provision job qwen25-7b-sft-ms: step convert - HF -> MindSpore checkpoint (complete; sliced online by auto_trans_ckpt)
# Rendered by provision from templates/jobs/mindspore-sft/convert.sh.j2; run.sh runs it on every node
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
# Hugging Face -> one complete MindSpore checkpoint (research/qwen2_5/README.md, "模型权重转换"); training
# slices it for the parallel strategy online (auto_trans_ckpt), which wants it at <dir>/rank_0/.
out=/output/qwen25-7b-sft-ms/weights/mindspore
partial="$out.partial"
rm -rf "$partial"
mkdir -p "$partial/rank_0"
# convert_weight.py imports torch at its top and MindSpore Transformers' requirements do not bring it (the
# image's mindformers-convert-weight command checks the same, images/mindspore.yaml).
if ! python -c "import torch" >/dev/null 2>&1; then
    echo "convert: convert_weight.py imports torch, which this image does not carry: install it in the image" \
         "(pip install torch, the CPU build is enough) or convert elsewhere and put the checkpoint at" \
         "$out/rank_0/checkpoint.ckpt (the step is then skipped)" >&2
    exit 2
fi
python convert_weight.py \
    --model qwen2_5 \
    --input_path /models/Qwen2.5-7B \
    --output_path "$partial/rank_0/checkpoint.ckpt" \
    --dtype bf16
publish "$partial" "$out"
