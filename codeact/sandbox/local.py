"""The ``local`` backend: the kernel in a subprocess with rlimits, inside bubblewrap where it exists.

With ``isolation="bwrap"`` (the default where bwrap works) the kernel runs in fresh namespaces:
no network, no host processes, the system read-only and the scratch directory the only writable
place (see ``_bwrap``). With ``isolation="none"`` it is a plain subprocess of the same user on the
same filesystem: rlimits, an empty environment, a scratch working directory and the
RestrictedPython policy only make accidents and casual escapes harder. Either way the kernel gets a
session keyring of its own and the seccomp deny list of the Docker profile (``_confine``): with
``none`` that is hardening, not a boundary.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..errors import SandboxUnavailable
from ..kernel.files import kernel_args, materialize
from . import _bwrap, _confine
from ._host_end import HostEnd
from .base import KERNEL_ENV, ExitStatus, SandboxConfig

__all__ = ["LocalSandbox", "isolation_report"]

#: What ``codeact doctor`` says about the local backend's isolation (bwrap found and working?).
isolation_report = _bwrap.doctor_report

_MB = 1024 * 1024

#: Kernels are started from this one long-lived thread. bwrap's ``--die-with-parent`` is
#: PR_SET_PDEATHSIG, which fires when the *thread* that forked the child exits, not the process:
#: a kernel started from a short-lived thread (a run with a listener, a pool filler) was SIGKILLed
#: as soon as that thread ended.
_SPAWNER: ThreadPoolExecutor | None = None
_SPAWNER_LOCK = threading.Lock()


def _spawn(start: Callable[[], subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    global _SPAWNER
    with _SPAWNER_LOCK:
        if _SPAWNER is None:
            _SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="codeact-spawner")
    return _SPAWNER.submit(start).result()


def _restricted_package() -> Path:
    import RestrictedPython

    return Path(RestrictedPython.__file__).resolve().parent


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class LocalSandbox(HostEnd):
    """A kernel subprocess; ``session_dir`` holds the socket, ``workspace`` is its cwd."""

    def __init__(self, config: SandboxConfig, session_dir: Path, workspace: Path,
                 inputs: Mapping[str, Path] | None = None) -> None:
        super().__init__(config)
        self.session_dir = session_dir
        self.workspace = workspace
        #: The host files the ``inputs/`` links point at: bwrap binds these (read-only), never
        #: whatever links the code itself makes in that folder.
        self.input_files = [Path(src).resolve() for src in (inputs or {}).values()]
        self._proc: subprocess.Popen[bytes] | None = None
        self.isolation = _bwrap.resolve_isolation(config.isolation)

    def _limits(self) -> None:  # runs in the child between fork and exec
        cfg = self.config
        resource.setrlimit(resource.RLIMIT_AS, (cfg.memory_mb * _MB,) * 2)
        cpu = int(cfg.timeout_s * 4 + 30)  # a backstop; the wall clock is enforced by the host
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
        resource.setrlimit(resource.RLIMIT_FSIZE, (cfg.fsize_mb * _MB,) * 2)
        resource.setrlimit(resource.RLIMIT_NOFILE, (cfg.nofile,) * 2)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if os.geteuid() != 0:  # root ignores RLIMIT_NPROC, and it counts the whole user
            resource.setrlimit(resource.RLIMIT_NPROC, (cfg.pids_limit,) * 2)

    def _preexec(self) -> Callable[[], None]:
        """What the child runs between fork and exec: the rlimits, a session keyring of its own and,
        without bwrap (which installs it from ``--seccomp``), the seccomp filter."""
        install = None if self.isolation == "bwrap" else _confine.FilterInstaller()

        def preexec() -> None:
            self._limits()
            _confine.join_session_keyring()
            if install is not None:
                install()

        return preexec

    def _command(self, socket_path: Path, policy: str, seccomp_fd: int) -> list[str]:
        kernel_dir = materialize()
        egress: list[str] = []
        if self.config.egress is not None:  # without bwrap the loopback is the host's: any free port
            egress = ["--egress", str(self.config.egress.port if self.isolation == "bwrap" else 0)]
        if self.isolation != "bwrap":
            cmd = [sys.executable, *kernel_args(str(kernel_dir)),
                   "--connect", str(socket_path), "--policy", policy, *egress]
            if policy == "restricted":
                cmd += ["--extra-path", str(_restricted_package().parent)]
            return cmd
        ok, reason = _bwrap.bwrap_status()
        if not ok:
            raise SandboxUnavailable(f"isolation='bwrap': {reason}")
        exe, _prefixes = _bwrap.interpreter()
        cmd = [exe, *kernel_args(_bwrap.KERNEL_DIR),
               "--connect", str(socket_path), "--policy", policy, *egress]
        extra = None
        if policy == "restricted":
            extra = str(_restricted_package())
            cmd += ["--extra-path", _bwrap.EXTRA_DIR]
        return _bwrap.bwrap_command(
            cmd, kernel_dir=kernel_dir, workspace=self.workspace.resolve(),
            session_dir=self.session_dir.resolve(), extra_path=extra, inputs=self.input_files,
            seccomp_fd=seccomp_fd,
        )

    def start(self) -> None:
        self.session_dir.mkdir(parents=True, exist_ok=True)
        self.workspace.mkdir(parents=True, exist_ok=True)
        socket_path = self._listen(self.session_dir)
        seccomp_fd = -1
        try:
            preexec = self._preexec()
            if self.isolation == "bwrap":
                seccomp_fd = _confine.filter_fd()  # the child inherits it (pass_fds), bwrap reads it
            cmd = self._command(socket_path.resolve(), self.config.effective_policy(), seccomp_fd)
            log = open(self.session_dir / "kernel.log", "wb")
            try:
                self._proc = _spawn(lambda: subprocess.Popen(
                    cmd, cwd=self.workspace, env=dict(KERNEL_ENV), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                    start_new_session=True, preexec_fn=preexec, close_fds=True,
                    pass_fds=(seccomp_fd,) if seccomp_fd >= 0 else (),
                ))
            finally:
                log.close()
        except SandboxUnavailable:
            self._stop_listening()
            raise
        except (OSError, subprocess.SubprocessError) as exc:
            self._stop_listening()
            raise SandboxUnavailable(f"cannot start the local kernel: {exc}") from None
        finally:
            if seccomp_fd >= 0:
                os.close(seccomp_fd)
        try:
            self._accept()
        except SandboxUnavailable:
            self.kill()
            raise

    def interrupt(self) -> None:
        pass  # the driver's interrupt frame is enough: the kernel signals itself

    def kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            try:
                os.killpg(self._proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._proc.wait()

    def exit_status(self) -> ExitStatus:
        if self._proc is None:
            return ExitStatus(detail="never started")
        try:
            code = self._proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self._proc.returncode
        if code is not None and code < 0:
            return ExitStatus(signal=-code, detail=signal.Signals(-code).name)
        if self.isolation == "bwrap" and code is not None and 128 < code < 128 + 65:
            return ExitStatus(signal=code - 128, detail=_signal_name(code - 128))
        return ExitStatus(exit_code=code)

    def close(self) -> None:
        self.kill()
        self._close_host_end()
        shutil.rmtree(self.session_dir, ignore_errors=True)
