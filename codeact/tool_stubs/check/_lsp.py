"""A minimal Language Server Protocol client over a child's stdin/stdout: requests, notifications,
answers to the server's own requests, and replies awaited with a deadline (a reader thread)."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
from pathlib import Path
from typing import IO, Any

__all__ = ["LspClient", "LspError"]

_MAX_MESSAGE = 64 * 1024 * 1024


class LspError(Exception):
    """The server died, sent something that is not LSP, or did not answer in time."""


class LspClient:
    def __init__(self, command: list[str], cwd: Path) -> None:
        self._proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, cwd=cwd)
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._stdin: IO[bytes] = self._proc.stdin
        self._ids = 0
        self._replies: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._write_lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, args=(self._proc.stdout,), daemon=True,
                                        name="codeact-check-lsp")
        self._reader.start()

    def request(self, method: str, params: dict[str, Any], timeout_s: float) -> Any:
        self._ids += 1
        wanted = self._ids
        self._send({"jsonrpc": "2.0", "id": wanted, "method": method, "params": params})
        while True:
            try:
                message = self._replies.get(timeout=timeout_s)
            except queue.Empty:
                raise LspError(f"no answer to {method} within {timeout_s:g} s") from None
            if message is None:
                raise LspError("the language server ended")
            if message.get("id") == wanted:
                if "error" in message:
                    raise LspError(f"{method}: {message['error']}")
                return message.get("result")

    def notify(self, method: str, params: dict[str, Any]) -> None:
        self._send({"jsonrpc": "2.0", "method": method, "params": params})

    def close(self) -> None:
        self._proc.kill()
        self._proc.wait()
        for stream in (self._proc.stdin, self._proc.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError:  # bytes still buffered for a server that is gone: nobody reads them
                    pass

    def _send(self, message: dict[str, Any]) -> None:
        body = json.dumps(message).encode()
        with self._write_lock:
            try:
                self._stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
                self._stdin.flush()
            except (OSError, ValueError) as exc:
                raise LspError(f"the language server is gone: {exc}") from None

    def _read(self, stream: IO[bytes]) -> None:
        try:
            while (message := _message(stream)) is not None:
                if "method" in message and "id" in message:  # the server asks: a neutral answer
                    items = message.get("params", {}).get("items", [])
                    result = [None] * len(items) if message["method"] == "workspace/configuration" else None
                    self._send({"jsonrpc": "2.0", "id": message["id"], "result": result})
                elif "id" in message:
                    self._replies.put(message)
        except (OSError, ValueError, LspError):
            pass
        finally:
            self._replies.put(None)


def _message(stream: IO[bytes]) -> dict[str, Any] | None:
    length = None
    while True:
        line = stream.readline(1024)
        if not line:
            return None
        if line in (b"\r\n", b"\n"):
            break
        name, _, value = line.decode("ascii", "replace").partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    if length is None or not 0 <= length <= _MAX_MESSAGE:
        raise ValueError(f"not an LSP message header (length {length})")
    data: dict[str, Any] = json.loads(stream.read(length))
    return data
