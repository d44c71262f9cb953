"""``serve-mcp`` over streamable HTTP: who may talk to the server, and how many MCP sessions it keeps.

* every request carries ``Authorization: Bearer <token>`` (compared in constant time), else 401;
  the token is minted at each start (printed once, written to a 0600 file) unless given;
  ``serve_mcp(auth=False)`` (``--no-auth``) opts out explicitly;
* the ``Origin`` header is absent or exactly the server's own origin, else 403 (a page served from
  another local port is no client);
* the 2026-07-28 era (one request per exchange, no ``Mcp-Session-Id``) is refused with 400, so a
  client falls back to the initialize handshake, whose session gets a codeact session of its own;
* at most ``max_sessions`` MCP sessions live at once (the SDK answers 503 beyond), each ended
  ``session_idle_s`` after its last request (its codeact session closed with it).

Over a Unix socket (``unix=PATH``, mode 0600) no Origin is accepted and the Host is not checked.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import secrets
import signal
import socket
import stat
import threading
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .._paths import cache_dir

if TYPE_CHECKING:
    from types import FrameType

    from mcp.server.mcpserver import MCPServer
    from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["DEFAULT_MAX_SESSIONS", "DEFAULT_SESSION_IDLE_S", "MIN_TOKEN_CHARS", "TOKEN_ENV", "HttpOptions",
           "allowed_origins", "mcp_http_app", "resolve_token", "serve_http", "token_file", "token_problem",
           "written_token"]

#: Each MCP session may hold a sandbox (a container with its own memory limit): a few, not thousands.
DEFAULT_MAX_SESSIONS = 8
DEFAULT_SESSION_IDLE_S = 1800.0
TOKEN_ENV = "CODEACT_MCP_TOKEN"
MIN_TOKEN_CHARS = 16
_JSONRPC_INVALID_REQUEST = -32600


@dataclass(frozen=True)
class HttpOptions:
    """Where and how the HTTP transport listens; ``token`` None means no authentication."""

    host: str = "127.0.0.1"
    port: int = 8000
    token: str | None = None
    max_sessions: int = DEFAULT_MAX_SESSIONS
    session_idle_s: float = DEFAULT_SESSION_IDLE_S
    unix: str | None = None

    def __post_init__(self) -> None:
        problem = None if self.token is None else token_problem(self.token)
        if problem:
            raise ValueError(problem)
        if self.max_sessions < 1:
            raise ValueError(f"max_sessions must be at least 1, not {self.max_sessions}")
        if not self.session_idle_s > 0 or self.session_idle_s == float("inf"):
            raise ValueError(f"session_idle_s must be a positive number of seconds, not {self.session_idle_s}")


def token_problem(token: str) -> str | None:
    """Why ``token`` cannot be a bearer token, or None."""
    if len(token) < MIN_TOKEN_CHARS:
        return f"the token must have at least {MIN_TOKEN_CHARS} characters"
    if not all("!" <= c <= "~" for c in token):
        return "the token must be printable ASCII without spaces"
    return None


def allowed_origins(host: str, port: int) -> list[str]:
    """The server's own origins: ``http://host:port``, and its ``localhost`` spelling when bound to
    a loopback address (what a browser on the same machine calls it); nothing else."""
    names = [host, "localhost"] if host in ("127.0.0.1", "::1") else [host]
    return [f"http://{_netloc(name, port)}" for name in names]


def _netloc(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def mcp_http_app(server: MCPServer, options: HttpOptions) -> ASGIApp:
    """The server's streamable HTTP app behind the guard (token, Origin, era), with the session
    cap and idle expiry set."""
    from mcp.server.transport_security import TransportSecuritySettings

    origins = [] if options.unix else allowed_origins(options.host, options.port)
    security = TransportSecuritySettings(  # the SDK checks Host (DNS rebinding) and Origin once more
        enable_dns_rebinding_protection=options.unix is None,
        allowed_hosts=[o.removeprefix("http://") for o in origins], allowed_origins=origins)
    app = server.streamable_http_app(session_idle_timeout=options.session_idle_s, max_sessions=options.max_sessions,
                                     transport_security=security, host=options.host)
    return _Guard(app, token=options.token, origins=frozenset(origins))


class _Guard:
    """ASGI middleware refusing, before the MCP app sees it, a request with a foreign Origin (403),
    without the token (401), or of the sessionless protocol era (400)."""

    def __init__(self, app: ASGIApp, *, token: str | None, origins: Collection[str]) -> None:
        self.app = app
        self.token = None if token is None else token.encode("ascii")
        self.origins = origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refusal = self._refusal(scope)
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _refusal(self, scope: Scope) -> ASGIApp | None:
        from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

        headers: dict[bytes, list[bytes]] = {}
        for key, value in scope["headers"]:
            headers.setdefault(key.lower(), []).append(value)
        origin = headers.get(b"origin", [])
        if origin and (len(origin) > 1 or origin[0].decode("latin-1") not in self.origins):
            return _refuse(403, "Forbidden: this Origin may not use the server")
        if self.token is not None and not self._authorized(headers.get(b"authorization", [])):
            return _refuse(401, "Unauthorized: send Authorization: Bearer <token>", {"WWW-Authenticate": "Bearer"})
        version = headers.get(b"mcp-protocol-version", [])
        if version and version[-1].decode("latin-1") not in HANDSHAKE_PROTOCOL_VERSIONS:
            return _refuse(400, "this server keeps one Python session per MCP session: connect with the "
                                "initialize handshake (a protocol version with sessions)")
        return None

    def _authorized(self, values: list[bytes]) -> bool:
        assert self.token is not None
        if len(values) != 1:
            return False
        scheme, _, credential = values[0].strip().partition(b" ")
        # compare_digest: the time taken says nothing about how much of the token matched
        return scheme.lower() == b"bearer" and hmac.compare_digest(credential.strip(), self.token)


def _refuse(status: int, message: str, headers: dict[str, str] | None = None) -> ASGIApp:
    from starlette.responses import Response

    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": _JSONRPC_INVALID_REQUEST, "message": message}})
    return Response(body, status_code=status, media_type="application/json", headers=headers)


def token_file(options: HttpOptions) -> Path:
    """Where a minted token is written: ``<cache>/serve-mcp/<host>-<port>.token`` (a socket: a
    digest of its path), in a 0700 directory."""
    if options.unix:
        name = "unix-" + hashlib.sha256(os.path.abspath(options.unix).encode()).hexdigest()[:16]
    else:
        name = f"{options.host.replace(':', '_')}-{options.port}"
    return cache_dir() / "serve-mcp" / f"{name}.token"


@contextlib.contextmanager
def written_token(token: str, path: Path) -> Iterator[Path]:
    """``token`` in ``path`` (mode 0600, replaced atomically) while the server runs; removed after."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)  # an older file of that name may have had another mode
        os.write(fd, (token + "\n").encode("ascii"))
    finally:
        os.close(fd)
    os.replace(partial, path)
    try:
        yield path
    finally:
        with contextlib.suppress(OSError):
            if path.read_text(encoding="ascii").strip() == token:  # not a newer server's
                path.unlink()


def serve_http(app: ASGIApp, options: HttpOptions, log_level: str = "info") -> None:
    """Serve ``app`` until interrupted: on ``host:port``, or on the Unix socket ``options.unix``."""
    import uvicorn

    with _exit_on_termination():
        if options.unix is None:
            uvicorn.Server(uvicorn.Config(app, host=options.host, port=options.port, log_level=log_level)).run()
            return
        with _unix_socket(options.unix) as sock:
            uvicorn.Server(uvicorn.Config(app, log_level=log_level)).run(sockets=[sock])


@contextlib.contextmanager
def _exit_on_termination() -> Iterator[None]:
    """SIGTERM and SIGHUP end the process as ``SystemExit(128 + signal)``: uvicorn shuts down
    gracefully, then raises the signal again, whose default action would kill the process before
    the sessions, the token file and the socket are cleaned up."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def leave(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    previous = {signum: signal.signal(signum, leave) for signum in (signal.SIGTERM, signal.SIGHUP)
                if signal.getsignal(signum) is not signal.SIG_IGN}  # nohup's choice stands
    try:
        yield
    finally:
        for signum, handler in previous.items():
            if handler is not None:  # None: installed from C, which Python cannot put back
                signal.signal(signum, handler)


@contextlib.contextmanager
def _unix_socket(path: str) -> Iterator[socket.socket]:
    """A listening socket at ``path`` that only its owner can connect to (created 0600, not
    chmod-ed after: there is no moment it is open to others)."""
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            raise ValueError(f"{path} exists and is not a socket")
        os.unlink(path)  # a socket left by an earlier server
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    umask = os.umask(0o177)
    try:
        sock.bind(path)
    finally:
        os.umask(umask)
    try:
        sock.listen(128)
        yield sock
    finally:
        sock.close()
        with contextlib.suppress(OSError):
            os.unlink(path)


def resolve_token(token: str | None, auth: bool) -> tuple[str | None, bool]:
    """(the token to require, whether it was minted): the one given, else ``$CODEACT_MCP_TOKEN``,
    else a new one; (None, False) when auth is off."""
    if not auth:
        if token is not None:
            raise ValueError("a token was given but authentication is off")
        return None, False
    token = token or os.environ.get(TOKEN_ENV) or None
    return (token, False) if token else (secrets.token_urlsafe(32), True)
