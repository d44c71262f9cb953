"""What the local kernel's process tree gets before it runs: its own session keyring and the seccomp filter.

The kernel keyring is not namespaced: a child inherits its parent's session keyring, and bwrap's
new user namespace does not change that, so the code could search and read the keys the host's
session holds. Two layers keep them out of reach. Between fork and exec the child joins a new,
anonymous, empty session keyring (:func:`join_session_keyring`); and the seccomp filter built from
``_seccomp.DENIED`` (the Docker profile's list) refuses ``keyctl``, ``add_key`` and
``request_key`` with the rest of the list. bwrap installs the filter itself (``--seccomp FD``, read
from :func:`filter_fd`) after making its namespaces, which need ``unshare`` and ``mount``; without
bwrap, :class:`FilterInstaller` installs it in the child.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import platform

from ..errors import SandboxUnavailable
from . import _bpf
from ._seccomp import DENIED

__all__ = ["FilterInstaller", "filter_fd", "join_session_keyring", "program"]

_KEYCTL_JOIN_SESSION_KEYRING = 1
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2

_KEYCTL = _bpf.SYSCALLS.get(platform.machine(), {}).get("keyctl")

_LIBC = ctypes.CDLL(None, use_errno=True)
_syscall = _LIBC.syscall
_syscall.restype = ctypes.c_long
_prctl = _LIBC.prctl
_prctl.restype = ctypes.c_int


@functools.cache
def program() -> bytes:
    """The compiled filter; ``SandboxUnavailable`` on a machine the syscall tables do not cover."""
    machine = platform.machine()
    if machine not in _bpf.SYSCALLS:
        raise SandboxUnavailable(
            f"the local backend's seccomp filter knows the syscall numbers of {sorted(_bpf.SYSCALLS)}, "
            f"not {machine!r}"
        )
    return _bpf.deny_filter(DENIED)


def filter_fd() -> int:
    """A memfd holding :func:`program`, at offset 0, for bwrap's ``--seccomp``; the caller closes it."""
    data = program()
    fd = os.memfd_create("codeact-seccomp", os.MFD_CLOEXEC)
    try:
        os.write(fd, data)  # a few hundred bytes to a fresh memfd: written whole
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        os.close(fd)
        raise
    return fd


def join_session_keyring() -> None:
    """Join a new anonymous session keyring (for the calling process and the children it makes).

    Runs between fork and exec, so it only calls into libc. ``ENOSYS`` (no keyrings in this
    kernel) and ``EPERM`` (keyctl filtered by a sandbox codeact itself runs in, which filters the
    code's calls as well) leave nothing to hide; any other failure stops the start.
    """
    if _KEYCTL is None:  # a machine without a table: ``program()`` refuses to start there
        return
    if _syscall(ctypes.c_long(_KEYCTL), ctypes.c_long(_KEYCTL_JOIN_SESSION_KEYRING), ctypes.c_void_p(None)) >= 0:
        return
    code = ctypes.get_errno()
    if code not in (errno.ENOSYS, errno.EPERM):
        raise OSError(code, f"cannot join a new session keyring: {os.strerror(code)}")


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class FilterInstaller:
    """Installs :func:`program` in the calling process (``no_new_privs`` first, as the kernel asks
    of an unprivileged filter). Built before the fork, so the child only makes two ``prctl`` calls."""

    def __init__(self) -> None:
        data = program()
        self._buffer = ctypes.create_string_buffer(data, len(data))
        self._fprog = _SockFprog(len(data) // 8, ctypes.cast(self._buffer, ctypes.c_void_p))

    def __call__(self) -> None:
        # prctl is variadic: every argument passed as a full unsigned long, or the kernel may see
        # garbage in the upper half of a register (and no_new_privs insists the unused ones are 0).
        zero = ctypes.c_ulong(0)
        if _prctl(_PR_SET_NO_NEW_PRIVS, ctypes.c_ulong(1), zero, zero, zero) != 0:
            code = ctypes.get_errno()
            raise OSError(code, f"cannot set no_new_privs: {os.strerror(code)}")
        fprog = ctypes.c_ulong(ctypes.addressof(self._fprog))
        if _prctl(_PR_SET_SECCOMP, ctypes.c_ulong(_SECCOMP_MODE_FILTER), fprog, zero, zero) != 0:
            code = ctypes.get_errno()
            raise OSError(code, f"cannot install the seccomp filter: {os.strerror(code)}")
