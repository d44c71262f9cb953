"""Which workspace files a run created or modified: a snapshot before, a comparison after.

A file counts as written by the run when it is new or its stat signature (inode, size, mtime,
ctime) changed. Timestamps are coarse (a clock tick of a few ms), so a file the previous run wrote
moments ago could be rewritten within the same tick with the same size and keep its signature: the
snapshot also hashes such *recent* files (bounded), and the comparison re-hashes them.

An empty workspace whose directory was last changed well before the snapshot (older than a tick)
is not walked again after the run if the directory's own stat signature is unchanged: creating
anything in it would have changed its mtime/ctime (a run that computes and writes nothing, the
common case, costs one ``stat``).

The workspace is the sandbox's: both scans go through ``sandbox.hostfs`` (no link followed, no
FIFO opened blocking, hard links and special files not listed) and are bounded by ``LIMITS``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from ..results import FileInfo
from ..sandbox.hostfs import Limits, Tree

__all__ = ["WorkspaceSnapshot", "snapshot", "written_files"]

MAX_FILES = 1000  # listed per run
_RECENT_NS = 200_000_000  # a file changed this recently may share a timestamp tick with a rewrite
#: Each scan (twice a run, outside its timeout): entries walked, bytes hashed, seconds. Past them the
#: scan is partial: what it found is listed, and nothing is reported removed.
LIMITS = Limits(entries=20_000, bytes=64 * 1024 * 1024, seconds=5.0)
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
    #: False when a limit cut the scan short (see ``LIMITS``).
    complete: bool = True


def _root_sig(root: str) -> _Sig | None:
    try:
        st = os.stat(root)  # the root itself is the host's path, not the sandbox's
    except OSError:
        return None
    return st.st_ino, st.st_dev, st.st_mtime_ns, st.st_ctime_ns


def _tree(root: str) -> Tree | None:
    try:
        return Tree(root, LIMITS, as_owner=True)
    except OSError:
        return None


def snapshot(root: str | os.PathLike[str], reuse: WorkspaceSnapshot | None = None) -> WorkspaceSnapshot:
    """The workspace's state now (taken right before a run). ``reuse``: an earlier snapshot, returned
    as it is when it found the workspace empty and the root's signature is the same now (one ``stat``)."""
    root = os.fspath(root)
    sig = _root_sig(root)  # one stat serves the reuse check and the empty-root check below
    if reuse is not None and reuse.empty_root is not None and sig == reuse.empty_root:
        return reuse
    snap = WorkspaceSnapshot()
    recent = time.time_ns() - _RECENT_NS
    tree = _tree(root)
    if tree is None:
        return snap
    with tree:
        if tree.is_empty() and sig is not None and max(sig[2], sig[3]) < recent and sig == _root_sig(root):
            snap.empty_root = sig
            return snap
        found = tree.listing()
        snap.complete = found.complete
        for rel, st in found.files.items():
            snap.sigs[rel] = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            snap.sizes[rel] = st.st_size
            if max(st.st_mtime_ns, st.st_ctime_ns) >= recent:
                digest = tree.digest(rel)
                if digest is not None:
                    snap.hashes[rel] = digest
    return snap


def written_files(root: str | os.PathLike[str], before: WorkspaceSnapshot) -> tuple[list[FileInfo], list[str]]:
    """(files created or modified since ``before``, sorted; paths of files removed since)."""
    root = os.fspath(root)
    if before.empty_root is not None and _root_sig(root) == before.empty_root:
        return [], []
    tree = _tree(root)
    if tree is None:
        return [], []
    found: list[FileInfo] = []
    with tree:
        listing = tree.listing()
        for rel, st in listing.files.items():
            sig = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            changed = before.sigs.get(rel) != sig
            if not changed and rel in before.hashes:
                changed = tree.digest(rel) != before.hashes[rel]
            if changed:
                found.append(FileInfo(path=rel, size=st.st_size))
    found.sort(key=lambda f: f.path)
    # A partial scan cannot tell a file removed from one not looked at: nothing is called removed.
    removed = sorted(set(before.sigs) - set(listing.files)) if listing.complete else []
    return found[:MAX_FILES], removed
