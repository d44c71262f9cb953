"""The transport floor, measured in the same run: no codeact code on either side of the channel.

A container from the sandbox image, with the same hardening (the sandbox's own host config:
network none, read-only root, cap-drop ALL, limits, init…) and a Unix socket in a bind-mounted
directory, runs a ~40-line stdlib script; the host side is a plain socket loop here. Both speak
the same framing codeact uses (4-byte length + JSON), so the only thing missing is codeact:

* ``ping``: the container sends a call-like frame, the host json-decodes it and answers a
  result-like frame; the container times each round trip (as the tool-call bench does).
* ``exec``: the host sends ``{"type": "run", "code": "x = 1"}``, the container ``exec``s the
  compiled code in a persistent namespace and answers; the host times each round trip (as the
  warm bench does).

Both ends wait for a frame the way codeact's channel does (``SandboxConfig.spin_us``): a read
polls without blocking for that long, then blocks. So a ratio to the floor compares like with like;
``spin_s=0.0`` measures the floor with blocking reads (the benches show it beside).
"""

from __future__ import annotations

import inspect
import json
import os
import socket
import struct
import time
from typing import Any

from codeact import SandboxConfig

from ._common import med_p90

_HEADER = struct.Struct("!I")


def spin_recv(s: socket.socket, spin: float) -> bytes:
    """What the next ``recv`` brings; it polls without blocking for ``spin`` seconds first, as
    codeact's channel reads do (``SandboxConfig.spin_us``). The floor scripts run it as source."""
    if spin:
        end = time.perf_counter() + spin
        while time.perf_counter() < end:
            try:
                return s.recv(65536, socket.MSG_DONTWAIT)
            except BlockingIOError:
                os.sched_yield()  # as codeact's spin does: a peer woken onto this CPU runs
    return s.recv(65536)


_SCRIPT = r'''
import json, os, socket, struct, sys, time
H = struct.Struct("!I")
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
for _ in range(500):
    try:
        s.connect("/run/codeact/channel.sock"); break
    except OSError:
        time.sleep(0.01)
buf = bytearray()
SPIN = 0.0
def chunk():
    return spin_recv(s, SPIN)
def recv():
    global buf
    while len(buf) < 4:
        buf += chunk()
    (n,) = H.unpack_from(buf)
    while len(buf) < 4 + n:
        buf += chunk()
    body = bytes(buf[4:4 + n]); del buf[:4 + n]
    return json.loads(body)
def send(obj):
    body = json.dumps(obj, separators=(",", ":")).encode()
    s.sendall(H.pack(len(body)) + body)
ns = {}
while True:
    msg = recv()
    SPIN = msg.get("spin", 0.0)
    if msg["type"] == "ping":
        lat = []
        for i in range(msg["n"]):
            t = time.perf_counter()
            send({"type": "call", "seq": i + 1, "name": "echo", "arguments": {"x": i}})
            reply = recv()
            assert reply["value"] == i
            lat.append(time.perf_counter() - t)
        send({"type": "lat", "lat": lat})
    elif msg["type"] == "run":
        exec(compile(msg["code"], "<cell>", "exec"), ns)
        send({"type": "done", "id": msg["id"], "termination": "completed", "stdout": "", "stderr": ""})
    else:
        break
'''.replace("\nbuf = bytearray()\n", "\n" + inspect.getsource(spin_recv) + "buf = bytearray()\n", 1)


class FloorContainer:
    """A hardened container from the sandbox image running the raw script; close() removes it."""

    def __init__(self, config: SandboxConfig) -> None:
        from codeact.sandbox._owner import LABEL, owner_id
        from codeact.sandbox.docker import DockerSandbox, _client, sandbox_image

        self._client = _client()
        image, python = sandbox_image(config)
        import tempfile
        from pathlib import Path

        session_dir = Path(tempfile.mkdtemp(prefix="codeact-floor-"))
        workspace = session_dir / "workspace"
        workspace.mkdir()
        if os.geteuid() == 0:
            os.chown(workspace, config.uid, config.uid)
        self._box = DockerSandbox(config, session_dir, workspace)
        chan_dir = self._box._prepare_dirs()
        path = chan_dir / "channel.sock"
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(path))
        if os.geteuid() == 0:
            os.chown(path, config.uid, -1)
        listener.listen(1)
        created = self._client.api.create_container(
            image, command=[python, "-s", "-B", "-c", _SCRIPT], user=f"{config.uid}:{config.uid}",
            working_dir="/workspace", hostname="sandbox", environment={}, network_disabled=True,
            labels={LABEL: owner_id(), "codeact.bench": "floor"},
            host_config=self._box._host_config(self._client, chan_dir))
        self.container_id = created["Id"]
        self._client.api.start(self.container_id)
        listener.settimeout(30)
        self.sock, _ = listener.accept()
        listener.close()
        self.sock.settimeout(None)
        self._buf = bytearray()
        #: How long each end's reads spin before they block, as codeact's channel does.
        self.spin_s = config.spin_us / 1e6

    def _send(self, obj: dict[str, Any]) -> None:
        body = json.dumps(obj, separators=(",", ":")).encode()
        self.sock.sendall(_HEADER.pack(len(body)) + body)

    def _recv(self, spin_s: float = 0.0) -> dict[str, Any]:
        while len(self._buf) < 4:
            self._buf += spin_recv(self.sock, spin_s)
        (n,) = _HEADER.unpack_from(self._buf)
        while len(self._buf) < 4 + n:
            self._buf += spin_recv(self.sock, spin_s)
        body = bytes(self._buf[4:4 + n])
        del self._buf[:4 + n]
        return json.loads(body)  # type: ignore[no-any-return]

    def ping(self, n: int, spin_s: float | None = None) -> list[float]:
        """``n`` call/result round trips timed in the container (µs each); ``spin_s``: how long
        reads spin (None: the config's ``spin_us``)."""
        spin = self.spin_s if spin_s is None else spin_s
        self._send({"type": "ping", "n": n, "spin": spin})
        while True:
            msg = self._recv(spin)
            if msg["type"] == "lat":
                return [v * 1e6 for v in msg["lat"]]
            self._send({"type": "result", "seq": msg["seq"], "ok": True, "value": msg["arguments"]["x"]})

    def exec_loop(self, n: int, spin_s: float | None = None) -> list[float]:
        """``n`` run/done round trips of ``x = 1`` timed on the host (µs each); ``spin_s`` as in ``ping``."""
        spin = self.spin_s if spin_s is None else spin_s
        lat = []
        for i in range(n):
            start = time.perf_counter()
            self._send({"type": "run", "id": str(i), "code": "x = 1", "spin": spin})
            self._recv(spin)
            lat.append((time.perf_counter() - start) * 1e6)
        return lat

    def close(self) -> None:
        try:
            self._send({"type": "bye"})
            self.sock.close()
        except OSError:
            pass
        try:
            self._client.api.remove_container(self.container_id, force=True)
        finally:
            import shutil

            shutil.rmtree(self._box.session_dir, ignore_errors=True)


def stats(values: list[float]) -> tuple[float, float]:
    return med_p90(values)


def open_floor(docker: bool, config: SandboxConfig) -> tuple[FloorContainer | None, str]:
    """The floor container when the Docker backend is measured, else None with the reason."""
    if not docker:
        return None, "the raw floor needs the Docker backend"
    try:
        return FloorContainer(config), ""
    except Exception as exc:
        return None, f"n/a: {type(exc).__name__}: {exc}"[:200]
