#!/bin/bash
# provision job qwen25-7b-grpo-2nodes: step data - data -> prompt/answer JSON lines (formats the handler cannot read as they are)
# Rendered by provision from templates/jobs/mindspeed-rl-grpo/data.sh.j2; run.sh runs it on every node
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
# orz data -> one JSON line a record with the fields R1AlpacaStyleInstructionHandler reads through map_keys
# (configs/data.yaml), by the job's tools/dataconv.py (provisioner/jobs/dataconv.py: standard library only).
src=/data/orz_math_57k/orz_math_57k_collected.json
dst=/output/qwen25-7b-grpo-2nodes/data-orz/orz.jsonl
out="${dst%/*}"
partial="$out.partial"
rm -rf "$partial"
mkdir -p "$partial"
python /output/qwen25-7b-grpo-2nodes/provision-job/tools/dataconv.py orz "$src" "$partial/${dst##*/}"
publish "$partial" "$out"
