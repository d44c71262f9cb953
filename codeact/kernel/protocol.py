"""Frame codec shared by the host and the kernel. Standard library only: it runs in the sandbox.

A frame is a 4-byte big-endian length followed by that many bytes of UTF-8 JSON encoding one
object with a ``type`` key. No pickle, ever: the sandbox is hostile, so the host caps every
frame's size before reading it and validates every message after decoding it.

Kernel → host: ``hello``, ``call``, ``output``, ``done``, ``ready``, ``bound``. Host → kernel:
``setup``, ``run``, ``result``, ``interrupt``, ``reset``, ``bind``. There is no shutdown frame: the
host ends a kernel by closing the channel (the kernel exits at its EOF) or by killing it.

The kernel handles ``setup``, ``run``, ``reset`` and ``bind`` one at a time, in order, on its main
thread; each is answered by exactly one frame:

* ``{"type": "setup", "stubs": str, "max_frame"?: int, "spin_us"?: int}`` → ``{"type": "ready",
  "error"?: str}`` (``max_frame``: the largest frame the host reads; the kernel cuts a larger
  ``done`` to fit; ``spin_us``: how long the kernel's reads spin before they block, see
  ``FrameSocket.spin_s``)
* ``{"type": "run", "id": str, "code": str, ...}`` → ``{"type": "done", "id": str, ...}``
* ``{"type": "reset"}`` → ``{"type": "ready", "error"?: str}``: the namespace goes back to its
  baseline, the namespace as setup left it (taken when the first frame after setup arrives):
  every name added since is removed, every baseline name (tool stubs, ``aio``, ``final_answer``,
  ``ToolError``, ``parallel``, ``__builtins__``) is rebound to its baseline object, even one the
  code rebound or deleted. Imported modules, files and threads are not touched.
* ``{"type": "bind", "values": {name: JSON value, ...}}`` → ``{"type": "bound", "error"?: str}``:
  each name is set to its value as the frame decoded it (JSON only: nothing is evaluated). A name
  must be an identifier, not a keyword, not starting with ``__``; otherwise nothing is bound and
  ``error`` says why.
"""

from __future__ import annotations

import _socket
import _thread
import json
import keyword
import os
import re
import select
import struct
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs every idle kernel memory; annotations are never evaluated
    from typing import Any

VERSION = 1
_HEADER = struct.Struct("!I")
#: The largest frame either side will read unless told otherwise.
DEFAULT_MAX_FRAME = 16 * 1024 * 1024
#: How deep a call's arguments may nest (the host refuses deeper ones as invalid arguments).
MAX_DEPTH = 64
#: Arrays and objects in one frame the host will parse, at least (parsed, each costs ~60 bytes).
MIN_CONTAINER_BUDGET = 100_000
#: The head of every call frame the kernel writes (``encode`` keeps the client's key order), so
#: the host can refuse oversized arguments by the frame's size without parsing them.
_CALL_HEAD = re.compile(rb'\{"type":"call","seq":(\d{1,18}),"name":("[^"\\]{0,600}"),"arguments":')
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_EMPTY_PAIR = re.compile(rb"\[\]|\{\}")
#: A JSON escape of a UTF-16 surrogate: a frame that holds none cannot decode to a lone surrogate.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_NOT_BRACKET = bytes(c for c in range(256) if c not in b"[]{}")
#: The longest a read may spin before it blocks (``SandboxConfig.spin_us`` is bounded by it).
MAX_SPIN_US = 10_000
#: A blocking wait shorter than this many spins says the peer answers quickly: spin again.
_SPIN_RELEARN = 4
_MSG_DONTWAIT: int = getattr(_socket, "MSG_DONTWAIT", 0)
#: One spinning reader per process: sessions sharing a host process never spin a core each.
_SPINNER = _thread.allocate_lock()
#: Called between a spinning read's polls. A wake-up on a Unix socket is a *sync* one: the
#: scheduler often puts the woken peer on this very CPU, expecting this side to sleep; a spin
#: that kept the CPU would starve the peer until the spin ran out, every frame (both ends then
#: spin in vain and block, many times slower than never spinning). Yielding lets it run.
_yield = getattr(os, "sched_yield", lambda: None)


class RefusedArguments:
    """A call's arguments the host refused while decoding the frame (too large, or too deep)."""

    __slots__ = ("reason",)

    def __init__(self, reason: str | None = None) -> None:
        self.reason = reason


def too_deep(value: Any, limit: int) -> bool:
    """Whether lists/dicts nest more than ``limit`` levels in ``value`` (iterative: no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        if depth >= limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list, tuple)))
    return False


def _nests_deeper(body: bytes, limit: int) -> bool:
    """Whether the JSON text ``body`` nests arrays/objects more than ``limit`` levels: strings cut
    out, everything but brackets dropped, then one level of empty pairs removed per pass (all in C;
    a Python walk over a large parsed value takes a good part of a second)."""
    brackets = _STRING.sub(b"", body).translate(None, _NOT_BRACKET)
    for _ in range(limit):
        if not brackets:
            return False
        brackets = _EMPTY_PAIR.sub(b"", brackets)
    return bool(brackets)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)
_SCAN: Any = _DECODER.scan_once  # type: ignore[attr-defined]  # set by JSONDecoder.__init__, not in the stubs


def _decode(text: str) -> Any:
    """``_DECODER.decode(text)``: straight through the C scanner when the text is one JSON value
    with nothing around it (every frame either side encodes), else the full decoder (its errors)."""
    try:
        value, end = _SCAN(text, 0)
    except (StopIteration, ValueError):
        return _DECODER.decode(text)
    return value if end == len(text) else _DECODER.decode(text)


def _parse(body: bytes) -> dict[str, Any]:
    """One frame's JSON object (no NaN/Infinity), or FrameError: what both sides accept."""
    try:
        message = _decode(body.decode("utf-8"))
    except RecursionError:
        raise FrameError("frame nests too deep to parse") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise FrameError(f"frame is not valid JSON: {exc}") from None
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        raise FrameError("frame is not an object with a string 'type'")
    return message


def decode_bounded(body: bytes, max_call_bytes: int | None = None) -> dict[str, Any]:
    """Decode one frame the sandbox sent, bounding what parsing it can cost the host.

    A call frame longer than ``max_call_bytes`` (plus room for its envelope) is not parsed: its
    arguments come back as :class:`RefusedArguments`. Arguments nesting deeper than
    :data:`MAX_DEPTH` come back the same way. Raises FrameError for frames that are not JSON
    (NaN and Infinity included), nest past what the parser can take, or hold more arrays and
    objects than the budget (which would blow up in memory when parsed).
    """
    if max_call_bytes is not None and len(body) > max_call_bytes + 1024:
        refused = refused_call(body)
        if refused is not None:
            return refused
    containers = body.count(b"[") + body.count(b"{")
    budget = max(MIN_CONTAINER_BUDGET, (max_call_bytes or 0) // 2)
    if containers > budget:
        stripped = _STRING.sub(b"", body)  # brackets inside strings cost nothing to parse
        if stripped.count(b"[") + stripped.count(b"{") > budget:
            raise FrameError(f"frame holds more than {budget} arrays and objects")
    message = _parse(body)
    # The frame's own object and the arguments object are two levels; MAX_DEPTH more may follow.
    if containers > MAX_DEPTH and message["type"] == "call" and _nests_deeper(body, MAX_DEPTH + 2):
        message["arguments"] = RefusedArguments(f"arguments nest deeper than {MAX_DEPTH} levels")
    if _SURROGATE_ESCAPE.search(body) is not None:
        _refuse_lone_surrogates(message)
    return message


def _refuse_lone_surrogates(message: dict[str, Any]) -> None:
    """Text no writer can encode (a lone surrogate: ``"\\udc80"``) never gets past the decoder.
    The kernel's own frames never hold one (it encodes with "replace"), so a frame that does was
    written by hand: a call's arguments are refused as invalid (the session goes on); anywhere
    else it is a FrameError."""
    arguments = message.pop("arguments", None) if message["type"] == "call" else None
    if _lone_surrogate(message):
        raise FrameError("frame holds a lone surrogate (text that is not valid Unicode)")
    if arguments is not None:
        message["arguments"] = RefusedArguments(
            "arguments hold a lone surrogate (text that is not valid Unicode)") if _lone_surrogate(arguments) \
            else arguments


def _lone_surrogate(value: Any) -> bool:
    """Whether any string (keys included) in the JSON value holds an unpaired surrogate."""
    stack = [value]
    while stack:
        item = stack.pop()
        if type(item) is str:
            if not item.isascii():
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError:
                    return True
        elif type(item) is dict:
            stack.extend(item)
            stack.extend(item.values())
        elif type(item) is list:
            stack.extend(item)
    return False


def refused_call(head: bytes) -> dict[str, Any] | None:
    """The call whose frame starts with ``head``, its arguments refused unparsed (a frame too large
    to parse); None when ``head`` is not the start of a call frame."""
    match = _CALL_HEAD.match(head)
    if match is None:
        return None
    return {"type": "call", "seq": int(match[1]), "name": json.loads(match[2]), "arguments": RefusedArguments()}


def bindable(name: Any) -> bool:
    """Whether a ``bind`` frame may set ``name``: an identifier, not a keyword, not starting with
    ``__`` (``__builtins__``, ``__codeact_call__`` and the like stay the kernel's)."""
    return isinstance(name, str) and name.isidentifier() and not keyword.iskeyword(name) and not name.startswith("__")


class FrameError(Exception):
    """The peer sent something that is not a well-formed frame, or went away."""


class PeerClosed(FrameError):
    """The peer closed the connection."""


class OversizedFrame(FrameError):
    """A frame larger than the reader's limit: ``head`` holds its first bytes (at most
    :data:`HEAD_BYTES`); the rest is skipped unread by the next reads (see ``FrameSocket``)."""

    def __init__(self, size: int, limit: int, head: bytes) -> None:
        super().__init__(f"frame of {size} bytes exceeds the limit of {limit}")
        self.size = size
        self.head = head


#: Bytes of an oversized frame kept to tell what it was (a call frame's head fits in them).
HEAD_BYTES = 1024
_SKIP_CHUNK = 1 << 20


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
_C_ENCODER: Any = getattr(json.encoder, "c_make_encoder", None)


def _not_serializable(obj: Any) -> Any:
    return _ENCODER.default(obj)  # raises TypeError, with json's own message


def _to_json(message: dict[str, Any]) -> str:
    """``_ENCODER.encode(message)``, straight through json's C encoder when there is one (the two
    Python layers of ``JSONEncoder.encode`` cost a few µs a frame, on every frame of both sides)."""
    if _C_ENCODER is None:
        return _ENCODER.encode(message)
    # A fresh markers dict each time, as JSONEncoder makes one: it is the circular-reference check.
    return "".join(_C_ENCODER({}, _not_serializable, json.encoder.encode_basestring, None, ":", ",",
                              False, False, False)(message, 0))


def encode(message: dict[str, Any]) -> bytes:
    """Serialize one message as a frame."""
    text = _to_json(message)
    # "replace": a lone surrogate (print('\ud800')) becomes '?' instead of an unsendable frame.
    body = text.encode("utf-8", "replace")
    return _HEADER.pack(len(body)) + body


class FrameSocket:
    """Reads and writes frames on a connected stream socket (not thread-safe for reading)."""

    def __init__(self, sock: _socket.socket, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        self.sock = sock
        self.max_frame = max_frame
        self._buf = bytearray()
        #: Size in bytes of the last frame read (lets the host bound what it keeps of a message).
        self.last_size = 0
        #: Bytes of an oversized frame still to be discarded before the next frame starts.
        self._skip = 0
        #: Seconds a read polls the socket without blocking before it sleeps in ``recv``. A peer
        #: that answers within them is read without a sleep and a wake-up, which costs more than the
        #: answer itself on a virtual machine; a read whose wait outlasts the spin (an idle session,
        #: a slow tool) stops spinning until a wait is short again. 0: reads always block.
        self.spin_s = 0.0
        self._chatty = True
        #: Set by :meth:`wait_in_poll`: a read that must wait sleeps in ``poll``, not in ``recv``.
        self._poller: Any = None

    def wait_in_poll(self) -> None:
        """Make a read that must wait sleep in ``poll(POLLIN)``, then take the bytes without
        blocking. A thread asleep in a stream socket's ``recv`` is woken each time the peer reads
        what this side sent (the socket's write-space wake-up): after every frame, a wake-up, a
        switch to this thread and back, while the peer is busy with the frame. ``poll`` waits for
        input only. For a blocking socket without a timeout (the kernel's channel)."""
        self._poller = select.poll()
        self._poller.register(self.sock.fileno(), select.POLLIN)

    def send(self, message: dict[str, Any]) -> None:
        self.sock.sendall(encode(message))

    def _fill(self, n: int, until: float | None) -> None:
        while len(self._buf) < n:
            # Only with part of a frame in: a frame that comes whole (the usual case) costs no clock read.
            if until is not None and self._buf and time.monotonic() >= until:
                raise TimeoutError("a frame was still arriving at the read's deadline")
            size = max(65536, n - len(self._buf))
            chunk = self._spun(size) if self.spin_s and self._chatty else None
            if chunk is None:
                if self.spin_s:
                    started = time.perf_counter()
                    try:
                        chunk = self._wait_recv(size)
                    finally:  # a wait its timeout ended was a long one too
                        self._chatty = time.perf_counter() - started < _SPIN_RELEARN * self.spin_s
                else:
                    chunk = self._wait_recv(size)
            if not chunk:
                raise PeerClosed("the peer closed the channel")
            self._buf += chunk

    def _wait_recv(self, size: int) -> bytes:
        """A ``recv`` that may wait (in ``poll`` after :meth:`wait_in_poll`)."""
        poller = self._poller
        if poller is None:
            return self.sock.recv(size)
        while True:
            poller.poll()
            try:
                return self.sock.recv(size, _MSG_DONTWAIT)
            except BlockingIOError:  # readable no more (e.g. a wake-up with nothing left): wait again
                continue

    def _spun(self, size: int) -> bytes | None:
        """What a non-blocking ``recv`` finds within ``spin_s``; None when nothing came, or when this
        read may not spin (another thread of the process spins, or the socket has a Python timeout:
        its ``recv`` polls first, so it would not return at once)."""
        sock = self.sock
        if not _MSG_DONTWAIT or sock.gettimeout() is not None or not _SPINNER.acquire(False):
            return None
        try:
            end = time.perf_counter() + self.spin_s
            while True:
                try:
                    return sock.recv(size, _MSG_DONTWAIT)
                except BlockingIOError:
                    if time.perf_counter() >= end:
                        return None
                    _yield()
        finally:
            _SPINNER.release()

    def _discard(self, until: float | None) -> None:
        """Skip what is left of an oversized frame, never holding more than a chunk of it."""
        held = min(self._skip, len(self._buf))
        del self._buf[:held]
        self._skip -= held
        while self._skip:
            chunk = self.sock.recv(min(self._skip, _SKIP_CHUNK))
            if not chunk:
                raise PeerClosed("the peer closed the channel")
            self._skip -= len(chunk)
            if until is not None and self._skip and time.monotonic() >= until:
                raise TimeoutError("an oversized frame was still arriving at the read's deadline")

    def recv_body(self, until: float | None = None) -> bytes:
        """Read one frame's body, unparsed; raise PeerClosed on EOF and :class:`OversizedFrame`
        for a frame over the limit (its head read, the rest skipped by the next reads).

        ``until`` (``time.monotonic()``): a frame still arriving then raises TimeoutError, its
        bytes so far kept for the next call, so a peer that trickles bytes cannot hold the
        reader past its deadline (each ``recv`` is bounded by the socket's own timeout)."""
        if self._skip:
            self._discard(until)
        self._fill(_HEADER.size, until)
        (size,) = _HEADER.unpack_from(self._buf)
        if size > self.max_frame:
            kept = min(size, HEAD_BYTES)
            self._fill(_HEADER.size + kept, until)
            head = bytes(self._buf[_HEADER.size : _HEADER.size + kept])
            del self._buf[: _HEADER.size + kept]
            self._skip = size - kept
            self.last_size = size
            raise OversizedFrame(size, self.max_frame, head)
        self._fill(_HEADER.size + size, until)
        self.last_size = size
        body = bytes(self._buf[_HEADER.size : _HEADER.size + size])
        del self._buf[: _HEADER.size + size]
        return body

    def recv(self) -> dict[str, Any]:
        """Read one frame; raise FrameError on oversize or garbage, PeerClosed on EOF."""
        return _parse(self.recv_body())

    def has_buffered(self) -> bool:
        return len(self._buf) >= _HEADER.size
