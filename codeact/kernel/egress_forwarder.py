"""The sandbox's end of egress: a forwarder on the loopback to the host's broker. Standard library only.

It listens on ``127.0.0.1:PORT`` inside the sandbox (which has no other network) and carries each
connection's bytes, unread, to the broker's Unix socket in the channel's directory and back. The
broker is the proxy: it parses, checks, records and answers. One thread serves every connection
(a selector), started before the kernel's hello so that it counts among the kernel's own threads.
"""

from __future__ import annotations

import os
import selectors
import socket
import sys
import threading

_CHUNK = 64 * 1024


def start(broker_path: str, port: int) -> int:
    """Listen on the loopback (``port`` 0: any free one); returns the port."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", port))
    server.listen(64)
    server.setblocking(False)
    threading.Thread(target=_serve, args=(server, broker_path), name="codeact-egress-forwarder",
                     daemon=True).start()
    return int(server.getsockname()[1])


def configure(port: int, pip_target: str) -> None:
    """The environment that sends ordinary clients (and pip, into ``pip_target``) through the forwarder."""
    proxy = f"http://127.0.0.1:{port}"
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        os.environ[name] = proxy
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        os.environ.pop(name, None)
    os.makedirs(pip_target, exist_ok=True)  # there before the first import looks, so no stale miss
    if "HOME" not in os.environ:  # pip asks where these are, even with no cache and no config
        base = os.path.join(os.path.dirname(pip_target), ".codeact-cache")
        for name in ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME"):
            os.environ.setdefault(name, base)
    os.environ.update(PIP_TARGET=pip_target, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_CACHE_DIR="1",
                      PIP_PROGRESS_BAR="off")
    path = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = pip_target + (os.pathsep + path if path else "")
    if pip_target not in sys.path:
        sys.path.append(pip_target)


def _serve(server: socket.socket, broker_path: str) -> None:
    forwarder = _Forwarder(server, broker_path)
    while True:
        for key, mask in forwarder.sel.select():
            forwarder.ready(key.fileobj, mask)  # type: ignore[arg-type]


class _Forwarder:
    """Pairs of (client, broker) sockets; bytes read from one are held for and written to the other."""

    def __init__(self, server: socket.socket, broker_path: str) -> None:
        self.server, self.broker_path = server, broker_path
        self.sel = selectors.DefaultSelector()
        self.sel.register(server, selectors.EVENT_READ)
        self.peer: dict[socket.socket, socket.socket] = {}
        self.pending: dict[socket.socket, bytearray] = {}  # what is still to be written to this socket
        self.registered: dict[socket.socket, int] = {}

    def ready(self, sock: socket.socket, mask: int) -> None:
        if sock is self.server:
            self._accept()
        elif sock in self.peer:
            if mask & selectors.EVENT_WRITE and not self._write(sock):
                return
            if mask & selectors.EVENT_READ and not self._read(sock):
                return
            self._interest(sock)
            self._interest(self.peer[sock])

    def _accept(self) -> None:
        try:
            client, _ = self.server.accept()
        except OSError:
            return
        broker = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            broker.connect(self.broker_path)
        except OSError:
            client.close()
            broker.close()
            return
        for s in (client, broker):
            s.setblocking(False)
            self.pending[s] = bytearray()
        self.peer[client], self.peer[broker] = broker, client
        self._interest(client)
        self._interest(broker)

    def _write(self, sock: socket.socket) -> bool:
        try:
            sent = sock.send(self.pending[sock])
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            self._drop(sock)
            return False
        del self.pending[sock][:sent]
        return True

    def _read(self, sock: socket.socket) -> bool:
        other = self.peer[sock]
        try:
            data = sock.recv(_CHUNK)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            data = b""
        if not data:  # one side ended: what is held for the other goes first, then both close
            _flush(other, self.pending[other])
            self._drop(sock)
            return False
        self.pending[other] += data
        return True

    def _interest(self, sock: socket.socket) -> None:
        """Read unless too much is held for the peer (back pressure); write while something is held."""
        events = selectors.EVENT_READ if len(self.pending[self.peer[sock]]) < 4 * _CHUNK else 0
        if self.pending[sock]:
            events |= selectors.EVENT_WRITE
        was = self.registered.get(sock, 0)
        if events == was:
            return
        if was and events:
            self.sel.modify(sock, events)
        elif was:
            self.sel.unregister(sock)
        else:
            self.sel.register(sock, events)
        self.registered[sock] = events

    def _drop(self, sock: socket.socket) -> None:
        for s in (sock, self.peer[sock]):
            if self.registered.pop(s, 0):
                self.sel.unregister(s)
            self.peer.pop(s, None)
            self.pending.pop(s, None)
            s.close()


def _flush(sock: socket.socket, data: bytearray) -> None:
    """Write what is held for ``sock`` before it is closed (a short blocking write)."""
    if not data:
        return
    try:
        sock.setblocking(True)
        sock.settimeout(5)
        sock.sendall(data)
    except OSError:
        pass
