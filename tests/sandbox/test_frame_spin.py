"""A channel read spins (non-blocking ``recv``) for ``spin_s`` before it blocks, and only while the
peer answers quickly: a long wait stops the spinning, a short one starts it again. Over a real
socket pair, with a wrapper that counts which kind of ``recv`` each read made."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from typing import Any

import pydantic
import pytest

from codeact import Runtime, SandboxConfig
from codeact.kernel import protocol
from codeact.kernel.protocol import MAX_SPIN_US, FrameSocket, PeerClosed, encode
from codeact.sandbox.driver import _timeval

FRAME = {"type": "done", "id": "r", "termination": "completed"}


class _Counting:
    """A socket whose ``recv`` calls are counted: ``spins`` non-blocking ones, ``blocks`` the rest."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.spins = 0
        self.blocks = 0

    def recv(self, size: int, flags: int = 0) -> bytes:
        if flags & protocol._MSG_DONTWAIT:
            self.spins += 1
        else:
            self.blocks += 1
        return self.sock.recv(size, flags)

    def gettimeout(self) -> float | None:
        return self.sock.gettimeout()

    def sendall(self, data: bytes) -> None:
        self.sock.sendall(data)


@pytest.fixture
def pair() -> Iterator[tuple[FrameSocket, _Counting, socket.socket]]:
    reader, writer = socket.socketpair()
    counting = _Counting(reader)
    chan = FrameSocket(counting, 1 << 20)  # type: ignore[arg-type]  # the wrapper stands in for the socket
    yield chan, counting, writer
    reader.close()
    writer.close()


def _later(seconds: float, fn: Any, *args: Any) -> threading.Thread:
    def go() -> None:
        time.sleep(seconds)
        fn(*args)

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    return thread


def test_a_quick_answer_is_read_by_spinning_without_a_blocking_recv(
        pair: tuple[FrameSocket, _Counting, socket.socket]) -> None:
    chan, counting, writer = pair
    chan.spin_s = 2.0  # far longer than the answer takes: it must come in during the spin
    _later(0.02, writer.sendall, encode(FRAME))
    assert chan.recv() == FRAME
    assert counting.blocks == 0 and counting.spins > 1  # it polled, found nothing, polled again


def test_a_slow_peer_stops_the_spin_and_a_quick_answer_restarts_it(
        pair: tuple[FrameSocket, _Counting, socket.socket]) -> None:
    chan, counting, writer = pair
    chan.spin_s = 0.001
    _later(0.1, writer.sendall, encode(FRAME))  # a wait of a hundred spins
    assert chan.recv() == FRAME
    assert counting.spins > 0 and counting.blocks == 1 and not chan._chatty
    spins = counting.spins
    writer.sendall(encode(FRAME))  # already there: the blocking read returns at once
    assert chan.recv() == FRAME
    assert counting.spins == spins and counting.blocks == 2  # no spin while the peer was slow
    assert chan._chatty
    writer.sendall(encode(FRAME))
    assert chan.recv() == FRAME
    assert counting.spins == spins + 1 and counting.blocks == 2  # spinning again


def test_a_read_its_timeout_ends_counts_as_a_long_wait(pair: tuple[FrameSocket, _Counting, socket.socket]) -> None:
    chan, counting, _ = pair
    chan.spin_s = 0.001
    counting.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _timeval(0.05))
    with pytest.raises(BlockingIOError):
        chan.recv()
    assert not chan._chatty


def test_a_frame_split_across_the_spin_is_read_whole(pair: tuple[FrameSocket, _Counting, socket.socket]) -> None:
    chan, counting, writer = pair
    chan.spin_s = 2.0
    data = encode(FRAME)
    writer.sendall(data[:3])  # part of the header now, the rest while the reader spins
    _later(0.02, writer.sendall, data[3:])
    assert chan.recv() == FRAME
    assert counting.blocks == 0


def test_the_peer_closing_during_the_spin_is_peer_closed(pair: tuple[FrameSocket, _Counting, socket.socket]) -> None:
    chan, counting, writer = pair
    chan.spin_s = 2.0
    _later(0.02, writer.close)
    with pytest.raises(PeerClosed):
        chan.recv()
    assert counting.blocks == 0


def test_no_spin_when_off_when_another_thread_spins_or_with_a_python_timeout(
        pair: tuple[FrameSocket, _Counting, socket.socket]) -> None:
    chan, counting, writer = pair
    writer.sendall(encode(FRAME))
    assert chan.recv() == FRAME and counting.spins == 0  # spin_s = 0: off
    chan.spin_s = 2.0
    with protocol._SPINNER:  # another reader of this process spins now
        writer.sendall(encode(FRAME))
        assert chan.recv() == FRAME and counting.spins == 0
    counting.sock.settimeout(5)  # its recv would poll first and wait: never spun
    writer.sendall(encode(FRAME))
    assert chan.recv() == FRAME and counting.spins == 0 and counting.blocks == 3
    counting.sock.settimeout(None)
    writer.sendall(encode(FRAME))
    assert chan.recv() == FRAME and counting.spins == 1  # and with neither, it spins


def test_spin_us_is_bounded() -> None:
    assert SandboxConfig().spin_us == 200
    assert SandboxConfig(spin_us=0).spin_us == 0
    assert SandboxConfig(spin_us=MAX_SPIN_US).spin_us == MAX_SPIN_US
    for bad in (-1, MAX_SPIN_US + 1):
        with pytest.raises(pydantic.ValidationError):
            SandboxConfig(spin_us=bad)


_KERNEL_SPIN = (
    "import gc\n"
    "[o.channel.spin_s for o in gc.get_objects() if type(o).__name__ == 'Kernel'][0]"
)


@pytest.mark.parametrize("spin_us", [0, 750])
def test_spin_us_reaches_both_ends_of_a_docker_session(docker_image: str, spin_us: int) -> None:
    config = SandboxConfig(backend="docker", policy="none", timeout_s=20, spin_us=spin_us)
    with Runtime([], config) as rt, rt.session() as session:
        result = session.run(_KERNEL_SPIN)
        assert result.ok, result.error
        assert result.value == spin_us / 1e6
        driver = session.sandbox_state.driver
        assert driver is not None
        assert driver.sandbox.channel.spin_s == spin_us / 1e6


def test_a_kernel_left_idle_stops_spinning(docker_image: str) -> None:
    config = SandboxConfig(backend="docker", policy="none", timeout_s=20, spin_us=200)
    chatty = "import gc\n[o.channel._chatty for o in gc.get_objects() if type(o).__name__ == 'Kernel'][0]"
    with Runtime([], config) as rt, rt.session() as session:
        assert session.run("x = 1").ok
        time.sleep(0.2)  # a thousand spins: the kernel's read of the next run sleeps, and stops spinning
        result = session.run(chatty)
        assert result.ok and result.value is False



#: In a fresh interpreter pinned to one CPU (where a Unix socket's sync wake-up often puts the woken
#: peer anyway): this side and a forked peer, both spinning, trade ``ROUNDS`` frames. Prints how
#: many of this side's spins ran out with nothing read. A spin that kept the CPU would starve the
#: peer until it ran out, every round; one that yields lets the peer answer within it.
_SAME_CPU = textwrap.dedent("""
    import json, os, socket, sys
    from codeact.kernel.protocol import FrameSocket
    ROUNDS = 200
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    mine, peer = socket.socketpair()
    if os.fork() == 0:
        mine.close()
        chan = FrameSocket(peer)
        chan.spin_s = 0.0002
        chan.wait_in_poll()
        for _ in range(ROUNDS):
            chan.recv()
            chan.send({"type": "done", "id": "r", "termination": "completed"})
        os._exit(0)
    peer.close()

    class Counted(FrameSocket):
        missed = 0

        def _spun(self, size):
            got = super()._spun(size)
            Counted.missed += got is None
            return got

    chan = Counted(mine)
    chan.spin_s = 0.0002
    for i in range(ROUNDS):
        chan.send({"type": "run", "id": str(i), "code": "x = 1"})
        chan.recv()
    os.wait()
    print(json.dumps({"missed": Counted.missed, "rounds": ROUNDS}))
""")


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity (Linux)")
def test_a_spin_yields_the_cpu_to_a_peer_woken_onto_it() -> None:
    out = subprocess.run([sys.executable, "-c", _SAME_CPU], capture_output=True, text=True, timeout=120, check=True)
    found = json.loads(out.stdout)
    assert found["rounds"] == 200
    assert found["missed"] <= 50, found  # without the yield nearly every spin runs out: ~200
