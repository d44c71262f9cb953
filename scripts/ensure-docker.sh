#!/usr/bin/env bash
# Make sure a Docker engine answers on this machine; install and start one from Debian's
# packages if none does. Idempotent; never waits forever.
set -euo pipefail

answers() { timeout 5 docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

# gVisor: Debian's runsc, registered with dockerd as the runtime "runsc". --network=none: containers
# with no network fail to start without it; --host-uds=open: the kernel connects to the channel socket
# in a bind-mounted directory; --oci-seccomp: our seccomp profile applies inside gVisor too.
ensure_runsc() {
  [ "$(id -u)" = 0 ] || return 1
  if ! command -v runsc >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends runsc >/dev/null 2>&1 \
      || { apt-get update -qq >/dev/null 2>&1 || true
           DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends runsc >/dev/null 2>&1; } \
      || return 1
  fi
  if timeout 5 docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc"'; then
    return 0
  fi
  mkdir -p /etc/docker
  python3 - "$(command -v runsc)" <<'PY'
import json, os, sys
path = "/etc/docker/daemon.json"
conf = json.load(open(path)) if os.path.exists(path) and os.path.getsize(path) else {}
conf.setdefault("runtimes", {})["runsc"] = {
    "path": sys.argv[1], "runtimeArgs": ["--network=none", "--host-uds=open", "--oci-seccomp"]}
tmp = path + ".tmp"
with open(tmp, "w") as fh:
    json.dump(conf, fh, indent=2)
os.replace(tmp, path)
PY
  kill -HUP "$(cat /var/run/docker.pid 2>/dev/null)" 2>/dev/null || return 1  # reloads runtimes
  for _ in $(seq 1 20); do
    if timeout 5 docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc"'; then return 0; fi
    sleep 0.5
  done
  return 1
}

if command -v docker >/dev/null 2>&1 && answers; then
  ensure_runsc || echo "ensure-docker: gVisor (runsc) not available; SandboxConfig(runtime='runsc') will not work" >&2
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

ok=""
for _ in $(seq 1 60); do
  if answers; then ok=1; break; fi
  sleep 1
done
if [ -z "$ok" ]; then
  echo "ensure-docker: dockerd did not answer within 60 s (see /var/log/dockerd.log)" >&2
  exit 3
fi
ensure_runsc || echo "ensure-docker: gVisor (runsc) not available; SandboxConfig(runtime='runsc') will not work" >&2
exit 0
