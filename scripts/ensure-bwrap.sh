#!/usr/bin/env bash
# Make sure bubblewrap (`bwrap`) is installed and can create its namespaces here; install Debian's
# package if it is missing and we are root. Idempotent. Exit 0 when bwrap works; otherwise say why
# on stderr and exit 3 (with CI=true) or 0 (elsewhere: the local backend falls back to isolation="none").
set -euo pipefail

works() { bwrap --unshare-all --die-with-parent --ro-bind / / --proc /proc --dev /dev true >/dev/null 2>&1; }

fail() {
  echo "ensure-bwrap: $1" >&2
  if [ "${CI:-}" = "true" ]; then exit 3; fi
  exit 0
}

if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    fail "bwrap is not installed and we cannot install it (install Debian's 'bubblewrap' package)"
  fi
  echo "ensure-bwrap: installing bubblewrap from Debian's packages ..." >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends bubblewrap >/dev/null 2>&1 \
    || { apt-get update -qq >/dev/null 2>&1 || true; apt-get install -y -qq --no-install-recommends bubblewrap >/dev/null; } \
    || fail "apt-get install bubblewrap failed"
fi

works || fail "bwrap is installed but cannot create namespaces here (unprivileged user namespaces disabled?)"
exit 0
