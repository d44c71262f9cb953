"""Bubblewrap isolation for the local backend: the kernel in fresh Linux namespaces.

``bwrap`` (Debian's ``bubblewrap``) starts the kernel in new user, pid, network, ipc, uts and
cgroup namespaces. Its filesystem is an empty root with, read-only, the system directories
(``/usr``, ``/bin``, ``/lib*``, the dynamic loader's config, the time zone), the interpreter's
prefix (and its venv's), the kernel files and RestrictedPython; the session's scratch directory is the only
writable place, and the channel's directory the only other path from the host. There is no
network but a loopback interface, no host process is visible, and the kernel dies with its parent.
bwrap installs the seccomp filter of ``_confine`` last (``--seccomp FD``), after its own
``unshare`` and ``mount`` calls, which the filter denies.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from ..errors import SandboxUnavailable
from . import _confine

__all__ = ["bwrap_command", "bwrap_path", "bwrap_status", "doctor_report", "resolve_isolation"]

#: Read-only system paths bound when they exist.
_SYSTEM_PATHS = (
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
    "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime", "/etc/timezone",
)
#: Where the kernel files and RestrictedPython appear inside the sandbox.
KERNEL_DIR = "/opt/codeact/kernel"
EXTRA_DIR = "/opt/codeact/lib"


def bwrap_path() -> str | None:
    """The ``bwrap`` executable, if one is installed."""
    return shutil.which("bwrap")


@functools.lru_cache(maxsize=1)
def bwrap_status() -> tuple[bool, str]:
    """Whether bwrap can create its namespaces here (cached: one probe per process), and why not."""
    path = bwrap_path()
    if path is None:
        return False, "bwrap is not installed (Debian: apt-get install bubblewrap; or scripts/ensure-bwrap.sh)"
    try:  # the kernel's seccomp filter too: a kernel that refuses it would fail every start
        seccomp_fd = _confine.filter_fd()
    except SandboxUnavailable as exc:
        return False, str(exc)
    except OSError as exc:
        return False, f"cannot hold the seccomp filter: {exc}"
    cmd = [path, "--unshare-all", "--die-with-parent", *_ro_binds(), "--proc", "/proc", "--dev", "/dev",
           "--seccomp", str(seccomp_fd), "true"]
    try:
        done = subprocess.run(cmd, capture_output=True, timeout=10, env={}, check=False, pass_fds=(seccomp_fd,))
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"bwrap does not run: {exc}"
    finally:
        os.close(seccomp_fd)
    if done.returncode != 0:
        reason = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return False, (f"bwrap cannot create namespaces or install the seccomp filter here: "
                       f"{reason[-1] if reason else done.returncode}")
    return True, f"bwrap at {path}"


def doctor_report() -> dict[str, object]:
    """For ``codeact doctor``: what ``SandboxConfig(backend="local")`` gets on this machine."""
    ok, detail = bwrap_status()
    return {"default": "bwrap" if ok else "none", "bwrap": ok, "detail": detail}


def resolve_isolation(isolation: str) -> str:
    """``auto`` becomes ``bwrap`` where bwrap works, else ``none``; the others stay."""
    if isolation != "auto":
        return isolation
    return "bwrap" if bwrap_status()[0] else "none"


def interpreter() -> tuple[str, list[str]]:
    """The interpreter (a venv's, as the plain local kernel uses) and the prefixes bound read-only
    so that it runs: the venv's (its site-packages, for policy="none") and the base installation's."""
    prefixes = {os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix)}
    return sys.executable, sorted(prefixes)


def _ro_binds() -> list[str]:
    args: list[str] = []
    for path in _SYSTEM_PATHS:
        args += ["--ro-bind-try", path, path]
    return args


def bwrap_command(
    kernel_argv: list[str], *, kernel_dir: Path, workspace: Path, session_dir: Path, extra_path: str | None,
    inputs: Sequence[Path] = (), seccomp_fd: int | None = None,
) -> list[str]:
    """The bwrap command line that runs ``kernel_argv`` (whose paths are already the in-sandbox ones);
    ``seccomp_fd``: an inherited fd holding the compiled seccomp filter bwrap installs last."""
    path = bwrap_path()
    if path is None:
        raise FileNotFoundError("bwrap is not installed")
    _exe, prefixes = interpreter()
    args = [
        path,
        "--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
        "--unshare-cgroup-try", "--die-with-parent", "--hostname", "codeact-sandbox",
        "--cap-drop", "ALL", "--disable-userns",
        *_ro_binds(),
        *[arg for prefix in prefixes for arg in ("--ro-bind", prefix, prefix)],
        "--ro-bind", str(kernel_dir), KERNEL_DIR,
        "--proc", "/proc", "--dev", "/dev",
        "--ro-bind", str(session_dir), str(session_dir),  # the channel's socket (before the workspace:
        "--bind", str(workspace), str(workspace),  # which may lie inside it)
        "--chdir", str(workspace),
    ]
    for target in inputs:  # the host's inputs (the links in inputs/ point at them), at the same path
        if target.exists() and not target.is_relative_to(workspace):
            args += ["--ro-bind", str(target), str(target)]
    if extra_path is not None:  # RestrictedPython's package directory, alone
        args += ["--ro-bind", extra_path, f"{EXTRA_DIR}/{Path(extra_path).name}"]
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    return [*args, "--remount-ro", "/", "--", *kernel_argv]
