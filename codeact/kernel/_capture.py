"""Capture: what a cell writes, kept in capped buffers and never on the channel. Standard library only.

fd 1 and 2 are pipes whose read ends the kernel drains (so ``os.write``, a subprocess or C code
writing there is captured too); ``sys.stdout``/``sys.stderr`` are in-memory writers during a cell.
Both feed one :class:`Output`: two capped streams and the hard limit on what a cell may write in all.
"""

from __future__ import annotations

import codecs
import fcntl
import os
import select
import struct
import termios
import threading

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs every idle kernel memory; annotations are never evaluated
    from typing import Any


class OutputLimit(BaseException):
    """Raised in the code when it has written more than the hard output limit."""


class _Stream:
    """One captured stream: keeps the first ``cap`` characters, counts the rest."""

    def __init__(self, cap: int) -> None:
        self.parts: list[str] = []
        self.kept = 0
        self.cap = cap
        self.truncated = False

    def add(self, text: str) -> str:
        """Keep what fits; return the kept part."""
        room = self.cap - self.kept
        if len(text) > room:
            self.truncated = True
            text = text[: max(room, 0)]
        if text:
            self.parts.append(text)
            self.kept += len(text)
        return text


class Output:
    """Both captured streams and the hard limit on what a cell may write in all."""

    def __init__(self, write_fds: dict[str, int]) -> None:
        self.lock = threading.Lock()
        self.read_fds = write_fds
        self.decoders = {name: codecs.getincrementaldecoder("utf-8")("replace") for name in write_fds}
        #: (stream, text) kept but not yet streamed to the host; None unless the run asked for events.
        self.live: list[tuple[str, str]] | None = None
        #: The run's label tracking (``flow.Flow``), told of output that no tracked print wrote.
        self.flow: Any = None
        self.total = self.cap = self.hard_limit = -1  # nothing set yet: the reset below makes all
        self.reset(1 << 20, 128 << 20)

    def reset(self, cap: int, hard_limit: int) -> None:
        with self.lock:
            if self.total == 0 and hard_limit == self.hard_limit and cap == self.cap:
                return  # nothing was written since the last reset (the usual warm run): as new already
            self.streams = {name: _Stream(cap) for name in self.read_fds}
            self.cap = cap
            self.total = 0
            self.hard_limit = hard_limit
            self.limit_hit = False

    def add(self, name: str, text: str) -> bool:
        """Append; False once the hard limit is passed."""
        with self.lock:
            self.total += len(text)
            if self.total > self.hard_limit:
                self.limit_hit = True
            kept = self.streams[name].add(text)
            if self.live is not None and kept:
                self.live.append((name, kept))
            return not self.limit_hit

    def pump(self, name: str, fd: int) -> bool:
        """Move what is readable on ``fd`` into the stream (caller holds ``fd_lock``); False at EOF
        (the code closed every write end, e.g. ``os.close(1)``)."""
        try:
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            return True
        if data:
            self.add(name, self.decoders[name].decode(data))
            if self.flow is not None:
                self.flow.untracked.add(name)
        return bool(data)




class Writer:
    """``sys.stdout``/``sys.stderr`` during a cell: in memory, capped, no syscalls."""

    encoding = "utf-8"
    errors = "replace"

    def __init__(self, output: Output, name: str, fd: int) -> None:
        self._output, self._name, self._fd = output, name, fd
        self.buffer = _BinaryWriter(self)

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        flow = self._output.flow
        if flow is not None and not flow.printing:
            flow.untracked.add(self._name)
        if not self._output.add(self._name, text):
            raise OutputLimit("output limit exceeded")
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self._fd

    def writable(self) -> bool:
        return True


class _BinaryWriter:
    def __init__(self, text: Writer) -> None:
        self._text = text

    def write(self, data: bytes) -> int:
        self._text.write(bytes(data).decode("utf-8", "replace"))
        return len(data)

    def flush(self) -> None:
        pass



def capture_fds() -> dict[str, int]:
    """Point fd 1 and 2 at pipes; return the read ends."""
    read_fds = {}
    for fd, name in ((1, "stdout"), (2, "stderr")):
        r, w = os.pipe()
        os.dup2(w, fd)
        os.close(w)
        os.set_blocking(r, False)
        read_fds[name] = r
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    return read_fds


def _pending_bytes(fd: int) -> int:
    buf = fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0")
    return int(struct.unpack("i", buf)[0])




class Capture:
    """fd 1 and 2 captured, the cell's writers, and the one check that nothing is left unread."""

    def __init__(self) -> None:
        self.read_fds = capture_fds()
        self.output = Output(self.read_fds)
        self.writers = Writer(self.output, "stdout", 1), Writer(self.output, "stderr", 2)
        #: Held while bytes read from a pipe are on their way into the output.
        self.fd_lock = threading.Lock()
        self._pending = select.poll()  # one poll(0) tells whether fd 1 or 2 has unread bytes
        for fd in self.read_fds.values():
            self._pending.register(fd, select.POLLIN)

    def drain_now(self) -> None:
        """Move everything written to fd 1 and 2 so far into the output (at a cell's end)."""
        # Under fd_lock even when nothing is unread: the drainer may hold bytes it has read but not
        # yet added, and the cell's report must wait for them (they went missing under load).
        with self.fd_lock:
            if not self._pending.poll(0):  # nothing unread (the usual case): one syscall, not one per fd
                return
            for name, fd in self.read_fds.items():
                while _pending_bytes(fd) > 0:
                    self.output.pump(name, fd)
