"""``run_suite``: the built-in suites through the FakeModelServer over real HTTP, the report's
numbers recomputed independently from the traces and the server's own log, resuming, Ctrl-C."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from codeact import SandboxConfig, Toolset
from codeact.evals.providers import ModelSpec, ScriptedProvider
from codeact.evals.report import write_report
from codeact.evals.runner import run_suite
from codeact.evals.suite import Suite, Task, load_suite
from codeact.testing._fake_wire import usage_of
from codeact.testing.fake_server import FakeModelServer
from tests._configs import LOCAL

#: The deliberate slips of the reference scripts (a competent model's typical mistakes).
SLIPS = {
    "weather": {("weather.ambiguous_city", "code"), ("weather.at_least_20c", "json")},
    "data": {("data.monthly_completed", "json")},
    "multitool": {("m3.trade", "code"), ("m3.travel", "json")},
}
COMPARED = ("correct", "answer", "status", "turns", "model_calls", "tokens_in", "tokens_out", "tool_calls",
            "tool_errors", "errors")


def lines(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def by_key(out: Path) -> dict[tuple[str, str, int], dict[str, Any]]:
    return {(r["task_id"], r["mode"], r["repeat"]): r for r in lines(out)}


@pytest.fixture(scope="module")
def weather_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ScriptedProvider]:
    """The weather suite, both modes, local backend, through one scripted server we can inspect."""
    out = tmp_path_factory.mktemp("weather")
    provider = ScriptedProvider(load_suite("weather"))
    try:
        summary = run_suite("weather", out=out, provider=provider, sandbox=LOCAL, concurrency=4, progress=False)
    finally:
        provider.close()
    assert summary.ran == 14 and not summary.failures and not summary.interrupted
    return out, provider


# -- independent recomputation ---------------------------------------------------------------------

EXPECTED: dict[str, Any] = {"weather.compare": 2.0, "weather.convert": 20.0, "weather.ambiguous_city": 50.0,
                            "weather.timeout": 18.0, "weather.warmest": "cairo",
                            "weather.at_least_20c": {"beijing", "cairo"}, "weather.mean": 17.25}


def grade(task_id: str, answer: Any) -> bool:
    want = EXPECTED[task_id]
    if isinstance(answer, str) and "ANSWER:" in answer:  # the answer protocol's last line, read independently
        answer = json.loads(answer.rsplit("ANSWER:", 1)[1])
    if isinstance(want, float):
        found = re.search(r"-?\d+(?:\.\d+)?", str(answer))
        return found is not None and abs(float(found.group()) - want) < 0.06
    if isinstance(want, set):
        items = answer if isinstance(answer, list) else str(answer).split(",")
        return {str(i).strip().lower() for i in items} == want
    return str(answer).strip().lower() == want


def from_trace(path: Path) -> dict[str, Any]:
    """One episode's numbers, read off its trace events (not from the Episode)."""
    events = [json.loads(line) for line in path.read_text().splitlines()]
    kinds = [e["event"] for e in events]
    responses = [e["response"] for e in events if e["event"] == "model_response"]
    executions = [e["result"] for e in events if e["event"] == "execution"]
    tool_events = [e for e in events if e["event"] == "tool_results"]
    records = [c for r in executions for c in r["calls"]] + [c for e in tool_events for c in e["records"]]
    final = next((r["final_answer"] for r in executions if r["answered"]), None)
    answer = final if final is not None else responses[-1]["text"]
    syntax = sum(1 for r in executions if r["error"] and r["error"]["type"] == "SyntaxError")
    return {
        "task_id": path.name.split("__")[0], "answer": answer,
        "turns": len({e["turn"] for e in events if e["event"] in ("code", "tool_results")}),
        "model_calls": kinds.count("model_request"),
        "tokens_in": sum(r["usage"]["input_tokens"] for r in responses),
        "tokens_out": sum(r["usage"]["output_tokens"] for r in responses),
        "tool_calls": len(records),
        "errors": {"syntax": syntax, "runtime": sum(1 for r in executions if not r["ok"]) - syntax,
                   "tool": sum(1 for c in records if not c["ok"]), "budget": kinds.count("budget"),
                   "model": kinds.count("model_error")},
    }


def wilson(k: int, n: int) -> tuple[float, float]:
    z = 1.96
    centre, half = (k / n + z * z / (2 * n)), z * math.sqrt(k / n * (1 - k / n) / n + z * z / (4 * n * n))
    return (centre - half) / (1 + z * z / n), (centre + half) / (1 + z * z / n)


def md_rows(markdown: str, heading: str) -> dict[str, list[str]]:
    section = markdown.split(heading, 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in section.splitlines() if line.startswith("| ")]
    return {row[0]: row for row in rows[1:]}


def test_weather_report_numbers_match_an_independent_recount(weather_run: tuple[Path, ScriptedProvider]) -> None:
    out, provider = weather_run
    written = write_report(out)
    table = md_rows(written["markdown"].read_text(), "## Per mode")
    server_tokens_in: dict[str, int] = {}
    for call in provider.server.calls:
        key = call.body["metadata"]["user_id"]
        server_tokens_in[key] = server_tokens_in.get(key, 0) + usage_of({}, call.body)[0]
    for mode in ("code", "json"):
        eps = [from_trace(p) for p in sorted((out / "traces").glob(f"*__{mode}__0.jsonl"))]
        assert len(eps) == 7
        for ep in eps:  # the server's own log agrees with the trace
            key = f"{ep['task_id']}|{mode}|0"
            assert provider.requests[key] == ep["model_calls"] and provider.episodes[key] == 1
            assert server_tokens_in[key] == ep["tokens_in"]
        ok = sum(grade(ep["task_id"], ep["answer"]) for ep in eps)
        failed = {(ep["task_id"], mode) for ep in eps if not grade(ep["task_id"], ep["answer"])}
        assert failed == {s for s in SLIPS["weather"] if s[1] == mode}
        lo, hi = wilson(ok, 7)
        mean = {f: sum(ep[f] for ep in eps) / 7 for f in ("turns", "model_calls", "tokens_in", "tokens_out",
                                                          "tool_calls")}
        row = table[mode]
        assert row[1] == "7"
        assert row[2] == f"{100 * ok / 7:.1f}% ({ok}/7)"
        assert row[3] == f"[{100 * lo:.1f}%, {100 * hi:.1f}%]"
        assert row[4:9] == [f"{mean['turns']:.2f}", f"{mean['model_calls']:.2f}", f"{mean['tokens_in']:.1f}",
                            f"{mean['tokens_out']:.1f}", f"{mean['tool_calls']:.2f}"]
        assert float(row[9]) > 0  # wall seconds
        assert 0 <= float(row[10]) <= float(row[9])  # of which the sandbox's start
        tokens = sum(ep["tokens_in"] + ep["tokens_out"] for ep in eps)
        assert row[11] == f"{tokens / ok:.1f}"
        layers = ("syntax", "runtime", "tool", "budget", "model")
        assert row[12:17] == [str(sum(ep["errors"][layer] for ep in eps)) for layer in layers]
    # the timed-out service and the ambiguous city surface as tool errors in both modes
    assert int(table["code"][14]) >= 3 and int(table["json"][14]) >= 2
    paired = md_rows(written["markdown"].read_text(), "## Code vs JSON, per task")
    assert paired["weather.ambiguous_city"][1:3] == ["0/1", "1/1"]
    assert paired["weather.at_least_20c"][1:3] == ["1/1", "0/1"]


@pytest.mark.parametrize("name", ["data", "multitool"])
def test_builtin_suite_end_to_end(name: str, tmp_path: Path) -> None:
    summary = run_suite(name, out=tmp_path, sandbox=LOCAL, concurrency=4, progress=False)
    results = lines(tmp_path)
    assert summary.ran == len(results) == 2 * len(load_suite(name))
    assert all(r["status"] == "answered" for r in results), [r["stop_reason"] for r in results]
    assert {(r["task_id"], r["mode"]) for r in results if not r["correct"]} == SLIPS[name]
    code = [r for r in results if r["mode"] == "code"]
    json_ = [r for r in results if r["mode"] == "json"]
    assert sum(r["model_calls"] for r in code) < sum(r["model_calls"] for r in json_)


def test_interrupted_run_resumes_without_running_an_episode_twice(tmp_path: Path) -> None:
    provider = ScriptedProvider(load_suite("weather"))
    try:
        first = run_suite("weather", out=tmp_path, provider=provider, sandbox=LOCAL, limit=5, progress=False)
        assert first.ran == 5 and len(lines(tmp_path)) == 5
        with (tmp_path / "results.jsonl").open("a") as fh:  # killed in the middle of writing a line
            fh.write('{"task_id": "weather.mean", "mode": "co')
        second = run_suite("weather", out=tmp_path, provider=provider, sandbox=LOCAL, progress=False)
        third = run_suite("weather", out=tmp_path, provider=provider, sandbox=LOCAL, progress=False)
    finally:
        provider.close()
    assert (second.already_done, second.ran, third.ran) == (5, 9, 0)
    keys = [(r["task_id"], r["mode"], r["repeat"]) for r in lines(tmp_path)]
    assert len(keys) == len(set(keys)) == 14
    assert len(provider.episodes) == 14 and set(provider.episodes.values()) == {1}  # no episode started twice


def test_sigint_keeps_finished_episodes_and_a_rerun_completes(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "codeact.cli", "eval", "weather", "--out", str(tmp_path), "--backend", "local",
           "--policy", "none", "--concurrency", "1", "--no-progress"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    results = tmp_path / "results.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not results.exists() or results.read_text().count("\n") < 3):
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err.decode()[-2000:]
    kept = len(lines(tmp_path))
    assert 3 <= kept < 14
    rerun = subprocess.run([*cmd, "--concurrency", "4"], capture_output=True, text=True, timeout=120, env=env)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert f"{14 - kept} episode(s) run, {kept} already done" in rerun.stderr
    keys = [(r["task_id"], r["mode"], r["repeat"]) for r in lines(tmp_path)]
    assert len(keys) == len(set(keys)) == 14


def test_weather_suite_on_docker(tmp_path: Path, docker_image: str,
                                 weather_run: tuple[Path, ScriptedProvider]) -> None:
    config = SandboxConfig(backend="docker", timeout_s=20)
    summary = run_suite("weather", out=tmp_path, sandbox=config, concurrency=4, progress=False)
    assert summary.ran == 14 and not summary.failures
    local, docker = by_key(weather_run[0]), by_key(tmp_path)
    for key, row in docker.items():
        assert {f: row[f] for f in COMPARED} == {f: local[key][f] for f in COMPARED}, key


def test_anthropic_wire_and_streaming_give_the_same_outcomes(tmp_path: Path,
                                                            weather_run: tuple[Path, ScriptedProvider]) -> None:
    summary = run_suite("weather", ModelSpec("scripted", wire="anthropic"), out=tmp_path, sandbox=LOCAL,
                        stream=True, concurrency=4, progress=False)
    assert summary.ran == 14
    local = by_key(weather_run[0])
    fields = ("correct", "answer", "turns", "model_calls", "tool_calls", "errors")
    for key, row in by_key(tmp_path).items():
        assert row["model"] == "scripted" and {f: row[f] for f in fields} == {f: local[key][f] for f in fields}


def test_a_provider_model_goes_through_the_same_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``openai:MODEL`` with a base URL: here an OpenAI-compatible server replaying one task's script."""
    task = load_suite("weather")["weather.compare"]
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with FakeModelServer(list(task.scripts["json"]), require_api_key="sk-test") as server:
        spec = ModelSpec("openai:gpt-test", base_url=server.openai_base_url)
        summary = run_suite("weather", spec, out=tmp_path, tasks=["weather.compare"], modes=["json"], sandbox=LOCAL,
                            progress=False)
        bodies = server.requests
    (row,) = lines(tmp_path)
    assert summary.ran == 1 and row["correct"] and row["model"] == "gpt-test" and row["model_calls"] == 3
    assert all(b["model"] == "gpt-test" and "metadata" not in b for b in bodies)
    assert json.loads((tmp_path / "run.json").read_text())["model"] == "openai:gpt-test"


def _broken_tools() -> Toolset:
    raise RuntimeError("the tool factory is broken")


def test_a_harness_failure_is_reported_not_recorded(tmp_path: Path) -> None:
    weather = load_suite("weather")
    broken = Task(id="broken", instruction="x", tools=_broken_tools, expected=1, scripts={"code": ["1"]})
    suite = Suite("mixed", [weather["weather.convert"], broken])
    summary = run_suite(suite, out=tmp_path, modes=["code"], sandbox=LOCAL, progress=False)
    assert summary.ran == 1 and [f.key.task_id for f in summary.failures] == ["broken"]
    assert "broken" in summary.failures[0].error and [r["task_id"] for r in lines(tmp_path)] == ["weather.convert"]
    again = run_suite(suite, out=tmp_path, modes=["code"], sandbox=LOCAL, progress=False)
    assert again.already_done == 1 and len(again.failures) == 1  # tried again, still not recorded


def test_a_run_directory_keeps_one_suite_and_model(tmp_path: Path) -> None:
    run_suite("weather", out=tmp_path, tasks=["weather.convert"], modes=["code"], sandbox=LOCAL, progress=False)
    with pytest.raises(ValueError, match="another --out"):
        run_suite("weather", ModelSpec("scripted", wire="anthropic"), out=tmp_path, sandbox=LOCAL, progress=False)
    with pytest.raises(ValueError, match="modes"):
        run_suite("weather", out=tmp_path, modes=["yaml"], sandbox=LOCAL, progress=False)


def test_an_experiment_with_check_block_counts_rejections(tmp_path: Path) -> None:
    """``run_suite(check="block")``: the scripted slip is rejected before it runs (no tool call),
    counted in the ``check`` layer; the run's fingerprint says how it was checked."""
    from codeact import tool

    @tool
    def unit(city: str) -> str:
        """The unit a city reports in."""
        return "fahrenheit" if city == "Beijing" else "celsius"

    slip = {"text": "```python\nprint(unit(citty='Beijing'))\n```"}
    fix = {"text": "```python\nfinal_answer(unit(city='Beijing'))\n```"}
    suite = Suite("checked", [Task(id="t1", instruction="Beijing's unit?", tools=lambda: [unit],
                                   expected="fahrenheit", scripts={"code": [slip, fix]})])
    rows = {}
    for check in ("block", "off"):
        out = tmp_path / check
        run_suite(suite, out=out, modes=["code"], sandbox=LOCAL, progress=False, check=check)  # type: ignore[arg-type]
        [rows[check]] = lines(out)
        assert json.loads((out / "run.json").read_text())["fingerprint"]["check"] == check
    assert rows["block"]["correct"] and rows["off"]["correct"]
    layers = {check: (row["errors"]["check"], row["errors"]["runtime"], row["tool_calls"]) for check, row in rows.items()}
    assert layers == {"block": (1, 0, 1), "off": (0, 1, 1)}
