#!/usr/bin/env bash
# Make sure a headless Chromium is on this machine for the trace viewer's browser test: Debian's
# `chromium` package, installed with apt when missing and we are root. Never downloads a browser
# build of its own. With CI=true a Chromium that cannot be had is a failure; elsewhere a warning
# (the browser test then skips with the reason).
set -euo pipefail

have() { command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; }

if have; then
  exit 0
fi

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "ensure-chromium: installing chromium from Debian's packages ..." >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null || true
  apt-get install -y -qq --no-install-recommends chromium >/dev/null || true
fi

if have; then
  exit 0
fi
echo "ensure-chromium: no chromium (install Debian's 'chromium' package); the browser test will not run" >&2
if [ "${CI:-}" = true ]; then
  exit 1
fi
exit 0
