"""Run directories never mix configurations; provider outages are retried, not scored."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from codeact import SandboxConfig
from codeact.evals.answers import instruction
from codeact.evals.providers import ModelSpec
from codeact.evals.report import write_report
from codeact.evals.runner import run_suite
from codeact.evals.suite import load_suite
from codeact.testing.fake_server import FakeModelServer
from tests._configs import LOCAL

ONE = {"tasks": ["weather.convert"], "modes": ["code"], "progress": False}


def _lines(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def test_every_episode_records_the_fingerprint_of_run_json(tmp_path: Path) -> None:
    run_suite("weather", out=tmp_path, sandbox=LOCAL, budget={"max_turns": 5}, **ONE)  # type: ignore[arg-type]
    meta = json.loads((tmp_path / "run.json").read_text())
    fp = meta["fingerprint"]
    assert fp["suite_ref"] == "weather" and fp["model"] == "scripted" and fp["wire"] == "openai"
    assert fp["budget"] == {"max_turns": 5} and fp["backend"] == "local" and fp["stream"] is False
    assert fp["sandbox"]["policy"] == "none" and fp["codeact_version"] and fp["system_prompt"] is None
    assert set(fp["tasks"]) == {"weather.convert"} and meta["tasks"] == ["weather.convert"]
    (row,) = _lines(tmp_path)
    assert row["fingerprint"] and len(row["fingerprint"]) == 16
    assert row["answer_value"] == 20.0 and row["correct"]
    start = json.loads((tmp_path / "traces" / "weather.convert__code__0.jsonl").read_text().splitlines()[0])
    assert start["task"].endswith(instruction("code")) and "Celsius" in start["task"]  # asked in the protocol's form
    # a resume with the same configuration is accepted and widens the plan
    again = run_suite("weather", out=tmp_path, sandbox=LOCAL, budget={"max_turns": 5}, tasks=["weather.compare"],
                      modes=["code"], progress=False)
    assert again.ran == 1
    assert json.loads((tmp_path / "run.json").read_text())["tasks"] == ["weather.convert", "weather.compare"]


@pytest.mark.parametrize(("change", "needle"), [
    ({"budget": {"max_turns": 4}}, "budget.max_turns: 10 → 4"),
    ({"sandbox": SandboxConfig(backend="docker", timeout_s=10)}, "backend: 'local' → 'docker'"),
    ({"stream": True}, "stream: False → True"),
    ({"system_prompt": "Be brief. {tools}"}, "system_prompt: None →"),
    ({"model": ModelSpec("scripted", wire="anthropic")}, "wire: 'openai' → 'anthropic'"),
])
def test_a_resume_with_another_configuration_is_refused_with_a_one_line_diff(
        tmp_path: Path, change: dict[str, Any], needle: str) -> None:
    run_suite("weather", out=tmp_path, sandbox=LOCAL, budget={"max_turns": 10}, **ONE)  # type: ignore[arg-type]
    before = (tmp_path / "results.jsonl").read_bytes(), (tmp_path / "run.json").read_bytes()
    kwargs: dict[str, Any] = {"sandbox": LOCAL, "budget": {"max_turns": 10}, **ONE, **change}
    with pytest.raises(ValueError) as info:
        run_suite("weather", out=tmp_path, **kwargs)
    message = str(info.value)
    assert needle in message and "--force-new" in message and "\n" not in message
    assert ((tmp_path / "results.jsonl").read_bytes(), (tmp_path / "run.json").read_bytes()) == before


SUITE = '''
from codeact import tool
from codeact.evals import Task

@tool
def seven() -> int:
    """Seven."""
    return 7

TASKS = [Task(id="seven", instruction="{instruction}", tools=lambda: [seven], expected=7,
              scripts={{"code": ["```python\\nfinal_answer(seven())\\n```"]}})]
'''


def test_a_suite_file_with_the_same_name_but_other_content_is_refused(tmp_path: Path) -> None:
    first, second = tmp_path / "a" / "toy.py", tmp_path / "b" / "toy.py"
    for path, text in ((first, "What is seven?"), (second, "What is 7?")):
        path.parent.mkdir()
        path.write_text(SUITE.format(instruction=text))
    out = tmp_path / "run"
    run_suite(str(first), out=out, modes=["code"], sandbox=LOCAL, progress=False)
    with pytest.raises(ValueError, match="suite_ref: "):  # another file
        run_suite(str(second), out=out, modes=["code"], sandbox=LOCAL, progress=False)
    first.write_text(SUITE.format(instruction="What is seven, really?"))  # the same file, edited
    load_suite.__globals__["sys"].modules.pop(next(k for k in list(load_suite.__globals__["sys"].modules)
                                                   if k.startswith("_codeact_suite_toy_")), None)
    with pytest.raises(ValueError, match="task content changed: seven"):
        run_suite(str(first), out=out, modes=["code"], sandbox=LOCAL, progress=False)
    fresh = run_suite(str(first), out=out, modes=["code"], sandbox=LOCAL, progress=False, force_new=True)
    assert fresh.ran == 1 and fresh.set_aside is not None and (fresh.set_aside / "results.jsonl").is_file()
    assert len(_lines(out)) == 1 and len(_lines(fresh.set_aside)) == 1


def test_a_provider_outage_is_stored_as_retryable_and_rerun_on_resume(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    task = load_suite("weather")["weather.convert"]
    script = list(task.scripts["code"])
    state = {"down": True}

    def answer(body: dict[str, Any], vendor: str) -> Any:
        if state["down"]:
            return {"http_status": 503, "message": "overloaded"}
        turn = sum(1 for m in body["messages"] if m.get("role") == "assistant")
        return script[turn]

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with FakeModelServer(answer) as server:
        spec = ModelSpec("openai:gpt-test", base_url=server.openai_base_url, max_retries=0)
        out, kept = tmp_path / "run", tmp_path / "kept"
        first = run_suite("weather", spec, out=out, sandbox=LOCAL, **ONE)  # type: ignore[arg-type]
        run_suite("weather", spec, out=kept, sandbox=LOCAL, **ONE)  # type: ignore[arg-type]
        (row,) = _lines(out)
        assert first.ran == 1 and row["retryable"] and row["stop_reason"] == "model_error" and not row["correct"]
        summary = json.loads(write_report(out, plots=False)["summary"].read_text())
        (mode,) = summary["modes"]
        assert (mode["provider_errors"], mode["episodes"], mode["finished"]) == (1, 0, 0)  # not scored as a failure
        assert any("retryable provider error" in w for w in summary["meta"]["warnings"])
        state["down"] = False
        not_retried = run_suite("weather", spec, out=kept, sandbox=LOCAL, retry_errors=False,
                                **ONE)  # type: ignore[arg-type]
        retried = run_suite("weather", spec, out=out, sandbox=LOCAL, **ONE)  # type: ignore[arg-type]
    assert (not_retried.ran, not_retried.already_done) == (0, 1)
    assert (retried.ran, retried.retried) == (1, 1)
    rows = _lines(out)
    assert len(rows) == 2 and rows[-1]["correct"] and not rows[-1]["retryable"]  # the later line wins
    again = json.loads(write_report(out, plots=False)["summary"].read_text())
    assert (again["modes"][0]["successes"], again["modes"][0]["provider_errors"]) == (1, 0)


def test_cli_refuses_another_budget_and_force_new_starts_afresh(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from codeact.cli import app

    out = tmp_path / "run"
    base = ["eval", "weather", "--out", str(out), "--tasks", "weather.convert", "--modes", "code",
            "--backend", "local", "--policy", "none", "--no-progress"]
    assert CliRunner().invoke(app, base).exit_code == 0
    refused = CliRunner().invoke(app, [*base, "--max-turns", "3"])
    assert refused.exit_code == 2 and "budget.max_turns: 10 → 3" in refused.output
    fresh = CliRunner().invoke(app, [*base, "--max-turns", "3", "--force-new"])
    assert fresh.exit_code == 0, fresh.output
    assert "1 episode(s) run, 0 already done" in fresh.output and "previous contents" in fresh.output
    assert json.loads((out / "run.json").read_text())["budget"]["max_turns"] == 3
    assert [p.name.startswith("run.old-") for p in tmp_path.iterdir()].count(True) == 1


def test_a_task_hash_is_the_same_in_another_process() -> None:
    """A set's order changes with the hash seed; the hash must not (else every resume is refused)."""
    import subprocess
    import sys

    code = ("from codeact.evals import Task; from codeact.evals.fingerprint import task_hash; "
            "from codeact.evals.suite import load_suite; "
            "print(task_hash(Task(id='t', instruction='x', tools=list, expected={'alpha', 'beta', 'gamma', 'delta'})), "
            "[task_hash(t) for name in ('weather', 'data', 'multitool') for t in load_suite(name)])")
    hashes = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env={**__import__("os").environ, "PYTHONHASHSEED": str(seed)}).stdout
              for seed in (1, 2, 3, 4)}
    assert len(hashes) == 1


OFFSET = 0
TABLE = {"a": 1}
LOADS: Any = None  # set by a test: a function reached as a module global


def _add(a: int, b: int) -> int:
    return a + b + OFFSET + TABLE["a"] - 1


def _is_five(x: Any) -> bool:
    return bool(x == 5)


def _is_six(x: Any) -> bool:
    return bool(x == 6)


def _task(**kw: Any) -> Any:
    from codeact import tool
    from codeact.evals import Task

    adder = tool(_add)

    def tools() -> list[Any]:
        return [adder]

    return Task(**{"id": "t", "instruction": "2 + 3?", "tools": tools, "expected": 5, **kw})


def test_a_task_hash_covers_the_checker_and_tool_code(monkeypatch: pytest.MonkeyPatch) -> None:
    from codeact.evals.checks import custom, numeric
    from codeact.evals.fingerprint import task_hash

    assert task_hash(_task(check=_is_five)) != task_hash(_task(check=_is_six))  # a plain predicate's body
    assert task_hash(_task(check=custom(_is_five, "c"))) != task_hash(_task(check=custom(_is_six, "c")))
    assert task_hash(_task(check=numeric(5, rel_tol=1e-6))) != task_hash(_task(check=numeric(5, rel_tol=0.5)))
    before = task_hash(_task())
    monkeypatch.setitem(globals(), "OFFSET", 1)  # a module-level constant the tool reads
    assert task_hash(_task()) != before
    monkeypatch.setitem(globals(), "OFFSET", 0)
    monkeypatch.setitem(TABLE, "a", 2)  # a module-level table it reads
    assert task_hash(_task()) != before
    monkeypatch.setitem(TABLE, "a", 1)
    assert task_hash(_task()) == before  # and nothing else moves it


def test_a_second_run_into_the_same_directory_is_refused(tmp_path: Path) -> None:
    from codeact.evals.runner import _exclusive

    with _exclusive(tmp_path), pytest.raises(ValueError, match="another run is writing to"):
        run_suite("weather", out=tmp_path, sandbox=LOCAL, **ONE)  # type: ignore[arg-type]
    with _exclusive(tmp_path), pytest.raises(ValueError, match="another run is writing to"):
        run_suite("weather", out=tmp_path, sandbox=LOCAL, force_new=True, **ONE)  # type: ignore[arg-type]
    assert not (tmp_path / "results.jsonl").exists()
    summary = run_suite("weather", out=tmp_path, sandbox=LOCAL, **ONE)  # type: ignore[arg-type]
    assert summary.planned == 1 and len(_lines(tmp_path)) == 1  # the lock went with the first run


_SUITE_WITH_OBJECTS = """
from dataclasses import dataclass
from codeact.evals import Task


@dataclass
class Inventory:
    items: int = 3


INV = Inventory()
WORDS = {f"w{i}" for i in range(100_050)}  # more than the data budget: cut the same way each time
ODD_KEYS = {int: 0, str: "", 1.5: 1, "1.5": None}
ALIKE = {tuple([0] * 70 + [i]) for i in range(50)}  # alike in their first 64 parts


def tools():
    return [INV, len(WORDS), ODD_KEYS, ALIKE]


TASKS = [Task(id="a", instruction="x", expected=1, tools=tools)]
"""


def test_a_path_loaded_suite_hashes_the_same_in_every_process(tmp_path: Path) -> None:
    # Its module's name holds a per-process hash (and its mtime), and sets iterate in a per-process
    # order: neither may reach the fingerprint, or every resume of such a run would be refused.
    import os
    import subprocess
    import sys

    suite = tmp_path / "objects.py"
    suite.write_text(_SUITE_WITH_OBJECTS)
    code = ("import sys; from codeact.evals.suite import load_suite; from codeact.evals.fingerprint import task_hash; "
            "print([task_hash(t) for t in load_suite(sys.argv[1])])")
    hashes = set()
    for seed in (1, 2, 3):
        os.utime(suite, (1_700_000_000 + seed, 1_700_000_000 + seed))  # a checkout changes the mtime
        hashes.add(subprocess.run([sys.executable, "-c", code, str(suite)], capture_output=True, text=True,
                                  check=True, env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout)
    assert len(hashes) == 1, hashes


def test_functions_of_the_same_name_from_other_modules_differ(monkeypatch: pytest.MonkeyPatch) -> None:
    import marshal
    import pickle

    from codeact.evals.fingerprint import task_hash

    def tools() -> list[Any]:
        return [LOADS]

    monkeypatch.setitem(globals(), "LOADS", marshal.loads)
    first = task_hash(_task(tools=tools))
    monkeypatch.setitem(globals(), "LOADS", pickle.loads)
    assert task_hash(_task(tools=tools)) != first
