"""Limits end runs with the right termination; the host and a concurrent session are unharmed."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator

import pytest

from codeact import ExecutionResult, Runtime, SandboxConfig

pytestmark = pytest.mark.docker

CONFIG = SandboxConfig(backend="docker", timeout_s=8, memory_mb=256, pids_limit=64, tmpfs_mb=16)


@pytest.fixture(scope="module")
def rt(docker_image: str) -> Iterator[Runtime]:
    with Runtime([], CONFIG) as runtime:
        yield runtime


def _with_neighbour(rt: Runtime, code: str, timeout_s: float | None = None) -> ExecutionResult:
    """Run ``code`` while a neighbour session keeps working; the neighbour must be unharmed."""
    with rt.session() as neighbour:
        neighbour.run("state = 'alive'")
        box: dict[str, ExecutionResult] = {}
        worker = threading.Thread(target=lambda: box.setdefault("r", rt.run(textwrap.dedent(code))))
        worker.start()
        checks = []
        while worker.is_alive():
            checks.append(neighbour.run("state").value)
            time.sleep(0.2)
        worker.join()
        assert checks and set(checks) == {"alive"}
        assert neighbour.run("state").value == "alive"
    return box["r"]


def test_fork_bomb_is_contained(rt: Runtime) -> None:
    result = _with_neighbour(rt, """
        import os
        children = 0
        try:
            while True:
                if os.fork() == 0:
                    import time
                    time.sleep(30)
                    os._exit(0)
                children += 1
        except OSError as e:
            print("fork refused after", children, type(e).__name__)
            raise
    """)
    assert result.termination == "error", result
    assert result.error is not None and result.error.type in ("BlockingIOError", "OSError")
    assert "fork refused after" in result.stdout
    assert subprocess.run([sys.executable, "-c", "pass"]).returncode == 0  # the host can still fork


def test_huge_allocation_is_memory(rt: Runtime) -> None:
    result = _with_neighbour(rt, "x = bytearray(10 * 1024**3)\nx[::4096] = b'1' * len(x[::4096])")
    assert result.termination == "memory" and not result.ok


def test_oom_by_touching_pages_is_memory(rt: Runtime) -> None:
    result = _with_neighbour(rt, "chunks = []\nwhile True:\n    chunks.append(b'x' * (16 * 1024**2))")
    assert result.termination == "memory"
    assert result.state_lost or result.error is not None


def test_filling_tmp_fails_cleanly(rt: Runtime) -> None:
    result = _with_neighbour(rt, "with open('/tmp/big', 'wb') as f:\n    for _ in range(1024):\n        f.write(b'x' * 1024**2)")
    assert result.termination == "error"
    assert result.error is not None and result.error.type == "OSError"
    assert "No space left" in result.error.message


def test_os_exit_is_killed(rt: Runtime) -> None:
    result = _with_neighbour(rt, "import os\nos._exit(3)")
    assert result.termination == "killed" and result.state_lost


def test_long_sleep_is_timeout(rt: Runtime) -> None:
    started = time.monotonic()
    with rt.session() as session:
        result = session.run("import time\ntime.sleep(10**6)", timeout_s=1.5)
        assert result.termination == "timeout"
        assert time.monotonic() - started < 60  # generous (a loaded machine): the sleep would take days
        assert session.run("1 + 1").value == 2


def test_output_flood_is_output_limit(docker_image: str) -> None:
    config = SandboxConfig(backend="docker", timeout_s=20, output_limit=5_000_000)
    with Runtime([], config) as rt:
        result = rt.run("while True:\n    print('y' * 10000)")
    assert result.termination == "output_limit" and result.stdout_truncated
    assert len(result.stdout) <= config.output_cap
