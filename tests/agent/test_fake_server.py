"""FakeModelServer on its own: raw HTTP on 127.0.0.1, checked against each vendor's wire format."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from codeact.testing.fake_server import FakeModelServer

OPENAI_BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
ANTHROPIC_BODY = {"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}
ANTHROPIC_HEADERS = {"anthropic-version": "2023-06-01"}
CALLS = {
    "text": "Looking that up for you now.",
    "tool_calls": [
        {"name": "get_weather", "arguments": {"city": "Pittsburgh", "units": "C"}},
        {"name": "get_weather", "arguments": {"city": "Beijing", "units": "C"}, "id": "mine"},
    ],
}


def sse(response: httpx.Response) -> list[tuple[str, str]]:
    """``(event, data)`` pairs of an SSE body."""
    out = []
    for block in response.text.split("\n\n"):
        if block.strip():
            fields = dict(line.split(": ", 1) for line in block.splitlines())
            out.append((fields.get("event", "message"), fields["data"]))
    return out


def test_openai_json_answer() -> None:
    with FakeModelServer([CALLS]) as server:
        r = httpx.post(f"{server.openai_base_url}/chat/completions", json=OPENAI_BODY)
    data = r.json()
    assert r.status_code == 200 and data["object"] == "chat.completion"
    choice = data["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] == CALLS["text"]
    calls = choice["message"]["tool_calls"]
    assert [c["id"] for c in calls] == ["call_0_0", "mine"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"city": "Pittsburgh", "units": "C"}
    assert set(data["usage"]) == {"prompt_tokens", "completion_tokens", "total_tokens"}
    assert server.requests == [OPENAI_BODY] and server.calls[0].vendor == "openai"


def test_openai_stream_is_cut_into_small_chunks() -> None:
    body = {**OPENAI_BODY, "stream": True, "stream_options": {"include_usage": True}}
    with FakeModelServer([CALLS]) as server:
        r = httpx.post(f"{server.url}/chat/completions", json=body)  # the path without /v1 works too
    assert r.headers["content-type"] == "text/event-stream"
    events = sse(r)
    assert events[-1] == ("message", "[DONE]")
    chunks = [json.loads(data) for _, data in events[:-1]]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0
    pieces = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    text = [d["content"] for d in pieces if d.get("content")]
    args = [tc["function"]["arguments"] for d in pieces for tc in d.get("tool_calls", []) if tc["index"] == 1]
    assert "".join(text) == CALLS["text"] and all(3 <= len(p) <= 7 for p in text[:-1])
    assert json.loads("".join(args)) == {"city": "Beijing", "units": "C"} and len(args) > 5
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "tool_calls"


def test_anthropic_json_and_stream() -> None:
    with FakeModelServer([CALLS, CALLS]) as server:
        plain = httpx.post(f"{server.anthropic_base_url}/v1/messages", json=ANTHROPIC_BODY, headers=ANTHROPIC_HEADERS)
        streamed = httpx.post(
            f"{server.anthropic_base_url}/v1/messages",
            json={**ANTHROPIC_BODY, "stream": True},
            headers=ANTHROPIC_HEADERS,
        )
    message = plain.json()
    assert message["type"] == "message" and message["stop_reason"] == "tool_use"
    assert [b["type"] for b in message["content"]] == ["text", "tool_use", "tool_use"]
    assert message["content"][1]["input"] == {"city": "Pittsburgh", "units": "C"}
    events = sse(streamed)
    names = [name for name, _ in events]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    assert all(json.loads(data)["type"] == name for name, data in events)
    partial = [json.loads(d)["delta"]["partial_json"] for n, d in events if "input_json_delta" in d]
    assert len(partial) > 5 and all(len(p) <= 7 for p in partial)


def test_error_entries_use_each_vendor_shape() -> None:
    script: list[Any] = [{"http_status": 429, "retry_after": 0.5}, {"http_status": 529, "message": "Overloaded"}]
    with FakeModelServer(script) as server:
        first = httpx.post(f"{server.openai_base_url}/chat/completions", json=OPENAI_BODY)
        second = httpx.post(f"{server.url}/v1/messages", json=ANTHROPIC_BODY, headers=ANTHROPIC_HEADERS)
    assert first.status_code == 429 and first.headers["retry-after"] == "0.5"
    assert first.json()["error"]["type"] == "rate_limit_error"
    assert second.status_code == 529
    assert second.json() == {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}


def test_truncated_stream_ends_without_terminal_event() -> None:
    with (
        FakeModelServer([{**CALLS, "truncate_stream": True}]) as server,
        httpx.stream("POST", f"{server.openai_base_url}/chat/completions", json={**OPENAI_BODY, "stream": True}) as r,
    ):
        received = b""
        with pytest.raises(httpx.RemoteProtocolError):
            for part in r.iter_bytes():
                received += part
    assert b"[DONE]" not in received and b'finish_reason": "tool_calls' not in received
    assert b'"arguments": "' in received


def test_bad_requests_are_400_and_consume_nothing() -> None:
    with FakeModelServer(["ok"]) as server:
        no_version = httpx.post(f"{server.url}/v1/messages", json=ANTHROPIC_BODY)
        orphan = {"model": "m", "messages": [{"role": "tool", "tool_call_id": "x", "content": "r"}]}
        bad_tool = httpx.post(f"{server.openai_base_url}/chat/completions", json=orphan)
        not_json = httpx.post(f"{server.openai_base_url}/chat/completions", content=b"{nope")
        unknown = httpx.post(f"{server.url}/v2/whatever", json={})
        ok = httpx.post(f"{server.openai_base_url}/chat/completions", json=OPENAI_BODY)
        exhausted = httpx.post(f"{server.openai_base_url}/chat/completions", json=OPENAI_BODY)
    assert no_version.status_code == 400 and "anthropic-version" in no_version.json()["error"]["message"]
    assert bad_tool.status_code == 400 and "role 'tool'" in bad_tool.json()["error"]["message"]
    assert not_json.status_code == 400 and unknown.status_code == 404
    assert ok.json()["choices"][0]["message"]["content"] == "ok"
    assert exhausted.status_code == 400 and "script exhausted" in exhausted.json()["error"]["message"]
    assert server.remaining == 0


def test_callable_script_sees_body_and_vendor() -> None:
    def reply(body: dict[str, Any], vendor: str) -> Any:
        return f"{vendor}:{len(body['messages'])}"

    with FakeModelServer(reply) as server:
        a = httpx.post(f"{server.url}/v1/messages", json=ANTHROPIC_BODY, headers=ANTHROPIC_HEADERS)
        o = httpx.post(f"{server.openai_base_url}/chat/completions", json=OPENAI_BODY)
    assert a.json()["content"][0]["text"] == "anthropic:1"
    assert o.json()["choices"][0]["message"]["content"] == "openai:1"
    assert server.remaining is None and len(server.requests) == 2


def test_a_failing_callable_script_is_a_final_500() -> None:
    def reply(body: dict[str, Any], vendor: str) -> Any:
        raise KeyError("oops")

    with FakeModelServer(reply) as server:
        r = httpx.post(f"{server.openai_base_url}/chat/completions", json=OPENAI_BODY)
    assert r.status_code == 500 and r.headers["x-should-retry"] == "false"
    assert "KeyError" in r.json()["error"]["message"]


def test_usage_from_entry_or_counted() -> None:
    script: list[Any] = [{"text": "x" * 40, "usage": {"input_tokens": 7, "output_tokens": 3}}, "x" * 40]
    with FakeModelServer(script) as server:
        given = httpx.post(f"{server.openai_base_url}/chat/completions", json=OPENAI_BODY).json()["usage"]
        counted = httpx.post(f"{server.openai_base_url}/chat/completions", json=OPENAI_BODY).json()["usage"]
    assert given == {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
    assert counted["completion_tokens"] == 10


def test_required_api_key() -> None:
    with FakeModelServer(["ok", "ok"], require_api_key="k1") as server:
        url = f"{server.openai_base_url}/chat/completions"
        denied = httpx.post(url, json=OPENAI_BODY, headers={"authorization": "Bearer wrong"})
        allowed = httpx.post(url, json=OPENAI_BODY, headers={"authorization": "Bearer k1"})
    assert denied.status_code == 401 and allowed.status_code == 200


def test_standalone_command(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps(["from the command line"]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "codeact.testing.fake_server", "--script", str(script), "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        base = proc.stdout.readline().split()[-1]
        assert base.startswith("http://127.0.0.1:") and base.endswith("/v1")
        r = httpx.post(f"{base}/chat/completions", json=OPENAI_BODY, timeout=10)
        assert r.json()["choices"][0]["message"]["content"] == "from the command line"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


def test_standalone_command_runs_without_a_runpy_warning() -> None:
    # codeact.testing's __init__ imported the module before runpy ran it as __main__: a RuntimeWarning
    proc = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-m", "codeact.testing.fake_server",
                           "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert "--script" in proc.stdout
