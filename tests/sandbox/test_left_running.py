"""What a cell left running (the ``threads`` and ``children`` replay compares) stays exact when the
kernel skips its walk of ``/proc`` (``kernel/running.py``): a cell that starts nothing
after cells whose processes still run, or that started an orphan, or that took the kernel's
descriptor of ``ns_last_pid`` away, still counts what runs."""

from __future__ import annotations

import time

import pytest

from codeact import Runtime, SandboxConfig, Session

#: A process the sandbox's init adopts: its parent exits at once.
#: An orphan that sleeps until killed (its pid in ``orphan.pid``): it ends when the test says so.
ORPHAN = "import subprocess\nsubprocess.run(['sh', '-c', 'sleep 600 & echo $! > orphan.pid; exit 0'], check=True)"


def _children(session: Session, code: str) -> int | None:
    assert session.run(code).ok
    return session.cells[-1].children


def _end_orphan(session: Session) -> None:
    """Kill the orphan, then run cells until one counts no child (the sandbox's init reaps it)."""
    assert session.run("import os, signal\nos.kill(int(open('orphan.pid').read()), signal.SIGKILL)").ok
    deadline = time.monotonic() + 60
    while _children(session, "pass") != 0 and time.monotonic() < deadline:
        time.sleep(0.05)


@pytest.mark.parametrize("backend", ["docker", "local"])
def test_a_child_counts_in_every_cell_until_it_ends(backend: str, request: pytest.FixtureRequest) -> None:
    if backend == "docker":
        request.getfixturevalue("docker_image")
    with Runtime([], SandboxConfig(backend=backend, policy="none")) as runtime, runtime.session() as s:
        assert _children(s, "x = 1") == 0
        assert _children(s, "import subprocess\np = subprocess.Popen(['sleep', '600'])") == 1
        assert _children(s, "x = 2") == 1  # nothing new started: still the one running
        assert _children(s, "p.kill()\np.wait()") == 0
        assert _children(s, "x = 3") == 0


def test_an_orphan_under_the_sandboxs_init_counts_until_it_ends(docker_image: str) -> None:
    with Runtime([], SandboxConfig(backend="docker", policy="none")) as runtime, runtime.session() as s:
        assert _children(s, "x = 1") == 0 and _children(s, "x = 2") == 0
        assert _children(s, ORPHAN) == 1  # its parent was reaped: the kernel has no child
        assert _children(s, "x = 3") == 1
        _end_orphan(s)
        assert _children(s, "x = 4") == 0


def test_a_cell_that_closes_the_kernels_descriptors_is_still_counted(docker_image: str) -> None:
    # The code closes every descriptor of ns_last_pid and opens a file of its own in its place
    # (same number, the old value in it): the kernel must not read that file as the pid mark.
    take = ("import os\nfor fd in os.listdir('/proc/self/fd'):\n"
            "    try:\n        target = os.readlink(f'/proc/self/fd/{fd}')\n    except OSError:\n        continue\n"
            "    if target.endswith('ns_last_pid'):\n"
            "        old = os.pread(int(fd), 32, 0)\n        os.close(int(fd))\n"
            "        with open('mark', 'wb') as f:\n            f.write(old)\n"
            "        assert os.open('mark', os.O_RDONLY) == int(fd)\n        closed = fd\n")
    with Runtime([], SandboxConfig(backend="docker", policy="none")) as runtime, runtime.session() as s:
        assert _children(s, "x = 1") == 0 and _children(s, "x = 2") == 0
        assert _children(s, take + "\n" + ORPHAN) == 1
        assert s.run("closed").ok  # the kernel's descriptor was found and taken
        assert _children(s, "x = 3") == 1
        _end_orphan(s)
        assert _children(s, "x = 4") == 0 and _children(s, "x = 5") == 0
