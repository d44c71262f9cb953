"""Live output: what a streaming run writes, sent to the host as ``output`` frames while it runs.
Standard library only.

Only runs whose frame asks for it (``stream``) stream; the kept output is batched: sent at most
every ``PERIOD`` seconds by the drainer thread, before each tool call (so what the code printed
before a call reaches the host before the call) and once at the run's end.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

try:  # flat in the sandbox image; a package when imported on the host
    from . import frames, protocol
    from ._capture import Output
except ImportError:
    import frames  # type: ignore[no-redef]
    import protocol  # type: ignore[no-redef]
    from _capture import Output  # type: ignore[no-redef]

PERIOD = 0.05  # streamed output is sent at most this often (seconds) ...
_FRAME_CHARS = 256 * 1024  # ... in frames of at most this many characters per chunk
_CHUNK_BYTES = 32  # what a chunk costs in an output frame beyond its text: ["stdout","…"],


class LiveOutput:
    """The streaming run's id and the last flush; ``write`` sends one encoded frame."""

    def __init__(self, output: Output, write: Callable[[bytes], None]) -> None:
        self._output = output
        self._write = write
        self.lock = threading.Lock()  # one flush at a time, so output frames keep their order
        #: The id of the run streaming now, else None.
        self.run_id: str | None = None
        self.flushed = 0.0

    def start(self, run_id: str) -> None:
        with self.lock:
            self._output.live, self.run_id = [], run_id

    def flush(self, max_frame: int, last: bool = False) -> None:
        """Send the output kept since the last flush as ``output`` frames (streaming runs only)."""
        with self.lock:
            run_id = self.run_id
            with self._output.lock:
                chunks = self._output.live or []
                self._output.live = None if last else []
            if last:
                self.run_id = None
            self.flushed = time.monotonic()
            if run_id is not None:
                try:
                    for frame in batches(chunks, max_frame):
                        self._write(protocol.encode({"type": "output", "id": run_id, "chunks": frame}))
                except OSError:
                    pass


def batches(chunks: list[tuple[str, str]], max_frame: int) -> list[list[list[str]]]:
    """``(stream, text)`` pieces as the chunks of as few frames as fit the host's limits."""
    # Every frame fits the host's limits whatever its characters encode to: at most 6 bytes
    # a character (a \u escape) and _CHUNK_BYTES a chunk for its brackets and stream name,
    # and fewer chunks than the frame schema's MAX_CHUNKS.
    room = max_frame - 1024
    per_chunk = min(_FRAME_CHARS, room // 6 - _CHUNK_BYTES)
    merged: list[list[str]] = []
    for name, text in chunks:  # coalesce neighbours of one stream; bound each chunk
        if merged and merged[-1][0] == name and len(merged[-1][1]) + len(text) <= per_chunk:
            merged[-1][1] += text
        else:
            merged.extend([name, text[i:i + per_chunk]] for i in range(0, len(text), per_chunk))
    out: list[list[list[str]]] = []
    size = room
    for chunk in merged:  # as few frames as fit
        cost = 6 * len(chunk[1]) + _CHUNK_BYTES
        if size + cost > room or len(out[-1]) >= frames.MAX_CHUNKS - 1:
            out.append([])
            size = 0
        out[-1].append(chunk)
        size += cost
    return out
