"""The host end of the channel: a Unix socket in a per-session directory."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from ..errors import SandboxUnavailable
from ..kernel.protocol import FrameSocket

SOCKET_NAME = "channel.sock"


class ChannelListener:
    """Listens on ``directory/channel.sock`` for exactly one kernel connection."""

    def __init__(self, directory: Path, owner_uid: int | None = None) -> None:
        self.path = directory / SOCKET_NAME
        if len(os.fsencode(self.path)) > 100:
            raise SandboxUnavailable(f"socket path too long for AF_UNIX: {self.path}")
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(str(self.path))
        if owner_uid is not None and os.geteuid() == 0:
            os.chown(self.path, owner_uid, -1)
            os.chmod(self.path, 0o600)
        self._sock.listen(1)

    def accept(self, timeout_s: float, max_frame: int) -> FrameSocket:
        self._sock.settimeout(timeout_s)
        try:
            conn, _ = self._sock.accept()
        except TimeoutError:
            raise SandboxUnavailable(f"the kernel did not connect within {timeout_s:.0f} s") from None
        finally:
            self._sock.close()
        conn.setblocking(True)
        return FrameSocket(conn, max_frame)

    def close(self) -> None:
        self._sock.close()
        self.path.unlink(missing_ok=True)
