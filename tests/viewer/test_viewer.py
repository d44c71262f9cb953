"""The trace viewer: real traces (agents on the local backend, an eval run) → HTML, checked as text
and in a real headless Chromium (console errors, DOM, a screenshot)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from codeact import Runtime, SandboxConfig
from codeact.agent import CodeActAgent, ScriptedModel, load_trace
from codeact.cli import app
from codeact.viewer import build_timeline, render_trace, write_view
from tests.browser import Chromium, find_chromium
from tests.conftest import Counter, make_tools

LOCAL = ["--backend", "local", "--policy", "none", "--no-progress"]
HOSTILE = "</script><img src=x onerror=\"window.__pwned=1\"><b>bold</b>&amp;"


def _fenced(code: str) -> str:
    return f"```python\n{code}\n```"


@pytest.fixture(scope="module")
def eval_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real eval run: two tasks (one with a timed-out tool call), code and JSON modes."""
    out = tmp_path_factory.mktemp("viewer") / "run"
    result = CliRunner().invoke(app, ["eval", "weather", "--out", str(out), "--tasks",
                                      "weather.compare,weather.timeout", "--max-turns", "6", *LOCAL])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def hostile_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A code-agent trace whose code, stdout, stderr, tool arguments and answer carry HTML."""
    trace = tmp_path_factory.mktemp("viewer") / "hostile.jsonl"
    code = (f"print({HOSTILE!r})\nimport sys\nprint({HOSTILE!r}, file=sys.stderr)\n"
            f"get_weather(city={HOSTILE!r})\n")
    script = [_fenced(code), _fenced("1 / 0"), _fenced(f"final_answer({HOSTILE!r})")]
    with Runtime(make_tools(Counter()), SandboxConfig(backend="local", policy="none", timeout_s=20)) as rt:
        episode = CodeActAgent(ScriptedModel(script), rt.toolset, runtime=rt, trace_path=trace).run(HOSTILE)
    assert episode.status == "answered"
    return trace


def test_timeline_of_a_code_trace(hostile_trace: Path) -> None:
    tl = build_timeline(load_trace(hostile_trace))
    assert tl.mode == "code" and tl.status == "answered" and tl.answer == HOSTILE
    kinds = [s.kind for s in tl.spans]
    assert kinds == ["model", "sandbox", "exec", "model", "exec", "model", "exec"]
    first, failed = tl.spans[2], tl.spans[4]
    assert HOSTILE in first.info["stdout"] and HOSTILE in first.info["stderr"] and "print(" in first.info["code"]
    assert len(first.calls) == 1 and first.calls[0].name == "get_weather"
    call = first.calls[0]
    assert call.arguments == {"city": HOSTILE} and not call.estimated  # the trace has its live start
    started = next(e for e in load_trace(hostile_trace) if e["event"] == "call_started")
    assert call.start == started["t"] and first.start <= call.start <= first.start + first.duration
    assert not failed.ok and failed.info["error"]["type"] == "ZeroDivisionError"
    times = [s.start for s in tl.spans]
    assert times == sorted(times) and all(s.duration >= 0 for s in tl.spans) and tl.total > 0


def test_call_starts_are_estimated_in_traces_without_live_events(hostile_trace: Path, tmp_path: Path) -> None:
    old = tmp_path / "old.jsonl"
    old.write_text("".join(line + "\n" for line in hostile_trace.read_text().splitlines()
                           if json.loads(line)["event"] not in ("call_started", "call_finished", "stdout", "stderr")))
    tl = build_timeline(load_trace(old))
    exec_span = tl.spans[2]
    assert exec_span.calls[0].estimated and exec_span.calls[0].start == exec_span.start
    assert "start estimated" in render_trace(old)


def test_every_untrusted_text_is_escaped(hostile_trace: Path) -> None:
    page = render_trace(hostile_trace)
    assert "<img" not in page and "<b>bold" not in page and "onerror=\"" not in page
    assert page.count("</script>") == 1  # the page's own script only
    assert "&lt;/script&gt;&lt;img src=x onerror=&quot;window.__pwned=1&quot;&gt;" in page
    assert "&amp;amp;" in page  # an escaped ampersand is escaped again, not decoded
    assert "http://" not in page and "https://" not in page  # nothing to fetch


def test_long_texts_are_clipped(hostile_trace: Path) -> None:
    page = render_trace(hostile_trace, limit=100)
    assert "more characters not shown" in page


def test_view_an_eval_dir(eval_dir: Path) -> None:
    out = CliRunner().invoke(app, ["view", str(eval_dir)])
    assert out.exit_code == 0, out.output
    page_path = eval_dir / "view.html"
    assert out.output.strip() == str(page_path)
    page = page_path.read_text()
    assert page.count('<section class="episode') == 4 and page.count('<section class="task"') == 2
    assert "Code vs JSON, per task" in page and "weather.timeout" in page
    assert 'class="bar call error' in page  # the timed-out call
    assert "error: timeout" in page
    assert page.count('<span class="badge ok">correct</span>') == 4  # every episode's grade


def test_view_cli_errors(tmp_path: Path) -> None:
    runner = CliRunner()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    for args in (["view", str(tmp_path / "missing")], ["view", str(bad)], ["view", str(tmp_path)]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
    result = runner.invoke(app, ["view", str(bad), "--max-chars", "5"])
    assert result.exit_code == 2


def test_a_trace_cut_short_still_shows(hostile_trace: Path, tmp_path: Path) -> None:
    lines = hostile_trace.read_text().splitlines()
    first_call = next(i for i, line in enumerate(lines) if json.loads(line)["event"] == "call_started")
    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join(lines[:first_call + 1]) + "\n")  # killed while the first call ran
    tl = build_timeline(load_trace(cut))
    assert tl.status == "unfinished" and [s.kind for s in tl.spans] == ["model", "sandbox", "exec"]
    running = tl.spans[2]
    assert not running.ok and running.info["termination"] == "unfinished" and "print(" in running.info["code"]
    assert tl.tool_calls == 1 and running.calls[0].name == "get_weather" and not running.calls[0].estimated
    assert 'data-status="unfinished"' in write_view(cut).read_text()


# -- in a real browser ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def browser() -> Iterator[Chromium]:
    binary = find_chromium()
    if binary is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true and no chromium (scripts/ensure-chromium.sh installs Debian's package)")
        pytest.skip("no chromium on PATH (scripts/ensure-chromium.sh installs it)")
    with Chromium(binary, width=1280, height=900) as chromium:
        yield chromium


_FACTS = """(() => ({
  ready: document.documentElement.dataset.ready,
  episodes: document.querySelectorAll("section.episode").length,
  tasks: document.querySelectorAll("section.task").length,
  callBars: document.querySelectorAll(".bar.call").length,
  errorCallBars: document.querySelectorAll(".bar.call.error").length,
  modelBars: document.querySelectorAll(".bar.model").length,
  barsInside: [...document.querySelectorAll(".bar")].every(b => {
    const t = b.parentElement.getBoundingClientRect(), r = b.getBoundingClientRect();
    return r.left >= t.left - 1 && r.right <= t.right + 1 && r.width > 0;
  }),
  pwned: window.__pwned === 1,
  images: document.images.length,
}))()"""


def test_eval_view_in_chromium(browser: Chromium, eval_dir: Path, tmp_path: Path) -> None:
    page = write_view(eval_dir, tmp_path / "eval.html")
    browser.open(page)
    facts = browser.evaluate(_FACTS)
    assert browser.console == []
    results = [json.loads(line) for line in (eval_dir / "results.jsonl").read_text().splitlines()]
    assert facts["ready"] == "1" and facts["episodes"] == 4 and facts["tasks"] == 2
    assert facts["callBars"] == sum(len(r["records"]) for r in results) > 0
    assert facts["errorCallBars"] == sum(not c["ok"] for r in results for c in r["records"]) >= 1
    assert facts["modelBars"] == sum(r["model_calls"] for r in results)
    assert facts["barsInside"] and not facts["pwned"]
    # A click on a call bar opens that call's arguments and result.
    opened = browser.evaluate("""(() => {
      const bar = document.querySelector(".bar.call.error");
      bar.click();
      const d = document.getElementById(bar.dataset.target);
      return {open: d.open, text: d.textContent};
    })()""")
    assert opened["open"] and "timeout" in opened["text"] and "arguments" in opened["text"]
    shot = browser.screenshot(tmp_path / "eval.png")
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_hostile_trace_in_chromium(browser: Chromium, hostile_trace: Path, tmp_path: Path) -> None:
    browser.open(write_view(hostile_trace, tmp_path / "hostile.html"))
    facts = browser.evaluate(_FACTS)
    assert browser.console == []
    assert facts["episodes"] == 1 and facts["callBars"] == 1 and facts["images"] == 0 and not facts["pwned"]
    texts = browser.evaluate("[...document.querySelectorAll('pre.stdout')].map(p => p.textContent)")
    assert texts and HOSTILE in texts[0]  # shown as text, exactly as the code printed it
    shot = browser.screenshot(tmp_path / "hostile.png", full_page=True)
    assert shot.read_bytes()[:4] == b"\x89PNG"


def test_a_run_directory_shows_its_own_traces_after_a_move(tmp_path: Path) -> None:
    # An episode records its trace's absolute path; a run set aside (--force-new) or moved must
    # not show the traces another run wrote at that path since.
    from codeact.viewer import _trace_file

    old, new = tmp_path / "run.old-1", tmp_path / "run"
    for directory, text in ((old, "old run"), (new, "new run")):
        (directory / "traces").mkdir(parents=True)
        (directory / "traces" / "t__code__0.jsonl").write_text(text)
    recorded = str(new / "traces" / "t__code__0.jsonl")  # what the old run's episode recorded
    found = _trace_file(old, recorded)
    assert found is not None and found.read_text() == "old run"
    elsewhere = tmp_path / "kept" / "t.jsonl"  # a trace written outside the run directory still shows
    elsewhere.parent.mkdir()
    elsewhere.write_text("outside")
    assert _trace_file(new, str(elsewhere)) == elsewhere


def test_numbers_past_float_range_render_and_unparsable_nesting_is_one_line(tmp_path: Path) -> None:
    """A trace is data: ``10**400`` (an int past float's range) where a time or duration belongs is
    shown as no time, and the value itself is rendered; nesting past the JSON parser's depth is a
    one-line error (exit 2), never a traceback."""
    huge = str(10**400)
    trace = tmp_path / "huge.jsonl"
    trace.write_text("\n".join([
        '{"event": "episode_start", "t": 0, "task": "t", "mode": "code"}',
        '{"event": "model_request", "t": ' + huge + ', "call": 1}',
        '{"event": "execution", "t": 1e400, "turn": 1, "result": {"ok": true, "value": ' + huge
        + ', "calls": [{"id": "call_1", "name": "f", "ok": true, "duration_ms": ' + huge
        + ', "result": ' + huge + '}]}}',
        '{"event": "episode_end", "t": 2, "episode": {"status": "answered", "wall_s": ' + huge + "}}",
    ]) + "\n")
    runner = CliRunner()
    result = runner.invoke(app, ["view", str(trace), "-o", str(tmp_path / "huge.html")])
    assert result.exit_code == 0, result.output
    assert huge in (tmp_path / "huge.html").read_text()
    deep = tmp_path / "deep.jsonl"
    deep.write_text('{"event": "episode_start", "t": 0}\n{"event": "x", "v": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    result = runner.invoke(app, ["view", str(deep)])
    assert result.exit_code == 2, result.output
    assert "deep.jsonl:2: not a trace line" in result.output and "Traceback" not in result.output


def test_a_runs_egress_is_shown_escaped(tmp_path: Path) -> None:
    """Each request through the egress broker is a line of its step: allowed or refused, and why."""
    records = [{"method": "GET", "host": "127.0.0.1", "port": 8080, "path": "/data.csv", "status": 200,
                "bytes_out": 90, "bytes_in": 1234, "duration_ms": 5, "allowed": True},
               {"method": "CONNECT", "host": HOSTILE, "port": 443, "status": 403, "allowed": False,
                "reason": f"{HOSTILE}:443 is not in the egress allowlist"}]
    trace = tmp_path / "egress.jsonl"
    trace.write_text("\n".join(json.dumps(e) for e in [
        {"event": "episode_start", "t": 0, "task": "t", "mode": "code"},
        {"event": "execution", "t": 1, "turn": 1, "code": "fetch()", "result": {"ok": True, "egress": records}},
        {"event": "episode_end", "t": 2, "episode": {"status": "answered"}},
    ]) + "\n")
    page = render_trace(trace)
    assert "ok · GET 127.0.0.1:8080/data.csv · 200 · 90→1234 B · 5 ms" in page
    assert "refused · CONNECT" in page and "is not in the egress allowlist" in page and HOSTILE not in page
