"""The files that make up the in-sandbox kernel, laid out flat as the sandbox sees them (the image
builder, `codeact.image`, ships them; the local backend runs them from a cache directory)."""

from __future__ import annotations

import hashlib
import py_compile
import shutil
import tempfile
from pathlib import Path

from codeact._paths import cache_dir

__all__ = ["KERNEL_FILES", "kernel_args", "kernel_hash", "materialize"]

_PACKAGE = Path(__file__).resolve().parent.parent

#: Paths relative to the codeact package; copied flat (the kernel imports its siblings by name).
KERNEL_FILES: tuple[str, ...] = (
    "kernel/kernel.py",
    "kernel/_capture.py",
    "kernel/_cells.py",
    "kernel/_describe.py",
    "kernel/_live.py",
    "kernel/_reading.py",
    "kernel/_sources.py",
    "kernel/protocol.py",
    "kernel/frames.py",
    "kernel/_restricted.py",
    "kernel/_restricted_ast.py",
    "kernel/_restricted_modules.py",
    "kernel/client.py",
    "kernel/lazy_stubs.py",
    "kernel/rich_output.py",
    "kernel/egress_forwarder.py",
    "kernel/running.py",
    "kernel/flow.py",
    "kernel/_flow_rewrite.py",
)


def kernel_args(kernel_dir: str) -> list[str]:
    """The interpreter's arguments that start the kernel in ``kernel_dir`` (its own arguments follow).

    Imported, not run as a script: a script is compiled from source at every start, a module
    loads its bytecode. ``-c`` puts the working directory (the workspace) first on ``sys.path``;
    it is replaced by ``kernel_dir`` before anything is imported from there."""
    return ["-s", "-B", "-c", f"import sys; sys.path[0] = {kernel_dir!r}; import kernel; kernel.main()"]


def kernel_hash(files: tuple[str, ...] = KERNEL_FILES) -> str:
    digest = hashlib.sha256()
    for rel in files:
        digest.update(rel.encode() + b"\0" + (_PACKAGE / rel).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def materialize() -> Path:
    """A directory holding the kernel files flat (and their bytecode), keyed by their hash (made
    once, atomically)."""
    target = cache_dir() / f"kernel-{kernel_hash()}"
    if target.is_dir():
        return target
    tmp = Path(tempfile.mkdtemp(dir=cache_dir(), prefix=".kernel-"))
    for rel in KERNEL_FILES:
        shutil.copyfile(_PACKAGE / rel, tmp / Path(rel).name)
        # Their bytecode too (checked against the source's hash, not its time): the kernel runs with
        # -B, so without it every start compiles them all again.
        py_compile.compile(str(tmp / Path(rel).name), doraise=True,
                           invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
    try:
        tmp.rename(target)
    except OSError:  # another process won the race
        shutil.rmtree(tmp, ignore_errors=True)
    return target
