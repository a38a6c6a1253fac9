#!/usr/bin/env bash
# Fill a wheelhouse with the CPU torch wheel that pip on this machine finds locally (no PyTorch index is
# reachable here); the image tests build with `provision build --wheelhouse DIR`. Quick when already filled.
#   scripts/wheelhouse.sh DIR VERSION
set -euo pipefail
DIR=${1:?usage: wheelhouse.sh DIR TORCH_VERSION}
VERSION=${2:?usage: wheelhouse.sh DIR TORCH_VERSION}
PYTHON=${PYTHON:-python3}
mkdir -p "$DIR"
if compgen -G "$DIR/torch-${VERSION}+cpu-*.whl" >/dev/null; then
    echo "wheelhouse: $(cd "$DIR" && ls torch-"${VERSION}"+cpu-*.whl) (cached)"
    exit 0
fi
"$PYTHON" -m pip download --quiet --no-deps --dest "$DIR" "torch==${VERSION}+cpu"
echo "wheelhouse: $(cd "$DIR" && ls torch-"${VERSION}"+cpu-*.whl)"
