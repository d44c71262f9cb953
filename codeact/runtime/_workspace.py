"""Workspace files for snapshots: read them (capped) and lay them back, through ``sandbox.hostfs``.

The workspace is writable by the sandbox, and a process the code left running may change it while
the host reads or writes: every access goes through :class:`~codeact.sandbox.hostfs.Tree`, which
never follows a symlink, never blocks on a FIFO, refuses hard links and other devices, and replaces
whatever is at a name it writes. Collecting for a snapshot is exact or refused (``SnapshotError``);
laying files back removes only what a complete listing named.
"""

from __future__ import annotations

import base64
import stat
from pathlib import Path

from ..errors import SnapshotError
from ..sandbox.hostfs import Limits, Tree, TreeLimit, UnsafePath
from .snapshot import FileOp, SnapshotFile

MAX_FILES = 10_000
#: What collecting or listing the workspace may cost beyond its byte cap (entries looked at, seconds).
LIMITS = Limits(entries=50_000, seconds=30.0)


def list_files(root: Path) -> dict[str, int] | None:
    """Relative path → size of every regular file under ``root``; None when the listing was cut
    short by ``LIMITS`` (so that nobody removes what it did not see)."""
    with Tree(root, LIMITS, as_owner=True) as tree:
        found = tree.listing()
    if not found.complete:
        return None
    return {rel: st.st_size for rel, st in found.files.items()}


def collect_files(root: Path, max_bytes: int, max_files: int = MAX_FILES) -> list[SnapshotFile]:
    """The workspace's regular files; raises SnapshotError when over ``max_bytes``, ``max_files`` or
    ``LIMITS`` (a snapshot is exact or not taken). Links, FIFOs, sockets and devices are left out."""
    with Tree(root, Limits(entries=LIMITS.entries, bytes=max_bytes, seconds=LIMITS.seconds), as_owner=True) as tree:
        found = tree.listing()
        if not found.complete:
            raise SnapshotError(f"the workspace could not be collected: {found.reason}; delete what is not "
                                "needed")
        sizes = {rel: st.st_size for rel, st in found.files.items()}
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
                got = tree.read(rel, max_bytes)
            except TreeLimit as exc:
                raise SnapshotError(f"the workspace could not be collected: {exc}") from None
            if got is None:
                continue  # gone, or swapped for something that is not a regular file
            data, info = got
            if len(data) > max_bytes:
                raise SnapshotError(f"workspace file {rel} grew past the snapshot limit of {max_bytes} bytes")
            files.append(SnapshotFile(path=rel, data=base64.b64encode(data).decode(),
                                      mode=stat.S_IMODE(info.st_mode) & 0o777))
    return files


def lay_files(root: Path, files: list[SnapshotFile], *, keep: set[str] | None, uid: int | None) -> None:
    """Make ``root`` hold ``files`` as saved: write each one, and remove regular files that are
    neither saved nor in ``keep`` (what was there before the replay that made them). ``keep`` None
    (its listing was incomplete) removes nothing."""
    owner = None if uid is None else (uid, uid)
    with Tree(root, LIMITS) as tree:
        if keep is not None:
            saved = {f.path for f in files}
            found = tree.listing()
            for rel in found.files:
                if rel not in saved and rel not in keep:
                    tree.remove(rel)
        for item in files:
            try:
                tree.write(item.path, item.content(), mode=item.mode, owner=owner)
            except UnsafePath:
                raise SnapshotError(f"refusing workspace path {item.path!r} in a snapshot (absolute or "
                                    "escaping)") from None
            except IsADirectoryError:
                raise SnapshotError(f"cannot restore {item.path}: a directory is in its place") from None
            except OSError as exc:
                raise SnapshotError(f"cannot restore {item.path} in the workspace: {exc.strerror}") from None


def apply_ops(root: Path, ops: list[FileOp], *, uid: int | None) -> None:
    """Do again the ``session.files`` writes and removals ``ops`` (a cell's ``files``, before its replay)."""
    owner = None if uid is None else (uid, uid)
    with Tree(root, LIMITS) as tree:
        for op in ops:
            data = op.content()
            try:
                if data is None:
                    tree.remove(op.path)
                else:
                    tree.write(op.path, data, mode=0o644, owner=owner)
            except UnsafePath:
                raise SnapshotError(f"refusing workspace path {op.path!r} in a cell's files") from None
            except OSError as exc:
                raise SnapshotError(f"cannot write {op.path} in the workspace: {exc.strerror or exc}") from None
