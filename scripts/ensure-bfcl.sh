#!/usr/bin/env bash
# BFCL v4 (the bfcl-eval package) for the bfcl-multi-turn suite, without its declared dependencies:
# they pull torch, sentence-transformers, faiss and a dozen vendor SDKs that the multi-turn tasks,
# tool classes and checker never import. This installs the pinned package with --no-deps, then only
# the packages those modules import. Idempotent: a second run installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-.venv/bin/python}"
BFCL_VERSION="2026.3.23"
# What bfcl_eval's multi-turn modules import beyond the standard library and codeact's own dependencies
# (math_api: mpmath, pinned as bfcl-eval pins it; web_search and memory are not multi-turn: not loaded).
DEPS=("mpmath==1.3.0")

have() {
    "$PY" - "$BFCL_VERSION" <<'PYEOF'
import sys
from importlib.metadata import PackageNotFoundError, version
try:
    ok = version("bfcl-eval") == sys.argv[1] and version("mpmath") == "1.3.0"
    import mpmath  # noqa: F401
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker  # noqa: F401
except (PackageNotFoundError, ImportError):
    ok = False
sys.exit(0 if ok else 1)
PYEOF
}

if have; then
    echo "bfcl-eval ${BFCL_VERSION}: installed"
    exit 0
fi
"$PY" -m pip install -q --no-deps "bfcl-eval==${BFCL_VERSION}"
"$PY" -m pip install -q "${DEPS[@]}"
have || { echo "ensure-bfcl: bfcl-eval ${BFCL_VERSION} does not import after installing" >&2; exit 1; }
echo "bfcl-eval ${BFCL_VERSION}: installed now"
