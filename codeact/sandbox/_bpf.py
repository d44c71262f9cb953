"""A seccomp deny-list compiler: syscall names in, a classic-BPF program (``struct sock_filter[]``) out.

The program is what bwrap's ``--seccomp FD`` and ``prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER)``
take. It checks ``seccomp_data.arch`` first (a syscall number means nothing without its ABI), on
x86_64 refuses the x32 ABI (numbers with bit 30 set: a second table of the same calls), then compares
the number with each denied one. A denied call, the x32 ABI and any other architecture (the i386
ABI of an x86_64 process through ``int 0x80``, with numbers of its own) get ``EPERM``, as Docker's
profile answers what it does not allow; everything else is allowed. One program serves both
supported machines: it carries the numbers of both and picks by the arch field at run time.
"""

from __future__ import annotations

import errno
import struct
from collections.abc import Iterable, Mapping

__all__ = [
    "AUDIT_ARCH", "BPF_MAXINSNS", "SECCOMP_RET_ALLOW", "SECCOMP_RET_ERRNO", "SYSCALLS",
    "X32_SYSCALL_BIT", "compile_filter", "deny_filter",
]

#: ``seccomp_data.arch`` per machine (linux/audit.h: EM_X86_64 / EM_AARCH64 | 64-bit | little-endian).
AUDIT_ARCH: dict[str, int] = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
X32_SYSCALL_BIT = 0x40000000
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
#: The kernel refuses a longer program (linux/bpf_common.h).
BPF_MAXINSNS = 4096

#: The numbers of the calls a deny list may name (x86_64: asm/unistd_64.h; aarch64 uses the
#: generic table, asm-generic/unistd.h). The tests check both against the headers where present.
SYSCALLS: dict[str, dict[str, int]] = {
    "x86_64": {
        "acct": 163, "add_key": 248, "bpf": 321, "delete_module": 176, "finit_module": 313,
        "fsconfig": 431, "fsmount": 432, "fsopen": 430, "fspick": 433, "init_module": 175,
        "io_uring_enter": 426, "io_uring_register": 427, "io_uring_setup": 425, "kcmp": 312,
        "kexec_file_load": 320, "kexec_load": 246, "keyctl": 250, "mount": 165, "mount_setattr": 442,
        "move_mount": 429, "name_to_handle_at": 303, "open_by_handle_at": 304, "open_tree": 428,
        "perf_event_open": 298, "personality": 135, "pidfd_getfd": 438, "pivot_root": 155,
        "process_madvise": 440, "process_vm_readv": 310, "process_vm_writev": 311, "ptrace": 101,
        "quotactl": 179, "reboot": 169, "request_key": 249, "setns": 308, "swapoff": 168, "swapon": 167,
        "syslog": 103, "umount2": 166, "unshare": 272, "userfaultfd": 323,
    },
    "aarch64": {
        "acct": 89, "add_key": 217, "bpf": 280, "delete_module": 106, "finit_module": 273,
        "fsconfig": 431, "fsmount": 432, "fsopen": 430, "fspick": 433, "init_module": 105,
        "io_uring_enter": 426, "io_uring_register": 427, "io_uring_setup": 425, "kcmp": 272,
        "kexec_file_load": 294, "kexec_load": 104, "keyctl": 219, "mount": 40, "mount_setattr": 442,
        "move_mount": 429, "name_to_handle_at": 264, "open_by_handle_at": 265, "open_tree": 428,
        "perf_event_open": 241, "personality": 92, "pidfd_getfd": 438, "pivot_root": 41,
        "process_madvise": 440, "process_vm_readv": 270, "process_vm_writev": 271, "ptrace": 117,
        "quotactl": 60, "reboot": 142, "request_key": 218, "setns": 268, "swapoff": 225, "swapon": 224,
        "syslog": 116, "umount2": 39, "unshare": 97, "userfaultfd": 282,
    },
}

# Classic BPF opcodes (linux/filter.h, linux/bpf_common.h).
_LD_W_ABS = 0x00 | 0x00 | 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ_K = 0x05 | 0x10 | 0x00  # BPF_JMP | BPF_JEQ | BPF_K
_JGE_K = 0x05 | 0x30 | 0x00  # BPF_JMP | BPF_JGE | BPF_K
_JA = 0x05 | 0x00  # BPF_JMP | BPF_JA: a 32-bit offset, unlike the conditional jumps' 8 bits
_RET_K = 0x06 | 0x00  # BPF_RET | BPF_K
# Offsets in struct seccomp_data.
_NR = 0
_ARCH = 4

_Insn = tuple[int, int, int, int]


def _stmt(code: int, k: int) -> _Insn:
    return (code, 0, 0, k)


def _jump(code: int, k: int, jt: int, jf: int) -> _Insn:
    return (code, jt, jf, k)


def compile_filter(denied: Mapping[int, Iterable[int]], *, errno_value: int = errno.EPERM) -> bytes:
    """The program for ``{audit arch: denied numbers}``: those numbers, the x32 ABI (on x86_64) and
    every architecture not in the mapping answer ``-errno_value``; the rest is allowed.

    Each test is followed by its own ``ret`` and an architecture's block is skipped with ``ja``, so
    no conditional jump ever needs more than the 8 bits it has.
    """
    deny = _stmt(_RET_K, SECCOMP_RET_ERRNO | (errno_value & 0xFFFF))
    program: list[_Insn] = []
    for arch, numbers in denied.items():
        block: list[_Insn] = [_stmt(_LD_W_ABS, _NR)]
        if arch == AUDIT_ARCH["x86_64"]:
            block += [_jump(_JGE_K, X32_SYSCALL_BIT, 0, 1), deny]
        for nr in sorted(set(numbers)):
            block += [_jump(_JEQ_K, nr, 0, 1), deny]
        block.append(_stmt(_RET_K, SECCOMP_RET_ALLOW))
        # This arch? Skip the ``ja`` into the block; else jump over the block to the next test.
        program += [_stmt(_LD_W_ABS, _ARCH), _jump(_JEQ_K, arch, 1, 0), _stmt(_JA, len(block)), *block]
    program.append(deny)  # no block matched: an architecture (an ABI) this filter has no numbers for
    if len(program) > BPF_MAXINSNS:
        raise ValueError(f"seccomp filter of {len(program)} instructions: the kernel takes at most {BPF_MAXINSNS}")
    return b"".join(struct.pack("=HBBI", *insn) for insn in program)


def deny_filter(names: Iterable[str]) -> bytes:
    """The program that denies ``names`` on every machine in :data:`SYSCALLS`.

    A name must be in every machine's table (``KeyError`` otherwise): a deny list that silently
    skipped a call on one machine would be a hole nobody sees.
    """
    wanted = sorted(set(names))
    return compile_filter({AUDIT_ARCH[machine]: [table[n] for n in wanted] for machine, table in SYSCALLS.items()})
