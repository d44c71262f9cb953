"""The local backend inside bubblewrap: isolation checked from inside the sandbox.

Where bwrap works these run; elsewhere they are skipped with the reason, and with CI=true a
missing bwrap is a failure (``make test`` installs it first: scripts/ensure-bwrap.sh).
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from codeact import Runtime, SandboxConfig
from codeact.errors import SandboxUnavailable
from codeact.runtime.session import Session
from codeact.sandbox import _bwrap


def _bwrap_or_skip() -> None:
    ok, reason = _bwrap.bwrap_status()
    if not ok:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and bwrap does not work: {reason}")
        pytest.skip(reason)


@pytest.fixture(scope="module")
def probe() -> Iterator[Session]:
    """policy="none" inside bwrap, so the code may import os/socket and look around."""
    _bwrap_or_skip()
    config = SandboxConfig(backend="local", isolation="bwrap", policy="none", timeout_s=20)
    with Runtime([], config) as rt, rt.session() as session:
        yield session


def run_value(session: Session, code: str) -> object:
    result = session.run(code)
    assert result.ok, result.error
    return result.value


def test_default_isolation_is_bwrap_where_it_works() -> None:
    _bwrap_or_skip()
    assert _bwrap.resolve_isolation("auto") == "bwrap"
    assert _bwrap.doctor_report()["default"] == "bwrap"
    with Runtime([], SandboxConfig(backend="local")) as rt:
        result = rt.run("print('hi')")
        assert result.stdout == "hi\n"
    from codeact.sandbox.local import LocalSandbox

    assert LocalSandbox(SandboxConfig(backend="local"), Path("/nonexistent"), Path("/nonexistent")).isolation == "bwrap"


def test_only_the_loopback_interface(probe: Session) -> None:
    assert run_value(probe, "import socket\nsocket.if_nameindex()") == [[1, "lo"]]


def test_host_loopback_is_not_reachable(probe: Session) -> None:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    accepted: list[object] = []
    threading.Thread(target=lambda: accepted.append(server.accept()), daemon=True).start()
    code = (
        "import socket\n"
        f"try:\n    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n    r = 'connected'\n"
        "except OSError as e:\n    r = type(e).__name__\nr"
    )
    try:
        assert run_value(probe, code) == "ConnectionRefusedError"
        assert accepted == []
    finally:
        server.close()


def test_host_files_outside_the_scratch_dir_are_not_writable(probe: Session, tmp_path: Path) -> None:
    target = tmp_path / "host.txt"
    target.write_text("original")
    paths = [str(target), str(tmp_path / "new.txt"), "/usr/codeact-probe", "/codeact-probe",
             "/tmp/codeact-probe", "/opt/codeact/kernel/kernel.py", os.path.realpath(os.__file__)]
    code = (
        "out = {}\n"
        f"for p in {paths!r}:\n"
        "    try:\n        open(p, 'a').write('x')\n        out[p] = 'written'\n"
        "    except OSError as e:\n        out[p] = type(e).__name__\nout"
    )
    outcome = run_value(probe, code)
    assert isinstance(outcome, dict)
    assert "written" not in outcome.values(), outcome
    assert target.read_text() == "original" and not (tmp_path / "new.txt").exists()
    written = probe.run("open('scratch.txt', 'w').write('ok')")
    assert written.ok and "scratch.txt" in [f.path for f in written.files]


def test_host_processes_are_not_visible(probe: Session) -> None:
    pids = run_value(probe, "import os\nsorted(int(p) for p in os.listdir('/proc') if p.isdigit())")
    assert isinstance(pids, list) and os.getpid() not in pids
    assert len(pids) <= 4 and max(pids) < 100, pids  # bwrap's init, the kernel, nothing of the host's
    assert run_value(probe, "import os\nos.getppid()") == 1


def test_hostname_and_home_are_the_sandbox_s(probe: Session) -> None:
    assert run_value(probe, "import socket\nsocket.gethostname()") == "codeact-sandbox"
    listing = run_value(probe, "import os\nsorted(os.listdir('/'))")
    assert isinstance(listing, list) and "home" not in listing
    readme = Path(__file__).resolve().parents[2] / "README.md"  # the project, beside the venv
    assert run_value(probe, f"import os\nos.path.exists({str(readme)!r})") is False


def test_rlimits_hold_inside_bwrap() -> None:
    _bwrap_or_skip()
    config = SandboxConfig(backend="local", isolation="bwrap", policy="none", memory_mb=128, fsize_mb=1)
    with Runtime([], config) as rt:
        big = rt.run("x = bytearray(400 * 1024 * 1024)")
        assert big.error is not None and big.error.type == "MemoryError", big
        file = rt.run("open('big.bin', 'wb').write(b'x' * (2 * 1024 * 1024))")
        assert not file.ok


def test_restricted_policy_inside_bwrap() -> None:
    _bwrap_or_skip()
    with Runtime([], SandboxConfig(backend="local", isolation="bwrap")) as rt:
        result = rt.run('x = 1\nprint("a")\nimport os')
        assert result.stdout == "a\n" and result.error is not None and result.error.type == "PolicyViolation"


def test_a_killed_kernel_leaves_no_process_behind() -> None:
    _bwrap_or_skip()
    config = SandboxConfig(backend="local", isolation="bwrap", policy="none", timeout_s=20)
    with Runtime([], config) as rt, rt.session() as s:
        marker = str(run_value(s, "import os\nos.getcwd()"))
        result = s.run("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
        assert result.termination == "killed" and "SIGKILL" in (result.reason or "")
    leftovers = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            leftovers.append(pid)
    assert leftovers == []


def test_bwrap_missing_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    _bwrap.bwrap_status.cache_clear()
    try:
        assert _bwrap.resolve_isolation("auto") == "none"
        with Runtime([], SandboxConfig(backend="local", isolation="bwrap")) as rt, pytest.raises(
            SandboxUnavailable, match="bwrap is not installed"
        ):
            rt.run("1")
    finally:
        monkeypatch.undo()
        _bwrap.bwrap_status.cache_clear()


def test_bwrap_is_for_the_local_backend() -> None:
    with pytest.raises(ValueError, match="local backend"):
        SandboxConfig(backend="docker", isolation="bwrap")


@pytest.mark.parametrize("isolation", ["bwrap", "none"])
def test_inputs_are_readable_not_writable(isolation: str, tmp_path: Path) -> None:
    if isolation == "bwrap":
        _bwrap_or_skip()
    data = tmp_path / "data.csv"
    data.write_text("a,b\n1,2\n")
    config = SandboxConfig(backend="local", isolation=isolation)  # type: ignore[arg-type]
    with Runtime([], config) as rt, rt.session(inputs={"data.csv": data}) as s:
        assert s.run("open('inputs/data.csv').read()").value == "a,b\n1,2\n"
        result = s.run("open('inputs/data.csv', 'a').write('x')")
        assert result.error is not None and result.error.type == "PolicyViolation"
    assert data.read_text() == "a,b\n1,2\n"


def test_a_link_the_code_plants_in_inputs_binds_nothing(tmp_path: Path) -> None:
    # The inputs/ folder is the code's to write: a link it makes there must not become a bind of
    # the next sandbox on this workspace (a link to / would show the whole host).
    _bwrap_or_skip()
    secret = tmp_path / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("host secret")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    data = tmp_path / "data.csv"
    data.write_text("a,b\n")
    read = f"open({str(secret)!r}).read()"
    config = SandboxConfig(backend="local", isolation="bwrap", policy="none", timeout_s=20)
    with Runtime([], config) as rt:
        with rt.session(workspace=workspace, inputs={"data.csv": data}) as s:
            assert s.run(read).error is not None  # not visible to begin with
            planted = s.run(f"import os\nos.symlink({str(secret.parent)!r}, 'inputs/x')")
            assert planted.ok, planted.error
            assert s.run("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)").state_lost
            again = s.run(read)  # a fresh sandbox on the same workspace: the input again, no more
            assert again.error is not None and again.error.type == "FileNotFoundError", again
            assert s.run("open('inputs/data.csv').read()").value == "a,b\n"
        with rt.session(workspace=workspace, inputs={"data.csv": data}) as other:  # the links are kept
            assert other.run("open('inputs/data.csv').read()").value == "a,b\n"
            assert other.run(read).error is not None


def _processes_mentioning(marker: str) -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            continue
    return found


def test_the_kernel_dies_with_the_host_process() -> None:
    """--die-with-parent and the pid namespace: when the host process is SIGKILLed (no cleanup
    runs), bwrap, the kernel and a child the code started in the background all go."""
    _bwrap_or_skip()
    import subprocess
    import sys
    import time

    marker = f"codeact-die-{os.getpid()}-{time.monotonic_ns()}"
    code = (
        "import subprocess, sys\n"
        f"subprocess.Popen(['/bin/sh', '-c', 'sleep 300; echo {marker}'], start_new_session=True)\n"
        "sys.argv[sys.argv.index('--connect') + 1]"
    )
    host = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time\nfrom codeact import Runtime, SandboxConfig\n"
         "rt = Runtime([], SandboxConfig(backend='local', isolation='bwrap', policy='none'))\n"
         "s = rt.session()\nprint(s.run(sys.argv[1]).value, flush=True)\ntime.sleep(60)\n", code],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert host.stdout is not None
        socket_path = host.stdout.readline().strip()  # on the kernel's command line, and bwrap's
        assert socket_path.endswith(".sock") and len(_processes_mentioning(socket_path)) >= 2
        assert _processes_mentioning(marker), "the background child should be running"
        host.kill()
        host.wait(30)
        deadline = time.monotonic() + 30
        while (_processes_mentioning(socket_path) or _processes_mentioning(marker)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _processes_mentioning(socket_path) == [] and _processes_mentioning(marker) == []
    finally:
        host.kill()
        host.wait(30)


def test_a_kernel_started_from_a_short_lived_thread_outlives_it() -> None:
    """Regression: --die-with-parent is PR_SET_PDEATHSIG, which fires when the *thread* that forked
    the child exits. A session first used by a run with a listener (a worker thread) lost its
    kernel (SIGKILL) as soon as that thread ended."""
    import threading

    _bwrap_or_skip()
    with Runtime([], SandboxConfig(backend="local", policy="none", isolation="bwrap")) as rt, rt.session() as s:
        started = threading.Thread(target=s.start)
        started.start()
        started.join()
        for i in range(3):
            streamed = s.run(f"print({i})", on_event=lambda event: None)
            assert streamed.ok and streamed.stdout == f"{i}\n", streamed
            plain = s.run("x = 1\nx")
            assert plain.ok and plain.value == 1, plain
