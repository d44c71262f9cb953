"""A tiny threaded HTTP server for tests: records each request and answers with JSON."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@contextlib.contextmanager
def json_server(answer: Callable[[dict[str, Any]], Any]) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """(base URL, the requests seen so far); each request ({method, path, query, body}) is answered
    with ``answer(request)`` as JSON."""
    seen: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _answer(self) -> None:
            parts = urlsplit(self.path)
            size = int(self.headers.get("Content-Length") or 0)
            request = {"method": self.command, "path": parts.path, "query": parse_qs(parts.query),
                       "body": json.loads(self.rfile.read(size)) if size else None}
            seen.append(request)
            data = json.dumps(answer(request)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PATCH = do_DELETE = _answer

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", seen
    finally:
        httpd.shutdown()
        httpd.server_close()
