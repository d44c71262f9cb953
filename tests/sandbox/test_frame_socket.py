"""``FrameSocket`` over a real socket pair: a frame over the reader's limit is reported with its head
and skipped unread (never held whole), however large, and the frames after it read normally."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from codeact.kernel import protocol
from codeact.kernel.protocol import FrameSocket, OversizedFrame, PeerClosed, RefusedArguments, encode
from codeact.kernel.protocol import _parse as _parse_body

LIMIT = 64 * 1024


@pytest.fixture
def pair() -> Iterator[tuple[FrameSocket, socket.socket]]:
    reader, writer = socket.socketpair()
    reader.settimeout(5)
    yield FrameSocket(reader, LIMIT), writer
    reader.close()
    writer.close()


def _send_in_background(sock: socket.socket, data: bytes) -> threading.Thread:
    thread = threading.Thread(target=sock.sendall, args=(data,), daemon=True)
    thread.start()
    return thread


def test_an_oversized_call_is_reported_with_its_head_and_skipped(pair: tuple[FrameSocket, socket.socket]) -> None:
    chan, writer = pair
    big = encode({"type": "call", "seq": 7, "name": "echo", "arguments": {"x": "a" * (3 * LIMIT)}})
    sender = _send_in_background(writer, big + encode({"type": "done", "id": "r", "termination": "completed"}))
    with pytest.raises(OversizedFrame) as caught:
        chan.recv_body()
    assert caught.value.size == len(big) - 4 and chan.last_size == caught.value.size
    assert len(caught.value.head) == protocol.HEAD_BYTES
    refused = protocol.refused_call(caught.value.head)
    assert refused is not None and refused["seq"] == 7 and refused["name"] == "echo"
    assert isinstance(refused["arguments"], RefusedArguments)
    assert chan.recv() == {"type": "done", "id": "r", "termination": "completed"}
    sender.join(5)
    assert len(chan._buf) == 0


def test_an_oversized_frame_that_is_not_a_call_has_no_call_head(pair: tuple[FrameSocket, socket.socket]) -> None:
    chan, writer = pair
    big = encode({"type": "done", "id": "r", "termination": "completed", "stdout": "o" * (2 * LIMIT)})
    _send_in_background(writer, big)
    with pytest.raises(OversizedFrame) as caught:
        chan.recv_body()
    assert protocol.refused_call(caught.value.head) is None


def test_a_trickled_frame_gives_control_back_at_the_deadline(pair: tuple[FrameSocket, socket.socket]) -> None:
    chan, writer = pair
    frame = encode({"type": "ready"})
    writer.sendall(frame[:3])
    threading.Timer(0.05, writer.sendall, args=(frame[3:6],)).start()
    with pytest.raises(TimeoutError):  # bytes keep coming, but not the whole frame by then
        chan.recv_body(until=time.monotonic() + 0.01)
    writer.sendall(frame[6:])
    assert chan.recv() == {"type": "ready"}  # nothing read so far was lost


def test_skipping_gives_control_back_at_the_deadline(pair: tuple[FrameSocket, socket.socket]) -> None:
    chan, writer = pair
    big = encode({"type": "call", "seq": 1, "name": "echo", "arguments": {"x": "a" * (10 * LIMIT)}})
    _send_in_background(writer, big + encode({"type": "ready"}))
    with pytest.raises(OversizedFrame):
        chan.recv_body()
    returns = 0
    while True:
        try:
            message = _parse_body(chan.recv_body(until=time.monotonic() - 1))  # always past its deadline
            break
        except TimeoutError:  # the caller may look at its own deadline, then read on
            returns += 1
    assert message == {"type": "ready"}
    assert returns >= 1 and chan._skip == 0


def test_a_peer_that_closes_while_skipped_is_closed(pair: tuple[FrameSocket, socket.socket]) -> None:
    chan, writer = pair
    writer.sendall(encode({"type": "call", "seq": 1, "name": "echo", "arguments": {"x": "a" * (2 * LIMIT)}})[:LIMIT])
    with pytest.raises(OversizedFrame):
        chan.recv_body()
    writer.close()
    with pytest.raises(PeerClosed):
        chan.recv_body()
