"""The host's only way into a tree the sandbox controls: never follow a path the sandbox can change.

The workspace, a user directory synced in and out, the local backend's scratch directory and its
``inputs/`` are all writable by the code, maybe by a process it left running that swaps entries
while the host looks. So every read, write, listing and hash of such a tree goes through a
:class:`Tree`, which holds a descriptor of the tree's root and resolves every path relative to it:

- with ``openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV | RESOLVE_NO_MAGICLINKS)``
  where the kernel has it (probed once; ``ENOSYS``/``EPERM`` under a seccomp filter fall back),
  else component by component with ``O_NOFOLLOW | O_DIRECTORY`` from the root's descriptor;
- directories are listed with ``os.scandir`` on a directory descriptor, never a path string;
- files are opened ``O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY`` (a FIFO swapped in cannot
  block the host) and accepted only when ``fstat`` of the *opened* descriptor says regular file,
  on the root's own device, with one link: a hard link may name a host file (a link made outside
  the sandbox, or one of a plain-directory workspace on the host's filesystem). Symlinks, FIFOs,
  sockets, device nodes, other devices and hard links are skipped and listed in ``skipped``;
- files are written under a fresh random name (``O_EXCL``, mode 0600 until the final ``fchmod``)
  and renamed over the name, parents made and entered fd-relative: a symlink or hard link planted
  at the name is replaced, never written through, and a failed write leaves the old file;
- each tree carries :class:`Limits` (entries looked at, bytes read, wall time): a listing past them
  comes back ``complete=False`` with the reason, a read past them raises :class:`TreeLimit`; each
  caller decides which of the two it can live with.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import os
import secrets
import stat
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import TracebackType

from ..errors import SandboxError

__all__ = ["Limits", "Listing", "Tree", "TreeLimit", "UnsafePath", "openat2_available", "parts_of"]

#: Tests set this False to force the component-by-component walk.
USE_OPENAT2 = True

_SYS_OPENAT2 = 437  # one number on every architecture (added after the syscall tables were unified)
_RESOLVE_NO_XDEV, _RESOLVE_NO_MAGICLINKS, _RESOLVE_NO_SYMLINKS, _RESOLVE_BENEATH = 0x01, 0x02, 0x04, 0x08
_RESOLVE = _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_XDEV | _RESOLVE_NO_MAGICLINKS
_O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_O_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
_O_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
_CHUNK = 1 << 20
_TRIES = 3  # a name that keeps changing under a write is given up after this many tries


class TreeLimit(SandboxError):
    """A read or copy went past its tree's :class:`Limits` (bytes or wall time)."""


class UnsafePath(SandboxError, ValueError):
    """A relative path that is absolute, empty, or climbs out with ``..``."""


@dataclass(frozen=True)
class Limits:
    """What one :class:`Tree` may cost: entries a listing looks at, bytes read, seconds in all."""

    entries: int = 100_000
    bytes: int = 1 << 40
    seconds: float = 60.0


@dataclass
class Listing:
    """What a walk found: regular files (``lstat`` results, keyed by relative path), directories, and
    what it skipped and why. ``complete`` is False when a limit stopped it (``reason`` says which)."""

    files: dict[str, os.stat_result] = field(default_factory=dict)
    dirs: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    complete: bool = True
    reason: str | None = None


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.setfsuid.argtypes = _libc.setfsgid.argtypes = [ctypes.c_int]
_probe_lock = threading.Lock()
_probed: bool | None = None


def _openat2(dir_fd: int, path: str, flags: int) -> int:
    how = _OpenHow(flags, 0, _RESOLVE)
    raw = os.fsencode(path)
    for _ in range(_TRIES):  # EAGAIN: a rename raced the lookup; the kernel asks to try again
        fd = _libc.syscall(ctypes.c_long(_SYS_OPENAT2), ctypes.c_int(dir_fd), ctypes.c_char_p(raw),
                           ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)))
        if fd >= 0:
            return int(fd)
        err = ctypes.get_errno()
        if err != errno.EAGAIN:
            break
    raise OSError(err, os.strerror(err), path)


def openat2_available() -> bool:
    """Whether ``openat2`` works here (probed once; a seccomp filter may refuse it)."""
    global _probed
    with _probe_lock:
        if _probed is None:
            root = os.open("/", _O_DIR)
            try:
                os.close(_openat2(root, ".", _O_DIR))
                _probed = True
            except OSError:  # ENOSYS (old kernel), EPERM (seccomp), EINVAL (unknown resolve flag)
                _probed = False
            finally:
                os.close(root)
    return _probed


@contextlib.contextmanager
def _filesystem_ids(ids: tuple[int, int] | None) -> Iterator[None]:
    """Open files as ``(uid, gid)`` on this thread only (``setfsuid``/``setfsgid`` are per thread,
    and a nonzero fsuid drops root's file capabilities such as ``CAP_DAC_OVERRIDE``); put back after."""
    if ids is None:
        yield
        return
    old_gid = _libc.setfsgid(ids[1])
    old_uid = _libc.setfsuid(ids[0])
    try:
        if _libc.setfsuid(-1) != ids[0]:  # -1 changes nothing and answers the current fsuid
            raise OSError(errno.EPERM, "cannot take the sandbox user's filesystem identity")
        yield
    finally:
        _libc.setfsuid(old_uid)
        _libc.setfsgid(old_gid)


def parts_of(rel: str) -> list[str]:
    """The components of a relative path; raises :class:`UnsafePath` for anything that could leave."""
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if not parts or rel.startswith("/") or ".." in parts or "\0" in rel:
        raise UnsafePath(f"refusing path {rel!r} (absolute, empty or escaping)")
    return parts


def _kind(st: os.stat_result) -> str:
    mode = st.st_mode
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else "other"


class Tree:
    """A sandbox-controlled tree rooted at ``root`` (a host path the host chose, opened once).

    ``hardlinks=True`` accepts files with more than one link: only for a tree the sandbox never
    wrote (a user's directory copied in). ``as_owner=True`` (a tree the sandbox wrote) opens every
    file and directory with the filesystem identity of the root's owner, the sandbox's user, when
    the host runs as root: whatever a path resolved to, the host opens nothing that user could not.
    Use as a context manager, or call :meth:`close`."""

    def __init__(self, root: str | os.PathLike[str], limits: Limits | None = None, *,
                 hardlinks: bool = False, as_owner: bool = False) -> None:
        self.limits = limits or Limits()
        self.hardlinks = hardlinks
        self._fd = os.open(root, _O_DIR & ~os.O_NOFOLLOW)  # the root is the host's word
        self.root_stat = os.fstat(self._fd)
        self.dev = self.root_stat.st_dev
        owner = (self.root_stat.st_uid, self.root_stat.st_gid)
        #: Whose filesystem identity opens take (None: the host's own).
        self.opens_as = owner if as_owner and os.geteuid() == 0 and owner[0] != 0 else None
        self._deadline = time.monotonic() + self.limits.seconds
        self._bytes_left = self.limits.bytes

    def __enter__(self) -> Tree:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    # -- resolution ---------------------------------------------------------------------------

    def _check_dir(self, fd: int) -> int:
        st = os.fstat(fd)
        if not stat.S_ISDIR(st.st_mode) or st.st_dev != self.dev:
            os.close(fd)
            raise OSError(errno.EXDEV, "not a directory of this tree")
        return fd

    def _walk_dirs(self, parts: list[str]) -> int:
        """A new descriptor of the directory ``parts`` (no creation, nothing followed)."""
        fd = os.dup(self._fd)
        for name in parts:
            try:
                with _filesystem_ids(self.opens_as):
                    opened = os.open(name, _O_DIR, dir_fd=fd)
                nxt = self._check_dir(opened)
            finally:
                os.close(fd)
            fd = nxt
        return fd

    def _open(self, parts: list[str], flags: int) -> int:
        if USE_OPENAT2 and openat2_available():
            with _filesystem_ids(self.opens_as):
                return _openat2(self._fd, "/".join(parts), flags)
        parent = self._walk_dirs(parts[:-1])
        try:
            with _filesystem_ids(self.opens_as):
                return os.open(parts[-1], flags, dir_fd=parent)
        finally:
            os.close(parent)

    def open_dir(self, rel: str) -> int:
        """A checked descriptor of the directory ``rel`` ("" is the root); the caller closes it."""
        if rel == "":
            return os.dup(self._fd)
        return self._check_dir(self._open(parts_of(rel), _O_DIR))

    def open_file(self, rel: str) -> tuple[int, os.stat_result] | None:
        """A descriptor and ``fstat`` of the regular file ``rel``, or None when it is anything else
        (a symlink or a directory on the way, a FIFO, a socket, a device, a hard link, gone)."""
        try:
            fd = self._open(parts_of(rel), _O_READ)
        except OSError:
            return None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_dev != self.dev or (st.st_nlink > 1 and not self.hardlinks):
            os.close(fd)
            return None
        return fd, st

    # -- budgets ------------------------------------------------------------------------------

    def _over(self) -> str | None:
        if time.monotonic() > self._deadline:
            return f"over {self.limits.seconds:g} s"
        return None

    def _take(self, n: int) -> None:
        self._bytes_left -= n
        if self._bytes_left < 0:
            raise TreeLimit(f"over the {self.limits.bytes} bytes this tree may read")
        if (why := self._over()) is not None:
            raise TreeLimit(why)

    # -- reading ------------------------------------------------------------------------------

    def listing(self) -> Listing:
        """Every regular file and directory under the root, walked by descriptors; bounded."""
        out = Listing()
        stack, seen = [""], 0
        while stack:
            rel = stack.pop()
            try:
                fd = self.open_dir(rel)
            except OSError:
                out.skipped[rel] = "changed"
                continue
            try:
                with os.scandir(fd) as entries:
                    for entry in entries:
                        seen += 1
                        why = f"over {self.limits.entries} entries" if seen > self.limits.entries else self._over()
                        if why is not None:
                            out.complete, out.reason = False, why
                            return out
                        child = f"{rel}/{entry.name}" if rel else entry.name
                        self._note(out, fd, entry.name, child, stack)
            except OSError:
                out.skipped[rel] = "changed"
            finally:
                os.close(fd)
        return out

    def _note(self, out: Listing, dir_fd: int, name: str, child: str, stack: list[str]) -> None:
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            return  # gone since the listing
        kind = _kind(st)
        if kind in ("dir", "file") and st.st_dev != self.dev:
            out.skipped[child] = "other device"
        elif kind == "dir":
            out.dirs.append(child)
            stack.append(child)
        elif kind == "file" and st.st_nlink > 1 and not self.hardlinks:
            out.skipped[child] = "hard link"
        elif kind == "file":
            out.files[child] = st
        else:
            out.skipped[child] = kind
            if kind == "symlink":
                out.links.append(child)

    def kind(self, rel: str) -> str | None:
        """What is at ``rel``, reached without following anything: ``file``, ``dir``, ``symlink``,
        ``fifo``, ``socket``, ``device``, ``other``, ``hard link``, ``other device``, or ``symlink on
        the way`` / ``file on the way`` when a component above it is no directory; None when nothing is."""
        parts = parts_of(rel)
        fd = os.dup(self._fd)
        try:
            for i, name in enumerate(parts):
                try:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except (FileNotFoundError, NotADirectoryError):
                    return None
                kind = _kind(st)
                if i == len(parts) - 1:
                    break
                if kind != "dir":
                    return f"{kind} on the way"
                try:
                    with _filesystem_ids(self.opens_as):
                        opened = os.open(name, _O_DIR, dir_fd=fd)
                    nxt = self._check_dir(opened)
                except OSError:
                    return "other device" if st.st_dev != self.dev else "changed"
                os.close(fd)
                fd = nxt
        finally:
            os.close(fd)
        if kind in ("dir", "file") and st.st_dev != self.dev:
            return "other device"
        if kind == "file" and st.st_nlink > 1 and not self.hardlinks:
            return "hard link"
        return kind

    def is_empty(self) -> bool:
        with os.scandir(self._fd) as entries:  # scandir works on a duplicate and rewinds it
            return next(entries, None) is None

    def read(self, rel: str, max_bytes: int) -> tuple[bytes, os.stat_result] | None:
        """The content (at most ``max_bytes + 1`` bytes: longer means over) and ``fstat`` of ``rel``."""
        opened = self.open_file(rel)
        if opened is None:
            return None
        fd, st = opened
        try:
            chunks: list[bytes] = []
            left = max_bytes + 1
            while left > 0 and (chunk := os.read(fd, min(left, _CHUNK))):
                self._take(len(chunk))
                chunks.append(chunk)
                left -= len(chunk)
            return b"".join(chunks), st
        finally:
            os.close(fd)

    def digest(self, rel: str) -> bytes | None:
        """SHA-256 of the regular file ``rel``; None when refused or past this tree's byte budget."""
        if self._bytes_left <= 0 or self._over() is not None:
            return None
        opened = self.open_file(rel)
        if opened is None:
            return None
        fd, _st = opened
        h = hashlib.sha256()
        try:
            while chunk := os.read(fd, _CHUNK):
                self._take(len(chunk))
                h.update(chunk)
        except (TreeLimit, OSError):
            return None
        finally:
            os.close(fd)
        return h.digest()

    def readlink(self, rel: str) -> str:
        parts = parts_of(rel)
        parent = self._walk_dirs(parts[:-1])
        try:
            return os.readlink(parts[-1], dir_fd=parent)
        finally:
            os.close(parent)

    # -- writing ------------------------------------------------------------------------------

    def make_dirs(self, parts: list[str], *, replace: bool, owner: tuple[int, int] | None = None) -> int:
        """A descriptor of the directory ``parts``, made where missing (mode 0755, ``owner``). A
        non-directory on the way is unlinked when ``replace``, else ``NotADirectoryError``."""
        fd = os.dup(self._fd)
        try:
            for name in parts:
                nxt = self._enter(fd, name, replace, owner)
                os.close(fd)
                fd = nxt
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _enter(self, dir_fd: int, name: str, replace: bool, owner: tuple[int, int] | None) -> int:
        for _ in range(_TRIES):
            try:
                return self._check_dir(os.open(name, _O_DIR, dir_fd=dir_fd))
            except FileNotFoundError:
                try:
                    os.mkdir(name, 0o700, dir_fd=dir_fd)
                except FileExistsError:
                    continue
                fd = self._check_dir(os.open(name, _O_DIR, dir_fd=dir_fd))
                if owner is not None:
                    os.fchown(fd, *owner)
                os.fchmod(fd, 0o755)
                return fd
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EXDEV):
                    raise
                if not replace:
                    raise NotADirectoryError(errno.ENOTDIR, f"{name!r} is not a directory") from None
                try:
                    os.unlink(name, dir_fd=dir_fd)  # a symlink or a file where a directory belongs
                except OSError:
                    continue  # swapped again (for a directory, say): look once more
        raise OSError(errno.EAGAIN, f"{name!r} keeps changing")

    def write(self, rel: str, source: bytes | int, *, mode: int, owner: tuple[int, int] | None = None,
              replace: bool = True, inherit: bool = False) -> None:
        """Make ``rel`` a new regular file holding ``source`` (bytes, or a descriptor read to its end,
        counted against this tree's budget): written under a fresh name beside it (``O_EXCL``, 0600),
        then renamed over whatever is at ``rel`` (a directory there raises ``IsADirectoryError``).
        A failed write leaves ``rel`` as it was. ``inherit`` keeps a replaced regular file's mode
        and owner."""
        parts = parts_of(rel)
        parent = self.make_dirs(parts[:-1], replace=replace, owner=owner)
        name = parts[-1]
        try:
            try:
                old: os.stat_result | None = os.stat(name, dir_fd=parent, follow_symlinks=False)
            except FileNotFoundError:
                old = None
            if old is not None and stat.S_ISDIR(old.st_mode):
                raise IsADirectoryError(errno.EISDIR, f"a directory is in the place of {rel}")
            fd, tmp = _create_temp(parent, rel)
            try:
                try:
                    if isinstance(source, bytes):
                        _write_all(fd, source)
                    else:
                        while chunk := os.read(source, _CHUNK):
                            self._take(len(chunk))
                            _write_all(fd, chunk)
                    if inherit and old is not None and stat.S_ISREG(old.st_mode):
                        mode, owner = stat.S_IMODE(old.st_mode) & 0o777, (old.st_uid, old.st_gid)
                    if owner is not None:
                        os.fchown(fd, *owner)
                    os.fchmod(fd, mode & 0o777)
                finally:
                    os.close(fd)
                # rename never follows a link at the destination: a symlink or hard link planted at
                # the name is replaced as an entry, never written through.
                os.rename(tmp, name, src_dir_fd=parent, dst_dir_fd=parent)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=parent)
                raise
        finally:
            os.close(parent)

    def remove(self, rel: str) -> bool:
        """Unlink ``rel`` if it is a regular file (reached without following anything)."""
        parts = parts_of(rel)
        try:
            parent = self._walk_dirs(parts[:-1])
        except OSError:
            return False
        try:
            st = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode):
                return False
            os.unlink(parts[-1], dir_fd=parent)
            return True
        except OSError:
            return False
        finally:
            os.close(parent)

    def symlink(self, rel: str, target: str, *, replace_link: bool = True,
                owner: tuple[int, int] | None = None) -> None:
        """Make ``rel`` a symlink to ``target`` (parents made, never through a link); an existing
        symlink is replaced when ``replace_link``, anything else raises ``FileExistsError``."""
        parts = parts_of(rel)
        parent = self.make_dirs(parts[:-1], replace=False, owner=owner)
        try:
            try:
                st = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
            except FileNotFoundError:
                pass
            else:
                if not (replace_link and stat.S_ISLNK(st.st_mode)):
                    raise FileExistsError(errno.EEXIST, f"{rel} exists and is not a link")
                os.unlink(parts[-1], dir_fd=parent)
            os.symlink(target, parts[-1], dir_fd=parent)
            if owner is not None:
                os.chown(parts[-1], *owner, dir_fd=parent, follow_symlinks=False)
        finally:
            os.close(parent)


def _create_temp(parent: int, rel: str) -> tuple[int, str]:
    """A new, empty, 0600 file under a random name in ``parent`` (``O_EXCL``: never an existing one)."""
    for _ in range(_TRIES):
        tmp = f".codeact-{secrets.token_hex(8)}.tmp"
        try:
            return os.open(tmp, _O_CREATE, 0o600, dir_fd=parent), tmp
        except FileExistsError:
            continue
    raise OSError(errno.EAGAIN, f"cannot make a file beside {rel}")


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
