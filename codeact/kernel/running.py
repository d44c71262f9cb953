"""What a cell left running, for replay to compare (``done``'s ``facts``): the code's threads still
alive and its processes. Standard library only.

Counting processes walks ``/proc``, which costs more than the rest of a warm run; it is skipped
when nothing can have started since a walk that found none. Whose processes count depends on
where the kernel runs: alone under the host, its children and their descendants (none if it has no
child at all: one ``waitid``); first under a sandbox's init, also the orphans that init adopted, so
the test is that no pid was handed out in the sandbox's pid namespace since (``ns_last_pid``, read
from a descriptor kept open). Where neither test can be made (no ``ns_last_pid``, as in gVisor),
every cell walks.
"""

from __future__ import annotations

import os
import threading

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs every idle kernel memory; annotations are never evaluated
    from typing import Any

__all__ = ["MAX_PROCESSES", "LeftRunning", "count_processes", "count_threads"]

#: Processes are counted up to this many.
MAX_PROCESSES = 1000
_LAST_PID = "/proc/sys/kernel/ns_last_pid"
_ABSENT = -2  # no ns_last_pid here: not asked again
#: ``threading``'s own tables: the threads started and not yet ended, and those being started.
_ACTIVE: dict[int, threading.Thread] = threading._active  # type: ignore[attr-defined]
_LIMBO: dict[threading.Thread, threading.Thread] = threading._limbo  # type: ignore[attr-defined]


def count_threads(own: set[threading.Thread]) -> int:
    """The threads alive that are not the kernel's own (nor C threads Python only saw pass)."""
    # The usual case, checked in C: every thread started and not yet ended is one of the kernel's
    # own (no Python code runs in it, so no other thread changes the dict meanwhile).
    if not _LIMBO and own.issuperset(_ACTIVE.values()):
        return 0
    return sum(1 for t in threading.enumerate()
               if t not in own and t.is_alive() and not isinstance(t, threading._DummyThread))


def count_processes(in_init: bool) -> int | None:
    """The processes the code left (not zombies): the kernel's children and their descendants, and
    with ``in_init`` the other processes the sandbox's init adopted; None without ``/proc``."""
    try:
        me = str(os.getpid())
        todo = _children("self")
        if in_init:  # the first process under an init, in a pid namespace of our own
            todo += [pid for pid in _children("1") if pid != me]
    except OSError:  # no /proc (or no children files): not reported
        return None
    seen: set[str] = set()
    while todo and len(seen) < MAX_PROCESSES:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                if f.read().rpartition(b")")[2].split()[:1] == [b"Z"]:
                    continue
            todo += _children(pid)
        except OSError:  # it ended meanwhile
            seen.discard(pid)
    return len(seen)


def _children(pid: str) -> list[str]:
    found: list[str] = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
            found += f.read().decode().split()
    return found


def _no_children() -> bool:
    """Whether this process has no child at all (running, stopped or a zombie); reaps nothing."""
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WSTOPPED | os.WCONTINUED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    except OSError:
        return False
    return False


class LeftRunning:
    """The ``facts`` of each cell's ``done`` frame, on the kernel's main thread."""

    def __init__(self, own: set[threading.Thread]) -> None:
        self.own = own  # main, reader, drainer (and the egress forwarder): not the code's
        #: The pid mark of the last walk, if it found no process: ``ns_last_pid`` under an init,
        #: ``b""`` alone; None: the next cell walks.
        self._quiet: bytes | None = None
        self._fd = -1
        self._ident: tuple[int, int] | None = None
        #: Whether the kernel is the first process under a sandbox's init, asked once: its parent
        #: is that init for the kernel's whole life (its end ends the sandbox).
        self._in_init: bool | None = None

    def facts(self) -> dict[str, Any]:
        facts: dict[str, Any] = {"threads": count_threads(self.own)}
        in_init = self._in_init
        if in_init is None:
            in_init = self._in_init = os.getppid() == 1
        mark = self._last_pid() if in_init else b""
        if mark is not None and mark == self._quiet and (in_init or _no_children()):
            facts["children"] = 0
            return facts
        children = count_processes(in_init)
        self._quiet = mark if children == 0 else None
        if children is not None:
            facts["children"] = children
        return facts

    def _last_pid(self) -> bytes | None:
        """The last pid handed out in this pid namespace; None where that cannot be read."""
        if self._fd >= 0:
            try:
                st = os.fstat(self._fd)
                if (st.st_dev, st.st_ino) == self._ident:
                    return os.pread(self._fd, 32, 0)
            except OSError:
                pass
            # The code closed (or replaced) the descriptor: it is the code's now; open another.
        elif self._fd == _ABSENT:
            return None
        try:
            fd = os.open(_LAST_PID, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self._fd = _ABSENT
            return None
        try:
            st = os.fstat(fd)
            self._fd, self._ident = fd, (st.st_dev, st.st_ino)
            return os.pread(fd, 32, 0)
        except OSError:
            return None
