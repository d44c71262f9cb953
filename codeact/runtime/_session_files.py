"""``Session.files``: read, write, list and remove files of a session's workspace from the host.

The workspace is the sandbox's, writable by the code and by whatever it left running, so every
access goes through :class:`~codeact.sandbox.hostfs.Tree` (nothing followed, no FIFO opened
blocking, writes under a fresh name renamed into place). A symlink, FIFO, device or hard link at a
path, or a symlink or file on the way to it, is refused rather than looked through; sizes are capped
by the runtime's ``max_file_bytes``. Paths are relative to the workspace (``/workspace/...``, the
path the code sees on Docker, is taken as the same).
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Callable
from typing import Any

from ..errors import (
    WorkspaceFileError,
    WorkspaceFileNotFound,
    WorkspaceFileTooLarge,
    WorkspacePathRefused,
)
from ..results import FileInfo
from ..sandbox.driver import KernelDriver
from ..sandbox.hostfs import Limits, Tree, TreeLimit, UnsafePath, parts_of

#: Entries a listing looks at and the seconds one operation may take, beyond the byte cap.
_ENTRIES, _SECONDS = 50_000, 30.0
_MOUNT = "/workspace/"


class SessionFiles:
    """The files of one session's workspace (``session.files``). Safe to use between runs and, from
    another thread, during one (the code sees each write whole: it is renamed into place)."""

    def __init__(self, driver: Callable[[], KernelDriver], max_bytes: int, owner: tuple[int, int] | None,
                 on_change: Callable[[str, bytes | None], None] | None = None) -> None:
        #: The session's kernel, started if need be; during a run, the one running it.
        self._driver = driver
        #: The largest file :meth:`read` returns or :meth:`write` writes (the runtime's ``max_file_bytes``).
        self.max_bytes = max_bytes
        #: Whose a new file is (None: the host user's).
        self._owner = owner
        #: Told each write done (path, data) and removal (path, None): the session's replay log.
        self._on_change = on_change

    def write(self, path: str, data: bytes | str) -> FileInfo:
        """Make ``path`` a regular file holding ``data`` (a str is written as UTF-8), parents made;
        an existing file is replaced, keeping its mode."""
        if isinstance(data, str):
            data = data.encode()
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"data must be bytes or str, not {type(data).__name__}")
        data = bytes(data)
        rel = _relative(path)
        if len(data) > self.max_bytes:
            raise WorkspaceFileTooLarge(f"{path}: {len(data)} bytes is over max_file_bytes ({self.max_bytes})")
        driver = self._driver()
        with self._tree(driver) as tree:
            found = tree.kind(rel)
            if found not in (None, "file"):
                raise _refused(path, found)
            try:
                tree.write(rel, data, mode=0o644, owner=self._owner, replace=False, inherit=True)
            except (NotADirectoryError, IsADirectoryError) as exc:
                raise WorkspacePathRefused(f"{path}: {exc.strerror}") from None
            except OSError as exc:
                raise WorkspaceFileError(f"cannot write {path}: {exc.strerror or exc}") from None
        _sync(driver, [rel], [])
        if self._on_change is not None:
            self._on_change(rel, data)
        return FileInfo(path=rel, size=len(data))

    def read(self, path: str) -> bytes:
        """The content of the regular file ``path``."""
        rel = _relative(path)
        with self._tree(self._driver()) as tree:
            try:
                got = tree.read(rel, self.max_bytes)
            except TreeLimit as exc:
                raise WorkspaceFileError(f"cannot read {path}: {exc}") from None
            if got is None:
                found = tree.kind(rel)
                if found is None:
                    raise WorkspaceFileNotFound(f"no file {path} in the workspace")
                raise _refused(path, found)
        data = got[0]
        if len(data) > self.max_bytes:
            raise WorkspaceFileTooLarge(f"{path} is over max_file_bytes ({self.max_bytes} bytes)")
        return data

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        """:meth:`read`, decoded."""
        return self.read(path).decode(encoding)

    def list(self, dir: str = "") -> builtins.list[FileInfo]:
        """The regular files under the directory ``dir`` (the whole workspace by default), every
        level, sorted by path; links and special files are left out."""
        rel = "" if dir in ("", ".", "/workspace", _MOUNT) else _relative(dir)
        with self._tree(self._driver()) as tree:
            if rel:
                found = tree.kind(rel)
                if found is None:
                    raise WorkspaceFileNotFound(f"no directory {dir} in the workspace")
                if found != "dir":
                    raise _refused(dir, found, want="a directory")
            listing = tree.listing()
        if not listing.complete:
            raise WorkspaceFileError(f"the workspace could not be listed: {listing.reason}")
        prefix = f"{rel}/" if rel else ""
        return sorted((FileInfo(path=p, size=st.st_size) for p, st in listing.files.items() if p.startswith(prefix)),
                      key=lambda f: f.path)

    def remove(self, path: str) -> None:
        """Remove the regular file ``path``."""
        rel = _relative(path)
        driver = self._driver()
        with self._tree(driver) as tree:
            found = tree.kind(rel)
            if found is None:
                raise WorkspaceFileNotFound(f"no file {path} in the workspace")
            if found != "file":
                raise _refused(path, found)
            if not tree.remove(rel):
                raise WorkspaceFileError(f"cannot remove {path}: it changed meanwhile")
        _sync(driver, [], [rel])
        if self._on_change is not None:
            self._on_change(rel, None)

    def _tree(self, driver: KernelDriver) -> Tree:
        limits = Limits(entries=_ENTRIES, bytes=self.max_bytes + 1, seconds=_SECONDS)
        return Tree(driver.sandbox.workspace, limits, as_owner=True)


def _relative(path: Any) -> str:
    """``path`` as a path relative to the workspace; refused when it could leave it."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str, not {type(path).__name__}")
    text = os.fspath(path)
    if not isinstance(text, str):
        raise TypeError("path must be a str, not bytes")
    if text.startswith(_MOUNT):
        text = text[len(_MOUNT):]
    try:
        return "/".join(parts_of(text))
    except UnsafePath:
        raise WorkspacePathRefused(f"refusing path {text!r}: absolute, empty or escaping the workspace") from None


def _refused(path: str, found: str, want: str = "a regular file") -> WorkspacePathRefused:
    return WorkspacePathRefused(f"refusing {path}: {found} there, not {want} (never followed)")


def _sync(driver: KernelDriver, written: list[str], removed: list[str]) -> None:
    """A workspace that is a copy of the user's directory writes the change back there too."""
    sync_out = getattr(driver.sandbox, "sync_out", None)
    if sync_out is not None:
        sync_out(written, removed)
