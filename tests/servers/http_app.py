"""A small JSON API on 127.0.0.1 for the HTTP and OpenAPI tests (stdlib ``http.server`` in a thread).

It records what it saw (hits per path and key, the credentials that arrived, hit times) so tests
can check from outside what the tools did. Every route that needs auth accepts
``Authorization: Bearer <token>`` or ``X-API-Key: <token>``.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

WEATHER = {
    "Pittsburgh": {"temperature": 12.0, "unit": "C"},
    "Beijing": {"temperature": 68.0, "unit": "F"},
}


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        import sys

        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):  # a client that timed out
            super().handle_error(request, client_address)  # type: ignore[arg-type]


class ApiServer:
    """Start with ``with ApiServer(token) as api:``; ``api.url`` is its base URL."""

    def __init__(self, token: str | None = None) -> None:
        self.token = token
        self.lock = threading.Lock()
        self.hits: Counter[str] = Counter()
        self.hit_times: dict[str, list[float]] = defaultdict(list)
        self.auth_seen: list[str] = []
        self.items: list[dict[str, Any]] = []
        self.httpd = _QuietServer(("127.0.0.1", 0), _handler(self))
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="api-server", daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> ApiServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def hit(self, key: str) -> int:
        with self.lock:
            self.hits[key] += 1
            self.hit_times[key].append(time.monotonic())
            return self.hits[key]


class _Handler(BaseHTTPRequestHandler):
    api: ApiServer  # set on the subclass each server makes
    protocol_version = "HTTP/1.1"
    query: dict[str, str]

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    def send_json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        if body is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def authorized(self) -> bool:
        seen = self.headers.get("Authorization") or self.headers.get("X-API-Key") or ""
        with self.api.lock:
            self.api.auth_seen.append(seen)
        if self.api.token is None:
            return True
        ok = seen in (f"Bearer {self.api.token}", self.api.token)
        if not ok:
            self.send_json(401, {"detail": "missing or wrong credentials"})
        return ok

    def body(self) -> Any:
        size = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(size)) if size else None

    def do_GET(self) -> None:
        self.route("GET")

    def do_POST(self) -> None:
        self.route("POST")

    def route(self, method: str) -> None:
        parts = urlsplit(self.path)
        path = parts.path
        self.query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        self.api.hit(path + (f"?key={self.query['key']}" if "key" in self.query else ""))
        head = path.split("/")[1] if path.count("/") else ""
        if head in OPEN:
            return OPEN[head](self, path)
        if not self.authorized():
            return None
        if head in GUARDED:
            return GUARDED[head](self, method, path)
        return self.send_json(404, {"detail": f"no route {path}"})

    # -- open routes ------------------------------------------------------------------------
    def openapi(self, path: str) -> None:
        from .openapi_doc import OPENAPI

        self.send_json(200, OPENAPI)

    def flaky(self, path: str) -> None:
        """Fail with the status in the path for the first ``times`` hits of ``key``, then answer."""
        status = int(path.rsplit("/", 1)[-1])
        attempt = self.api.hits[path + f"?key={self.query.get('key')}"]
        if attempt <= int(self.query.get("times", "1")):
            extra = {"Retry-After": self.query["after"]} if "after" in self.query else {}
            return self.send_json(status, {"detail": f"try again (attempt {attempt})"}, extra)
        return self.send_json(200, {"ok": True, "attempt": attempt})

    def slow(self, path: str) -> None:
        time.sleep(float(self.query.get("seconds", "2")))
        self.send_json(200, {"slept": True})

    def dribble(self, path: str) -> None:
        """Send the headers, then a body of ``bytes`` bytes, one every ``every`` seconds."""
        total, every = int(self.query.get("bytes", "100")), float(self.query.get("every", "0.1"))
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(total))
        self.end_headers()
        try:
            for _ in range(total):
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(every)
        except OSError:  # the client gave up: what this route is for
            pass

    def status(self, path: str) -> None:
        code = int(path.rsplit("/", 1)[-1])
        self.send_json(code, {"detail": f"status {code} as asked"})

    def redirect(self, path: str) -> None:
        self.send_json(302, None, {"Location": "http://127.0.0.1:9/elsewhere"})

    def redirect_echo(self, path: str) -> None:
        """A trailing-slash redirect that keeps the query (and so echoes a query credential)."""
        query = urlsplit(self.path).query
        self.send_json(301, None, {"Location": f"http://127.0.0.1:9{path}/?{query}"})

    def echo_escaped(self, path: str) -> None:
        """Echo the Authorization header as JSON spelt with escapes: ``\\/`` for each slash and
        ``\\u0074`` for each ``t``; answer with the status the path ends with (``/echo-escaped/400``)."""
        sent = json.dumps(self.headers.get("Authorization") or "")[1:-1]
        data = ('{"you_sent": "' + sent.replace("/", "\\/").replace("t", "\\u0074") + '"}').encode()
        last = path.rsplit("/", 1)[-1]
        self.send_response(int(last) if last.isdigit() else 200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def trace(self, path: str) -> None:
        self.send_json(200, {"trace": self.headers.get("X-Trace-Id")})

    def text(self, path: str) -> None:
        data = b"plain words"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    # -- routes that need the credential ----------------------------------------------------
    def echo_auth(self, method: str, path: str) -> None:  # a careless server echoing the credential
        self.send_json(200, {"you_sent": self.headers.get("Authorization")})

    def weather(self, method: str, path: str) -> None:
        city = path.split("/", 2)[-1]
        if city not in WEATHER:
            return self.send_json(404, {"detail": f"unknown city {city!r}"})
        data = {"city": city, **WEATHER[city]}
        if self.query.get("units") == "C" and data["unit"] == "F":
            data.update(temperature=round((data["temperature"] - 32) * 5 / 9, 1), unit="C")
        return self.send_json(200, data)

    def tenants(self, method: str, path: str) -> None:
        """Only ``/tenants/acme/items/<id>`` is an endpoint a tool exposes; the rest must stay unreached."""
        parts = path.split("/")
        if len(parts) == 5 and parts[1:4] == ["tenants", "acme", "items"]:
            return self.send_json(200, {"tenant": "acme", "item": parts[4]})
        return self.send_json(200, {"tenant": "acme", "secret_admin_view": True})

    def items(self, method: str, path: str) -> None:
        if method == "GET":
            with self.api.lock:
                items = list(self.api.items)
            return self.send_json(200, items[: int(self.query.get("limit", "100"))])
        item = self.body() or {}
        if "name" not in item:
            return self.send_json(400, {"detail": "name is required"})
        if item.get("price", 0) < 0:
            return self.send_json(422, {"detail": "price must not be negative"})
        with self.api.lock:
            item = {"id": len(self.api.items) + 1, **item}
            self.api.items.append(item)
        return self.send_json(201, item)


OPEN: dict[str, Callable[[_Handler, str], None]] = {
    "openapi.json": _Handler.openapi, "flaky": _Handler.flaky, "slow": _Handler.slow, "status": _Handler.status,
    "dribble": _Handler.dribble,
    "redirect": _Handler.redirect, "trace": _Handler.trace, "text": _Handler.text,
    "redirect-echo": _Handler.redirect_echo, "echo-escaped": _Handler.echo_escaped,
}
GUARDED: dict[str, Callable[[_Handler, str, str], None]] = {
    "echo-auth": _Handler.echo_auth, "weather": _Handler.weather, "items": _Handler.items,
    "tenants": _Handler.tenants,
}


def _handler(api: ApiServer) -> type[BaseHTTPRequestHandler]:
    return type("Handler", (_Handler,), {"api": api})
