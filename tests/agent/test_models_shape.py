"""A model response that is JSON but not of the vendor's shape is a ModelError (an episode that ends
``model_error``), never whatever reading it raised (AttributeError, KeyError...). Real HTTP on loopback."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from codeact.agent.messages import Message
from codeact.agent.models import AnthropicClient, OpenAIClient
from codeact.errors import ModelError


class _Answers:
    """A loopback server that answers every POST with the next (content type, body) queued."""

    def __init__(self) -> None:
        self.queue: list[tuple[str, bytes]] = []
        answers = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                kind, body = answers.queue.pop(0)
                if kind == "gzip-429":  # a rate-limit answer with a compressed body
                    import gzip

                    packed = gzip.compress(body)
                    self.send_response(429)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-encoding", "gzip")
                    self.send_header("content-length", str(len(packed)))
                    self.end_headers()
                    self.wfile.write(packed)
                    return
                self.send_response(200)
                self.send_header("content-type", kind)
                if body:
                    self.send_header("content-length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                self.end_headers()  # no body given: "data: xxxx…" for as long as the client reads
                try:
                    self.wfile.write(b"data: ")
                    while True:
                        self.wfile.write(b"x" * 65536)
                except OSError:
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture(scope="module")
def answers() -> Iterator[_Answers]:
    server = _Answers()
    yield server
    server.server.shutdown()


def _sse(*events: Any) -> bytes:
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"


OPENAI_BODIES = [{"choices": ["x"]}, {"choices": {"a": 1}}, {"choices": [{"message": "hi"}]},
                 {"choices": [{"message": {"tool_calls": ["x"]}, "finish_reason": "tool_calls"}]}]
OPENAI_STREAMS = [{"choices": [{"index": 0, "delta": "text"}]}, {"choices": [{"index": 0, "delta": {"content": 5}}]}]
ANTHROPIC_BODIES = [{"type": "message", "content": "hello", "stop_reason": "end_turn"},
                    {"type": "message", "content": ["hello"], "stop_reason": "end_turn"}]
ANTHROPIC_STREAMS = [{"type": "content_block_start", "index": "abc", "content_block": {"type": "text", "text": ""}},
                     {"type": "message_start", "message": "x"}]


@pytest.mark.parametrize("body", OPENAI_BODIES + ANTHROPIC_BODIES)
def test_a_body_of_another_shape_is_a_model_error(answers: _Answers, body: dict[str, Any]) -> None:
    client_cls, base = (AnthropicClient, answers.url) if body.get("type") == "message" else \
        (OpenAIClient, answers.url + "/v1")
    answers.queue.append(("application/json", json.dumps(body).encode()))
    with client_cls("m", base_url=base, api_key="k", max_retries=0) as client, \
            pytest.raises(ModelError, match="unexpected shape"):
        client.complete([Message.user("hi")])


@pytest.mark.parametrize("event", OPENAI_STREAMS + ANTHROPIC_STREAMS)
def test_a_stream_event_of_another_shape_is_a_model_error(answers: _Answers, event: dict[str, Any]) -> None:
    client_cls, base = (OpenAIClient, answers.url + "/v1") if "choices" in event else (AnthropicClient, answers.url)
    answers.queue.append(("text/event-stream", _sse(event)))
    with client_cls("m", base_url=base, api_key="k", max_retries=0) as client, \
            pytest.raises(ModelError, match="unexpected shape"):
        client.complete([Message.user("hi")], stream=True)


def _complete_capped(answers: _Answers, *, stream: bool, awaited: bool) -> None:
    """Ask for the next queued answer with a 100,000-byte cap: it must end as a ModelError saying so."""
    import asyncio

    from codeact.agent.models import HTTPOptions

    options = HTTPOptions(max_retries=0, max_response_bytes=100_000)
    with OpenAIClient("m", base_url=answers.url + "/v1", api_key="k", options=options) as client, \
            pytest.raises(ModelError, match="larger than 100000 bytes"):
        if awaited:
            asyncio.run(client.acomplete([Message.user("hi")], stream=stream))
        else:
            client.complete([Message.user("hi")], stream=stream)


@pytest.mark.parametrize("stream", [False, True], ids=["body", "stream"])
@pytest.mark.parametrize("awaited", [False, True], ids=["sync", "async"])
def test_an_answer_over_the_size_cap_is_a_model_error(answers: _Answers, stream: bool, awaited: bool) -> None:
    # Without a cap a huge body, or a stream that never ends, grew in memory until the wall budget.
    text = "x" * 200_000
    if stream:
        answers.queue.append(("text/event-stream", _sse(*[{"choices": [{"index": 0, "delta": {"content": text}}]}] * 3)))
    else:
        answers.queue.append(("application/json", json.dumps(
            {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}
        ).encode()))
    _complete_capped(answers, stream=stream, awaited=awaited)


@pytest.mark.parametrize("awaited", [False, True], ids=["sync", "async"])
def test_an_endless_line_is_capped_too(answers: _Answers, awaited: bool) -> None:
    # A line is held until its newline: a stream that never sends one must be cut by its raw bytes.
    answers.queue.append(("text/event-stream", b""))
    _complete_capped(answers, stream=True, awaited=awaited)


def test_sse_lines_split_on_every_line_ending_across_chunks() -> None:
    from codeact.agent.models._http import HTTPOptions, Transport, _LineSplitter

    lines = _LineSplitter(Transport("test", HTTPOptions()))
    out = []
    for chunk in (b"data: a\r", b"\ndata: b\n", b"\r\nevent: x\rdata: c", b"\r", b"\n\n"):
        out += lines.feed(chunk)
    out += lines.end()
    assert out == ["data: a", "data: b", "", "event: x", "data: c", ""]

    def split(*chunks: bytes) -> list[str]:
        splitter = _LineSplitter(Transport("test", HTTPOptions()))
        return [line for chunk in chunks for line in splitter.feed(chunk)] + splitter.end()

    assert split(b"a\r", b"", b"\nb\n") == ["a", "b"]  # an empty chunk between a CR and its LF
    assert split(b"data: x\r\r") == ["data: x", ""]  # a CR at the very end still ends the event
    assert split("é\n".encode()[:1], "é\n".encode()[1:]) == ["é"]  # a character split across chunks


def test_a_long_line_costs_linear_time() -> None:
    # Each chunk was joined to the whole line so far and split again: 4 MiB in 1 KiB chunks took 52 s.
    from codeact.agent.models._http import HTTPOptions, Transport, _LineSplitter

    splitter = _LineSplitter(Transport("test", HTTPOptions()))
    chunk = b"x" * 1024
    for _ in range(8 * 1024):  # 8 MiB, no newline
        assert splitter.feed(chunk) == []
    assert len(splitter._pieces) == 8 * 1024  # kept as pieces, joined once at the line's end
    assert [len(line) for line in splitter.feed(b"\n")] == [8 * 1024 * 1024]


def test_a_compressed_error_body_is_read_once(answers: _Answers) -> None:
    # The error's body is read (decoded) for its message, then handed on: with its wire headers
    # (content-encoding: gzip) it was decoded a second time and raised httpx.DecodingError.
    from codeact.agent.models import HTTPOptions

    for _ in range(2):
        answers.queue.append(("gzip-429", json.dumps({"error": {"message": "slow down"}}).encode()))
    options = HTTPOptions(max_retries=1, backoff_base=0.01, backoff_max=0.01)
    with OpenAIClient("m", base_url=answers.url + "/v1", api_key="k", options=options) as client, \
            pytest.raises(ModelError, match=r"429 after 2 attempts.*slow down"):
        client.complete([Message.user("hi")])
