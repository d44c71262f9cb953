#!/usr/bin/env bash
# Build (or reuse) the codeact sandbox image offline and print its tag.
#   scripts/build-image.sh [--base IMAGE] [--pip PKG]... [--force]
# Needs a Docker engine (scripts/ensure-docker.sh); the first build debootstraps a Debian base
# (root; ~35 s) from the mirror apt uses. No container registry is contacted.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-}"
if [ -z "$python" ]; then
  if [ -x "$here/.venv/bin/python" ]; then python="$here/.venv/bin/python"; else python=python3; fi
fi
"$here/scripts/ensure-docker.sh"
cd "$here"
exec "$python" -m codeact.image "$@"
