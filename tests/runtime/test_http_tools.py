"""HTTP tools against a real server on 127.0.0.1: status mapping, retries, timeouts, credentials."""

from __future__ import annotations

import json
import secrets
import socket
import textwrap
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, quote_plus

import pytest

from codeact import Runtime, SandboxConfig, ToolError, Toolset
from codeact.errors import ToolDefinitionError
from codeact.runtime.ledger import CallLedger
from codeact.runtime.sources.http import HttpAuth, HttpClient, HttpEndpoint, HttpParam, http_tool
from tests._configs import LOCAL
from tests.servers.http_app import ApiServer

TOKEN_ENV = "CODEACT_TEST_API_TOKEN"
TOKEN = "tok-" + secrets.token_hex(16)


@pytest.fixture(scope="module")
def api() -> Iterator[ApiServer]:
    with ApiServer(token=TOKEN) as server:
        yield server


@pytest.fixture(autouse=True)
def token_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)


def weather_tool(api: ApiServer, **options: Any) -> Any:
    return http_tool("get_weather", "GET", f"{api.url}/weather/{{city}}",
                     [HttpParam("units", "query", {"type": "string", "enum": ["C", "F"]}, description="Unit.")],
                     description="Current weather for a city.", auth=HttpAuth.bearer(TOKEN_ENV), **options)


def call(tools: list[Any], name: str, arguments: dict[str, Any]) -> Any:
    """One call through the host's pipeline (policies and retries included), without a sandbox."""
    with Runtime(tools, LOCAL) as rt:
        return rt.host.call(CallLedger(), name, arguments)


def error_code(record: Any) -> tuple[str, bool]:
    assert not record.ok and record.error is not None, record
    return record.error.code, record.error.retryable


def test_get_with_path_query_and_bearer_auth(api: ApiServer) -> None:
    tool = weather_tool(api)
    assert tool.policy.idempotent and tool.spec.input_schema["required"] == ["city"]
    with Runtime([tool], LOCAL) as rt:
        assert 'def get_weather(city: str, units: Literal["C", "F"] | None = None)' in rt.stubs
        result = rt.run("get_weather('Beijing', units='C')")
    assert result.ok, result.error
    assert result.value == {"city": "Beijing", "temperature": 20.0, "unit": "C"}
    assert f"Bearer {TOKEN}" in api.auth_seen


@pytest.mark.parametrize("backend_name", ["local", "docker"])
def test_credentials_never_reach_the_sandbox(api: ApiServer, backend_name: str, request: pytest.FixtureRequest) -> None:
    if backend_name == "docker":
        request.getfixturevalue("docker_image")
    echo = http_tool("echo_auth", "GET", f"{api.url}/echo-auth", auth=HttpAuth.bearer(TOKEN_ENV))
    config = SandboxConfig(backend=backend_name, policy="none", timeout_s=30)  # type: ignore[arg-type]
    # The sandbox's own writable places: its workspace, and in Docker its private /tmp.
    tops = [".", "/tmp"] if backend_name == "docker" else ["."]
    code = f"tops = {tops!r}\n" + textwrap.dedent("""
        import json, os
        weather = get_weather(city="Pittsburgh")
        echoed = echo_auth()
        seen = []
        for top in tops:
            for root, _, names in os.walk(top):
                for name in names:
                    path = os.path.join(root, name)
                    if os.path.isfile(path) and not os.path.islink(path):
                        with open(path, errors="replace") as f:
                            seen.append(f.read(1_000_000))
        print("Bearer" in json.dumps(echoed))
        {"env": dict(os.environ), "weather": weather, "echoed": echoed, "files": seen, "globals": repr(globals())}
    """)
    with Runtime([weather_tool(api), echo], config) as rt, rt.session() as session:
        result = session.run(code)
        view = json.dumps(result.model_dump(mode="json"))
        stubs = rt.stubs
    assert result.ok, result.error
    assert result.stdout == "True\n"
    assert result.value["weather"]["city"] == "Pittsburgh"
    assert result.value["echoed"] == {"you_sent": "Bearer [redacted]"}  # an echoing server is redacted
    assert TOKEN not in view and TOKEN not in stubs  # not in env, files, values, arguments, results
    assert f"Bearer {TOKEN}" in api.auth_seen  # yet it reached the server


def test_429_with_retry_after_then_success(api: ApiServer) -> None:
    key = f"/flaky/429?key={secrets.token_hex(4)}"
    tool = http_tool("flaky", "GET", f"{api.url}/flaky/429", [HttpParam("key"), HttpParam("after")])
    record = call([tool], "flaky", {"key": key.split("=")[1], "after": "0.4"})
    assert record.ok and record.result == {"ok": True, "attempt": 2}
    first, second = api.hit_times[key]
    assert second - first >= 0.4 * 0.95  # the host waited what Retry-After asked for


def test_500_then_success_and_post_is_not_retried(api: ApiServer) -> None:
    get = http_tool("flaky_get", "GET", f"{api.url}/flaky/500", [HttpParam("key")])
    post = http_tool("flaky_post", "POST", f"{api.url}/flaky/500", [HttpParam("key")])
    ok = call([get], "flaky_get", {"key": "g"})
    assert ok.ok and ok.result["attempt"] == 2
    failed = call([post], "flaky_post", {"key": "p"})
    assert error_code(failed) == ("upstream_error", True)
    assert "HTTP 500" in failed.error.message and "try again" in failed.error.message
    assert api.hits["/flaky/500?key=p"] == 1  # side-effecting: never retried automatically


def test_retries_give_up_after_max_retries(api: ApiServer) -> None:
    tool = http_tool("always_503", "GET", f"{api.url}/flaky/503", [HttpParam("key"), HttpParam("times")])
    record = call([tool], "always_503", {"key": "m", "times": "99"})
    assert error_code(record) == ("upstream_error", True)
    assert "after 3 attempts" in record.error.message
    assert api.hits["/flaky/503?key=m"] == 3  # 1 + max_retries (2)


def test_slow_endpoint_ends_as_timeout(api: ApiServer) -> None:
    tool = http_tool("slow", "GET", f"{api.url}/slow", [HttpParam("seconds")], timeout_s=0.3, idempotent=False)
    record = call([tool], "slow", {"seconds": "3"})
    assert error_code(record) == ("timeout", True)
    assert "timed out after 0.3 s" in record.error.message


def test_a_body_sent_a_byte_at_a_time_ends_at_the_timeout_and_frees_its_connection(api: ApiServer) -> None:
    # httpx's timeout bounds each read: a server sending a byte every 0.1 s held the call (and its
    # pooled connection) long after the call's timeout; two such calls exhausted this pool.
    client = HttpClient(max_connections=2)
    slow = http_tool("dribble", "GET", f"{api.url}/dribble?bytes=200&every=0.1", timeout_s=0.5,
                     client=client, idempotent=False)
    fast = http_tool("fast", "GET", f"{api.url}/status/200", timeout_s=2, client=client)
    with Runtime([slow, fast], LOCAL) as rt:
        ledger = CallLedger()
        for _ in range(2):  # each cut while its body still arrives (the whole body would take 20 s)
            record = rt.host.call(ledger, "dribble", {})
            assert error_code(record) == ("timeout", True)
            assert "still arriving" in record.error.message
        assert rt.host.call(ledger, "fast", {}).ok  # both connections went back to the pool
    client.close()


def test_not_found_is_not_retried(api: ApiServer) -> None:
    record = call([weather_tool(api)], "get_weather", {"city": "Atlantis"})
    assert error_code(record) == ("not_found", False)
    assert "unknown city 'Atlantis'" in record.error.message
    assert api.hits["/weather/Atlantis"] == 1


@pytest.mark.parametrize(("status", "code", "retryable"), [
    (400, "invalid_arguments", False), (422, "invalid_arguments", False), (401, "permission_denied", False),
    (403, "permission_denied", False), (404, "not_found", False), (409, "tool_exception", False),
    (408, "timeout", True), (429, "rate_limited", True), (502, "upstream_error", True),
])
def test_status_codes_map_to_error_codes(api: ApiServer, status: int, code: str, retryable: bool) -> None:
    tool = http_tool("status", "POST", f"{api.url}/status/{{status}}", [HttpParam("status", "path", {"type": "integer"})])
    record = call([tool], "status", {"status": status})
    assert error_code(record) == (code, retryable)
    assert record.error.message == f"HTTP {status} from POST {api.url}/status/{status}: status {status} as asked"


def test_sandbox_sees_error_codes_and_body_arguments(api: ApiServer) -> None:
    endpoints = [
        HttpEndpoint("create_item", "POST", "/items", [
            HttpParam("name", "body", required=True), HttpParam("price", "body", {"type": "number"})]),
        HttpEndpoint("list_items", "GET", "/items", [HttpParam("limit", "query", {"type": "integer"})]),
    ]
    tools = Toolset.from_http(endpoints, base_url=api.url, auth=HttpAuth.header("X-API-Key", TOKEN_ENV))
    with Runtime(tools, LOCAL) as rt:
        result = rt.run(textwrap.dedent("""
            made = create_item(name="pen", price=2.5)
            try:
                create_item(name="debt", price=-1)
            except ToolError as e:
                print(e.code, e.retryable, e.message)
            [made["name"], made["price"], len(list_items(limit=100)) >= 1]
        """))
    assert result.ok, result.error
    assert result.value == ["pen", 2.5, True]
    assert result.stdout == f"invalid_arguments False HTTP 422 from POST {api.url}/items: price must not be negative\n"
    assert TOKEN in api.auth_seen


def test_whole_json_body_text_answers_and_header_params(api: ApiServer) -> None:
    create = http_tool("create", "POST", f"{api.url}/items", [HttpParam("item", "json", {"type": "object"}, required=True)],
                       auth=HttpAuth.basic(TOKEN_ENV, lambda: "pw"))
    trace = http_tool("trace", "GET", f"{api.url}/trace", [HttpParam("trace_id", "header", wire_name="X-Trace-Id")])
    text = http_tool("text", "GET", f"{api.url}/text")
    with Runtime([create, trace, text], LOCAL) as rt:
        ledger = CallLedger()
        made = rt.host.call(ledger, "create", {"item": {"name": "cup"}})
        traced = rt.host.call(ledger, "trace", {"trace_id": "t-1"})
        injected = rt.host.call(ledger, "trace", {"trace_id": "a\r\nX-Evil: 1"})
        plain = rt.host.call(ledger, "text", {})
    assert error_code(made) == ("permission_denied", False)  # basic auth is not what the server takes
    assert api.auth_seen[-1].startswith("Basic ")
    assert traced.result == {"trace": "t-1"}
    assert error_code(injected) == ("invalid_arguments", False)
    assert plain.result == "plain words"


def test_missing_credential_is_permission_denied(api: ApiServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TOKEN_ENV)
    record = call([weather_tool(api)], "get_weather", {"city": "Beijing"})
    assert error_code(record) == ("permission_denied", False)
    assert f"environment variable {TOKEN_ENV} is not set" in record.error.message


def test_redirects_and_connection_errors(api: ApiServer) -> None:
    redirect = http_tool("redirect", "GET", f"{api.url}/redirect", auth=HttpAuth.bearer(TOKEN_ENV))
    record = call([redirect], "redirect", {})
    assert error_code(record) == ("tool_exception", False)
    assert "not followed" in record.error.message
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dead = http_tool("dead", "POST", f"http://127.0.0.1:{port}/x")
    record = call([dead], "dead", {})
    assert error_code(record) == ("upstream_error", True)
    assert "cannot connect" in record.error.message


def test_response_size_is_bounded(api: ApiServer) -> None:
    small = HttpClient(max_response_bytes=10)
    tool = http_tool("items", "GET", f"{api.url}/text", client=small)
    record = call([tool], "items", {})
    small.close()
    assert error_code(record) == ("tool_exception", False)
    assert "larger than 10 bytes" in record.error.message


def test_definition_errors() -> None:
    with pytest.raises(ToolDefinitionError, match="not an absolute"):
        http_tool("x", "GET", "/relative")
    with pytest.raises(ToolDefinitionError, match="unsupported method"):
        http_tool("x", "FETCH", "http://127.0.0.1/")
    with pytest.raises(ToolDefinitionError, match="share a name"):
        http_tool("x", "GET", "http://127.0.0.1/{id}", [HttpParam("id"), HttpParam("id", "header")])
    with pytest.raises(ToolDefinitionError, match="whole body"):
        http_tool("x", "POST", "http://127.0.0.1/", [HttpParam("a", "json"), HttpParam("b", "body")])


def test_a_tool_error_keeps_retry_after() -> None:
    from codeact.runtime._http_client import parse_retry_after, status_error

    assert parse_retry_after("2") == 2.0 and parse_retry_after("soon") is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # a date in the past: now
    error = status_error(429, {"retry-after": "7"}, '{"message": "slow down"}', "GET http://127.0.0.1/x")
    assert isinstance(error, ToolError) and error.retry_after == 7.0
    assert error.message == "HTTP 429 from GET http://127.0.0.1/x: slow down (Retry-After: 7 s)"


def item_tool(api: ApiServer, **options: Any) -> Any:
    return http_tool("get_item", "GET", f"{api.url}/tenants/acme/items/{{item_id}}", auth=HttpAuth.bearer(TOKEN_ENV),
                     **options)


def tenant_paths(api: ApiServer) -> set[str]:
    with api.lock:
        return {path for path in api.hits if path.startswith("/tenants")}


@pytest.mark.parametrize("value", ["..", ".", "", "\uff0e\uff0e"])
def test_a_dot_or_empty_path_argument_is_refused_and_never_sent(api: ApiServer, value: str) -> None:
    # httpx removes dot segments: get_item(item_id="..") reached /tenants/acme/ with the bearer token.
    before = tenant_paths(api)
    record = call([item_tool(api)], "get_item", {"item_id": value})
    assert error_code(record) == ("invalid_arguments", False)
    assert "path parameter 'item_id'" in record.error.message and "URL template" in record.error.message
    assert tenant_paths(api) == before  # nothing was sent at all


def test_path_arguments_stay_one_encoded_segment(api: ApiServer) -> None:
    tools = [item_tool(api), http_tool("maybe_item", "GET", f"{api.url}/tenants/acme/items/{{item_id}}",
                                       [HttpParam("item_id", "path", {"type": ["string", "null"]})])]
    with Runtime(tools, LOCAL) as rt:
        ledger = CallLedger()
        answers = {value: rt.host.call(ledger, "get_item", {"item_id": value})
                   for value in ["a/../..", "%2e%2e", "..%2f", "x y"]}
        null = rt.host.call(ledger, "maybe_item", {"item_id": None})
    assert {value: r.result["item"] for value, r in answers.items()} == {
        "a/../..": "a%2F..%2F..", "%2e%2e": "%252e%252e", "..%2f": "..%252f", "x y": "x%20y"}
    assert error_code(null) == ("invalid_arguments", False) and "cannot be null" in null.error.message
    assert all(path.startswith("/tenants/acme/items/") for path in tenant_paths(api))


SLASHED = "tok/en+" + secrets.token_hex(8)  # a credential JSON and URLs can spell in other ways


def test_a_redirect_echoing_a_query_credential_is_redacted(api: ApiServer) -> None:
    # A trailing-slash redirect that keeps the query: its Location went into the message as it was.
    tool = http_tool("moved", "GET", f"{api.url}/redirect-echo", auth=HttpAuth.query("appid", lambda: SLASHED))
    record = call([tool], "moved", {})
    assert error_code(record) == ("tool_exception", False)
    message = record.error.message
    assert "not followed" in message and "appid=[redacted]" in message, message
    for spelling in (SLASHED, quote(SLASHED, safe=""), quote(SLASHED, safe="").lower(), quote_plus(SLASHED)):
        assert spelling not in message


def test_a_json_escaped_echo_of_a_credential_is_redacted(api: ApiServer) -> None:
    # redact() ran on the raw text only: '"Bearer \\u0074ok\\/en..."' decoded to the credential.
    ok = http_tool("echo", "GET", f"{api.url}/echo-escaped", auth=HttpAuth.bearer(lambda: SLASHED))
    failing = http_tool("echo_400", "GET", f"{api.url}/echo-escaped/400", auth=HttpAuth.bearer(lambda: SLASHED))
    with Runtime([ok, failing], LOCAL) as rt:
        result = rt.run("try:\n    echo_400()\nexcept ToolError as e:\n    print(e.message)\necho()")
        view = json.dumps(result.model_dump(mode="json"))
    assert result.ok, result.error
    assert result.stdout == f'HTTP 400 from GET {api.url}/echo-escaped/400: {{"you_sent": "Bearer [redacted]"}}\n'
    assert result.value == {"you_sent": "Bearer [redacted]"}
    assert SLASHED not in view and SLASHED.replace("/", "\\/") not in view and "\\u0074" not in view


def test_redact_knows_the_other_spellings_of_a_credential() -> None:
    from codeact.runtime._http_client import redact

    spelt = ["\\u0074ok\\/en+", "%74ok%2Fen%2B", "tok%2fen%2b", "\\u0074ok/en%2b", "tok/en+"]
    assert [redact(f"<{s}>", ["tok/en+"]) for s in spelt] == ["<[redacted]>"] * len(spelt)
    assert redact("a tok/en- b", ["tok/en+"]) == "a tok/en- b"
