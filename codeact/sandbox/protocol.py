"""Frame codec shared by the host and the kernel. Standard library only: it runs in the sandbox.

A frame is a 4-byte big-endian length followed by that many bytes of UTF-8 JSON encoding one
object with a ``type`` key. No pickle, ever: the sandbox is hostile, so the host caps every
frame's size before reading it and validates every message after decoding it.

Kernel → host: ``hello``, ``call``, ``done``. Host → kernel: ``setup``, ``run``, ``result``,
``interrupt``, ``shutdown``.
"""

from __future__ import annotations

import json
import socket
import struct
from typing import Any

VERSION = 1
_HEADER = struct.Struct("!I")
#: The largest frame either side will read unless told otherwise.
DEFAULT_MAX_FRAME = 16 * 1024 * 1024


class FrameError(Exception):
    """The peer sent something that is not a well-formed frame, or went away."""


class PeerClosed(FrameError):
    """The peer closed the connection."""


def encode(message: dict[str, Any]) -> bytes:
    """Serialize one message as a frame."""
    text = json.dumps(message, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    # "replace": a lone surrogate (print('\ud800')) becomes '?' instead of an unsendable frame.
    body = text.encode("utf-8", "replace")
    return _HEADER.pack(len(body)) + body


class FrameSocket:
    """Reads and writes frames on a connected stream socket (not thread-safe for reading)."""

    def __init__(self, sock: socket.socket, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        self.sock = sock
        self.max_frame = max_frame
        self._buf = bytearray()
        #: Size in bytes of the last frame read (lets the host bound what it keeps of a message).
        self.last_size = 0

    def send(self, message: dict[str, Any]) -> None:
        self.sock.sendall(encode(message))

    def _fill(self, n: int) -> None:
        while len(self._buf) < n:
            chunk = self.sock.recv(max(65536, n - len(self._buf)))
            if not chunk:
                raise PeerClosed("the peer closed the channel")
            self._buf += chunk

    def recv(self) -> dict[str, Any]:
        """Read one frame; raise FrameError on oversize or garbage, PeerClosed on EOF."""
        self._fill(_HEADER.size)
        (size,) = _HEADER.unpack_from(self._buf)
        if size > self.max_frame:
            raise FrameError(f"frame of {size} bytes exceeds the limit of {self.max_frame}")
        self._fill(_HEADER.size + size)
        self.last_size = size
        body = bytes(self._buf[_HEADER.size : _HEADER.size + size])
        del self._buf[: _HEADER.size + size]
        try:
            message = json.loads(body)
        except (UnicodeDecodeError, ValueError) as exc:
            raise FrameError(f"frame is not valid JSON: {exc}") from None
        if not isinstance(message, dict) or not isinstance(message.get("type"), str):
            raise FrameError("frame is not an object with a string 'type'")
        return message

    def has_buffered(self) -> bool:
        return len(self._buf) >= _HEADER.size
