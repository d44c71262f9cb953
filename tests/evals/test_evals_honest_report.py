"""The report accounts for every planned episode and says where its token numbers come from."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from codeact import Toolset
from codeact.agent.messages import Usage
from codeact.agent.models.anthropic import parse_message
from codeact.agent.models.openai import parse_completion
from codeact.evals._accounting import SCRIPTED_TOKENS
from codeact.evals.providers import ModelSpec
from codeact.evals.report import write_report
from codeact.evals.runner import run_suite
from codeact.evals.suite import Suite, Task, load_suite
from tests._configs import LOCAL


def _broken_tools() -> Toolset:
    raise RuntimeError("the tool factory is broken")


def test_a_report_shows_harness_failures_and_unpaired_episodes(tmp_path: Path) -> None:
    weather = load_suite("weather")
    broken = Task(id="broken", instruction="x", tools=_broken_tools, expected=1,
                  scripts={"code": ["1"], "json": ["1"]})
    suite = Suite("mixed", [weather["weather.convert"], weather["weather.compare"], broken])
    # json runs only one task (--limit): code 2/2 must not be compared with json 1/1 on other tasks
    run_suite(suite, out=tmp_path, modes=["code"], sandbox=LOCAL, progress=False)
    run_suite(suite, out=tmp_path, modes=["json"], sandbox=LOCAL, progress=False, limit=1)
    assert len((tmp_path / "failures.jsonl").read_text().splitlines()) == 1  # broken|code
    written = write_report(tmp_path, plots=False)
    summary = json.loads(written["summary"].read_text())
    modes = {m["mode"]: m for m in summary["modes"]}
    code, json_ = modes["code"], modes["json"]
    assert (code["planned"], code["finished"], code["episodes"], code["harness_failures"]) == (3, 2, 1, 1)
    assert (json_["planned"], json_["finished"], json_["episodes"], json_["not_run"]) == (3, 1, 1, 2)
    assert code["successes"] + (code["episodes"] - code["successes"]) == 1  # rates on the paired set only
    warnings = summary["meta"]["warnings"]
    assert any("code: 1 finished episode(s) have no counterpart" in w for w in warnings)
    assert any("code: 1 harness failure(s)" in w for w in warnings)
    assert any("json: 2 planned episode(s) not run yet" in w for w in warnings)
    assert summary["meta"]["token_source"] == SCRIPTED_TOKENS and summary["meta"]["fingerprint"]["tasks"]
    assert summary["paired"]["unit"] == "task" and summary["paired"]["tasks"] == 1
    markdown = written["markdown"].read_text()
    assert "## Episodes" in markdown and "| code | 3 | 2 | 1 |" in markdown
    assert "Warning: code: 1 harness failure(s)" in markdown and f"Tokens: {SCRIPTED_TOKENS}" in markdown
    assert "Unit of analysis: the task" in markdown


def test_usage_in_every_provider_shape_and_missing_usage_is_unknown() -> None:
    assert Usage.from_wire({"prompt_tokens": 10, "completion_tokens": 3}) == Usage(input_tokens=10, output_tokens=3)
    assert Usage.from_wire({"input_tokens": 10, "output_tokens": 3, "cache_read_input_tokens": 100,
                            "cache_creation_input_tokens": 5}) == Usage(input_tokens=115, output_tokens=3)
    assert Usage.from_wire({"promptTokenCount": 7, "candidatesTokenCount": 2}) == Usage(input_tokens=7, output_tokens=2)
    assert Usage.from_wire({"inputTokens": 4, "outputTokens": 1}) == Usage(input_tokens=4, output_tokens=1)
    for missing in (None, {}, {"total_tokens": "x"}, "12"):
        assert Usage.from_wire(missing).reported is False
    assert (Usage() + Usage.from_wire(None)).reported is False
    base = {"choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}]}
    assert parse_completion(base).usage.reported is False
    assert parse_completion({**base, "usage": {"prompt_tokens": 2, "completion_tokens": 1}}).usage.input_tokens == 2
    anthropic = {"content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn"}
    assert parse_message(anthropic).usage.reported is False
    shaped = parse_message({**anthropic, "usage": {"input_tokens": 3, "cache_read_input_tokens": 4,
                                                   "output_tokens": 1}}).usage
    assert (shaped.input_tokens, shaped.output_tokens, shaped.reported) == (7, 1, True)


class _NoUsage(BaseHTTPRequestHandler):
    """An OpenAI-compatible server that never reports usage (as some local servers do)."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        body = json.dumps({"id": "x", "object": "chat.completion", "model": "m", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "It is 20 °C.\nANSWER: 20.0"},
             "finish_reason": "stop"}]}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def no_usage_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NoUsage)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def test_missing_usage_is_reported_as_unknown_not_zero(tmp_path: Path, no_usage_server: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    spec = ModelSpec("openai:m", base_url=no_usage_server, max_retries=0)
    run_suite("weather", spec, out=tmp_path, tasks=["weather.convert"], modes=["json"], sandbox=LOCAL, progress=False)
    (row,) = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert row["correct"] and row["usage_unknown"] == 1 and row["tokens_in"] == 0
    written = write_report(tmp_path, plots=False)
    summary = json.loads(written["summary"].read_text())
    (mode,) = summary["modes"]
    assert mode["tokens_in"] is None and mode["tokens_per_success"] is None and mode["usage_unknown_calls"] == 1
    assert summary["meta"]["token_source"].startswith("provider usage (1 model call(s) reported none")
    assert "| json | 1 | 100.0% (1/1) |" in written["markdown"].read_text()
    assert "unknown" in written["markdown"].read_text()
