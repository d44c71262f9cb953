#!/bin/sh
# Fetch GitHub's official OpenAPI description (npm package @octokit/openapi) into codeact's cache, where
# `make bench` (benchmarks/toolsets.py) and tests/tool_stubs/test_search_quality.py look for it. Needs npm and
# network; does nothing when the file is there. The version is pinned, so the tasks in
# tests/servers/github_tasks.py keep naming real operations. Target: $CODEACT_GITHUB_OPENAPI, else $CODEACT_CACHE/bench/, else
# ${XDG_CACHE_HOME:-~/.cache}/codeact/bench/api.github.com.json.
set -eu
cache="${CODEACT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/codeact}"
target="${CODEACT_GITHUB_OPENAPI:-$cache/bench/api.github.com.json}"
[ -s "$target" ] && { echo "$target"; exit 0; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent @octokit/openapi@${CODEACT_GITHUB_OPENAPI_VERSION:-23.0.2} >/dev/null && tar -xzf octokit-openapi-*.tgz)
mkdir -p "$(dirname "$target")"
cp "$work/package/generated/api.github.com.json" "$target"
echo "$target"
