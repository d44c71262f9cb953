#!/usr/bin/env python3
"""Regenerate codeact/sandbox/seccomp.json from the engine's default seccomp profile.

Usage: scripts/gen-seccomp.py [DEFAULT_JSON]. The default comes from Debian's
golang-github-docker-docker-dev (the source release of docker.io; apt-get install it first).
Kept: every rule of the default, except the syscalls in codeact.sandbox._seccomp.REMOVED and the
rules that only apply with a capability (the sandbox drops them all).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from codeact.sandbox._seccomp import REMOVED  # noqa: E402

DEFAULT = "/usr/share/gocode/src/github.com/docker/docker/profiles/seccomp/default.json"


def main() -> int:
    source = Path(sys.argv[1] if len(sys.argv) > 1 else DEFAULT)
    profile = json.loads(source.read_text())
    kept = []
    for rule in profile["syscalls"]:
        if (rule.get("includes") or {}).get("caps"):
            continue  # needs a capability: never applies with cap_drop=ALL
        names = [n for n in rule["names"] if n not in REMOVED]
        if names:
            kept.append({**rule, "names": names})
    profile["syscalls"] = kept
    out = ROOT / "codeact" / "sandbox" / "seccomp.json"
    out.write_text(json.dumps(profile, indent=1) + "\n")
    print(f"wrote {out.relative_to(ROOT)}: {len(kept)} rules, removed {', '.join(sorted(REMOVED))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
