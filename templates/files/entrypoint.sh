#!/bin/bash
# Entrypoint of images built by provision: load CANN's environment (set_env.sh) for any command, then run it.
# Works for non-login shells and plain commands (`docker run IMAGE python train.py`). Host-specific things
# (device nodes, the driver, ASCEND_VISIBLE_DEVICES) come from `docker run`, never from the image.
# shellcheck source=/dev/null
. /etc/provision/cann-env.sh
if [ "$PROVISION_CANN_ENV" = absent ] && [ -z "${PROVISION_QUIET:-}" ]; then
    echo "provision: CANN not found (no /usr/local/Ascend/cann/set_env.sh or /usr/local/Ascend/ascend-toolkit/set_env.sh):" \
         "NPU operators are unavailable, CPU only (TORCH_DEVICE_BACKEND_AUTOLOAD=${TORCH_DEVICE_BACKEND_AUTOLOAD:-unset});" \
         "set PROVISION_CANN_SET_ENV to a set_env.sh elsewhere, PROVISION_QUIET=1 to silence this" >&2
fi
if [ "$#" -eq 0 ]; then
    set -- /bin/bash
fi
exec "$@"
