"""Workspace files for snapshots: read them (capped) and lay them back, never through a symlink.

The workspace is writable by the sandbox, so anything in it may be a trap: a symlink planted where
the host will write would make the host write outside. Reading skips symlinks; writing walks
every path component with ``O_NOFOLLOW`` relative to directory descriptors and replaces a symlink
found on the way by a real directory or file.
"""

from __future__ import annotations

import base64
import errno
import os
import stat
from pathlib import Path

from ..errors import SnapshotError
from .snapshot import SnapshotFile

MAX_FILES = 10_000
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


def list_files(root: Path) -> dict[str, int]:
    """Relative path → size of every regular file under ``root`` (symlinks not followed)."""
    found: dict[str, int] = {}
    stack = [str(root)]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    found[os.path.relpath(entry.path, root)] = entry.stat(follow_symlinks=False).st_size
            except OSError:
                continue
    return found


def collect_files(root: Path, max_bytes: int, max_files: int = MAX_FILES) -> list[SnapshotFile]:
    """The workspace's regular files; raises SnapshotError when over ``max_bytes`` or ``max_files``."""
    sizes = list_files(root)
    total = sum(sizes.values())
    if total > max_bytes or len(sizes) > max_files:
        biggest = sorted(sizes.items(), key=lambda kv: -kv[1])[:3]
        listed = ", ".join(f"{p} ({n} bytes)" for p, n in biggest)
        raise SnapshotError(
            f"the workspace holds {total} bytes in {len(sizes)} files, over the snapshot limit of "
            f"{max_bytes} bytes / {max_files} files (largest: {listed}); delete what is not needed or "
            "raise max_workspace_bytes")
    files: list[SnapshotFile] = []
    for rel in sorted(sizes):
        try:
            fd = os.open(root / rel, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue  # gone or swapped for a symlink since the listing
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                continue
            data = handle.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise SnapshotError(f"workspace file {rel} grew past the snapshot limit of {max_bytes} bytes")
        files.append(SnapshotFile(path=rel, data=base64.b64encode(data).decode(),
                                  mode=stat.S_IMODE(info.st_mode) & 0o777))
    return files


def _safe_parts(rel: str) -> list[str]:
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if not parts or rel.startswith("/") or ".." in parts or "\0" in rel:
        raise SnapshotError(f"refusing workspace path {rel!r} in a snapshot (absolute or escaping)")
    return parts


def _enter(dir_fd: int, name: str, uid: int | None) -> int:
    """Open (making it if needed) the directory ``name`` in ``dir_fd``; a symlink there is replaced."""
    for _ in range(3):
        try:
            return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            try:
                os.mkdir(name, 0o755, dir_fd=dir_fd)
                if uid is not None:
                    os.chown(name, uid, uid, dir_fd=dir_fd, follow_symlinks=False)
            except FileExistsError:
                pass
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            os.unlink(name, dir_fd=dir_fd)  # a symlink or a file where a directory belongs
    raise SnapshotError(f"cannot make directory {name!r} in the workspace (it keeps changing)")


def _walk_to_parent(root_fd: int, parts: list[str], uid: int | None) -> int:
    fd = os.dup(root_fd)
    for name in parts[:-1]:
        nxt = _enter(fd, name, uid)
        os.close(fd)
        fd = nxt
    return fd


def _write(root_fd: int, item: SnapshotFile, uid: int | None) -> None:
    parts = _safe_parts(item.path)
    parent = _walk_to_parent(root_fd, parts, uid)
    name = parts[-1]
    try:
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600, dir_fd=parent)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.EISDIR):
                raise
            if exc.errno == errno.EISDIR:
                raise SnapshotError(f"cannot restore {item.path}: a directory is in its place") from None
            os.unlink(name, dir_fd=parent)
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=parent)
        with os.fdopen(fd, "wb") as out:
            out.write(item.content())
            os.fchmod(out.fileno(), item.mode & 0o777)
            if uid is not None:
                os.fchown(out.fileno(), uid, uid)
    finally:
        os.close(parent)


def _remove(root_fd: int, rel: str) -> None:
    parts = _safe_parts(rel)
    try:
        parent = _walk_to_parent_existing(root_fd, parts)
    except OSError:
        return
    try:
        os.unlink(parts[-1], dir_fd=parent)
    except OSError:
        pass
    finally:
        os.close(parent)


def _walk_to_parent_existing(root_fd: int, parts: list[str]) -> int:
    fd = os.dup(root_fd)
    try:
        for name in parts[:-1]:
            nxt = os.open(name, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except OSError:
        os.close(fd)
        raise
    return fd


def lay_files(root: Path, files: list[SnapshotFile], *, keep: set[str], uid: int | None) -> None:
    """Make ``root`` hold ``files`` as saved: write each one, and remove regular files that are
    neither saved nor in ``keep`` (what was there before the replay that made them)."""
    saved = {f.path for f in files}
    root_fd = os.open(root, _DIR_FLAGS)
    try:
        for rel in list_files(root):
            if rel not in saved and rel not in keep:
                _remove(root_fd, rel)
        for item in files:
            _write(root_fd, item, uid)
    finally:
        os.close(root_fd)
