"""Ctrl-C in the host during a blocking ``Session.run`` (issue 28, item 1): a real SIGINT delivered to
this process mid-run interrupts the code in the sandbox, the run is recorded ``interrupted``, the
KeyboardInterrupt reaches the caller, and the session goes on at once with its namespace. And a
timeout says it was a timeout, not a KeyboardInterrupt (item 9)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from codeact import Runtime, SandboxConfig, tool

SLEEPS = "kept = 41\nstarted('x')\nimport time\nfor _ in range(3000):\n    time.sleep(0.1)\n"
WAITS_ON_A_TOOL = "kept = 41\nstarted('x')\nhold(60)\n"


def _runtime(backend: str, started: threading.Event, release: threading.Event) -> Runtime:
    @tool(name="started")
    def started_(label: str) -> str:
        """Say the code is running."""
        started.set()
        return label

    @tool(name="hold")
    def hold(seconds: float) -> bool:
        """Block on the host (a tool run on a leader thread while the caller watches the run)."""
        return release.wait(seconds)

    return Runtime([started_, hold], SandboxConfig(backend=backend))  # type: ignore[arg-type]


def _sigint_when(started: threading.Event) -> threading.Thread:
    """Deliver SIGINT to this process (the main thread, where Python raises KeyboardInterrupt) once
    the code is running, as a terminal's Ctrl-C does."""
    def fire() -> None:
        if started.wait(120):
            time.sleep(0.2)  # the caller is back waiting for the kernel's frames
            os.kill(os.getpid(), signal.SIGINT)

    thread = threading.Thread(target=fire, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("code", [SLEEPS, WAITS_ON_A_TOOL], ids=["code-sleeps", "code-waits-on-a-host-tool"])
def test_ctrl_c_interrupts_the_run_and_keeps_the_session(backend: str, code: str) -> None:
    assert threading.current_thread() is threading.main_thread()
    started, release = threading.Event(), threading.Event()
    with _runtime(backend, started, release) as rt, rt.session() as session:
        firing = _sigint_when(started)
        try:
            with pytest.raises(KeyboardInterrupt):
                session.run(code, timeout_s=300)
        finally:
            release.set()
            firing.join(10)
        last = session.history[-1]
        assert (last.termination, last.ok, last.state_lost) == ("interrupted", False, False), last
        assert [(c.name, c.result) for c in last.calls][:1] == [("started", "x")]
        # The next run is not held by the old one (it would wait out its whole timeout and end killed).
        after = session.run("kept + 1", timeout_s=20)
        assert (after.termination, after.value, after.state_lost) == ("completed", 42, False), after
        assert session.cells[-2].code == code  # the interrupted run is recorded among the cells


def test_a_timeout_says_it_was_a_timeout(runtime: Runtime) -> None:
    with runtime.session() as session:
        result = session.run("import time\ntime.sleep(60)", timeout_s=1)
        assert result.termination == "timeout" and result.error is not None, result
        assert result.error.type == "TimeoutError", result.error
        assert "timeout_s" in result.error.message and "1 s" in result.error.message
        assert "KeyboardInterrupt" not in result.error.traceback
        assert result.error.traceback.rstrip().endswith(f"TimeoutError: {result.error.message}")
        assert session.run("2 + 2").value == 4


SCRIPT = """
import sys, threading
from codeact import Runtime, SandboxConfig, tool

@tool(name="started")
def started(label: str) -> str:
    '''Say the code is running.'''
    print("RUNNING", flush=True)
    return label

with Runtime([started], SandboxConfig(backend=sys.argv[1])) as rt, rt.session() as session:
    try:
        session.run("kept = 41\\nstarted('x')\\nimport time\\nfor _ in range(3000):\\n    time.sleep(0.1)\\n", timeout_s=300)
        print("NOT INTERRUPTED", flush=True)
    except KeyboardInterrupt:
        print("CAUGHT", session.history[-1].termination, flush=True)
    after = session.run("kept + 1", timeout_s=20)
    print("AFTER", after.termination, after.value, after.state_lost, flush=True)
"""


def test_ctrl_c_at_a_terminal_reaches_the_whole_process_group(backend: str, tmp_path: Path) -> None:
    """A terminal's Ctrl-C signals the foreground process group: the host and whatever it started
    (the local backend's kernel, the docker client's nothing) get SIGINT at once."""
    script = tmp_path / "host.py"
    script.write_text(SCRIPT)
    proc = subprocess.Popen([sys.executable, str(script), backend], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, cwd=tmp_path)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "RUNNING", line + proc.stderr.read() if proc.stderr else line
        time.sleep(0.3)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "CAUGHT interrupted" in out, out + err
    assert "AFTER completed 42 False" in out, out + err


IGNORES = ("kept = 41\nstarted('x')\nimport time\nwhile True:\n    try:\n        time.sleep(0.1)\n"
           "    except KeyboardInterrupt:\n        pass\n")


@pytest.mark.parametrize("second", [True, False], ids=["second-ctrl-c", "grace-passes"])
def test_code_that_ignores_the_interrupt_is_killed(second: bool) -> None:
    """Code that swallows the KeyboardInterrupt is killed after the grace, or at once at a second
    Ctrl-C; the caller still gets the first KeyboardInterrupt and the next run starts afresh."""
    started = threading.Event()
    rt = _runtime("local", started, threading.Event())
    config = SandboxConfig(backend="local", grace_s=60 if second else 0.5)
    with rt, rt.session(config=config) as session:
        def fire() -> None:
            if started.wait(120):
                time.sleep(0.2)
                os.kill(os.getpid(), signal.SIGINT)
                if second:
                    time.sleep(0.5)
                    os.kill(os.getpid(), signal.SIGINT)

        thread = threading.Thread(target=fire, daemon=True)
        thread.start()
        with pytest.raises(KeyboardInterrupt):
            session.run(IGNORES, timeout_s=300)
        thread.join(10)
        last = session.history[-1]
        assert (last.termination, last.state_lost) == ("interrupted", True), last
        assert "killed" in (last.reason or ""), last.reason
        after = session.run("2 + 2", timeout_s=20)
        assert (after.termination, after.value) == ("completed", 4), after
