"""Loopback upstreams for the egress tests: a plain HTTP server and an HTTPS one (a throwaway
certificate made here), counting the requests each path gets, and a pip simple index of one wheel."""

from __future__ import annotations

import base64
import collections
import datetime
import hashlib
import ipaddress
import json
import ssl
import threading
import time
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit


class Upstream:
    """A server on 127.0.0.1 in a thread; ``hits[path]`` counts requests; ``url`` its base."""

    def __init__(self, tls_dir: Path | None = None, wheel: Path | None = None) -> None:
        self.hits: collections.Counter[str] = collections.Counter()
        self.seen_headers: list[dict[str, str]] = []
        self.wheel = wheel
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                upstream.handle(self)

            def do_POST(self) -> None:
                upstream.handle(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        scheme = "http"
        self.cert: Path | None = None
        if tls_dir is not None:
            self.cert, key = _throwaway_cert(tls_dir)
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(self.cert, key)
            self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def handle(self, req: BaseHTTPRequestHandler) -> None:
        url = urlsplit(req.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        self.hits[url.path] += 1
        self.seen_headers.append({k.lower(): v for k, v in req.headers.items()})
        length = int(req.headers.get("Content-Length") or 0)
        body = req.rfile.read(length) if length else b""
        if url.path == "/slow":  # a slow loris: the status line, then a byte now and then
            req.wfile.write(b"HTTP/1.1 200 OK\r\n")
            req.wfile.flush()
            for _ in range(int(query.get("n", "40"))):
                time.sleep(0.25)
                try:
                    req.wfile.write(b"X")
                    req.wfile.flush()
                except OSError:
                    return
            return
        if url.path == "/delay":  # a whole answer, after a while
            time.sleep(float(query.get("s", "0.5")))
            return self._send(req, 200, b"late")
        if url.path == "/redirect":
            return self._send(req, 302, b"", {"Location": query["to"]})
        if url.path == "/big":
            return self._send(req, 200, b"x" * int(query["n"]))
        if url.path == "/headers":
            return self._send(req, 200, json.dumps(self.seen_headers[-1]).encode(), {"Content-Type": "application/json"})
        if url.path == "/echo":  # the request's headers and body, as they arrived
            return self._send(req, 200, json.dumps({"headers": self.seen_headers[-1], "body": body.decode()}).encode())
        if url.path.startswith("/simple") and self.wheel is not None:
            return self._index(req, url.path)
        if url.path.startswith("/files/") and self.wheel is not None:
            return self._send(req, 200, self.wheel.read_bytes(), {"Content-Type": "application/octet-stream"})
        self._send(req, 200, f"hello {self.hits[url.path]}".encode())

    def _index(self, req: BaseHTTPRequestHandler, path: str) -> None:
        assert self.wheel is not None
        name = self.wheel.name.split("-")[0].replace("_", "-")
        if path.rstrip("/") == "/simple":
            return self._send(req, 200, f'<a href="/simple/{name}/">{name}</a>'.encode(), {"Content-Type": "text/html"})
        digest = hashlib.sha256(self.wheel.read_bytes()).hexdigest()
        link = f'<a href="/files/{self.wheel.name}#sha256={digest}">{self.wheel.name}</a>'
        self._send(req, 200, link.encode(), {"Content-Type": "text/html"})

    @staticmethod
    def _send(req: BaseHTTPRequestHandler, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        req.send_response(status)
        for k, v in (headers or {}).items():
            req.send_header(k, v)
        req.send_header("Content-Length", str(len(body)))
        req.end_headers()
        req.wfile.write(body)


def _throwaway_cert(directory: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def make_wheel(directory: Path, name: str = "egress_probe", version: str = "1.0") -> Path:
    """A pure-Python wheel of one module ``name`` whose ``VALUE`` is ``"installed"``."""
    dist = f"{name}-{version}"
    path = directory / f"{dist}-py3-none-any.whl"
    files = {
        f"{name}.py": b'VALUE = "installed"\n',
        f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{dist}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for rel, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{rel},sha256={digest},{len(data)}")
    record.append(f"{dist}.dist-info/RECORD,,")
    with zipfile.ZipFile(path, "w") as zf:
        for rel, data in files.items():
            zf.writestr(rel, data)
        zf.writestr(f"{dist}.dist-info/RECORD", "\n".join(record) + "\n")
    return path


def direct_connect_code(port: int) -> str:
    """Code that connects straight to the host's listener on ``port``, past the broker: ``direct``
    says how it went (``json`` is imported)."""
    return f"""
import json, socket
s = socket.socket()
try:
    s.connect(("127.0.0.1", {port}))
    direct = "connected"
except OSError as e:
    direct = type(e).__name__
"""
