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
import requests
from docker.errors import APIError, NotFound

from codeact import Runtime, SandboxConfig
from codeact.sandbox import docker as docker_backend
from codeact.sandbox._owner import LABEL, dir_owner, owner_id, sessions_root

pytestmark = pytest.mark.docker


def _containers(owner: str) -> list[str]:
    out = subprocess.run(["docker", "ps", "-aq", "--filter", f"label={LABEL}={owner}"],
                         capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_200_sequential_sessions_leave_nothing(docker_image: str) -> None:
    before = set(_containers(owner_id()))  # another test's in this worker are not this test's to judge
    with Runtime([], SandboxConfig(backend="docker", pool_size=2)) as rt:
        for i in range(200):
            with rt.session() as s:
                assert s.run(f"{i} * 2").value == i * 2
    assert set(_containers(owner_id())) - before == set()


def test_20_concurrent_sessions_are_isolated_and_leave_nothing(docker_image: str) -> None:
    before = set(_containers(owner_id()))
    with Runtime([], SandboxConfig(backend="docker")) as rt:
        def work(i: int) -> list[object]:
            with rt.session() as s:
                s.run(f"mine = {i}")
                return [s.run("mine").value, s.run("'other' in globals()").value]

        with ThreadPoolExecutor(20) as pool:
            results = list(pool.map(work, range(20)))
    assert results == [[i, False] for i in range(20)]
    assert set(_containers(owner_id())) - before == set()


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


class _Engine:
    """The two engine answers a removal meets, in order (``None``: removed)."""

    def __init__(self, *answers: BaseException | None) -> None:
        self.answers, self.calls = list(answers), 0

    def remove_container(self, container_id: str, force: bool) -> None:
        assert force
        self.calls += 1
        answer = self.answers.pop(0)
        if answer is not None:
            raise answer


def _conflict() -> APIError:
    return APIError("409 Conflict", response=_response(409))


def _response(status: int) -> requests.Response:
    response = requests.Response()
    response.status_code = status
    return response


@pytest.mark.parametrize("first", [_conflict(), requests.ReadTimeout("engine slow")], ids=["conflict", "timeout"])
def test_a_removal_that_meets_a_conflict_or_a_lost_reply_is_tried_again(
        monkeypatch: pytest.MonkeyPatch, first: BaseException) -> None:
    monkeypatch.setattr(docker_backend, "_REMOVE_BACKOFF_S", 0.0)
    engine = _Engine(first, NotFound("gone"))
    docker_backend._remove_container(engine, "c1")
    assert engine.calls == 2  # not given up after the first answer: the container would live on


def test_a_removal_gives_up_after_its_attempts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(docker_backend, "_REMOVE_BACKOFF_S", 0.0)
    engine = _Engine(_conflict(), _conflict(), _conflict())
    with pytest.raises(APIError):
        docker_backend._remove_container(engine, "c1", attempts=3)
    assert engine.calls == 3
    server_error = _Engine(APIError("500", response=_response(500)), None)
    with pytest.raises(APIError):  # not a conflict: no retry
        docker_backend._remove_container(server_error, "c1")
    assert server_error.calls == 1


def test_two_removals_of_one_container_at_once_leave_it_gone(docker_image: str) -> None:
    before = set(_containers(owner_id()))
    with Runtime([], SandboxConfig(backend="docker")) as rt, rt.session() as s:
        s.run("1")
        container_id = s.sandbox_state.driver.sandbox.container_id
        from codeact.image.engine import docker_client
        api = docker_client(timeout=60).api
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda _: docker_backend._remove_container(api, container_id), range(2)))
        assert not [c for c in _containers(owner_id()) if container_id.startswith(c)]
    assert set(_containers(owner_id())) - before == set()


def _run_script(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                          timeout=180, cwd=Path(__file__).resolve().parents[2])


def test_a_process_that_exits_with_sessions_open_removes_their_containers(docker_image: str) -> None:
    """No close, no ``with``: interpreter exit removes the containers (a session's and the pool's)
    and their session directories, not the next start's sweep."""
    done = _run_script("""
        from codeact import Runtime, SandboxConfig
        from codeact.sandbox._owner import owner_id
        rt = Runtime([], SandboxConfig(backend="docker", timeout_s=60, pool_size=1))
        s = rt.session()
        assert s.run("x = 1").ok
        rt.pool.wait_ready(60)
        print(owner_id())
        print(s.sandbox_state.driver.sandbox.session_dir)
    """)
    assert done.returncode == 0, done.stderr[-2000:]
    owner, session_dir = done.stdout.split()
    assert _containers(owner) == []
    assert not Path(session_dir).exists()


def test_a_forked_child_that_exits_leaves_its_parents_sandbox_alone(docker_image: str) -> None:
    done = _run_script("""
        import os, sys
        from codeact import Runtime, SandboxConfig
        rt = Runtime([], SandboxConfig(backend="docker", timeout_s=60))
        s = rt.session()
        assert s.run("x = 41").ok
        pid = os.fork()
        if pid == 0:
            sys.exit(0)  # a normal exit: the exit handlers the child inherited run
        os.waitpid(pid, 0)
        print(s.run("x + 1").value)
        s.close(); rt.close()
    """)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["42"]
