"""The host's end of a sandbox, the same in every backend: the channel its kernel connects to, and
beside it the egress broker (``SandboxConfig(egress=...)``), from listening to close."""

from __future__ import annotations

from pathlib import Path

from ..errors import SandboxUnavailable
from ..kernel.protocol import FrameSocket
from ._channel import ChannelListener
from .base import SandboxConfig
from .egress import EgressBroker

#: How long a started kernel has to connect.
_ACCEPT_S = 30.0


class HostEnd:
    """What a backend inherits for its host end: :meth:`_listen` in a directory before the kernel
    starts, :meth:`_accept` its connection once it has, :meth:`_close_host_end` in its close (and
    :meth:`_stop_listening` when the start fails before the accept)."""

    config: SandboxConfig

    def __init__(self, config: SandboxConfig) -> None:
        self.config = config
        self._channel: FrameSocket | None = None
        self._listener: ChannelListener | None = None
        #: The host's end of the sandbox's egress (``SandboxConfig(egress=...)``), while it runs.
        self.egress: EgressBroker | None = None

    @property
    def channel(self) -> FrameSocket:
        if self._channel is None:
            raise SandboxUnavailable("the sandbox is not started")
        return self._channel

    def _listen(self, directory: Path, owner_uid: int | None = None) -> Path:
        """Listen in ``directory`` for the kernel (the egress broker too, when egress is on); the
        socket's path. ``owner_uid``: who the socket is for (a container's user)."""
        self._listener = ChannelListener(directory, owner_uid=owner_uid)
        if self.config.egress is not None:
            self.egress = EgressBroker(directory, self.config.egress, owner_uid=owner_uid)
        return self._listener.path

    def _accept(self) -> None:
        """Take the started kernel's connection (SandboxUnavailable when it does not come); the
        listener is closed either way."""
        listener, self._listener = self._listener, None
        if listener is None:
            raise SandboxUnavailable("the sandbox is not listening for its kernel")
        try:
            self._channel = listener.accept(_ACCEPT_S, self.config.max_frame_bytes)
            self._channel.spin_s = self.config.spin_us / 1e6
        finally:
            listener.close()

    def _stop_listening(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()

    def _close_host_end(self) -> None:
        """Drop the channel (the kernel exits on EOF), the broker and any listener left."""
        if self._channel is not None:
            self._channel.sock.close()
            self._channel = None
        if self.egress is not None:
            self.egress.close()
        self._stop_listening()
