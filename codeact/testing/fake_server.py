"""``FakeModelServer``: a real HTTP server on loopback that speaks both vendors' wire formats.

It serves ``POST /v1/chat/completions`` (also ``/chat/completions``) and ``POST /v1/messages``,
answering in order from a script of neutral entries rendered in the format of the endpoint hit:
SSE cut into many small pieces when the request says ``"stream": true``, plain JSON otherwise.
Every request is recorded (``.requests`` bodies; ``.calls`` with path, vendor and headers).

Script entries (a list, or a callable ``(request_body, vendor) -> entry``)::

    "plain text answer"
    {"text": ..., "tool_calls": [{"name", "arguments": dict | raw str, "id"?}],
     "stop_reason"?: neutral ("max_tokens", …) or the vendor's own value,
     "usage"?: {"input_tokens", "output_tokens"}}          # default: characters / 4
    {"http_status": 429, "retry_after"?: 0.1, "message"?: ..., "headers"?: {...}}
    {"truncate_stream": true, "truncate_after"?: N, ...}    # close midway, no terminal event (default:
                                                            # before the last argument piece); a JSON
                                                            # answer is cut mid-body instead
    {"stream_error": "overloaded_error", ...}               # an error event midway through the stream
    {"delay": seconds, ...}                                 # wait before answering

A request the real API would reject (tool results not matching calls, missing
``anthropic-version``…) is answered with a 400 in the vendor's error shape and does not consume
an entry; so does a request after the script is exhausted.

Run standalone: ``python -m codeact.testing.fake_server --script FILE.json --port N``.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from codeact.testing._fake_wire import Vendor, error_body, render_events, render_json, validate

__all__ = ["FakeModelServer", "RecordedRequest"]

Entry = str | Mapping[str, Any]
Script = Sequence[Entry] | Callable[[dict[str, Any], str], Entry]

_ROUTES: dict[str, Vendor] = {
    "/v1/chat/completions": "openai",
    "/chat/completions": "openai",
    "/v1/messages": "anthropic",
}


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server received."""

    vendor: Vendor
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class FakeModelServer:
    """A scripted OpenAI + Anthropic compatible server on ``host:port`` (0 = any free port).

    ``require_api_key`` makes both endpoints answer 401 unless the request carries that key;
    ``chunk_sizes`` bounds the size of streamed text/argument pieces.
    """

    def __init__(
        self,
        script: Script,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        require_api_key: str | None = None,
        chunk_sizes: tuple[int, int] = (3, 7),
    ) -> None:
        self.script = script if callable(script) else list(script)
        self.require_api_key = require_api_key
        self.chunk_sizes = chunk_sizes
        self.calls: list[RecordedRequest] = []
        self.served = 0
        self._lock = threading.Lock()
        self._httpd = _QuietServer((host, port), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> FakeModelServer:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._httpd.serve_forever, args=(0.05,), name="fake-model", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join()
            self._thread = None
        self._httpd.server_close()

    def __enter__(self) -> FakeModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- addresses and records ---------------------------------------------------------------

    @property
    def url(self) -> str:
        """``http://HOST:PORT`` (the Anthropic base URL)."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def openai_base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.url

    @property
    def requests(self) -> list[dict[str, Any]]:
        """The JSON body of every request received, in order."""
        with self._lock:
            return [c.body for c in self.calls]

    @property
    def remaining(self) -> int | None:
        """Script entries not yet served (``None`` for a callable script)."""
        return None if callable(self.script) else len(self.script) - self.served

    # -- answering ---------------------------------------------------------------------------

    def _record(self, vendor: Vendor, path: str, headers: dict[str, str], body: dict[str, Any]) -> None:
        with self._lock:
            self.calls.append(RecordedRequest(vendor, path, headers, body))

    def _next(self, body: dict[str, Any], vendor: Vendor) -> tuple[int, Entry | None]:
        """``(n, entry)``; entry ``None`` when the script is exhausted."""
        with self._lock:
            n = self.served
            if callable(self.script):
                self.served += 1
                return n, self.script(body, vendor)
            if n >= len(self.script):
                return n, None
            self.served += 1
            return n, self.script[n]


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """Ignore clients that hung up (a timed-out client, a cut stream); report the rest."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def _handler_for(server: FakeModelServer) -> type[BaseHTTPRequestHandler]:
    class Handler(_Handler):
        owner = server

    return Handler


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    owner: FakeModelServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send_json(self, status: int, data: Mapping[str, Any], headers: Mapping[str, str] | None = None) -> None:
        payload = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(payload)

    def _cut(self) -> None:
        """Drop the connection without finishing the response."""
        self.wfile.flush()
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        vendor = _ROUTES.get(path)
        if vendor is None:
            self._send_json(404, error_body("openai", 404, f"no route for POST {path}"))
            return
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            self._send_json(400, error_body(vendor, 400, "the request body is not a JSON object"))
            return
        headers = {k.lower(): v for k, v in self.headers.items()}
        self.owner._record(vendor, path, headers, body)
        key = self.owner.require_api_key
        given = headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ")
        if key is not None and given != key:
            self._send_json(401, error_body(vendor, 401, "invalid x-api-key / bearer token"))
            return
        try:
            problems = validate(vendor, body, headers)
        except (AttributeError, TypeError) as exc:
            problems = [f"malformed request: {exc}"]
        if problems:
            self._send_json(400, error_body(vendor, 400, "; ".join(problems)))
            return
        try:
            n, entry = self.owner._next(body, vendor)
        except Exception as exc:  # a bug in a callable script: a final 500, not retried
            message = f"FakeModelServer: the script raised {type(exc).__name__}: {exc}"
            self._send_json(500, error_body(vendor, 500, message), {"x-should-retry": "false"})
            return
        if entry is None:
            message = f"FakeModelServer: script exhausted after {n} responses"
            self._send_json(400, error_body(vendor, 400, message))
            return
        self._answer(vendor, body, n, {"text": entry} if isinstance(entry, str) else entry)

    def _answer(self, vendor: Vendor, body: dict[str, Any], n: int, entry: Mapping[str, Any]) -> None:
        time.sleep(float(entry.get("delay") or 0))
        status = int(entry.get("http_status") or 200)
        if status >= 300:
            headers = {str(k): str(v) for k, v in (entry.get("headers") or {}).items()}
            if entry.get("retry_after") is not None:
                headers["retry-after"] = str(entry["retry_after"])
            message = str(entry.get("message") or f"scripted HTTP {status}")
            self._send_json(status, error_body(vendor, status, message), headers)
            return
        if not body.get("stream"):
            if entry.get("truncate_stream"):  # a dropped connection mid-body
                payload = json.dumps(render_json(entry, vendor, body, n)).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload[: len(payload) // 2])
                self._cut()
                return
            self._send_json(200, render_json(entry, vendor, body, n))
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for event in render_events(entry, vendor, body, n, self.owner.chunk_sizes):
            half = len(event) // 2  # two HTTP chunks per event: lines are split across reads
            for part in (event[:half], event[half:]):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
        if entry.get("truncate_stream"):
            self._cut()
            return
        self.wfile.write(b"0\r\n\r\n")


def main(argv: Sequence[str] | None = None) -> None:
    """Serve a script file until interrupted."""
    parser = argparse.ArgumentParser(
        prog="python -m codeact.testing.fake_server", description="Serve a scripted fake model."
    )
    parser.add_argument("--script", required=True, help="JSON list of entries (or {'responses': [...]})")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    with open(args.script, encoding="utf-8") as fh:
        data = json.load(fh)
    script = data["responses"] if isinstance(data, dict) else data
    with FakeModelServer(script, args.host, args.port) as server:
        print(f"OpenAI base URL:    {server.openai_base_url}", flush=True)
        print(f"Anthropic base URL: {server.anthropic_base_url}", flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
