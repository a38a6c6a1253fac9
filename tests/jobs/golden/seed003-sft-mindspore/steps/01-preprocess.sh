#!/bin/bash
# provision job qwen25-7b-sft-ms: step preprocess - alpaca -> messages -> MindRecord
# Rendered by provision from templates/jobs/mindspore-sft/preprocess.sh.j2; run.sh runs it on every node
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
# Alpaca -> messages -> MindRecord of 4096 tokens (the static-shape route of
# research/qwen2_5/README.md: the alpaca converter, then the preprocessor with --dataset_type qa; their paths
# in this release's checkout come from matrices/jobs.yaml job_scripts).
model=/models/Qwen2.5-7B
out=/output/qwen25-7b-sft-ms/data
partial="$out.partial"
rm -rf "$partial"
mkdir -p "$partial"
python research/qwen2_5/alpaca_converter.py \
    --data_path /data/alpaca/alpaca_data.json \
    --output_path "$partial/messages.json"
python research/qwen2_5/qwen2_5_preprocess.py \
    --dataset_type qa \
    --input_glob "$partial/messages.json" \
    --vocab_file "$model/vocab.json" \
    --merges_file "$model/merges.txt" \
    --seq_length 4096 \
    --output_file "$partial/alpaca.mindrecord"
# One record a line in the converter's output, one sample each in the MindRecord: the train step splits the
# job's samples into epochs by this count.
wc -l < "$partial/messages.json" | tr -d ' ' > "$partial/alpaca.records"
rm -f "$partial/messages.json"
publish "$partial" "$out"
