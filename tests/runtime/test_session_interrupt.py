"""``Session.interrupt()`` / ``Runtime.interrupt()``: the run ends ``interrupted`` with its records, and
the flag does not leak into the next run (the CLI's Ctrl-C is built on this)."""

from __future__ import annotations

import threading
import time

import pytest

from codeact import Runtime, SandboxConfig, tool

CODE = "started('x')\nimport time\nfor _ in range(1200):\n    time.sleep(0.1)\n"


def _runtime(backend: str, started: threading.Event) -> Runtime:
    @tool(name="started")
    def started_(label: str) -> str:
        """Say the code is running."""
        started.set()
        return label

    return Runtime([started_], SandboxConfig(backend=backend))  # type: ignore[arg-type]


def test_interrupt_ends_the_run_with_its_records(backend: str) -> None:
    started = threading.Event()
    with _runtime(backend, started) as rt, rt.session() as session:
        session.interrupt()  # no run in progress: nothing happens, nothing is remembered
        assert session.run("1 + 1").termination == "completed"

        def stop() -> None:
            assert started.wait(120)
            rt.interrupt()  # as the call's result is written, or the kernel waits for it

        threading.Thread(target=stop, daemon=True).start()
        result = session.run(CODE, timeout_s=300)
        assert (result.termination, result.ok) == ("interrupted", False)
        assert result.reason and "interrupted" in result.reason
        assert [(c.name, c.result) for c in result.calls] == [("started", "x")]
        after = session.run("2 + 2")  # the next run is not marked interrupted; the namespace survives
        assert (after.termination, after.value) == ("completed", 4)


@pytest.mark.parametrize("handler", ["kernel's", "SIG_DFL set by the code"])
def test_a_sigint_between_runs_is_ignored(runtime: Runtime, handler: str) -> None:
    """The kernel's SIGINT handler stays installed between runs and ignores a signal then, even
    when the code set ``SIG_DFL`` (the default would kill the kernel and lose the state)."""
    setup = "signal.signal(signal.SIGINT, signal.SIG_DFL)\n" if handler.startswith("SIG_DFL") else ""
    code = ("import os, signal, threading\n" + setup +
            "kept = 41\ndef _signal():\n    os.kill(os.getpid(), signal.SIGINT)\n    open('signalled', 'w').close()\n"
            "threading.Timer(0.3, _signal).start()\n")
    with runtime.session() as session:
        assert session.run(code).ok
        deadline = time.monotonic() + 60  # the signal lands while no run is in progress
        while not (session.workspace / "signalled").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert (session.workspace / "signalled").exists()
        time.sleep(0.2)  # its handler runs (on the kernel's main thread) before the next run starts
        after = session.run("kept + 1")
        assert after.ok and after.value == 42 and not after.state_lost, after


def test_a_late_engine_signal_does_not_interrupt_the_next_run(docker_image: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine's SIGINT travels through the engine and may land after the run it was meant for
    ended: once the ``interrupt`` frame went, none is sent, so it cannot cut the next run short."""
    from codeact.sandbox.docker import DockerSandbox

    deliver = DockerSandbox.interrupt
    late: list[threading.Timer] = []

    def slow_engine(self: DockerSandbox) -> None:
        timer = threading.Timer(1.0, deliver, (self,))
        late.append(timer)
        timer.start()

    monkeypatch.setattr(DockerSandbox, "interrupt", slow_engine)
    started = threading.Event()
    with _runtime("docker", started) as rt, rt.session() as session:
        threading.Thread(target=lambda: (started.wait(120), time.sleep(0.3), rt.interrupt()),
                         daemon=True).start()
        assert session.run(CODE, timeout_s=300).termination == "interrupted"
        after = session.run("import time\ntime.sleep(3)\n'done'", timeout_s=60)
        for timer in late:
            timer.join()
        assert (after.termination, after.value) == ("completed", "done"), after


def test_an_interrupt_while_a_result_is_being_written_is_not_lost() -> None:
    """Fired the moment a tool returns, the interrupt often finds the write lock held by the
    result's frame: the holder sends it on release. (The local backend has no engine signal to
    fall back on, so there a lost frame was a lost interrupt: most of these runs completed.)"""
    started = threading.Event()
    code = "started('x')\nimport time\nfor _ in range(50):\n    time.sleep(0.1)\n"
    with _runtime("local", started) as rt, rt.session() as session:
        ends = []
        for _ in range(10):
            started.clear()
            stopper = threading.Thread(target=lambda: (started.wait(60), rt.interrupt()))
            stopper.start()
            ends.append(session.run(code, timeout_s=60).termination)
            stopper.join()
        assert ends == ["interrupted"] * 10
