"""The Docker sandbox's ``/workspace``: a size-limited filesystem of its own, never a user's directory.

As root (the engine's usual setting) the workspace is an ext4 image file of ``disk_mb`` (sparse: it
takes host disk only as the code writes) loop-mounted at ``<session dir>/workspace`` and bind-mounted
into the container. Writing past the quota fails in the code with ``ENOSPC``; the host's disk loses
at most ``disk_mb`` per session. Costs: a sparse copy of a cached empty image (``mkfs`` once per
machine and size) and a ``mount`` per sandbox start (the costly part; the warm pool does it ahead), one loop
device per live session; the image is deleted at close.

A user-given directory (``rt.session(workspace=DIR)``) is *copied in* at start, so its owner and
mode are never touched and the code can read every file in it whoever owns them, and each run's
written and deleted files (``ExecutionResult.files``) are *written back* after the run; a file the
run created is given the directory's owner. Both copies go through ``hostfs`` (nothing followed).
The copy counts against the quota. Changes made to DIR by others while the session is open are not
seen by the code (write to ``session.workspace``).

Without root (no loop devices) the workspace is a plain directory with no quota besides ``fsize``
per file, and a user directory is bind-mounted as it is (run the code as its owner: ``uid``).
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import subprocess
from pathlib import Path

from ..errors import SandboxUnavailable
from .hostfs import Limits, Tree, TreeLimit, parts_of

__all__ = ["Workspace", "loop_available", "unmount_under"]

#: Copying a user's directory in or a run's files out: the quota bounds the bytes.
_COPY_LIMITS = Limits(entries=300_000, seconds=300.0)
_MKFS = ["mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal,^resize_inode"]


def loop_available() -> bool:
    """Whether this process can make quota'd workspaces (root, loop devices, mkfs.ext4)."""
    return os.geteuid() == 0 and os.path.exists("/dev/loop-control") and shutil.which("mkfs.ext4") is not None


class Workspace:
    """``path`` is the host directory the code sees as ``/workspace``."""

    def __init__(self, session_dir: Path, disk_mb: int, uid: int, user_dir: Path | None = None) -> None:
        self.session_dir = session_dir
        self.disk_mb = disk_mb
        self.uid = uid
        self.user_dir = user_dir
        self.quota = loop_available()
        self.path = session_dir / "workspace" if self.quota or user_dir is None else user_dir
        self._image = session_dir / "disk.img"
        self._mounted = False

    def open(self) -> None:
        """Create (and, with a quota, mount) the workspace; copy a user directory in."""
        if not self.quota:
            self.path.mkdir(parents=True, exist_ok=True)
            return
        self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
        _sparse_copy(_template(self.disk_mb, self.uid), self._image)  # a copy of holes, not a mkfs per start
        options = "loop,nosuid,nodev,noatime,noinit_itable"  # noinit_itable: no background zeroing writes
        _run(["mount", "-t", "ext4", "-o", options, str(self._image), str(self.path)])
        self._mounted = True
        os.rmdir(self.path / "lost+found")
        if self.user_dir is not None:
            self._copy_in()

    def _copy_in(self) -> None:
        """Copy the user's directory into the fresh workspace (before the sandbox starts): regular
        files, directories and symlinks (as links, never followed); FIFOs, sockets and devices are
        left out. The directory is the user's, so its hard-linked files are copied too."""
        assert self.user_dir is not None
        owner = (self.uid, self.uid)
        try:
            with Tree(self.user_dir, _COPY_LIMITS, hardlinks=True) as src, Tree(self.path, _COPY_LIMITS) as dst:
                found = src.listing()
                if not found.complete:
                    raise SandboxUnavailable(f"cannot copy workspace {self.user_dir} in: {found.reason}")
                for rel in found.dirs:  # a directory is listed after its parent
                    os.close(dst.make_dirs(parts_of(rel), replace=False, owner=owner))
                for rel in found.files:
                    opened = src.open_file(rel)
                    if opened is not None:
                        fd, st = opened
                        try:
                            dst.write(rel, fd, mode=stat.S_IMODE(st.st_mode) | 0o600, owner=owner)
                        finally:
                            os.close(fd)
                for rel in found.links:
                    dst.symlink(rel, src.readlink(rel), owner=owner)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise SandboxUnavailable(f"workspace {self.user_dir} does not fit disk_mb={self.disk_mb}") from None
            raise SandboxUnavailable(f"cannot copy workspace {self.user_dir} in: {exc}") from None
        except TreeLimit as exc:
            raise SandboxUnavailable(f"cannot copy workspace {self.user_dir} in: {exc}") from None

    def sync_out(self, written: list[str], removed: list[str]) -> None:
        """Write a run's files back to the user's directory (copy-in mode only). Each is read from
        the workspace through ``hostfs`` (a link, FIFO or hard link there is not copied) and made
        anew in the directory, walked fd-relative: a symlink in the directory's own tree is never
        followed (a file below one is not written back; one at the file's name is replaced, as the
        code replaced it). A file that was there keeps its mode and owner; a new one gets the
        directory's owner."""
        if not self.quota or self.user_dir is None:
            return
        owner_st = os.stat(self.user_dir)
        owner = (owner_st.st_uid, owner_st.st_gid)
        with Tree(self.path, _COPY_LIMITS, as_owner=True) as src, Tree(self.user_dir, _COPY_LIMITS) as dest:
            for rel in written:
                opened = src.open_file(rel)
                if opened is None:
                    continue  # gone, or no longer a regular file of the workspace
                fd, st = opened
                try:
                    dest.write(rel, fd, mode=(stat.S_IMODE(st.st_mode) & 0o755) | 0o600, owner=owner,
                               replace=False, inherit=True)
                except OSError:
                    continue  # below a link or a file of the directory, or unwritable: still listed
                except TreeLimit:
                    break
                finally:
                    os.close(fd)
            for rel in removed:
                dest.remove(rel)

    def close(self) -> None:
        """Unmount and delete the image (the session directory itself is removed by the caller)."""
        if self._mounted:
            self._mounted = False
            subprocess.run(["umount", "-l", str(self.path)], capture_output=True)
        self._image.unlink(missing_ok=True)


def _template(disk_mb: int, uid: int) -> Path:
    """A freshly made, empty filesystem image for these parameters, made once per machine (cached)."""
    from .._paths import cache_dir

    inodes = max(1024, min(262_144, disk_mb * 64))  # files the code may create
    path = cache_dir() / "workspace" / f"ext4-{disk_mb}m-{uid}-{inodes}.img"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    try:
        with tmp.open("wb") as fh:
            fh.truncate(disk_mb * 1024 * 1024)
        ext = f"root_owner={uid}:{uid},lazy_itable_init=1,nodiscard"
        _run([*_MKFS, "-N", str(inodes), "-E", ext, str(tmp)])
        os.replace(tmp, path)  # atomic: a concurrent maker's copy is as good as ours
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _sparse_copy(src: Path, dest: Path) -> None:
    """Copy ``src`` keeping its holes (only the few MB of metadata are data)."""
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # the code's data: root's eyes only
    with src.open("rb") as fin, os.fdopen(fd, "wb") as fout:
        size = os.fstat(fin.fileno()).st_size
        fout.truncate(size)
        offset = 0
        while offset < size:
            try:
                data = os.lseek(fin.fileno(), offset, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # only a hole is left
                    break
                raise
            hole = os.lseek(fin.fileno(), data, os.SEEK_HOLE)
            fin.seek(data)
            fout.seek(data)
            remaining = hole - data
            while remaining > 0:
                chunk = fin.read(min(remaining, 1 << 20))
                if not chunk:
                    break
                fout.write(chunk)
                remaining -= len(chunk)
            offset = hole


def _run(cmd: list[str]) -> None:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxUnavailable(f"{cmd[0]} failed: {exc}") from None
    if done.returncode != 0:
        raise SandboxUnavailable(f"{cmd[0]} failed: {done.stderr.strip()[-300:]}")


def unmount_under(root: Path) -> None:
    """Lazily unmount every mount point below ``root`` (a dead owner's workspaces)."""
    prefix = str(root).rstrip("/") + "/"
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return
    for line in lines:
        point = line.split()[4].replace("\\040", " ")
        if point.startswith(prefix):
            subprocess.run(["umount", "-l", point], capture_output=True)
