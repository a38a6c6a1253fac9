#!/usr/bin/env bash
# Build a local stand-in for a CANN base image from Debian packages.
#
# No registry is reachable on the CI machines, so the integration tests build on
# a Debian bookworm root made with debootstrap (python3, pip, venv) and turned
# into an image with `docker import`. It has no CANN; the images built on it
# prove the Dockerfile, the layers and the labels, not NPU support.
# Cached: does nothing when the tag exists.
set -euo pipefail

TAG=${1:-${PROVISION_TEST_BASE:-provision-local/debian-python:bookworm}}
SUITE=${PROVISION_BASE_SUITE:-bookworm}
MIRROR=${PROVISION_BASE_MIRROR:-http://deb.debian.org/debian}

if docker image inspect "$TAG" >/dev/null 2>&1; then
    echo "base image: $TAG (cached)"
    exit 0
fi
if ! command -v debootstrap >/dev/null 2>&1; then
    echo "base image: installing debootstrap"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
fi

ROOT=$(mktemp -d /var/tmp/provision-base.XXXXXX)
trap 'rm -rf "$ROOT"' EXIT
echo "base image: debootstrap $SUITE into $ROOT"
debootstrap --variant=minbase --include=python3,python3-pip,python3-venv,ca-certificates \
    "$SUITE" "$ROOT" "$MIRROR" >"$ROOT.log" 2>&1 || { tail -n 30 "$ROOT.log" >&2; rm -f "$ROOT.log"; exit 1; }
rm -f "$ROOT.log"
# What an image does not need: package caches, logs, documentation.
rm -rf "$ROOT"/var/cache/apt/archives/*.deb "$ROOT"/var/lib/apt/lists/* "$ROOT"/var/log/* \
    "$ROOT"/usr/share/doc/* "$ROOT"/usr/share/man/* "$ROOT"/usr/share/info/*
echo "base image: importing as $TAG"
tar --numeric-owner -C "$ROOT" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["/bin/bash"]' \
    --message "debootstrap $SUITE minbase + python3, python3-pip, python3-venv" \
    - "$TAG" >/dev/null
docker image inspect "$TAG" --format 'base image: {{.RepoTags}} {{.Size}} bytes'
