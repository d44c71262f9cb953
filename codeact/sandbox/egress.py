"""The egress broker: the host's end of a sandbox's only way out, an HTTP proxy on a Unix socket.

The sandbox keeps no network (only ``lo``). With ``SandboxConfig(egress=Egress(...))`` the kernel
starts a forwarder on the sandbox's loopback (``kernel/egress_forwarder.py``) that carries each
connection, unread, over ``egress.sock`` in the channel's directory to this broker, and sets
``HTTP_PROXY``/``HTTPS_PROXY`` so that ordinary clients (urllib, requests, httpx, pip) use it.

The broker takes one request per connection: plain HTTP (an absolute ``http://`` target,
forwarded with ``Connection: close`` and answered from a buffered response) or a ``CONNECT``
tunnel (bytes passed both ways, unseen). Each is checked against the allowlist, resolved here and
connected to the checked address (``_egress_policy``), held to the caps of ``Egress`` (bytes, time,
count, rate) and recorded as an :class:`~codeact.results.EgressRecord`. A refusal is an HTTP answer
from the proxy (403, 429, 502, 504) whose reason phrase and body say why, so the code can print it.

Secrets: ``{{secret:NAME}}`` in a plain-HTTP request header is replaced here by the host's value;
the value never enters the sandbox, and any copy of it in the response is masked. The broker does
not terminate TLS: inside a CONNECT tunnel it sees only ciphertext, so a placeholder there is sent
as written (never substituted) and cannot be detected; a secret is for plain-HTTP hosts. Replay: given a
cell's records (:meth:`EgressBroker.begin_run`), plain-HTTP requests are answered from the kept
responses, never sent; a tunnel cannot be replayed (such a cell is inexact).
"""

from __future__ import annotations

import base64
import collections
import contextlib
import hashlib
import os
import re
import selectors
import socket
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from urllib.parse import urlsplit

from ..errors import SandboxUnavailable
from ..results import EgressRecord
from ._egress_policy import Egress, Refused, Resolver, check_address, match_entry, system_resolver

__all__ = ["SOCKET_NAME", "Egress", "EgressBroker"]

SOCKET_NAME = "egress.sock"
_MAX_HEAD = 64 * 1024
_CHUNK = 64 * 1024
#: Refused requests recorded one by one in a take, at most; the rest are counted in one record.
_MAX_REFUSED_RECORDS = 200
_LINGERING = 16  # connections turned away (over the cap) and not closed yet, at most
_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "proxy-authorization", "te", "trailer",
                  "upgrade", "transfer-encoding"})
_SECRET = re.compile(rb"\{\{secret:([A-Za-z0-9_]+)\}\}")


class _Stop(Exception):
    """The exchange ends with an answer from the proxy: ``status`` and the reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


class _Exchange:
    """One connection's request, as it will be recorded; ``until``: when it is cut, and ``late`` why."""

    def __init__(self, started: float, until: float, late: str) -> None:
        self.started, self.until, self.late = started, until, late
        self.record = EgressRecord(method="?", host="", port=0)
        self.published = False


class EgressBroker:
    """Listens on ``directory/egress.sock``; one thread a connection (at most ``Egress.max_connections``)."""

    def __init__(self, directory: Path, config: Egress, owner_uid: int | None = None,
                 resolve: Resolver | None = None) -> None:
        self.config = config
        self.path = directory / SOCKET_NAME
        if len(os.fsencode(self.path)) > 100:
            raise SandboxUnavailable(f"socket path too long for AF_UNIX: {self.path}")
        self._entries = config.entries()
        self._resolve = resolve or system_resolver
        self._secrets = {name.encode(): value.encode() for name, value in config.secrets.items()}
        self._lock = threading.Lock()
        self._records: list[EgressRecord] = []
        self._refused = 0  # refused requests since the last take
        self._run_requests = 0
        self._run_bytes = 0
        self._tokens = float(config.burst)
        self._refilled = time.monotonic()
        self._replay: list[EgressRecord] | None = None
        self._run_started = time.monotonic()
        #: Told of each record as it is put in (the run's live events), on the exchange's thread.
        self._on_record: Callable[[EgressRecord], None] | None = None
        self._slots = threading.BoundedSemaphore(config.max_connections)
        self._settled = threading.Condition(self._lock)
        self._in_flight = 0
        self._open: set[socket.socket] = set()
        self._lingering: collections.deque[socket.socket] = collections.deque()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(str(self.path))
        if owner_uid is not None and os.geteuid() == 0:
            os.chown(self.path, owner_uid, -1)
            os.chmod(self.path, 0o600)
        self._sock.listen(min(config.max_connections, 128))
        self._closed = False
        threading.Thread(target=self._accept, name="codeact-egress", daemon=True).start()

    # -- the session's side ---------------------------------------------------------------------
    def begin_run(self, replay: Sequence[EgressRecord] | None = None,
                  on_record: Callable[[EgressRecord], None] | None = None) -> None:
        """A new run: its caps start again; ``replay``: answer plain HTTP from these records;
        ``on_record``: told of each request as it completes (a copy of its record), until the next run."""
        with self._lock:
            self._run_requests = self._run_bytes = 0
            self._run_started = time.monotonic()
            self._replay = None if replay is None else list(replay)
            self._on_record = on_record

    def take(self, wait_s: float = 1.0) -> list[EgressRecord]:
        """The records of the requests answered since the last ``take``; waits up to ``wait_s`` for
        the exchanges still open (a tunnel the code just closed) to end. Later ones go to the next take."""
        with self._settled:
            self._settled.wait_for(lambda: self._in_flight == 0, timeout=wait_s)
            records, self._records = self._records, []
            unrecorded, self._refused = self._refused - _MAX_REFUSED_RECORDS, 0
        if unrecorded > 0:  # a flood of refusals costs the host one record, not one each
            records.append(EgressRecord(method="*", host="", port=0, reason=f"{unrecorded} more refused requests, "
                                        "not recorded one by one"))
        return records

    def _publish(self, ex: _Exchange) -> None:
        """Put the exchange's record in (once): before its last bytes go to the code, so that the run
        that got an answer has its record."""
        with self._lock:
            if ex.published or (not ex.record.host and ex.record.method == "?"):
                return
            ex.published = True
            ex.record.duration_ms = (time.monotonic() - ex.started) * 1000
            if not ex.record.allowed:
                self._refused += 1
                if self._refused > _MAX_REFUSED_RECORDS:
                    return
            self._records.append(ex.record)
            tell = self._on_record
        if tell is not None:
            tell(ex.record.model_copy(update={"response": None}))  # the kept answer stays with the record

    def close(self) -> None:
        self._closed = True
        self._sock.close()
        with self._lock:
            for conn in [*self._open, *self._lingering]:  # wakes the threads that wait on them
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
                conn.close()
        self.path.unlink(missing_ok=True)

    # -- connections ----------------------------------------------------------------------------
    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            if not self._slots.acquire(blocking=False):
                self._turn_away(conn)
                continue
            threading.Thread(target=self._serve, args=(conn,), name="codeact-egress-conn", daemon=True).start()

    def _turn_away(self, conn: socket.socket) -> None:
        """Over the connection cap: the 503 now, the socket closed a few turn-aways later, so that the
        client's request still has somewhere to go and the answer is read, not reset."""
        try:
            _answer(conn, 503, f"more than {self.config.max_connections} egress connections at once")
            conn.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        self._lingering.append(conn)
        if len(self._lingering) > _LINGERING:
            _close(self._lingering.popleft())

    def _serve(self, conn: socket.socket) -> None:
        now, limit = time.monotonic(), self.config.request_timeout_s
        ex = _Exchange(now, now + limit, f"the request passed its time limit of {limit:g} s")
        upstream: socket.socket | None = None
        with self._lock:
            self._open.add(conn)
            self._in_flight += 1
        try:
            head, rest = self._read_head(conn, ex)
            method, target, headers = _parse_request(head)
            ex.record.method = method
            self._admit(ex)
            if method == "CONNECT":
                upstream = self._tunnel(conn, ex, target, rest)
            else:
                upstream = self._forward(conn, ex, method, target, headers, rest)
        except Refused as exc:
            self._refuse(conn, ex, 403, str(exc))
        except _Stop as exc:
            self._refuse(conn, ex, exc.status, str(exc))
        except OSError as exc:
            ex.record.reason = ex.record.reason or f"connection failed: {exc.strerror or exc}"
        finally:
            for sock in (conn, upstream):
                if sock is not None:
                    _close(sock)
            self._publish(ex)
            with self._settled:
                self._open.discard(conn)
                self._in_flight -= 1
                self._settled.notify_all()
            self._slots.release()

    def _refuse(self, conn: socket.socket, ex: _Exchange, status: int, reason: str) -> None:
        ex.record.status = status
        ex.record.reason = reason
        ex.record.response = None
        self._publish(ex)
        try:
            _answer(conn, status, reason)
        except OSError:
            pass

    def _admit(self, ex: _Exchange) -> None:
        """The session's rate and the run's count and time, before anything is resolved or sent; from
        here the exchange is cut at the request's time limit or the run's, whichever comes first."""
        cfg = self.config
        with self._lock:
            now = time.monotonic()
            if cfg.max_run_s is not None:
                run_until = self._run_started + cfg.max_run_s
                late = f"the run passed its egress time limit of {cfg.max_run_s:g} s"
                if now >= run_until:
                    raise _Stop(403, late)
                if run_until < ex.until:
                    ex.until, ex.late = run_until, late
            self._tokens = min(float(cfg.burst), self._tokens + (now - self._refilled) * cfg.rate_per_s)
            self._refilled = now
            if self._tokens < 1:
                raise _Stop(429, f"over the session's egress rate of {cfg.rate_per_s:g} requests/s")
            self._tokens -= 1
            if self._run_requests >= cfg.max_requests_per_run:
                raise _Stop(403, f"over the run's cap of {cfg.max_requests_per_run} egress requests")
            self._run_requests += 1

    def _count(self, ex: _Exchange, n: int) -> None:
        with self._lock:
            self._run_bytes += n
            over = self._run_bytes > self.config.max_run_bytes
        if over:
            raise _Stop(502, f"the run passed its egress cap of {self.config.max_run_bytes} bytes")

    def _wait(self, sock: socket.socket, ex: _Exchange, who: str) -> None:
        """Set ``sock``'s timeout for the next read: the idle limit or what is left of the request's."""
        left = ex.until - time.monotonic()
        if left <= 0:
            raise _Stop(504, ex.late)
        sock.settimeout(min(self.config.idle_timeout_s, left))

    def _recv(self, sock: socket.socket, ex: _Exchange, who: str) -> bytes:
        self._wait(sock, ex, who)
        try:
            return sock.recv(_CHUNK)
        except TimeoutError:
            if time.monotonic() >= ex.until:
                raise _Stop(504, ex.late) from None
            raise _Stop(504, f"the {who} sent nothing for {self.config.idle_timeout_s:g} s") from None

    def _read_head(self, sock: socket.socket, ex: _Exchange, who: str = "client") -> tuple[bytes, bytes]:
        data = b""
        while b"\r\n\r\n" not in data:
            if len(data) > _MAX_HEAD:
                raise _Stop(502 if who == "upstream" else 431, f"the {who}'s head is over {_MAX_HEAD} bytes")
            chunk = self._recv(sock, ex, who)
            if not chunk:
                raise _Stop(502, f"the {who} closed the connection before a full head")
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        return head, rest

    def _target(self, ex: _Exchange, host: str, port: int) -> str:
        """The allowlist and the pinned address for ``host:port``; raises Refused."""
        ex.record.host, ex.record.port = host, port
        entry = match_entry(self._entries, host, port)
        if entry is None:
            raise Refused(f"{host}:{port} is not in the egress allowlist")
        return check_address(entry, host, port, self._resolve)

    def _connect(self, ex: _Exchange, address: str, port: int) -> socket.socket:
        left = ex.until - time.monotonic()
        try:
            return socket.create_connection((address, port), timeout=max(0.1, min(self.config.idle_timeout_s, left)))
        except OSError as exc:
            raise _Stop(502, f"cannot connect to {ex.record.host}:{port}: {exc.strerror or exc}") from None

    # -- plain HTTP -----------------------------------------------------------------------------
    def _forward(self, conn: socket.socket, ex: _Exchange, method: str, target: str,
                 headers: list[tuple[bytes, bytes]], rest: bytes) -> socket.socket | None:
        url = urlsplit(target)
        if url.scheme != "http" or not url.hostname:
            raise _Stop(400, "the proxy takes an absolute http:// URL, or CONNECT for https")
        port = url.port or 80
        path = (url.path or "/") + (f"?{url.query}" if url.query else "")
        ex.record.path = path[:2000]
        address = self._target(ex, url.hostname, port)
        body = self._request_body(conn, ex, headers, rest)
        digest = hashlib.sha256(b"\0".join([method.encode(), target.encode(),
                                            *(k + b":" + v for k, v in headers), body])).hexdigest()
        ex.record.request_digest = digest
        if self._replay is not None:  # the digest is of the request before substitution: no secret needed
            ex.record.allowed = True
            self._answer_from_record(conn, ex)
            return None
        sent = self._substitute(headers)
        ex.record.allowed = True
        lines = [f"{method} {path} HTTP/1.1".encode()]
        lines += [k + b": " + v for k, v in sent if k.lower().decode("latin-1") not in _HOP]
        request = b"\r\n".join([*lines, b"Connection: close", b"", b""]) + body
        if len(request) > self.config.max_request_bytes:
            raise _Stop(413, f"the request is over {self.config.max_request_bytes} bytes")
        upstream = self._connect(ex, address, port)
        self._count(ex, len(request))
        upstream.sendall(request)
        ex.record.bytes_out = len(request)
        response = self._mask(self._read_response(upstream, ex, method))
        ex.record.bytes_in = len(response)
        if len(response) <= self.config.max_kept_bytes:
            ex.record.response = base64.b64encode(response).decode("ascii")
        self._publish(ex)
        conn.settimeout(self.config.idle_timeout_s)
        conn.sendall(response)
        return upstream

    def _request_body(self, conn: socket.socket, ex: _Exchange, headers: list[tuple[bytes, bytes]],
                      rest: bytes) -> bytes:
        names = {k.lower(): v for k, v in headers}
        if b"transfer-encoding" in names:
            raise _Stop(411, "chunked request bodies are not supported through the proxy: send a Content-Length")
        try:
            length = int(names.get(b"content-length", b"0"))
        except ValueError:
            raise _Stop(400, "Content-Length is not a number") from None
        if length > self.config.max_request_bytes:
            raise _Stop(413, f"the request body is over {self.config.max_request_bytes} bytes")
        body = rest
        while len(body) < length:
            chunk = self._recv(conn, ex, "client")
            if not chunk:
                raise _Stop(400, "the client closed the connection before the whole body")
            body += chunk
        return body[:length]

    def _substitute(self, headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        def put(match: re.Match[bytes]) -> bytes:
            value = self._secrets.get(match.group(1))
            if value is None:
                raise Refused(f"no secret named {match.group(1).decode()!r} is configured (Egress(secrets=...))")
            return value

        return [(k, _SECRET.sub(put, v)) for k, v in headers]

    def _mask(self, data: bytes) -> bytes:
        """The response with every copy of a secret's value masked (same length: lengths stay right)."""
        for value in self._secrets.values():
            data = data.replace(value, b"*" * len(value))
        return data

    def _read_response(self, upstream: socket.socket, ex: _Exchange, method: str) -> bytes:
        cap = self.config.max_response_bytes
        head, body = self._read_head(upstream, ex, "upstream")
        self._count(ex, len(head) + len(body))
        status_line, *lines = head.split(b"\r\n")
        parts = status_line.split(b" ", 2)
        try:
            status = int(parts[1])
        except (IndexError, ValueError):
            raise _Stop(502, "the upstream's answer is not HTTP") from None
        ex.record.status = status
        kept = [line for line in lines if line.split(b":", 1)[0].strip().lower() not in (b"connection", b"keep-alive")]
        length: int | None = None
        for line in lines:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length" and value.strip().isdigit():
                length = int(value.strip())
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            length = 0
        if length is not None and length > cap:
            raise _Stop(502, f"the response is over the cap of {cap} bytes (Content-Length {length})")
        while length is None or len(body) < length:
            chunk = self._recv(upstream, ex, "upstream")
            if not chunk:
                if length is not None:
                    raise _Stop(502, "the upstream closed the connection before the whole body")
                break
            self._count(ex, len(chunk))
            body += chunk
            if len(body) > cap:
                raise _Stop(502, f"the response is over the cap of {cap} bytes")
        if length is not None:
            body = body[:length]
        return b"\r\n".join([status_line, *kept, b"Connection: close", b"", b""]) + body

    def _answer_from_record(self, conn: socket.socket, ex: _Exchange) -> None:
        with self._lock:
            pending = self._replay or []
            found = next((r for r in pending if r.request_digest == ex.record.request_digest and r.response), None)
            if found is not None:
                pending.remove(found)
        if found is None or found.response is None:
            raise _Stop(502, "replay: this request was not recorded")
        response = base64.b64decode(found.response)
        ex.record.status, ex.record.bytes_in, ex.record.response = found.status, len(response), found.response
        ex.record.reason = "answered from the record"
        self._publish(ex)
        conn.sendall(response)

    # -- CONNECT tunnels ------------------------------------------------------------------------
    def _tunnel(self, conn: socket.socket, ex: _Exchange, target: str, rest: bytes) -> socket.socket:
        ex.record.tunnel = True
        host, sep, port_text = target.rpartition(":")
        host = host.strip("[]")
        if not sep or not port_text.isdigit() or not host:
            raise _Stop(400, f"CONNECT takes HOST:PORT, not {target[:200]!r}")
        port = int(port_text)
        address = self._target(ex, host, port)
        if self._replay is not None:
            raise _Stop(502, "replay: a TLS tunnel cannot be answered from the record")
        upstream = self._connect(ex, address, port)
        ex.record.allowed = True
        conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        ex.record.status = 200
        if rest:
            upstream.sendall(rest)
            ex.record.bytes_out += len(rest)
        try:
            self._pump(conn, upstream, ex)
        except _Stop as exc:  # the 200 went already: the tunnel is cut, the reason recorded
            ex.record.reason = f"cut: {exc}"
        return upstream

    def _pump(self, conn: socket.socket, upstream: socket.socket, ex: _Exchange) -> None:
        cfg = self.config
        with selectors.DefaultSelector() as sel:
            sel.register(conn, selectors.EVENT_READ, upstream)
            sel.register(upstream, selectors.EVENT_READ, conn)
            while True:
                left = ex.until - time.monotonic()
                if left <= 0:
                    raise _Stop(504, ex.late)
                ready = sel.select(min(cfg.idle_timeout_s, left))
                if not ready:
                    if time.monotonic() < ex.until:
                        raise _Stop(504, f"the tunnel was idle for {cfg.idle_timeout_s:g} s")
                    continue
                for key, _ in ready:
                    src: socket.socket = key.fileobj  # type: ignore[assignment]
                    data = src.recv(_CHUNK)
                    if not data:
                        return
                    self._count(ex, len(data))
                    if src is upstream:
                        ex.record.bytes_in += len(data)
                        if ex.record.bytes_in > cfg.max_response_bytes:
                            raise _Stop(502, f"the tunnel passed the cap of {cfg.max_response_bytes} bytes inbound")
                    else:
                        ex.record.bytes_out += len(data)
                        if ex.record.bytes_out > cfg.max_request_bytes:
                            raise _Stop(502, f"the tunnel passed the cap of {cfg.max_request_bytes} bytes outbound")
                    key.data.settimeout(cfg.idle_timeout_s)
                    key.data.sendall(data)


def _parse_request(head: bytes) -> tuple[str, str, list[tuple[bytes, bytes]]]:
    request_line, *lines = head.split(b"\r\n")
    parts = request_line.split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
        raise _Stop(400, "not an HTTP request")
    headers = []
    for line in lines:
        name, sep, value = line.partition(b":")
        if not sep or not name.strip():
            raise _Stop(400, "a malformed request header")
        headers.append((name.strip(), value.strip()))
    return parts[0].decode("latin-1"), parts[1].decode("latin-1"), headers


def _answer(conn: socket.socket, status: int, reason: str) -> None:
    """The proxy's own answer: the reason in the status line (what clients put in their errors for a
    refused CONNECT) and in the body."""
    phrase = "".join(c if 32 <= ord(c) < 127 else "?" for c in f"codeact egress: {reason}")[:400]
    body = f"{phrase}\n".encode()
    conn.settimeout(5)
    conn.sendall(f"HTTP/1.1 {status} {phrase}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
                 f"X-Codeact-Egress: refused\r\nConnection: close\r\n\r\n".encode() + body)


def _close(sock: socket.socket) -> None:
    """Close ``sock``, after reading what the peer sent and nobody read (a refused request's body):
    closed with unread data, a Unix socket resets the peer, and the answer sent before is lost."""
    try:
        sock.shutdown(socket.SHUT_WR)
        sock.setblocking(False)
        for _ in range(64):
            if not sock.recv(_CHUNK):
                break
    except OSError:
        pass
    sock.close()
