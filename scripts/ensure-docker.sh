#!/usr/bin/env bash
# Make sure a Docker engine answers on this machine; install and start one from Debian's
# packages if none does. Idempotent; never waits forever.
set -euo pipefail

answers() { timeout 5 docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

if command -v docker >/dev/null 2>&1 && answers; then
  exit 0
fi

if [ "$(id -u)" != 0 ]; then
  echo "ensure-docker: no Docker engine answers and we are not root; start one (dockerd) by hand" >&2
  exit 3
fi

if ! command -v dockerd >/dev/null 2>&1; then
  echo "ensure-docker: installing docker.io from Debian's packages ..." >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null || true
  apt-get install -y -qq --no-install-recommends docker.io iptables ca-certificates >/dev/null
fi

if ! pgrep -x dockerd >/dev/null 2>&1; then
  echo "ensure-docker: starting dockerd ..." >&2
  mkdir -p /var/log
  nohup dockerd >/var/log/dockerd.log 2>&1 &
fi

for _ in $(seq 1 60); do
  if answers; then exit 0; fi
  sleep 1
done
echo "ensure-docker: dockerd did not answer within 60 s (see /var/log/dockerd.log)" >&2
exit 3
