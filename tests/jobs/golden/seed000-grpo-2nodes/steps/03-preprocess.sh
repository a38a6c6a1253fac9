#!/bin/bash
# provision job qwen25-7b-grpo-2nodes: step preprocess - prompts -> indexed dataset (R1 handler)
# Rendered by provision from templates/jobs/mindspeed-rl-grpo/preprocess.sh.j2; run.sh runs it on every node
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
# Prompts -> indexed dataset with R1AlpacaStyleInstructionHandler and the qwen_r1 template
# (MindSpeed-RL's examples/data/preprocess_data.sh; the dataset config is configs/data.yaml).
out=/output/qwen25-7b-grpo-2nodes/data
partial="$out.partial"
rm -rf "$partial"
mkdir -p "$partial"
python cli/preprocess_data.py data \
    --config-path /output/qwen25-7b-grpo-2nodes/provision-job/configs \
    hydra.run.dir=/output/qwen25-7b-grpo-2nodes/provision-job/hydra/preprocess
publish "$partial" "$out"
