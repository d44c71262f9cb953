"""A kernel's channel read that must wait sleeps in ``poll(POLLIN)`` (``FrameSocket.wait_in_poll``):
the peer reading what this side sent does not wake it, as it wakes a thread asleep in ``recv``.
Over a real socket pair, the peer a forked process."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from codeact.kernel.protocol import FrameSocket, PeerClosed, encode

FRAME = {"type": "done", "id": "r", "termination": "completed"}

#: In a fresh interpreter (one thread, so no wait for the GIL adds a switch): this side sends a
#: frame and waits for the answer; the forked peer reads the frame once this side sleeps, then
#: answers later. Prints the voluntary context switches of this side's wait (with ``recv`` as the
#: argument instead of ``poll``, the plain ``recv`` wait: 2, the peer's read waking it once more).
_PROBE = textwrap.dedent("""
    import json, os, socket, sys, time
    from codeact.kernel.protocol import FrameSocket, encode
    poll = sys.argv[1] == "poll"
    mine, peer = socket.socketpair()
    if os.fork() == 0:
        mine.close()
        time.sleep(0.1)
        peer.recv(65536)  # the host reading this side's frame
        time.sleep(0.1)
        peer.sendall(encode({"type": "run", "id": "r2", "code": "x = 1"}))
        os._exit(0)
    peer.close()
    chan = FrameSocket(mine)
    if poll:
        chan.wait_in_poll()

    def switches():
        with open("/proc/thread-self/status") as f:
            return int(next(line for line in f if line.startswith("voluntary_ctxt_switches")).split()[1])

    chan.send({"type": "done", "id": "r1", "termination": "completed"})
    before = switches()
    message = chan.recv()
    after = switches()
    os.wait()
    print(json.dumps({"switches": after - before, "id": message["id"]}))
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/thread-self and the wake-ups are Linux's")
def test_a_read_waiting_in_poll_is_woken_once_by_the_answer_not_by_the_peer_reading() -> None:
    out = subprocess.run([sys.executable, "-c", _PROBE, "poll"], capture_output=True, text=True, timeout=60,
                         check=True)
    found = json.loads(out.stdout)
    assert found == {"switches": 1, "id": "r2"}


def _pair() -> tuple[FrameSocket, socket.socket]:
    reader, writer = socket.socketpair()
    chan = FrameSocket(reader, 1 << 20)
    chan.wait_in_poll()
    return chan, writer


@pytest.mark.parametrize("spin_s", [0.0, 0.0002])
def test_a_frame_arriving_in_pieces_is_read_whole_after_poll(spin_s: float) -> None:
    chan, writer = _pair()
    chan.spin_s = spin_s
    data = encode(FRAME)

    def trickle() -> None:
        for i in range(0, len(data), 7):
            time.sleep(0.01)
            writer.sendall(data[i:i + 7])

    thread = threading.Thread(target=trickle)
    thread.start()
    try:
        assert json.loads(chan.recv_body()) == FRAME
    finally:
        thread.join()
        writer.close()


def test_the_peer_closing_while_a_read_waits_in_poll_is_peer_closed() -> None:
    chan, writer = _pair()
    closer = threading.Timer(0.05, writer.close)
    closer.start()
    with pytest.raises(PeerClosed):
        chan.recv_body()
    closer.join()

