"""What the viewer shows of an episode besides its steps: the sandbox's cold start apart from the
first action, the system prompt, the stubs, the observation fed back, and unknown token usage."""

from __future__ import annotations

import html
import json
from pathlib import Path

from codeact import Runtime, SandboxConfig
from codeact.agent import CodeActAgent, ScriptedModel, load_trace
from codeact.agent.messages import ModelResponse, Usage
from codeact.viewer import build_timeline, render_trace
from tests.conftest import Counter, make_tools


def _episode(tmp_path: Path, script: list[object]) -> Path:
    trace = tmp_path / "episode.jsonl"
    with Runtime(make_tools(Counter()), SandboxConfig(backend="local", policy="none", timeout_s=20)) as rt:
        episode = CodeActAgent(ScriptedModel(script), rt.toolset, runtime=rt, trace_path=trace).run("weather?")  # type: ignore[arg-type]
    assert episode.status == "answered"
    return trace


def test_the_first_action_does_not_carry_the_sandbox_start(tmp_path: Path) -> None:
    trace = _episode(tmp_path, ["```python\nx = get_weather(city='Pittsburgh')\n```", "```python\nfinal_answer(x)\n```"])
    tl = build_timeline(load_trace(trace))
    assert [s.kind for s in tl.spans] == ["model", "sandbox", "exec", "model", "exec"]
    start, first = tl.spans[1], tl.spans[2]
    assert start.duration > 0 and first.start >= start.start + start.duration - 1e-3
    events = [json.loads(line) for line in trace.read_text().splitlines()]
    episode = events[-1]["episode"]
    assert 0 < episode["sandbox_start_s"] < episode["wall_s"]
    page = render_trace(trace)
    assert page.count('class="bar sandbox"') == 1 and "sandbox start (cold start" in page


def test_the_page_shows_the_system_prompt_the_stubs_and_the_observation(tmp_path: Path) -> None:
    trace = _episode(tmp_path, ["```python\nprint(get_weather(city='Pittsburgh'))\n```", "```python\nfinal_answer(1)\n```"])
    page = render_trace(trace)
    start = json.loads(trace.read_text().splitlines()[0])
    assert "def get_weather" in start["stubs"]
    for cls, text in (("system", start["system"]), ("stubs", start["stubs"])):
        assert f'<details class="prompt {cls}">' in page and html.escape(text, quote=True) in page
    assert 'class="prompt tools"' in page  # the execute_python tool the model may call
    assert '<pre class="observation">' in page and "stdout:" in page.split('<pre class="observation">')[1]


def test_unknown_token_usage_shows_as_na(tmp_path: Path) -> None:
    unknown = Usage(input_tokens=0, output_tokens=0, reported=False)
    script = [ModelResponse(text="```python\nfinal_answer(1)\n```", usage=unknown)]
    page = render_trace(_episode(tmp_path, script))  # type: ignore[arg-type]
    assert "tokens n/a" in page and "tokens: <b>n/a</b>" in page
    assert "0→0" not in page and "0 in → 0 out" not in page
