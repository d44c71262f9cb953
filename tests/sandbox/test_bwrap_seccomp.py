"""The local backend's seccomp filter and session keyring (issue 25, finding 6).

The filter (``codeact/sandbox/_bpf.py``) is built from the Docker profile's deny list
(``_seccomp.DENIED``) and checked twice: instruction by instruction, by a small classic-BPF
interpreter below, and from inside the sandbox, where each denied call is tried. The keyring: a
key the host adds to its session keyring is out of the code's reach (a child of the host without
the change reads it).
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import platform
import re
import struct
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from codeact import Runtime, SandboxConfig, tool
from codeact.runtime.session import Session
from codeact.sandbox import _bpf, _bwrap, _confine
from codeact.sandbox._seccomp import DENIED, profile
from tests.sandbox import test_local_bwrap
from tests.sandbox.syscall_probe import ARGS, CAPABILITY_FIRST, probe_code
from tests.sandbox.test_local_bwrap import _bwrap_or_skip, run_value

_EPERM = _bpf.SECCOMP_RET_ERRNO | errno.EPERM
_AUDIT_ARCH_I386 = 0x40000003
#: A few calls every Python process makes, per machine: the filter must let them through.
_ORDINARY = {
    "x86_64": {"read": 0, "write": 1, "mmap": 9, "clone": 56, "execve": 59, "getpid": 39, "openat": 257,
               "clone3": 435, "seccomp": 317},
    "aarch64": {"read": 63, "write": 64, "mmap": 222, "clone": 220, "execve": 221, "getpid": 172,
                "openat": 56, "clone3": 435, "seccomp": 277},
}


# --- the filter, instruction by instruction -------------------------------------------------------

def _run_bpf(program: bytes, arch: int, nr: int) -> int:
    """Classic BPF as the kernel runs a seccomp filter, for the instructions the compiler emits."""
    insns = [struct.unpack_from("=HBBI", program, i) for i in range(0, len(program), 8)]
    data = struct.pack("=iIQ6Q", nr, arch, 0, *[0] * 6)  # struct seccomp_data
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        pc += 1
        if code == 0x20:  # ld [k]
            acc = struct.unpack_from("=I", data, k)[0]
        elif code == 0x05:  # ja k
            pc += k
        elif code == 0x15:  # jeq k
            pc += jt if acc == k else jf
        elif code == 0x35:  # jge k
            pc += jt if acc >= k else jf
        elif code == 0x06:  # ret k
            return int(k)
        else:
            raise AssertionError(f"unexpected opcode {code:#x}")


@pytest.mark.parametrize("machine", sorted(_bpf.SYSCALLS))
def test_the_filter_denies_the_list_and_allows_the_rest(machine: str) -> None:
    program = _confine.program()  # exactly what the local backend installs
    arch, table = _bpf.AUDIT_ARCH[machine], _bpf.SYSCALLS[machine]
    assert {name: _run_bpf(program, arch, table[name]) for name in DENIED} == dict.fromkeys(DENIED, _EPERM)
    ordinary = _ORDINARY[machine]
    assert {n: _run_bpf(program, arch, nr) for n, nr in ordinary.items()} == dict.fromkeys(
        ordinary, _bpf.SECCOMP_RET_ALLOW)
    x32_getpid = _bpf.X32_SYSCALL_BIT | ordinary["getpid"]
    assert _run_bpf(program, arch, x32_getpid) == (_EPERM if machine == "x86_64" else _bpf.SECCOMP_RET_ALLOW)


def test_an_architecture_without_a_table_is_refused_outright() -> None:
    program = _confine.program()
    for nr in (0, 20, 39, 0x40000000):  # the i386 ABI of an x86_64 process (int 0x80), say
        assert _run_bpf(program, _AUDIT_ARCH_I386, nr) == _EPERM


def test_a_program_past_the_kernel_s_limit_is_refused() -> None:
    arch = _bpf.AUDIT_ARCH["aarch64"]
    assert _run_bpf(_bpf.compile_filter({arch: range(2000)}), arch, 1999) == _EPERM
    with pytest.raises(ValueError, match="at most 4096"):
        _bpf.compile_filter({arch: range(2100)})


def test_a_name_missing_from_a_table_is_an_error_not_a_hole() -> None:
    with pytest.raises(KeyError):
        _bpf.deny_filter(["keyctl", "no_such_call"])


def test_the_deny_list_is_the_docker_profile_s() -> None:
    allowed = {n for rule in profile()["syscalls"] if rule["action"] == "SCMP_ACT_ALLOW" for n in rule["names"]}
    assert not allowed & set(DENIED)
    assert {"keyctl", "add_key", "request_key", "bpf", "userfaultfd", "ptrace", "perf_event_open",
            "kexec_load", "mount", "unshare", "setns"} <= set(DENIED)
    for table in _bpf.SYSCALLS.values():
        assert set(table) == set(DENIED)
    assert set(ARGS) == set(DENIED)


_HEADERS = {
    "x86_64": ["/usr/include/x86_64-linux-gnu/asm/unistd_64.h", "/usr/include/asm/unistd_64.h"],
    "aarch64": ["/usr/include/asm-generic/unistd.h"],  # arm64 uses the generic table
}


@pytest.mark.parametrize("machine", sorted(_HEADERS))
def test_the_syscall_numbers_are_the_kernel_headers(machine: str) -> None:
    header = next((Path(p) for p in _HEADERS[machine] if Path(p).exists()), None)
    if header is None:
        pytest.skip(f"no kernel header for {machine} here ({', '.join(_HEADERS[machine])})")
    defined = {m[1]: int(m[2]) for m in re.finditer(r"^#define __NR_(\w+)\s+(\d+)\s*$", header.read_text(), re.M)}
    assert {name: defined.get(name) for name in _bpf.SYSCALLS[machine]} == _bpf.SYSCALLS[machine]


# --- from inside the sandbox --------------------------------------------------------------------

probe = test_local_bwrap.probe  # the module's bwrap session with policy="none"


@pytest.mark.parametrize("name", sorted(DENIED))
def test_each_denied_call_gets_eperm_inside_bwrap(probe: Session, name: str) -> None:
    # Calls in CAPABILITY_FIRST answer EPERM without the filter too: the BPF tests above cover those.
    assert run_value(probe, probe_code([name])) == {name: errno.EPERM}


def test_the_filter_is_installed_with_no_new_privs(probe: Session) -> None:
    status = str(run_value(probe, "open('/proc/self/status').read()"))
    fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    assert fields["Seccomp"].strip() == "2" and fields["NoNewPrivs"].strip() == "1", fields
    assert CAPABILITY_FIRST < set(DENIED)


_OTHER_ABIS = """
import ctypes, mmap, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
ctypes.set_errno(0)
x32 = libc.syscall(ctypes.c_long(0x40000000 | 39)), ctypes.get_errno()  # x32 getpid
page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
page.write(bytes([0xB8, 20, 0, 0, 0, 0xCD, 0x80, 0xC3]))  # mov eax, 20 (i386 getpid); int 0x80; ret
i386 = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(page)))()
print(json.dumps({"x32": list(x32), "i386": i386, "pid": os.getpid()}))
"""


def _other_abis(runner: list[str]) -> dict[str, object]:
    done = subprocess.run([*runner, "-c", "import json\n" + _OTHER_ABIS], capture_output=True, text=True,
                          timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def test_the_x32_and_i386_abis_are_refused_inside_bwrap(probe: Session) -> None:
    if platform.machine() != "x86_64":
        pytest.skip("the x32 and i386 ABIs are x86_64's")
    try:
        host = _other_abis([sys.executable])  # unfiltered: x32 ENOSYS (or a pid), int 0x80 a pid
    except AssertionError:
        pytest.skip("this kernel runs no i386 code (no IA32 emulation)")
    assert host["x32"] != [-1, errno.EPERM] and host["i386"] == host["pid"], host
    # In a child of the kernel: int 0x80 without IA32 emulation would kill the process that tries it.
    code = ("import subprocess, sys, json\n"
            f"json.loads(subprocess.run([sys.executable, '-c', {('import json' + chr(10) + _OTHER_ABIS)!r}],"
            " capture_output=True, text=True, check=True).stdout)")
    inside = run_value(probe, code)
    assert isinstance(inside, dict)
    assert inside["x32"] == [-1, errno.EPERM] and inside["i386"] == -errno.EPERM, inside


# --- the keyring -------------------------------------------------------------------------------

_KEYCTL_SEARCH = 10
_KEYCTL_READ = 11
_KEYCTL_INVALIDATE = 21
_KEY_SPEC_SESSION_KEYRING = -3


@pytest.fixture
def host_key() -> Iterator[tuple[int, bytes]]:
    """A key in this process's session keyring: (serial, description); the payload is "host-secret"."""
    table = _bpf.SYSCALLS.get(platform.machine())
    if table is None:
        pytest.skip(f"no syscall table for {platform.machine()}")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    desc = f"codeact-test-{os.getpid()}-{threading.get_ident()}".encode()
    ctypes.set_errno(0)
    serial = libc.syscall(ctypes.c_long(table["add_key"]), b"user", desc, b"host-secret", ctypes.c_long(11),
                          ctypes.c_long(_KEY_SPEC_SESSION_KEYRING))
    if serial < 0:
        pytest.skip(f"this host cannot add a key: {os.strerror(ctypes.get_errno())}")
    try:
        yield serial, desc
    finally:
        libc.syscall(ctypes.c_long(table["keyctl"]), ctypes.c_long(_KEYCTL_INVALIDATE), ctypes.c_long(serial))


def _key_code(serial: int, desc: bytes) -> str:
    """Code whose ``out`` is [[search result, errno], [read result, errno], payload read]."""
    nr = _bpf.SYSCALLS[platform.machine()]["keyctl"]
    return textwrap.dedent(f"""
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        def keyctl(*args):
            ctypes.set_errno(0)
            return [libc.syscall(ctypes.c_long({nr}), *args), ctypes.get_errno()]
        buf = ctypes.create_string_buffer(64)
        out = [keyctl(ctypes.c_long({_KEYCTL_SEARCH}), ctypes.c_long({_KEY_SPEC_SESSION_KEYRING}), b"user", {desc!r},
                      ctypes.c_long(0)),
               keyctl(ctypes.c_long({_KEYCTL_READ}), ctypes.c_long({serial}), buf, ctypes.c_long(64)),
               buf.value.decode()]
    """)


def _in_child(code: str, **popen: object) -> object:
    done = subprocess.run([sys.executable, "-c", code + "\nimport json\nprint(json.dumps(out))"],
                          capture_output=True, text=True, timeout=30, check=True, **popen)  # type: ignore[call-overload]
    return json.loads(done.stdout)


def test_the_host_s_session_keys_are_out_of_reach_inside_bwrap(probe: Session, host_key: tuple[int, bytes]) -> None:
    serial, desc = host_key
    code = _key_code(serial, desc)
    assert _in_child(code) == [[serial, 0], [11, 0], "host-secret"]  # any plain child of the host reads it
    assert run_value(probe, code + "out") == [[-1, errno.EPERM], [-1, errno.EPERM], ""]


def test_the_kernel_joins_a_session_keyring_of_its_own(host_key: tuple[int, bytes]) -> None:
    # The layer under the filter: a child that joined finds nothing, and may not read the key by its id.
    serial, desc = host_key
    joined = _in_child(_key_code(serial, desc), preexec_fn=_confine.join_session_keyring)
    assert joined == [[-1, errno.ENOKEY], [-1, errno.EACCES], ""]


def test_isolation_none_gets_the_same_filter_and_keyring(host_key: tuple[int, bytes]) -> None:
    # Not a boundary (the same user, the same filesystem), but no reason to leave the keys in reach.
    serial, desc = host_key
    config = SandboxConfig(backend="local", isolation="none", policy="none", timeout_s=20)
    with Runtime([], config) as rt, rt.session() as s:
        assert run_value(s, _key_code(serial, desc) + "out") == [[-1, errno.EPERM], [-1, errno.EPERM], ""]
        assert run_value(s, probe_code(["ptrace", "unshare", "bpf"])) == dict.fromkeys(
            ["ptrace", "unshare", "bpf"], errno.EPERM)


# --- what still works ----------------------------------------------------------------------------

@tool
def double(x: int) -> int:
    """Doubles a number.

    Args:
        x: the number.
    """
    return 2 * x


_WORKLOAD = """
import subprocess, sys, threading
from concurrent.futures import ThreadPoolExecutor
with ThreadPoolExecutor(4) as pool:
    doubled = list(pool.map(double, range(8)))
seen = []
threads = [threading.Thread(target=lambda i=i: seen.append(i * i)) for i in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid() > 1)"], capture_output=True, text=True)
shell = subprocess.run(["/bin/sh", "-c", "echo $((6 * 7))"], capture_output=True, text=True)
{"doubled": doubled, "squares": sorted(seen), "child": child.stdout.strip(), "shell": shell.stdout.strip()}
"""


@pytest.mark.parametrize("isolation", ["bwrap", "none"])
def test_an_ordinary_workload_still_works(isolation: str) -> None:
    if isolation == "bwrap":
        _bwrap_or_skip()
    config = SandboxConfig(backend="local", isolation=isolation, policy="none", timeout_s=30)
    with Runtime([double], config) as rt, rt.session() as s:
        result = s.run(_WORKLOAD)
        assert result.ok, (result.error, result.stderr)
        assert result.value == {"doubled": [2 * i for i in range(8)], "squares": [0, 1, 4, 9], "child": "True",
                                "shell": "42"}
        assert [c.name for c in result.calls].count("double") == 8


def test_bwrap_that_cannot_install_the_filter_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    # Checked once, up front: a kernel or bwrap that refuses the filter would fail every start.
    _bwrap_or_skip()
    monkeypatch.setattr(_confine, "program", lambda: struct.pack("=HBBI", 0x20, 0, 0, 0))  # no ret: invalid
    _bwrap.bwrap_status.cache_clear()
    try:
        ok, reason = _bwrap.bwrap_status()
        assert not ok and "seccomp" in reason, reason
        assert _bwrap.resolve_isolation("auto") == "none"
    finally:
        monkeypatch.undo()
        _bwrap.bwrap_status.cache_clear()
    assert _bwrap.bwrap_status()[0]
