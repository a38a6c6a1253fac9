# Load CANN's environment. Sourced by the image's entrypoint, by bash for `bash -c` (BASH_ENV) and by login
# shells (/etc/profile.d/provision-cann.sh). Quiet and idempotent: the outcome is exported as
# PROVISION_CANN_ENV (the set_env.sh used, or "absent"), so child shells do not source it again.
#
# As the official CANN images' entrypoint does (github Ascend/cann-container-image, cann/*/Dockerfile
# ENTRYPOINT): the toolkit's set_env.sh, then ascendnpu-ir's (CANN 8.5 on), then NNAL/ATB's with the C++ ABI
# of the installed torch (--cxx_abi=0|1, read from torch when the image was built into
# /etc/provision/torch-cxx11-abi, or PROVISION_TORCH_CXX11_ABI; without either, ATB's script imports torch
# itself at every shell start).
if [ -z "${PROVISION_CANN_ENV:-}" ]; then
    PROVISION_CANN_ENV=absent
    # Each script is sourced inside a function, so it sees only the arguments given here, never the
    # entrypoint's command line.
    _provision_source() {
        _provision_file=$1
        shift
        # shellcheck disable=SC1090
        . "$_provision_file" "$@" >/dev/null 2>&1 || true
    }
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
            _provision_source "$_provision_set_env"
            PROVISION_CANN_ENV=$_provision_set_env
            break
        fi
    done
    if [ "$PROVISION_CANN_ENV" != absent ]; then
        _provision_root=$(dirname "$PROVISION_CANN_ENV")
        # ascendnpu-ir (BiSheng IR), in the versioned toolkit directory the set_env.sh points at.
        for _provision_set_env in \
            "${ASCEND_TOOLKIT_HOME:-/nonexistent}/share/info/ascendnpu-ir/bin/set_env.sh" \
            "$_provision_root/latest/share/info/ascendnpu-ir/bin/set_env.sh"
        do
            if [ -f "$_provision_set_env" ]; then
                _provision_source "$_provision_set_env"
                break
            fi
        done
        # NNAL's ATB (transformer acceleration library), beside the toolkit.
        _provision_atb="${PROVISION_ATB_SET_ENV:-$(dirname "$_provision_root")/nnal/atb/set_env.sh}"
        if [ -f "$_provision_atb" ]; then
            _provision_abi="${PROVISION_TORCH_CXX11_ABI:-}"
            if [ -z "$_provision_abi" ] && [ -r /etc/provision/torch-cxx11-abi ]; then
                read -r _provision_abi < /etc/provision/torch-cxx11-abi || true
            fi
            case "$_provision_abi" in
                0|1) _provision_source "$_provision_atb" "--cxx_abi=$_provision_abi" ;;
                *) _provision_source "$_provision_atb" ;;
            esac
            PROVISION_ATB_ENV=$_provision_atb
            export PROVISION_ATB_ENV
        fi
        unset _provision_root _provision_atb _provision_abi
    fi
    unset _provision_set_env _provision_file
    unset -f _provision_source
    if [ "$PROVISION_CANN_ENV" = absent ] && [ -z "${TORCH_DEVICE_BACKEND_AUTOLOAD+set}" ]; then
        # torch >= 2.5 loads torch_npu at `import torch`, which fails without CANN's libraries; CPU still works.
        TORCH_DEVICE_BACKEND_AUTOLOAD=0
        export TORCH_DEVICE_BACKEND_AUTOLOAD
    fi
    export PROVISION_CANN_ENV
fi
