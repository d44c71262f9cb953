"""Which workspace files a run created or modified: a snapshot before, a comparison after.

A file counts as written by the run when it is new or its stat signature (inode, size, mtime,
ctime) changed. Timestamps are coarse (a clock tick of a few ms), so a file the previous run wrote
moments ago could be rewritten within the same tick with the same size and keep its signature: the
snapshot also hashes such *recent* files (bounded), and the comparison re-hashes them.

An empty workspace whose directory was last changed well before the snapshot (older than a tick)
is not walked again after the run if the directory's own stat signature is unchanged: creating
anything in it would have changed its mtime/ctime (a run that computes and writes nothing, the
common case, costs one ``stat``).
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass, field

from ..results import FileInfo

__all__ = ["WorkspaceSnapshot", "snapshot", "written_files"]

MAX_FILES = 1000  # listed per run
_MAX_SCAN = 20_000  # entries walked per snapshot: a hostile workspace cannot make the host walk forever
_RECENT_NS = 200_000_000  # a file changed this recently may share a timestamp tick with a rewrite
_HASH_BUDGET = 64 * 1024 * 1024  # bytes hashed per snapshot
_Sig = tuple[int, int, int, int]


@dataclass
class WorkspaceSnapshot:
    """Relative path → stat signature, and content hashes of the recently changed files."""

    sigs: dict[str, _Sig] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)
    hashes: dict[str, bytes] = field(default_factory=dict)
    #: The root's stat signature when the root held nothing and had not changed recently: while
    #: it stays the same, nothing was created (set by ``snapshot``; None means walk).
    empty_root: _Sig | None = None


def _root_sig(root: str) -> _Sig | None:
    try:
        st = os.stat(root)
    except OSError:
        return None
    return st.st_ino, st.st_dev, st.st_mtime_ns, st.st_ctime_ns


def _walk(root: str) -> list[tuple[str, os.stat_result]]:
    """The regular files under ``root``: at most ``_MAX_SCAN`` entries are looked at in all, however
    many one directory holds (the scan runs twice a run, outside its timeout)."""
    out: list[tuple[str, os.stat_result]] = []
    stack, seen = [root], 0
    while stack and seen < _MAX_SCAN:
        try:
            entries = os.scandir(stack.pop())
        except OSError:
            continue
        with entries:
            for entry in entries:
                seen += 1
                if seen > _MAX_SCAN:
                    break
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    elif entry.is_file(follow_symlinks=False):
                        out.append((os.path.relpath(entry.path, root), entry.stat(follow_symlinks=False)))
                except OSError:
                    continue
    return out


def _digest(path: str, budget: list[int]) -> bytes | None:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                budget[0] -= len(chunk)
                if budget[0] < 0:
                    return None
                h.update(chunk)
    except OSError:
        return None
    return h.digest()


def snapshot(root: str | os.PathLike[str], reuse: WorkspaceSnapshot | None = None) -> WorkspaceSnapshot:
    """The workspace's state now (taken right before a run). ``reuse``: an earlier snapshot, returned
    as it is when it found the workspace empty and the root's signature is the same now (one ``stat``)."""
    root = os.fspath(root)
    sig = _root_sig(root)  # one stat serves the reuse check and the empty-root check below
    if reuse is not None and reuse.empty_root is not None and sig == reuse.empty_root:
        return reuse
    snap = WorkspaceSnapshot()
    recent = time.time_ns() - _RECENT_NS
    budget = [_HASH_BUDGET]
    try:
        with os.scandir(root) as entries:
            empty = next(entries, None) is None
    except OSError:
        empty = False
    if empty and sig is not None and max(sig[2], sig[3]) < recent and sig == _root_sig(root):
        snap.empty_root = sig
        return snap
    for rel, st in _walk(root):
        snap.sigs[rel] = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        snap.sizes[rel] = st.st_size
        if max(st.st_mtime_ns, st.st_ctime_ns) >= recent and budget[0] > 0:
            digest = _digest(os.path.join(root, rel), budget)
            if digest is not None:
                snap.hashes[rel] = digest
    return snap


def written_files(root: str | os.PathLike[str], before: WorkspaceSnapshot) -> tuple[list[FileInfo], list[str]]:
    """(files created or modified since ``before``, sorted; paths of files removed since)."""
    root = os.fspath(root)
    if before.empty_root is not None and _root_sig(root) == before.empty_root:
        return [], []
    found: list[FileInfo] = []
    present: set[str] = set()
    budget = [_HASH_BUDGET]
    for rel, st in _walk(root):
        present.add(rel)
        sig = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        old = before.sigs.get(rel)
        changed = old != sig
        if not changed and rel in before.hashes:
            changed = _digest(os.path.join(root, rel), budget) != before.hashes[rel]
        if changed:
            found.append(FileInfo(path=rel, size=st.st_size))
    found.sort(key=lambda f: f.path)
    removed = sorted(set(before.sigs) - present)
    return found[:MAX_FILES], removed
