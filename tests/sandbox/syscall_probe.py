"""Trying each call of the seccomp deny list from inside a sandbox (both backends' tests use it).

The arguments are harmless and chosen so that a call that got past the filter fails some other
way (EFAULT, EBADF, ESRCH, EINVAL, ENOSYS) or succeeds doing nothing; only the calls whose
capability check comes before anything else (:data:`CAPABILITY_FIRST`) answer EPERM either way.
"""

from __future__ import annotations

import platform

from codeact.sandbox._bpf import SYSCALLS

__all__ = ["ARGS", "CAPABILITY_FIRST", "CODE", "calls", "probe_code"]

ARGS: dict[str, tuple[int, ...]] = {
    "acct": (1,), "add_key": (0, 0, 0, 0, 0), "bpf": (0, 0, 0), "delete_module": (0, 0),
    "finit_module": (-1, 0, 0), "fsconfig": (-1, 0, 0, 0, 0), "fsmount": (-1, 0, 0), "fsopen": (0, 0),
    "fspick": (-1, 0, 0xFFFFFFFF), "init_module": (0, 0, 0), "io_uring_enter": (-1, 0, 0, 0, 0, 0),
    "io_uring_register": (-1, 0, 0, 0), "io_uring_setup": (1, 0), "kcmp": (0x7FFFFFFF, 0x7FFFFFFF, 0, 0, 0),
    "kexec_file_load": (-1, -1, 0, 0, 0), "kexec_load": (0, 0, 0, 0), "keyctl": (0, 0),
    "mount": (0, 0, 0, 0, 0), "mount_setattr": (-1, 0, 0xFFFFFFFF, 0, 0),
    "move_mount": (-1, 0, -1, 0, 0xFFFFFFFF), "name_to_handle_at": (-1, 0, 0, 0, 0xFFFFFFFF),
    "open_by_handle_at": (-1, 0, 0), "open_tree": (-1, 0, 0xFFFFFFFF), "perf_event_open": (0, 0, -1, -1, 0),
    "personality": (0xFFFFFFFF,),  # a query: succeeds unfiltered
    "pidfd_getfd": (-1, 0, 0), "pivot_root": (0, 0), "process_madvise": (-1, 0, 0, 0, 0),
    "process_vm_readv": (0x7FFFFFFF, 0, 0, 0, 0, 0), "process_vm_writev": (0x7FFFFFFF, 0, 0, 0, 0, 0),
    "ptrace": (16, 0x7FFFFFFF, 0, 0),  # PTRACE_ATTACH to no process: ESRCH unfiltered
    "quotactl": (0, 0, 0, 0), "reboot": (0, 0, 0, 0), "request_key": (0, 0, 0, 0), "setns": (-1, 0),
    "swapoff": (0,), "swapon": (0, 0), "syslog": (10, 0, 0), "umount2": (0, 0),
    "unshare": (0,),  # no flags: succeeds unfiltered
    "userfaultfd": (1,),  # UFFD_USER_MODE_ONLY: succeeds unfiltered where unprivileged userfaultfd is off
}

#: Refused by the kernel's own capability check before it looks at an argument, filter or not
#: (without capabilities, as in both sandboxes); the filter itself is checked instruction by
#: instruction for these (tests/sandbox/test_bwrap_seccomp.py).
CAPABILITY_FIRST = frozenset({"acct", "fsmount", "fsopen", "fspick", "move_mount", "pivot_root", "reboot",
                              "swapoff", "swapon", "syslog"})

#: Defines ``sys_(nr, *args)``: the errno of a failed call, or ``"ok"``.
CODE = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def sys_(nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    return ctypes.get_errno() if r == -1 else "ok"
"""


def calls(names: list[str] | None = None) -> dict[str, tuple[int, ...]]:
    """``{name: (this machine's number, *ARGS[name])}``."""
    table = SYSCALLS[platform.machine()]
    return {name: (table[name], *ARGS[name]) for name in (names if names is not None else sorted(ARGS))}


def probe_code(names: list[str] | None = None) -> str:
    """Code whose value is ``{name: errno or "ok"}`` for each call tried."""
    return CODE + f"{{name: sys_(*call) for name, call in {calls(names)!r}.items()}}"
