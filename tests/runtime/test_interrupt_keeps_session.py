"""Ctrl-C in the host during a blocking ``Session.run`` (issue 28, item 1): a real SIGINT delivered to
this process mid-run interrupts the code in the sandbox, the run is recorded ``interrupted``, the
KeyboardInterrupt reaches the caller, and the session goes on at once with its namespace. And a
timeout says it was a timeout, not a KeyboardInterrupt (item 9)."""

from __future__ import annotations

import os
import signal
import threading
import time

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
