#!/bin/bash
# Compile DeepSpeed operators into the installed deepspeed package at image build time, for the accelerator
# the image runs on, so that no container JIT-compiles them at start (a compiler and minutes per fresh
# container; DeepSpeed issue 7061: a failed cpu_adam JIT build leaves DeepSpeedCPUAdam without ds_opt_adam).
#
#   ds-prebuild.sh REQUIREMENTS_FILE OP [OP ...]      e.g. ds-prebuild.sh requirements/deepspeed.txt cpu_adam
#
# An OP is the suffix of the builder's DS_BUILD_<OP> switch (cpu_adam: DS_BUILD_CPU_ADAM, shm_comm:
# DS_BUILD_SHM_COMM). An OP the accelerator's DeepSpeed op builders do not have is skipped with a line saying so
# (shm_comm, the CPU accelerator's shared-memory collectives, which deepspeed/comm/torch.py build_shm_op loads
# in every TorchBackend on the CPU, has no builder on the NPU); one that is built must then be installed.
#
# The accelerator is the one DeepSpeed will detect at run time: Ascend NPU (DS_ACCELERATOR=npu) where the base
# image has a CANN toolkit, else CPU. No driver is mounted during a build, so the NPU build links against the
# toolkit's stub libraries (<toolkit>/<arch>-linux/devlib, as vllm-ascend's wheel builds do). DeepSpeed loads a
# pre-built op only when it was built for the accelerator it runs on (op_builder/builder.py load()).
set -euo pipefail
requirements=$1
shift
line=$(grep -iE '^deepspeed==' "$requirements" | head -n 1)
if [ -z "$line" ]; then
    echo "ds-prebuild: no deepspeed== line in $requirements" >&2
    exit 1
fi
# shellcheck source=/dev/null
. /etc/provision/cann-env.sh
if [ "$PROVISION_CANN_ENV" != absent ]; then
    accelerator=npu
    export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}${ASCEND_TOOLKIT_HOME:-$(dirname "$PROVISION_CANN_ENV")/latest}/$(uname -m)-linux/devlib"
else
    accelerator=cpu
fi
# Which OPs this accelerator has a builder for, as "OP NAME" lines (NAME: the key of installed_ops), read from the
# installed DeepSpeed (the deps stage installed it without ops) as its setup.py reads them (op_builder/all_ops.py).
builders=$(env "DS_ACCELERATOR=$accelerator" TORCH_DEVICE_BACKEND_AUTOLOAD=0 python - "$accelerator" "$@" <<'EOF'
import sys

from deepspeed.ops.op_builder.all_ops import ALL_OPS

accelerator, ops = sys.argv[1], sys.argv[2:]
names = {getattr(b, "BUILD_VAR", ""): name for name, b in ALL_OPS.items()}
for op in ops:
    name = names.get(f"DS_BUILD_{op.upper()}")
    if name is None:
        print(f"ds-prebuild: {op}: DeepSpeed's {accelerator} accelerator has no builder for it; not built",
              file=sys.stderr)
    else:
        print(op, name)
EOF
)
flags=(DS_BUILD_OPS=0 "DS_ACCELERATOR=$accelerator" TORCH_DEVICE_BACKEND_AUTOLOAD=0)
ops=()
names=()
while read -r op name; do
    [ -n "$op" ] || continue
    flags+=("DS_BUILD_${op^^}=1")
    ops+=("$op")
    names+=("$name")
done <<< "$builders"
if [ ${#ops[@]} -eq 0 ]; then
    echo "ds-prebuild: none of ${*} applies to accelerator $accelerator"
    exit 0
fi
echo "ds-prebuild: building ${ops[*]} for accelerator $accelerator (${line})"
env "${flags[@]}" pip install --no-cache-dir --no-deps --no-build-isolation --force-reinstall "$line"
env "DS_ACCELERATOR=$accelerator" TORCH_DEVICE_BACKEND_AUTOLOAD=0 python - "$accelerator" "${names[@]}" <<'EOF'
import sys

from deepspeed.git_version_info import accelerator_name, installed_ops

accelerator, ops = sys.argv[1], sys.argv[2:]
missing = [op for op in ops if not installed_ops.get(op)]
if missing or accelerator_name != accelerator:
    sys.exit(f"ds-prebuild: deepspeed was built for {accelerator_name!r} without {', '.join(missing) or 'nothing'}"
             f" (wanted {accelerator!r} with {', '.join(ops)})")
print(f"ds-prebuild: {', '.join(ops)} pre-built for {accelerator_name}")
EOF
