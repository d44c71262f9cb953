"""The egress broker on its own: a client on its Unix socket, real loopback upstreams, no sandbox."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from codeact.sandbox.egress import Egress, EgressBroker
from tests.servers.egress_upstream import Upstream


@pytest.fixture(scope="module")
def plain() -> Iterator[Upstream]:
    up = Upstream()
    yield up
    up.close()


@contextlib.contextmanager
def _broker(tmp_path: Path, resolve: dict[str, str] | None = None, **caps: object) -> Iterator[EgressBroker]:
    table = resolve or {}

    def resolver(host: str, port: int) -> list[str]:
        return [table[host]] if host in table else socket.gethostbyname_ex(host)[2]

    allow = caps.pop("allow", ())
    with contextlib.closing(EgressBroker(tmp_path, Egress(allow=tuple(allow), **caps),  # type: ignore[arg-type]
                                         resolve=resolver)) as broker:
        yield broker


def _ask(broker: EgressBroker, request: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(20)
        sock.connect(str(broker.path))
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return data


def _get(broker: EgressBroker, url: str, headers: str = "") -> bytes:
    host = url.split("/")[2]
    return _ask(broker, f"GET {url} HTTP/1.1\r\nHost: {host}\r\n{headers}\r\n".encode())


def _status(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


def test_entries_are_checked() -> None:
    for bad in ("exa mple.com", "host:0", "host:99999", "*.10.0.0.1", ""):
        with pytest.raises(ValidationError):
            Egress(allow=(bad,))
    Egress(allow=("api.example.com", "*.example.org:443", "[::1]:8080", "127.0.0.1:9"))


def test_off_the_list_is_refused_before_any_lookup(tmp_path: Path, plain: Upstream) -> None:
    looked: list[str] = []

    def resolve(host: str, port: int) -> list[str]:
        looked.append(host)
        return ["127.0.0.1"]

    with contextlib.closing(EgressBroker(tmp_path, Egress(allow=(f"127.0.0.1:{plain.port}",)), resolve=resolve)) as broker:
        response = _get(broker, f"http://127.0.0.1:{plain.port + 1}/x")
        assert _status(response) == 403 and b"not in the egress allowlist" in response
        response = _get(broker, "http://other.test/")
        assert _status(response) == 403 and looked == []
        [*_, record] = broker.take()
        assert (record.host, record.allowed, record.status) == ("other.test", False, 403)


@pytest.mark.parametrize(("address", "kind"), [("10.1.2.3", "private"), ("169.254.169.254", "link-local"),
                                               ("127.0.0.1", "loopback"), ("100.64.0.1", "non-global")])
def test_a_name_that_resolves_to_a_refused_range_is_refused(tmp_path: Path, address: str, kind: str) -> None:
    with _broker(tmp_path, {"api.test": address}, allow=("api.test:80", "*.wild.test")) as broker:
        response = _get(broker, "http://api.test/")
        assert _status(response) == 403
        assert f"resolves to {address}, a {kind} address".encode() in response


def test_wildcards_match_subdomains_only(tmp_path: Path, plain: Upstream) -> None:
    with _broker(tmp_path, {"a.wild.test": "127.0.0.1"}, allow=(f"*.wild.test:{plain.port}",)) as broker:
        assert b"not in the egress allowlist" in _get(broker, f"http://wild.test:{plain.port}/")
        # allowed by the wildcard, then refused by the range: the entry names no address
        assert b"a loopback address" in _get(broker, f"http://a.wild.test:{plain.port}/")


def test_connect_is_checked_like_plain_http(tmp_path: Path, plain: Upstream) -> None:
    with _broker(tmp_path, allow=(f"127.0.0.1:{plain.port}",)) as broker:
        response = _ask(broker, b"CONNECT evil.test:443 HTTP/1.1\r\nHost: evil.test:443\r\n\r\n")
        assert response.startswith(b"HTTP/1.1 403 codeact egress: evil.test:443 is not in the egress allowlist")


def test_request_body_cap(tmp_path: Path, plain: Upstream) -> None:
    with _broker(tmp_path, allow=(f"127.0.0.1:{plain.port}",), max_request_bytes=2048) as broker:
        response = _ask(broker, f"POST {plain.url}/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n".encode()
                        + b"a" * 5000)
        assert _status(response) == 413 and plain.hits["/echo"] == 0


def test_run_request_count_cap_and_begin_run(tmp_path: Path, plain: Upstream) -> None:
    with _broker(tmp_path, allow=(f"127.0.0.1:{plain.port}",), max_requests_per_run=2) as broker:
        statuses = [_status(_get(broker, f"{plain.url}/count")) for _ in range(3)]
        assert statuses == [200, 200, 403]
        broker.begin_run()
        assert _status(_get(broker, f"{plain.url}/count")) == 200


def test_run_bytes_cap(tmp_path: Path, plain: Upstream) -> None:
    with _broker(tmp_path, allow=(f"127.0.0.1:{plain.port}",), max_run_bytes=20_000) as broker:
        assert _status(_get(broker, f"{plain.url}/big?n=8000")) == 200
        response = _get(broker, f"{plain.url}/big?n=15000")
        assert _status(response) == 502 and b"egress cap of 20000 bytes" in response


def test_session_rate_limit(tmp_path: Path, plain: Upstream) -> None:
    with _broker(tmp_path, allow=(f"127.0.0.1:{plain.port}",), rate_per_s=0.5, burst=3) as broker:
        statuses = [_status(_get(broker, f"{plain.url}/rate")) for _ in range(6)]
        assert statuses[:3] == [200, 200, 200] and set(statuses[3:]) == {429}
        assert plain.hits["/rate"] == 3


def test_idle_upstream_is_cut(tmp_path: Path) -> None:
    with socket.socket() as silent:  # accepts (the backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        port = silent.getsockname()[1]
        with _broker(tmp_path, allow=(f"127.0.0.1:{port}",), idle_timeout_s=0.5) as broker:
            response = _get(broker, f"http://127.0.0.1:{port}/")
            assert _status(response) == 504 and b"sent nothing for 0.5 s" in response


def test_replay_answers_from_the_record(tmp_path: Path, plain: Upstream) -> None:
    with _broker(tmp_path, allow=(f"127.0.0.1:{plain.port}",)) as broker:
        first = _get(broker, f"{plain.url}/replayed")
        [record] = broker.take()
        broker.begin_run(replay=[record])
        assert _get(broker, f"{plain.url}/replayed") == first
        assert plain.hits["/replayed"] == 1
        assert b"not recorded" in _get(broker, f"{plain.url}/other")


def _open_tunnel(broker: EgressBroker, target: str) -> socket.socket:
    """A CONNECT tunnel through the broker, its 200 read; the caller closes it."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(20)
    sock.connect(str(broker.path))
    sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    assert head.startswith(b"HTTP/1.1 200"), head
    return sock


def _drain(sock: socket.socket) -> bytes:
    data = b""
    with contextlib.suppress(OSError):
        while chunk := sock.recv(65536):
            data += chunk
    return data


def test_concurrent_connection_cap(tmp_path: Path, plain: Upstream) -> None:
    with _broker(tmp_path, allow=(f"127.0.0.1:{plain.port}",), max_connections=2) as broker:
        held = [_open_tunnel(broker, f"127.0.0.1:{plain.port}") for _ in range(2)]
        response = _get(broker, f"{plain.url}/third")
        assert _status(response) == 503 and b"more than 2 egress connections at once" in response
        assert plain.hits["/third"] == 0
        for sock in held:
            sock.close()
        broker.take()  # the held tunnels have ended: their slots are free again
        assert _status(_get(broker, f"{plain.url}/third")) == 200


def test_run_time_cap_cuts_open_requests_and_refuses_new_ones(tmp_path: Path, plain: Upstream) -> None:
    with _broker(tmp_path, allow=(f"127.0.0.1:{plain.port}",), max_run_s=1) as broker:
        response = _get(broker, f"{plain.url}/slow")  # a byte every 0.25 s: only the run's limit stops it
        assert _status(response) == 504 and b"the run passed its egress time limit of 1 s" in response
        refused = _get(broker, f"{plain.url}/late")
        assert _status(refused) == 403 and b"egress time limit of 1 s" in refused and plain.hits["/late"] == 0
        broker.begin_run()
        assert _status(_get(broker, f"{plain.url}/late")) == 200


def test_tunnel_caps_cut_the_tunnel_both_ways(tmp_path: Path, plain: Upstream) -> None:
    target = f"127.0.0.1:{plain.port}"
    with _broker(tmp_path, allow=(target,), max_response_bytes=4096, max_request_bytes=4096) as broker:
        inbound = _open_tunnel(broker, target)
        inbound.sendall(f"GET /big?n=50000 HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        got = _drain(inbound)
        inbound.close()
        outbound = _open_tunnel(broker, target)
        with contextlib.suppress(OSError):
            outbound.sendall(f"POST /echo HTTP/1.1\r\nHost: {target}\r\nContent-Length: 50000\r\n\r\n".encode()
                             + b"a" * 50000)
        _drain(outbound)
        outbound.close()
        first, second = broker.take()
    assert len(got) < 50000 and first.reason == "cut: the tunnel passed the cap of 4096 bytes inbound"
    assert second.reason == "cut: the tunnel passed the cap of 4096 bytes outbound" and plain.hits["/echo"] == 0


def test_idle_tunnel_is_cut(tmp_path: Path, plain: Upstream) -> None:
    with _broker(tmp_path, allow=(f"127.0.0.1:{plain.port}",), idle_timeout_s=0.5) as broker:
        sock = _open_tunnel(broker, f"127.0.0.1:{plain.port}")
        assert _drain(sock) == b""  # nothing sent either way: the broker ends it
        sock.close()
        [record] = broker.take()
        assert record.tunnel and record.reason == "cut: the tunnel was idle for 0.5 s"


def test_oversized_request_head(tmp_path: Path, plain: Upstream) -> None:
    with _broker(tmp_path, allow=(f"127.0.0.1:{plain.port}",)) as broker:
        response = _get(broker, f"{plain.url}/head", headers=f"X-Big: {'a' * 70_000}\r\n")
        assert _status(response) == 431 and plain.hits["/head"] == 0


def test_a_flood_of_refusals_costs_one_record(tmp_path: Path) -> None:
    with _broker(tmp_path, rate_per_s=10_000, burst=10_000) as broker:
        for _ in range(210):
            assert _status(_get(broker, "http://off.test/")) == 403
        records = broker.take()
    assert len(records) == 201 and records[-1].reason == "10 more refused requests, not recorded one by one"


def test_each_record_is_told_as_it_completes(tmp_path: Path, plain: Upstream) -> None:
    told: list[tuple[str, int | None]] = []
    with _broker(tmp_path, allow=(f"127.0.0.1:{plain.port}",)) as broker:
        broker.begin_run(on_record=lambda r: told.append((r.path, r.status)))
        _get(broker, f"{plain.url}/told")
        assert told == [("/told", 200)]  # before the answer reached the client
        _get(broker, "http://off.test/x")
        assert told[-1] == ("/x", 403)
        broker.begin_run()
        _get(broker, f"{plain.url}/told")
        assert len(told) == 2


def test_a_record_is_one_line_in_progress_messages(tmp_path: Path, plain: Upstream) -> None:
    from codeact.agent._mcp_progress import describe_event
    from codeact.runtime.events import EgressFinished

    with _broker(tmp_path, allow=(f"127.0.0.1:{plain.port}",)) as broker:
        _get(broker, f"{plain.url}/line")
        _get(broker, "http://off.test/no")
        ok, refused = broker.take()
    assert describe_event(EgressFinished(record=ok)) == f"egress GET 127.0.0.1:{plain.port}/line 200 ({ok.bytes_in} B in)"
    assert describe_event(EgressFinished(record=refused)) == (
        "egress GET off.test:80/no refused: off.test:80 is not in the egress allowlist")
