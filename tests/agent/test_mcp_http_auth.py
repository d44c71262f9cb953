"""``serve-mcp`` over HTTP is no open door: a bearer token, the exact Origin, a codeact session per
MCP session, a cap on live sessions and an idle expiry that frees them. A real uvicorn server on
loopback (in a thread, so the test can count the sessions it holds; the CLI in a subprocess),
driven with httpx and the official MCP client."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp_types.version import LATEST_HANDSHAKE_VERSION

from codeact import ExecutionResult, Runtime, Session
from codeact.agent.mcp_server import CodeActMCP, HttpOptions, build_http_app
from tests._configs import LOCAL
from tests.servers.util import free_port, wait_for_port

CODEACT = str(Path(sys.executable).with_name("codeact"))
TOKEN = "test-token-" + os.urandom(12).hex()


class Served:
    """A guarded MCP app served by uvicorn in a thread on 127.0.0.1."""

    def __init__(self, tools: CodeActMCP, port: int, server: uvicorn.Server, thread: threading.Thread,
                 opened: list[Session]) -> None:
        self.tools, self.port, self.server, self.thread = tools, port, server, thread
        self.url = f"http://127.0.0.1:{port}/mcp"
        self.opened = opened  # every codeact session the server opened


def recording(runtime: Runtime, opened: list[Session]) -> None:
    """Keep each session ``runtime`` opens in ``opened``."""
    plain = runtime.session

    def session(**options: Any) -> Session:
        made = plain(**options)
        opened.append(made)
        return made

    runtime.session = session  # type: ignore[method-assign]


@pytest.fixture
def serve() -> Iterator[Callable[..., Served]]:
    started: list[tuple[Runtime, Served]] = []

    def start(**options: Any) -> Served:
        port = free_port()
        runtime = Runtime([], LOCAL)
        opened: list[Session] = []
        recording(runtime, opened)
        app, tools = build_http_app(runtime, HttpOptions(port=port, token=options.pop("token", TOKEN), **options))
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        thread = threading.Thread(target=server.run, name="mcp-http", daemon=True)
        thread.start()
        wait_for_port(port)
        served = Served(tools, port, server, thread, opened)
        started.append((runtime, served))
        return served

    yield start
    for runtime, served in started:
        served.server.should_exit = True
        served.thread.join(timeout=30)
        served.tools.close()
        runtime.close()


def headers(token: str | None = TOKEN, **extra: str) -> dict[str, str]:
    out = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json", **extra}
    if token is not None:
        out["Authorization"] = f"Bearer {token}"
    return out


def rpc(method: str, params: dict[str, Any] | None = None, id: int | None = 1) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params or {}}
    if id is not None:
        message["id"] = id
    return message


INITIALIZE = rpc("initialize", {"protocolVersion": LATEST_HANDSHAKE_VERSION, "capabilities": {},
                                "clientInfo": {"name": "test", "version": "1"}})


def answer(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC answer of a POST, sent as JSON or as an SSE event."""
    if response.headers.get("content-type", "").startswith("application/json"):
        return dict(response.json())
    data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
    return dict(json.loads([d for d in data if d][-1]))


class RawSession:
    """One MCP session over plain httpx (no GET stream: nothing keeps it busy while idle)."""

    def __init__(self, url: str, client: httpx.Client) -> None:
        self.url, self.client = url, client
        opened = client.post(url, json=INITIALIZE, headers=headers())
        self.status = opened.status_code
        self.id = opened.headers.get("mcp-session-id", "")
        if self.status == 200:
            self.post(rpc("notifications/initialized", id=None))

    def post(self, message: dict[str, Any]) -> httpx.Response:
        return self.client.post(self.url, json=message, headers=headers(
            **{"mcp-session-id": self.id, "mcp-protocol-version": LATEST_HANDSHAKE_VERSION}))

    def run(self, code: str) -> ExecutionResult:
        response = self.post(rpc("tools/call", {"name": "execute_python", "arguments": {"code": code}}, id=2))
        assert response.status_code == 200, response.text
        return ExecutionResult.model_validate(answer(response)["result"]["structuredContent"])


def test_a_request_without_the_token_or_with_a_wrong_one_gets_401(serve: Callable[..., Served]) -> None:
    served = serve()
    with httpx.Client(timeout=10) as client:
        bare = client.post(served.url, json=INITIALIZE, headers=headers(token=None))
        wrong = client.post(served.url, json=INITIALIZE, headers=headers(token=TOKEN[:-1] + "x"))
        basic = client.post(served.url, json=INITIALIZE, headers={**headers(token=None), "Authorization": TOKEN})
        elsewhere = client.get(f"http://127.0.0.1:{served.port}/anything", headers=headers(token=None))
        right = client.post(served.url, json=INITIALIZE, headers=headers())
    assert [r.status_code for r in (bare, wrong, basic, elsewhere)] == [401] * 4
    assert bare.headers["www-authenticate"] == "Bearer" and "mcp-session-id" not in bare.headers
    assert right.status_code == 200 and right.headers["mcp-session-id"]


def test_a_foreign_origin_gets_403(serve: Callable[..., Served]) -> None:
    served = serve()
    other = free_port()
    with httpx.Client(timeout=10) as client:
        def status(origin: str) -> int:
            return client.post(served.url, json=INITIALIZE, headers=headers(Origin=origin)).status_code

        refused = [status(o) for o in (f"http://localhost:{other}", f"http://127.0.0.1:{other}", "null",
                                       "http://evil.example", f"https://127.0.0.1:{served.port}")]
        own = [status(f"http://127.0.0.1:{served.port}"), status(f"http://localhost:{served.port}")]
    assert refused == [403] * 5
    assert own == [200, 200]


def test_the_sessionless_protocol_era_is_refused_so_clients_fall_back_to_sessions(
        serve: Callable[..., Served]) -> None:
    served = serve()
    with httpx.Client(timeout=10) as client:
        modern = client.post(served.url, json=rpc("server/discover"),
                             headers=headers(**{"mcp-protocol-version": "2026-07-28"}))
    assert modern.status_code == 400 and "initialize handshake" in modern.json()["error"]["message"]


@contextlib.asynccontextmanager
async def mcp_client(url: str, token: str = TOKEN) -> AsyncIterator[Client]:
    """The official client (its protocol negotiation included) sending the token."""
    async with create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http, \
            Client(streamable_http_client(url, http_client=http)) as client:
        yield client


def value_of(result: Any) -> Any:
    return ExecutionResult.model_validate(result.structured_content)


def test_two_clients_have_separate_namespaces(serve: Callable[..., Served]) -> None:
    served = serve()

    async def main() -> tuple[list[Any], int]:
        async with mcp_client(served.url) as a, mcp_client(served.url) as b:
            await a.call_tool("execute_python", {"code": "secret = 41"})
            seen_by_b = value_of(await b.call_tool("execute_python", {"code": "secret"}))
            await b.call_tool("execute_python", {"code": "secret = 'b'"})
            seen_by_a = value_of(await a.call_tool("execute_python", {"code": "secret + 1"}))
            live = served.tools.live_sessions
            await a.call_tool("reset_session", {})  # resets A's namespace only
            b_after_reset = value_of(await b.call_tool("execute_python", {"code": "secret"}))
        return [seen_by_b.error and seen_by_b.error.type, seen_by_a.value, b_after_reset.value], live

    seen, live = asyncio.run(asyncio.wait_for(main(), 60))
    assert seen == ["NameError", 42, "b"]
    assert live == 2
    deadline = time.monotonic() + 15  # both clients sent DELETE on exit: their sessions close
    while served.tools.live_sessions and time.monotonic() < deadline:
        time.sleep(0.05)
    assert served.tools.live_sessions == 0
    assert len(served.opened) == 2 and {s.state for s in served.opened} == {"closed"}


def test_sessions_past_the_cap_are_refused_and_an_idle_one_is_freed(serve: Callable[..., Served]) -> None:
    served = serve(max_sessions=2, session_idle_s=3.0)
    with httpx.Client(timeout=20) as client:
        first, second = RawSession(served.url, client), RawSession(served.url, client)
        assert first.run("x = 1").ok and second.run("y = 2").ok
        assert served.tools.live_sessions == 2
        for session in (first, second):  # each one's idle time starts again now
            assert session.post(rpc("ping", id=9)).status_code == 200
        flood = [client.post(served.url, json=INITIALIZE, headers=headers()) for _ in range(10)]
        assert {r.status_code for r in flood} == {503}
        assert "Too many open sessions" in flood[0].text
        deadline = time.monotonic() + 20  # neither session gets a request: both expire
        while served.tools.live_sessions and time.monotonic() < deadline:
            time.sleep(0.1)
        assert served.tools.live_sessions == 0
        assert len(served.opened) == 2 and {s.state for s in served.opened} == {"closed"}
        gone = first.post(rpc("tools/call", {"name": "execute_python", "arguments": {"code": "x"}}, id=3))
        assert gone.status_code == 404
        third = RawSession(served.url, client)  # room again
        assert third.status == 200 and third.run("x").error.type == "NameError"


@contextlib.contextmanager
def cli(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[tuple[subprocess.Popen[str], list[str]]]:
    """``codeact serve-mcp ARGS`` with its cache in tmp_path; its stderr lines collected as they come."""
    environ = {**os.environ, "CODEACT_CACHE": str(tmp_path / "cache"), **(env or {})}
    if env is None or "CODEACT_MCP_TOKEN" not in env:
        environ.pop("CODEACT_MCP_TOKEN", None)
    proc = subprocess.Popen([CODEACT, "serve-mcp", "--backend", "local", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=environ)
    lines: list[str] = []
    assert proc.stderr is not None
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    try:
        yield proc, lines
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        reader.join(timeout=5)


def wait_for_line(lines: list[str], marker: str, proc: subprocess.Popen[str]) -> str:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        found = [line for line in list(lines) if marker in line]
        if found:
            return found[0]
        time.sleep(0.05)
    raise AssertionError(f"no {marker!r} in {lines}")


def test_the_cli_mints_a_token_prints_it_once_and_keeps_it_in_a_0600_file(tmp_path: Path) -> None:
    port = free_port()
    with cli(tmp_path, "--http", "--port", str(port)) as (proc, lines):
        line = wait_for_line(lines, "bearer token", proc)
        token = line.rsplit(": ", 1)[1].strip()
        path = tmp_path / "cache" / "serve-mcp" / f"127.0.0.1-{port}.token"
        assert f"also in {path}, mode 0600" in line
        assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        assert path.read_text().strip() == token and len(token) >= 32
        wait_for_port(port)
        url = f"http://127.0.0.1:{port}/mcp"
        with httpx.Client(timeout=10) as client:
            assert client.post(url, json=INITIALIZE, headers=headers(token=None)).status_code == 401
            assert client.post(url, json=INITIALIZE, headers=headers(token=token)).status_code == 200
    assert sum(line.count(token) for line in lines) == 1  # printed once
    assert not path.exists()  # gone with the server


def test_the_cli_without_auth_warns_and_rejects_bad_flags(tmp_path: Path) -> None:
    port = free_port()
    with cli(tmp_path, "--http", "--port", str(port), "--no-auth") as (proc, lines):
        assert "authentication is OFF" in wait_for_line(lines, "--no-auth", proc)
        wait_for_port(port)
        with httpx.Client(timeout=10) as client:
            opened = client.post(f"http://127.0.0.1:{port}/mcp", json=INITIALIZE, headers=headers(token=None))
        assert opened.status_code == 200
    for args, env, said in [
        (["--token", "short"], {}, "--token: the token must have at least 16 characters"),
        (["--token", "x" * 20, "--no-auth"], {}, "--token and --no-auth contradict each other"),
        ([], {"CODEACT_MCP_TOKEN": "has a space in it!"}, "$CODEACT_MCP_TOKEN: the token must be printable ASCII"),
        (["--max-sessions", "0"], {}, "--max-sessions must be at least 1"),
        (["--unix", str(tmp_path / ("s" * 120))], {}, "is too long for a socket path"),
        (["--unix", str(tmp_path)], {}, "exists and is not a socket"),
    ]:
        done = subprocess.run([CODEACT, "serve-mcp", "--http", "--backend", "local", *args], capture_output=True,
                              text=True, env={**os.environ, **env}, timeout=60)
        assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_the_unix_socket_is_0600_and_guarded_like_the_port(tmp_path: Path) -> None:
    path = tmp_path / "mcp.sock"
    with cli(tmp_path, "--unix", str(path), env={"CODEACT_MCP_TOKEN": TOKEN}) as (proc, lines):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None:
            with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as probe:
                probe.connect(str(path))
                break
            time.sleep(0.05)
        assert stat.S_ISSOCK(path.stat().st_mode) and stat.S_IMODE(path.stat().st_mode) == 0o600
        with httpx.Client(transport=httpx.HTTPTransport(uds=str(path)), timeout=10) as client:
            url = "http://localhost/mcp"
            bare = client.post(url, json=INITIALIZE, headers=headers(token=None))
            origin = client.post(url, json=INITIALIZE, headers=headers(Origin="http://localhost"))
            opened = client.post(url, json=INITIALIZE, headers=headers())
        assert (bare.status_code, origin.status_code, opened.status_code) == (401, 403, 200), lines
    assert not path.exists()
