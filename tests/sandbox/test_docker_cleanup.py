"""Nothing leaks: many sessions, concurrent sessions, and an owner killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from codeact import Runtime, SandboxConfig
from codeact.sandbox._owner import LABEL, dir_owner, owner_id, sessions_root

pytestmark = pytest.mark.docker


def _containers(owner: str) -> list[str]:
    out = subprocess.run(["docker", "ps", "-aq", "--filter", f"label={LABEL}={owner}"],
                         capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_200_sequential_sessions_leave_nothing(docker_image: str) -> None:
    with Runtime([], SandboxConfig(backend="docker", pool_size=2)) as rt:
        for i in range(200):
            with rt.session() as s:
                assert s.run(f"{i} * 2").value == i * 2
    assert _containers(owner_id()) == []


def test_20_concurrent_sessions_are_isolated_and_leave_nothing(docker_image: str) -> None:
    with Runtime([], SandboxConfig(backend="docker")) as rt:
        def work(i: int) -> list[object]:
            with rt.session() as s:
                s.run(f"mine = {i}")
                return [s.run("mine").value, s.run("'other' in globals()").value]

        with ThreadPoolExecutor(20) as pool:
            results = list(pool.map(work, range(20)))
    assert results == [[i, False] for i in range(20)]
    assert _containers(owner_id()) == []


def test_owner_killed_with_sigkill_is_cleaned_at_next_start(docker_image: str) -> None:
    script = textwrap.dedent("""
        import sys
        from codeact import Runtime, SandboxConfig
        from codeact.sandbox._owner import owner_id
        rt = Runtime([], SandboxConfig(backend="docker", timeout_s=600))
        s = rt.session()
        s.start()
        print(owner_id(), flush=True)
        s.run("import time\\ntime.sleep(600)")
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    owner = proc.stdout.readline().strip()
    assert owner and _containers(owner), "the child's container should be running"
    dirs = [p for p in sessions_root().iterdir() if dir_owner(p) == owner]
    assert dirs and all(f" {d}/workspace " in Path("/proc/self/mountinfo").read_text() for d in dirs)
    time.sleep(0.5)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert _containers(owner)  # it leaked, for now

    # "The next start": a new process's first Docker use runs the cleanup.
    subprocess.run([sys.executable, "-c", "from codeact import Runtime, SandboxConfig\n"
                    "with Runtime([], SandboxConfig(backend='docker')) as rt: rt.run('1')"], check=True)
    assert _containers(owner) == []
    assert not [p for p in sessions_root().iterdir() if dir_owner(p) == owner]
    mounts = Path("/proc/self/mountinfo").read_text()
    assert not [d for d in dirs if f" {d}/workspace " in mounts]  # its workspace was unmounted first
