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
