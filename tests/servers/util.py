"""Helpers for tests that start servers on 127.0.0.1."""

from __future__ import annotations

import os
import socket
import time


def free_port() -> int:
    """A port nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, deadline_s: float = 30.0) -> None:
    end = time.monotonic() + deadline_s
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                return
        except OSError:
            if time.monotonic() > end:
                raise
            time.sleep(0.05)


def process_gone(pid: int, deadline_s: float = 15.0) -> bool:
    """Whether process ``pid`` has exited (waits up to ``deadline_s``)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:  # a child of ours that exited but was not yet reaped still answers kill(0)
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                return True
        except ChildProcessError:
            pass
        time.sleep(0.05)
    return False
