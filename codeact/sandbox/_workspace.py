"""The Docker sandbox's ``/workspace``: a size-limited filesystem of its own, never a user's directory.

As root (the engine's usual setting) the workspace is an ext4 image file of ``disk_mb`` (sparse: it
takes host disk only as the code writes) loop-mounted at ``<session dir>/workspace`` and bind-mounted
into the container. Writing past the quota fails in the code with ``ENOSPC``; the host's disk loses
at most ``disk_mb`` per session. Costs: a sparse copy of a cached empty image (``mkfs`` once per
machine and size) and a ``mount`` per sandbox start (~30 ms; the warm pool does it ahead), one loop
device per live session; the image is deleted at close.

A user-given directory (``rt.session(workspace=DIR)``) is *copied in* at start, so its owner and
mode are never touched and the code can read every file in it whoever owns them, and each run's
written and deleted files (``ExecutionResult.files``) are *written back* after the run; a file the
run created is given the directory's owner. The copy counts against the quota. Changes made to DIR
by others while the session is open are not seen by the code (write to ``session.workspace``).

Without root (no loop devices) the workspace is a plain directory with no quota besides ``fsize``
per file, and a user directory is bind-mounted as it is (run the code as its owner: ``uid``).
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from pathlib import Path

from ..errors import SandboxUnavailable

__all__ = ["Workspace", "loop_available", "unmount_under"]

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
        _sparse_copy(_template(self.disk_mb, self.uid), self._image)  # ~1 ms instead of a mkfs per start
        options = "loop,nosuid,nodev,noatime,noinit_itable"  # noinit_itable: no background zeroing writes
        _run(["mount", "-t", "ext4", "-o", options, str(self._image), str(self.path)])
        self._mounted = True
        os.rmdir(self.path / "lost+found")
        if self.user_dir is not None:
            self._copy_in()

    def _copy_in(self) -> None:
        assert self.user_dir is not None
        try:
            shutil.copytree(self.user_dir, self.path, symlinks=True, dirs_exist_ok=True,
                            copy_function=shutil.copyfile)
        except shutil.Error as exc:
            if any("No space left" in str(e) for e in exc.args[0]):
                raise SandboxUnavailable(f"workspace {self.user_dir} does not fit disk_mb={self.disk_mb}") from None
            raise SandboxUnavailable(f"cannot copy workspace {self.user_dir} in: {exc.args[0][0]}") from None
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise SandboxUnavailable(f"workspace {self.user_dir} does not fit disk_mb={self.disk_mb}") from None
            raise
        for dirpath, dirnames, filenames in os.walk(self.path):
            for name in [*dirnames, *filenames]:
                os.lchown(os.path.join(dirpath, name), self.uid, self.uid)

    def sync_out(self, written: list[str], removed: list[str]) -> None:
        """Write a run's files back to the user's directory (copy-in mode only)."""
        if not self.quota or self.user_dir is None:
            return
        owner = self.user_dir.stat()
        base = os.path.realpath(self.user_dir)
        for rel in written:
            dest = os.path.realpath(os.path.join(base, rel))
            if not dest.startswith(base + os.sep):
                continue  # a path through a symlink the code planted: never write outside the dir
            _make_parents(base, os.path.dirname(dest), owner)
            fresh = not os.path.lexists(dest)
            try:
                _copy_regular(self.path / rel, dest)
                if fresh:
                    os.chown(dest, owner.st_uid, owner.st_gid)
            except OSError:
                continue  # gone again, or unwritable: the result still lists it
        for rel in removed:
            dest = os.path.realpath(os.path.join(base, rel))
            if dest.startswith(base + os.sep) and os.path.isfile(dest) and not os.path.islink(dest):
                os.unlink(dest)

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


def _copy_regular(src: Path, dest: str) -> None:
    """Copy ``src`` (never through a symlink the code may have swapped in) over ``dest``."""
    fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as fin, open(dest, "wb") as fout:
        shutil.copyfileobj(fin, fout, 1 << 20)


def _make_parents(base: str, directory: str, owner: os.stat_result) -> None:
    missing: list[str] = []
    while directory != base and not os.path.isdir(directory):
        missing.append(directory)
        directory = os.path.dirname(directory)
    for path in reversed(missing):
        os.mkdir(path)
        os.chown(path, owner.st_uid, owner.st_gid)


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
