"""The kernel's modules start from bytecode shipped beside them (the image's ``__pycache__``, the
local backend's kernel directory), not compiled from source at every sandbox start (``-B`` never
writes any), and that bytecode is checked against the source, so a changed file is never run stale."""

from __future__ import annotations

import importlib.util
import sys

from codeact import Runtime, SandboxConfig
from codeact.image._context import KERNEL_DIR, PythonInfo, dockerfile, kernel_bytecode

#: In the sandbox: for each kernel module imported at start, whether its bytecode file exists (the
#: kernel itself too: it is imported, not run as a script, which would be compiled at every start).
PROBE = ("import os, sys\n"
         "{n: os.path.exists(sys.modules[n].__cached__) for n in ('kernel', 'protocol', 'client', '_capture', '_reading')}")


def test_the_kernel_modules_load_from_shipped_bytecode(backend: str) -> None:
    with Runtime([], SandboxConfig(backend=backend, policy="none")) as runtime, runtime.session() as session:  # type: ignore[arg-type]
        result = session.run(PROBE)
    assert result.ok, result.error
    assert result.value == {"kernel": True, "protocol": True, "client": True, "_capture": True, "_reading": True}


def test_image_bytecode_is_hash_checked_and_copied() -> None:
    info = PythonInfo("/usr/bin/python3", sys.version_info[:2], ("glibc", "2.36"), "x86_64")
    files = {"kernel.py": b"x = 1\n", "protocol.py": b"y = 2\n"}
    pycs = kernel_bytecode(files, info)
    tag = sys.implementation.cache_tag
    assert set(pycs) == {f"__pycache__/kernel.{tag}.pyc", f"__pycache__/protocol.{tag}.pyc"}
    pyc = pycs[f"__pycache__/protocol.{tag}.pyc"]
    assert pyc[:4] == importlib.util.MAGIC_NUMBER
    assert int.from_bytes(pyc[4:8], "little") == 0b11  # hash-based, checked against the source
    assert pyc[8:16] == importlib.util.source_hash(files["protocol.py"])
    assert f"COPY __pycache__/ {KERNEL_DIR}/__pycache__/" in dockerfile("b", sorted(files), "/usr/bin/python3",
                                                                       site=False, user="1:1", bytecode=True)


def test_no_image_bytecode_for_another_python() -> None:
    other = (sys.version_info[0], sys.version_info[1] + 1)
    assert kernel_bytecode({"kernel.py": b"x = 1\n"}, PythonInfo("/usr/bin/python3", other, ("glibc", "2.36"), "x86_64")) == {}
