"""Egress on Docker: requests, httpx, urllib and pip in a real container (network ``none``, only
``lo``) through the host's broker to loopback upstreams allowlisted by ``127.0.0.1:PORT``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from codeact import Runtime, SandboxConfig
from codeact.sandbox.egress import Egress
from tests.servers.egress_upstream import Upstream, direct_connect_code, make_wheel

SECRET = "d0cker-s3cret-value"


@pytest.fixture(scope="module")
def ups(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Upstream]]:
    made = {"plain": Upstream(), "tls": Upstream(tls_dir=tmp_path_factory.mktemp("tls")),
            "index": Upstream(wheel=make_wheel(tmp_path_factory.mktemp("wheel")))}
    yield made
    for up in made.values():
        up.close()


@pytest.fixture(scope="module")
def rt(egress_image: str, ups: dict[str, Upstream]) -> Iterator[Runtime]:
    egress = Egress(allow=tuple(f"127.0.0.1:{up.port}" for up in ups.values()), secrets={"TOKEN": SECRET},
                    max_response_bytes=64 * 1024)
    with Runtime([], SandboxConfig(image=egress_image, timeout_s=120, egress=egress)) as runtime:
        yield runtime


def _last_json(stdout: str) -> object:
    return json.loads(stdout.strip().splitlines()[-1])


def test_requests_httpx_urllib_over_http_and_https(rt: Runtime, ups: dict[str, Upstream]) -> None:
    plain, tls = ups["plain"], ups["tls"]
    assert tls.cert is not None
    result = rt.run(f"""
import json, os, urllib.request, urllib.error
import httpx, requests
open("ca.pem", "w").write({json.dumps(tls.cert.read_text())})
os.environ["REQUESTS_CA_BUNDLE"] = os.environ["SSL_CERT_FILE"] = os.path.abspath("ca.pem")
out = {{
    "requests": [requests.get("{plain.url}/d-r", timeout=10).text, requests.get("{tls.url}/d-rs", timeout=10).text],
    "httpx": [httpx.get("{plain.url}/d-h", timeout=10).text,
              httpx.Client(verify="ca.pem").get("{tls.url}/d-hs", timeout=10).text],
    "urllib": urllib.request.urlopen("{plain.url}/d-u", timeout=10).read().decode(),
    "secret": requests.get("{plain.url}/echo", headers={{"Authorization": "Bearer {{{{secret:TOKEN}}}}"}},
                           timeout=10).json()["headers"]["authorization"],
}}
try:
    requests.get("http://127.0.0.1:{plain.port + 1}/off", timeout=10).raise_for_status()
except requests.HTTPError as e:
    out["off_list"] = [e.response.status_code, e.response.text.strip()]
try:
    requests.get("https://127.0.0.1:{plain.port + 1}/off", timeout=10)
except requests.exceptions.ProxyError as e:
    out["tunnel_off_list"] = str(e)
print(json.dumps(out))
""")
    assert result.ok, (result.stderr, result.error)
    out = _last_json(result.stdout)
    assert isinstance(out, dict)
    assert out["requests"] == out["httpx"] == ["hello 1", "hello 1"] and out["urllib"] == "hello 1"
    assert out["secret"] == "Bearer " + "*" * len(SECRET) and plain.seen_headers[-1]["authorization"] == f"Bearer {SECRET}"
    assert SECRET not in result.stdout and SECRET not in result.to_json()
    assert out["off_list"] == [403, f"codeact egress: 127.0.0.1:{plain.port + 1} is not in the egress allowlist"]
    assert "not in the egress allowlist" in out["tunnel_off_list"]
    tunnels = [r for r in result.egress if r.tunnel and r.allowed]
    assert len(tunnels) == 2 and all(r.port == tls.port and r.bytes_in > 0 for r in tunnels)
    assert {r.path for r in result.egress if not r.tunnel and r.allowed} == {"/d-r", "/d-h", "/d-u", "/echo"}
    assert sum(not r.allowed for r in result.egress) == 2


def test_pip_install_from_a_loopback_index_then_import(rt: Runtime, ups: dict[str, Upstream]) -> None:
    index = ups["index"]
    with rt.session() as session:
        done = session.run(f"""
import subprocess, sys
p = subprocess.run([sys.executable, "-m", "pip", "install", "--index-url", "{index.url}/simple/", "egress-probe"],
                   capture_output=True, text=True)
print(p.returncode, p.stdout[-1500:], p.stderr[-1500:])
""")
        assert done.ok and done.stdout.startswith("0 "), (done.stdout, done.stderr)
        assert [r.path for r in done.egress] == ["/simple/egress-probe/", "/files/egress_probe-1.0-py3-none-any.whl"]
        assert all(r.allowed and r.status == 200 for r in done.egress)
        used = session.run("import egress_probe\nprint(egress_probe.VALUE, egress_probe.__file__)")
        assert used.ok, used.stderr
        assert used.stdout.split() == ["installed", "/workspace/.codeact-packages/egress_probe.py"]
        assert (Path(session.workspace) / ".codeact-packages" / "egress_probe.py").is_file()
    assert index.hits["/files/egress_probe-1.0-py3-none-any.whl"] == 1


def test_only_lo_and_no_direct_socket_with_egress_on(rt: Runtime, ups: dict[str, Upstream]) -> None:
    plain = ups["plain"]
    result = rt.run(direct_connect_code(plain.port) + """
import os
print(json.dumps([direct, sorted(os.listdir("/sys/class/net"))]))
""")
    assert result.ok, result.stderr
    assert _last_json(result.stdout) == ["ConnectionRefusedError", ["lo"]]
    assert plain.hits["/"] == 0 and result.egress == []


def test_restore_answers_from_the_record_on_docker(rt: Runtime, ups: dict[str, Upstream]) -> None:
    plain = ups["plain"]
    with rt.session() as session:
        first = session.run(f"import requests\nx = requests.get('{plain.url}/d-replay', timeout=10).text")
        assert first.ok and [r.path for r in first.egress] == ["/d-replay"], first.stderr
        snap = session.snapshot()
    with rt.restore(type(snap).model_validate_json(snap.model_dump_json())) as restored:
        again = restored.run("print(x)")
    assert again.ok and again.stdout.strip() == "hello 1", again.stderr
    assert plain.hits["/d-replay"] == 1  # the replay was answered by the broker from the record
