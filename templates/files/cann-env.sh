# Load CANN's environment. Sourced by the image's entrypoint, by bash for `bash -c` (BASH_ENV) and by login
# shells (/etc/profile.d/provision-cann.sh). Quiet and idempotent: the outcome is exported as
# PROVISION_CANN_ENV (the set_env.sh used, or "absent"), so child shells do not source it again.
if [ -z "${PROVISION_CANN_ENV:-}" ]; then
    PROVISION_CANN_ENV=absent
    # CANN >= 8.5 installs under /usr/local/Ascend/cann; earlier releases (and the compatibility link kept
    # by later ones) under /usr/local/Ascend/ascend-toolkit. Non-root installs live under $HOME/Ascend.
    for _provision_set_env in \
        "${PROVISION_CANN_SET_ENV:-}" \
        /usr/local/Ascend/cann/set_env.sh \
        /usr/local/Ascend/ascend-toolkit/set_env.sh \
        "${HOME:-/root}/Ascend/cann/set_env.sh" \
        "${HOME:-/root}/Ascend/ascend-toolkit/set_env.sh"
    do
        if [ -n "$_provision_set_env" ] && [ -f "$_provision_set_env" ]; then
            # shellcheck disable=SC1090
            . "$_provision_set_env" >/dev/null 2>&1 || true
            PROVISION_CANN_ENV=$_provision_set_env
            break
        fi
    done
    unset _provision_set_env
    if [ "$PROVISION_CANN_ENV" = absent ] && [ -z "${TORCH_DEVICE_BACKEND_AUTOLOAD+set}" ]; then
        # torch >= 2.5 loads torch_npu at `import torch`, which fails without CANN's libraries; CPU still works.
        TORCH_DEVICE_BACKEND_AUTOLOAD=0
        export TORCH_DEVICE_BACKEND_AUTOLOAD
    fi
    export PROVISION_CANN_ENV
fi
