"""Egress through the host's broker, from code in a real sandbox (local/bwrap here; Docker below),
to loopback upstreams allowlisted by ``127.0.0.1:PORT``."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from codeact import EgressFinished, Runtime, SandboxConfig, tracing
from codeact.errors import SnapshotError
from codeact.sandbox import _bwrap
from codeact.sandbox.egress import Egress
from tests.servers.egress_upstream import Upstream, direct_connect_code, make_wheel

SECRET = "s3cr3t-token-value"


@pytest.fixture(scope="module")
def plain() -> Iterator[Upstream]:
    up = Upstream()
    yield up
    up.close()


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstream]:
    up = Upstream(tls_dir=tmp_path_factory.mktemp("tls"))
    yield up
    up.close()


def _egress(plain: Upstream, tls: Upstream, **caps: object) -> Egress:
    # localhost is listed by name: it resolves to loopback, which only a listed address may be
    return Egress(allow=(f"127.0.0.1:{plain.port}", f"127.0.0.1:{tls.port}", f"localhost:{plain.port}"),
                  secrets={"TOKEN": SECRET}, max_response_bytes=64 * 1024, request_timeout_s=3,
                  idle_timeout_s=2, **caps)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def rt(plain: Upstream, tls: Upstream) -> Iterator[Runtime]:
    if not _bwrap.bwrap_status()[0]:
        pytest.skip("bwrap does not work here")
    config = SandboxConfig(backend="local", policy="none", timeout_s=20, egress=_egress(plain, tls))
    with Runtime([], config) as runtime:
        yield runtime


def _run(rt: Runtime, code: str) -> dict[str, object]:
    result = rt.run(code)
    assert result.ok, (result.error, result.stderr)
    return json.loads(result.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _cert(rt: Runtime, tls: Upstream) -> str:
    assert tls.cert is not None
    return json.dumps(tls.cert.read_text())


def test_urllib_plain_http_and_an_https_tunnel(rt: Runtime, plain: Upstream, tls: Upstream) -> None:
    result = rt.run(f"""
import json, os, ssl, urllib.request
open("ca.pem", "w").write({_cert(rt, tls)})
ctx = ssl.create_default_context(cafile="ca.pem")
a = urllib.request.urlopen("{plain.url}/u1", timeout=10).read().decode()
b = urllib.request.urlopen("{tls.url}/u2", timeout=10, context=ctx).read().decode()
print(json.dumps([a, b, os.environ["HTTPS_PROXY"]]))
""")
    assert result.ok, result.stderr
    assert json.loads(result.stdout.strip()) == ["hello 1", "hello 1", "http://127.0.0.1:3128"]
    plain_rec, tunnel = result.egress
    assert (plain_rec.method, plain_rec.path, plain_rec.status, plain_rec.allowed) == ("GET", "/u1", 200, True)
    assert plain_rec.bytes_in > 0 and plain_rec.bytes_out > 0 and plain_rec.response is not None
    assert (tunnel.method, tunnel.tunnel, tunnel.port, tunnel.status) == ("CONNECT", True, tls.port, 200)
    assert tunnel.bytes_in > 0 and tunnel.response is None


def test_requests_and_httpx_work_unmodified(rt: Runtime, plain: Upstream, tls: Upstream) -> None:
    out = _run(rt, f"""
import json, httpx, requests
open("ca.pem", "w").write({_cert(rt, tls)})
r1 = requests.get("{plain.url}/r1", timeout=10).text
r2 = requests.get("{tls.url}/r2", timeout=10, verify="ca.pem").text
h1 = httpx.get("{plain.url}/h1", timeout=10).text
h2 = httpx.Client(verify="ca.pem").get("{tls.url}/h2", timeout=10).text
print(json.dumps([r1, r2, h1, h2]))
""")
    assert out == ["hello 1"] * 4  # type: ignore[comparison-overlap]


def test_refusals_are_clear_and_nothing_leaks(rt: Runtime, plain: Upstream) -> None:
    out = _run(rt, f"""
import json, urllib.request, urllib.error
def get(url):
    try:
        return urllib.request.urlopen(url, timeout=10).read().decode()
    except urllib.error.HTTPError as e:
        return [e.code, e.read().decode().strip()]
    except OSError as e:
        return ["oserror", str(e)]
print(json.dumps({{
    "off_list": get("http://127.0.0.1:{plain.port + 1}/x"),
    "private": get("http://10.0.0.1/"),
    "name_to_loopback": get("http://localhost:{plain.port}/named"),
    "redirect": get("{plain.url}/redirect?to=http://localhost:{plain.port}/named"),
    "oversized": get("{plain.url}/big?n=200000"),
    "slow": get("{plain.url}/slow"),
    "tunnel_off_list": get("https://127.0.0.1:{plain.port + 1}/"),
}}))
""")
    assert out["off_list"] == [403, f"codeact egress: 127.0.0.1:{plain.port + 1} is not in the egress allowlist"]
    assert out["private"] == [403, "codeact egress: 10.0.0.1:80 is not in the egress allowlist"]
    loopback = ("codeact egress: localhost resolves to 127.0.0.1, a loopback address; list that address "
                "itself to allow it")
    assert out["name_to_loopback"] == [403, loopback] and out["redirect"] == [403, loopback]
    assert plain.hits["/named"] == 0 and plain.hits["/redirect"] == 1
    assert out["oversized"][0] == 502 and "over the cap of 65536 bytes" in out["oversized"][1]  # type: ignore[index]
    assert out["slow"][0] == 504 and "time limit of 3 s" in out["slow"][1]  # type: ignore[index]
    assert out["tunnel_off_list"][0] == "oserror"  # type: ignore[index]
    assert (f"Tunnel connection failed: 403 codeact egress: 127.0.0.1:{plain.port + 1} is not in the egress "
            "allowlist") in out["tunnel_off_list"][1]  # type: ignore[index]


def test_a_secret_is_put_in_on_the_host_and_never_seen_inside(rt: Runtime, plain: Upstream) -> None:
    result = rt.run(f"""
import json, os, urllib.request
req = urllib.request.Request("{plain.url}/echo", headers={{"Authorization": "Bearer {{{{secret:TOKEN}}}}"}})
body = urllib.request.urlopen(req, timeout=10).read().decode()
print(body)
print(json.dumps(dict(os.environ)))
""")
    assert result.ok, result.stderr
    assert plain.seen_headers[-1]["authorization"] == f"Bearer {SECRET}"  # the upstream got the value
    assert SECRET not in result.stdout and SECRET not in result.to_json()  # the sandbox never did
    assert "Bearer " + "*" * len(SECRET) in result.stdout  # its copy in the response is masked
    refused = rt.run(f"""
import urllib.request
try:
    urllib.request.urlopen(urllib.request.Request("{plain.url}/echo", headers={{"X": "{{{{secret:NOPE}}}}"}}))
except Exception as e:
    print(e.read().decode())
""")
    assert "no secret named 'NOPE'" in refused.stdout


def test_a_flood_meets_the_session_rate(plain: Upstream, tls: Upstream) -> None:
    config = SandboxConfig(backend="local", policy="none", timeout_s=20,
                           egress=_egress(plain, tls, rate_per_s=1, burst=4, max_requests_per_run=6))
    with Runtime([], config) as rt:
        out = _run(rt, f"""
import json, urllib.request, urllib.error
codes = []
for i in range(10):
    try:
        codes.append(urllib.request.urlopen("{plain.url}/flood", timeout=10).status)
    except urllib.error.HTTPError as e:
        codes.append(e.code)
print(json.dumps(codes))
""")
    assert out[:4] == [200] * 4 and set(out[4:]) == {429}  # type: ignore[index]
    assert plain.hits["/flood"] == 4


def test_a_flood_of_connections_meets_the_connection_cap(plain: Upstream, tls: Upstream) -> None:
    config = SandboxConfig(backend="local", policy="none", timeout_s=20,
                           egress=_egress(plain, tls, max_connections=2))
    with Runtime([], config) as rt:
        out = _run(rt, f"""
import json, threading, urllib.request, urllib.error
answers = []
def get():
    try:
        answers.append([urllib.request.urlopen("{plain.url}/delay?s=1.5", timeout=10).status, ""])
    except urllib.error.HTTPError as e:
        answers.append([e.code, e.read().decode().strip()])
threads = [threading.Thread(target=get) for _ in range(6)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps(sorted(answers)))
""")
    codes = [code for code, _ in out]  # type: ignore[attr-defined]
    assert 1 <= codes.count(200) <= 2 and codes.count(503) == 6 - codes.count(200)
    assert {text for code, text in out if code == 503} == {"codeact egress: more than 2 egress connections at once"}  # type: ignore[attr-defined]
    assert plain.hits["/delay"] == codes.count(200)


def test_restore_answers_plain_http_from_the_record(rt: Runtime, plain: Upstream) -> None:
    with rt.session() as session:
        first = session.run(f"import urllib.request\nx = urllib.request.urlopen('{plain.url}/replay').read()")
        assert first.ok and len(first.egress) == 1
        assert first.egress[0].response is not None and "response" not in first.to_json()  # not in traces
        snap = session.snapshot()
    snap = type(snap).model_validate_json(snap.model_dump_json())  # as a snapshot file keeps it
    assert plain.hits["/replay"] == 1
    with rt.restore(snap) as restored:
        again = restored.run("print(x)")
    assert again.ok and again.stdout.strip() == "b'hello 1'"
    assert plain.hits["/replay"] == 1  # the replay never reached the upstream


def test_a_response_over_max_kept_bytes_makes_the_cell_inexact(plain: Upstream, tls: Upstream) -> None:
    config = SandboxConfig(backend="local", policy="none", timeout_s=20, egress=_egress(plain, tls, max_kept_bytes=2000))
    with Runtime([], config) as rt, rt.session() as session:
        result = session.run(f"import urllib.request\nurllib.request.urlopen('{plain.url}/big?n=5000').read()")
        assert result.ok and result.egress[0].response is None
        with pytest.raises(SnapshotError, match="was not kept"):
            session.snapshot()


def test_kept_responses_count_against_the_record_budget(plain: Upstream, tls: Upstream) -> None:
    config = SandboxConfig(backend="local", policy="none", timeout_s=20, egress=_egress(plain, tls))
    with Runtime([], config, max_run_record_bytes=20_000) as rt, rt.session() as session:
        result = session.run(f"import urllib.request\nurllib.request.urlopen('{plain.url}/big?n=30000').read()")
        assert result.ok and result.egress[0].response is not None
        assert session.cells[-1].status == "inexact" and session.cells[-1].egress == []
        assert [c.index for c in session.skipped] == [1]


def test_a_cell_with_a_tunnel_is_inexact(rt: Runtime, tls: Upstream) -> None:
    with rt.session() as session:
        result = session.run(f"""
import ssl, urllib.request
open("ca.pem", "w").write({_cert(rt, tls)})
urllib.request.urlopen("{tls.url}/t", context=ssl.create_default_context(cafile="ca.pem")).read()
""")
        assert result.ok, result.stderr
        with pytest.raises(SnapshotError, match="TLS tunnel"):
            session.snapshot()
    with rt.session() as session:  # a refused tunnel is refused again on replay: the cell stays exact
        result = session.run(f"""
import urllib.request
try:
    urllib.request.urlopen("https://127.0.0.1:{tls.port + 1}/")
except OSError as e:
    print(type(e).__name__)
""")
        assert result.ok and result.egress[0].tunnel and not result.egress[0].allowed
        assert session.snapshot().cells[0].status == "completed"


def test_pip_installs_from_an_allowlisted_index_into_the_workspace(tmp_path: Path, tls: Upstream) -> None:
    index = Upstream(wheel=make_wheel(tmp_path))
    try:
        config = SandboxConfig(backend="local", policy="none", timeout_s=120,
                               egress=Egress(allow=(f"127.0.0.1:{index.port}",)))
        with Runtime([], config) as rt, rt.session() as session:
            result = session.run(f"""
import subprocess, sys
done = subprocess.run([sys.executable, "-m", "pip", "install", "--index-url", "{index.url}/simple/",
                       "egress-probe"], capture_output=True, text=True)
print(done.returncode, done.stderr[-2000:])
import egress_probe
print(egress_probe.VALUE, egress_probe.__file__)
""")
            assert result.ok, (result.stdout, result.stderr, result.error)
            assert "installed" in result.stdout and "/.codeact-packages/" in result.stdout
            assert any(r.path.startswith("/files/egress_probe") for r in result.egress)
    finally:
        index.close()


def _direct(plain: Upstream) -> str:
    return direct_connect_code(plain.port)


def test_the_sandbox_still_has_no_network_of_its_own(rt: Runtime, plain: Upstream) -> None:
    out = _run(rt, _direct(plain) + "print(json.dumps([direct]))")
    assert out[0] == "ConnectionRefusedError"  # type: ignore[index]
    assert plain.hits["/"] == 0


def test_docker_urllib_through_the_broker_and_only_lo(docker_ready: str, plain: Upstream) -> None:
    config = SandboxConfig(timeout_s=20, egress=Egress(allow=(f"127.0.0.1:{plain.port}",)))
    with Runtime([], config) as rt:
        result = rt.run(_direct(plain) + f"""
import os, urllib.request
body = urllib.request.urlopen("{plain.url}/docker", timeout=10).read().decode()
print(json.dumps([body, direct, sorted(os.listdir("/sys/class/net"))]))
""")
    assert result.ok, result.stderr
    assert json.loads(result.stdout) == ["hello 1", "ConnectionRefusedError", ["lo"]]
    assert [r.path for r in result.egress] == ["/docker"]


def test_the_cli_takes_allow_host(docker_ready: str, plain: Upstream) -> None:
    code = f"import urllib.request; print(urllib.request.urlopen('{plain.url}/cli').read())"
    cli = [sys.executable, "-m", "codeact.cli"]
    done = subprocess.run([*cli, "exec", "--allow-host", f"127.0.0.1:{plain.port}", "-"], input=code,
                          capture_output=True, text=True, timeout=120, check=False)
    assert "hello 1" in done.stdout, done.stderr
    bad = subprocess.run([*cli, "exec", "--allow-host", "no such host", "-"], input="1",
                         capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 2 and "--allow-host" in bad.stderr


def test_each_request_is_a_live_event_as_it_completes(rt: Runtime, plain: Upstream) -> None:
    events: list[object] = []
    with rt.session() as session:
        result = session.run(f"""
import sys, urllib.request, urllib.error
urllib.request.urlopen("{plain.url}/live", timeout=10).read()
try:
    urllib.request.urlopen("http://127.0.0.1:{plain.port + 1}/refused", timeout=10)
except urllib.error.HTTPError:
    pass
print("after"); sys.stdout.flush()
""", on_event=events.append)
    assert result.ok, result.stderr
    kinds = [(e.type, getattr(e, "text", "")) for e in events]  # type: ignore[attr-defined]
    egress = [e.record for e in events if isinstance(e, EgressFinished)]
    assert [(r.path, r.status, r.allowed) for r in egress] == [("/live", 200, True), ("/refused", 403, False)]
    assert "not in the egress allowlist" in (egress[1].reason or "")
    after = next(i for i, (kind, text) in enumerate(kinds) if kind == "stdout" and "after" in text)
    assert max(i for i, (kind, _) in enumerate(kinds) if kind == "egress") < after  # before the code went on
    assert [r.path for r in result.egress] == ["/live", "/refused"] and kinds[-1][0] == "done"
    assert all(r.response is None for r in egress) and result.egress[0].response is not None  # kept once


def test_each_request_is_an_event_on_the_run_span(rt: Runtime, plain: Upstream) -> None:
    from tests.test_tracing import Otel

    otel = Otel()
    tracing.enable(otel.provider, otel.meters)
    try:
        result = rt.run(f"import urllib.request\nurllib.request.urlopen('{plain.url}/traced', timeout=10).read()")
    finally:
        tracing.disable()
    assert result.ok, result.stderr
    [run] = [s for s in otel.spans() if s.name.startswith("codeact.run")]
    [event] = [e for e in run.events if e.name == "codeact.egress"]
    attrs = dict(event.attributes or {})
    assert (attrs["url.path"], attrs["http.response.status_code"], attrs["codeact.egress.allowed"]) == ("/traced", 200, True)
    assert attrs["server.port"] == plain.port and int(attrs["codeact.egress.bytes_in"]) > 0  # type: ignore[call-overload]
