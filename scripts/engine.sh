#!/usr/bin/env bash
# Make sure a Docker engine answers on the default socket.
#
# Idempotent and quick when the engine already runs: installs docker.io only
# when there is no dockerd, starts dockerd in the background (there is no init
# system on the CI machines) and waits until it answers. Several worktrees may
# call this at once, so the check-install-start sequence runs under a lock.
set -euo pipefail

LOG=${PROVISION_DOCKERD_LOG:-/var/log/provision-dockerd.log}
WAIT=${PROVISION_DOCKERD_WAIT:-60}

answers() { docker info >/dev/null 2>&1; }

exec 9>/var/lock/provision-engine.lock
flock 9

if answers; then
    echo "engine: running ($(docker version --format '{{.Server.Version}}' 2>/dev/null))"
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "engine: no Docker engine answers and starting one needs root" >&2
    exit 2
fi
if ! command -v dockerd >/dev/null 2>&1; then
    echo "engine: installing docker.io"
    export DEBIAN_FRONTEND=noninteractive
    APT_LOG=$(mktemp /tmp/provision-apt.XXXXXX)
    if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends docker.io; } >"$APT_LOG" 2>&1; then
        echo "engine: installing docker.io failed; last lines:" >&2
        tail -n 20 "$APT_LOG" >&2
        exit 1
    fi
    rm -f "$APT_LOG"
fi
if ! command -v docker >/dev/null 2>&1; then
    echo "engine: no docker client on PATH" >&2
    exit 2
fi
echo "engine: starting dockerd (log: $LOG)"
mkdir -p "$(dirname "$LOG")"
# 9>&-: dockerd must not inherit the lock, or it would hold it for as long as it runs.
setsid nohup dockerd >"$LOG" 2>&1 </dev/null 9>&- &
for _ in $(seq "$WAIT"); do
    if answers; then
        echo "engine: ready ($(docker version --format '{{.Server.Version}}'))"
        exit 0
    fi
    sleep 1
done
echo "engine: dockerd did not answer within ${WAIT}s; last log lines:" >&2
tail -n 20 "$LOG" >&2 || true
exit 1
