"""The README's "On a cluster" example runs as written (in a process of its own: its own Ray)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray")
ROOT = Path(__file__).resolve().parents[2]


def test_the_cluster_example_runs_as_written(docker_ready: str) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"## On a cluster \(Ray\)\n.*?```python\n(.*?)```", readme, re.S)
    assert match, "the README's cluster example"
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", match.group(1)], capture_output=True, text=True, env=env,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    node, ok, value = done.stdout.strip().splitlines()[-1].split()
    assert len(node) == 56 and (ok, value) == ("True", "42")
