"""The CLI's Ctrl-C contract, as a user meets it: SIGINT sent to real ``codeact`` subprocesses mid-run.

First SIGINT: what finished is printed/written (exec: the result with ``termination="interrupted"``
and its records; agent: the episode so far; batch/eval: results kept, a re-run resumes), exit 130.
Second SIGINT: abandon at once, exit 130. Either way no container of the process is left.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from codeact.testing.fake_server import FakeModelServer

CODEACT = str(Path(sys.executable).with_name("codeact"))

TOOLS_PY = '''\
import os
import pathlib

from codeact import tool


@tool
def mark(text: str) -> str:
    """Note progress on the host (the test waits for the file); prints on the host too."""
    print("host noise from mark", text)
    path = pathlib.Path(os.environ["MARK_FILE"])
    with path.open("a") as fh:
        fh.write(text + "\\n")
    return text.upper()
'''

SLOW = 'mark("one")\nimport time\ntime.sleep(120)\nmark("two")\n'
STUBBORN = 'mark("one")\nimport time\nwhile True:\n    try:\n        time.sleep(120)\n    except KeyboardInterrupt:\n        pass\n'


@pytest.fixture
def tools_file(tmp_path: Path) -> Path:
    path = tmp_path / "mark_tools.py"
    path.write_text(TOOLS_PY)
    return path


@pytest.fixture(params=["local", "docker"])
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "docker":
        request.getfixturevalue("docker_image")
    return str(request.param)


def start(args: list[str], marks: Path, **kwargs: Any) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
    env.update(MARK_FILE=str(marks), COLUMNS="160", PYTHONUNBUFFERED="1")
    return subprocess.Popen([CODEACT, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, **kwargs)


def wait_for(predicate: Any, proc: subprocess.Popen[str], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"exited {proc.returncode} before {what}: {out[-1000:]} {err[-2000:]}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def marks_at_least(path: Path, n: int) -> Any:
    return lambda: path.exists() and path.read_text().count("\n") >= n


def containers_of(pid: int) -> list[str]:
    """Containers (running or not) labelled as owned by process ``pid``."""
    from codeact.image.engine import docker_client

    client = docker_client()
    try:
        return [c["Id"] for c in client.api.containers(all=True, filters={"label": f"codeact.owner.pid={pid}"})]
    finally:
        client.close()


def finish(proc: subprocess.Popen[str], backend: str = "local") -> tuple[str, str]:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    if backend == "docker":
        assert containers_of(proc.pid) == []
    return out, err


def test_exec_first_sigint_prints_the_result_so_far(tools_file: Path, tmp_path: Path, backend: str) -> None:
    marks, code = tmp_path / "marks", tmp_path / "slow.py"
    code.write_text(SLOW)
    proc = start(["exec", str(code), "--tools", str(tools_file), "--backend", backend, "--json"], marks)
    wait_for(marks_at_least(marks, 1), proc, "the first tool call")
    proc.send_signal(signal.SIGINT)
    out, err = finish(proc, backend)
    result = json.loads(out)  # exactly one JSON object; the tool's host print went to stderr
    assert result["termination"] == "interrupted" and result["ok"] is False
    assert [(c["name"], c["result"]) for c in result["calls"]] == [("mark", "ONE")]
    assert "host noise from mark one" in err and "Ctrl-C again" in err


def test_exec_human_output_on_sigint(tools_file: Path, tmp_path: Path) -> None:
    marks, code = tmp_path / "marks", tmp_path / "slow.py"
    code.write_text(SLOW)
    proc = start(["exec", str(code), "--tools", str(tools_file), "--backend", "local"], marks)
    wait_for(marks_at_least(marks, 1), proc, "the first tool call")
    proc.send_signal(signal.SIGINT)
    out, _ = finish(proc)
    assert "interrupted" in out and "mark" in out and "ONE" in out and "host noise" not in out


def test_exec_second_sigint_abandons(tools_file: Path, tmp_path: Path, backend: str) -> None:
    marks, code = tmp_path / "marks", tmp_path / "stubborn.py"
    code.write_text(STUBBORN)  # swallows KeyboardInterrupt: only the second Ctrl-C ends it
    proc = start(["exec", str(code), "--tools", str(tools_file), "--backend", backend, "--json",
                  "--timeout", "300"], marks)
    wait_for(marks_at_least(marks, 1), proc, "the first tool call")
    proc.send_signal(signal.SIGINT)
    time.sleep(1.0)
    assert proc.poll() is None  # the code ignored the interrupt
    proc.send_signal(signal.SIGINT)
    out, err = finish(proc, backend)
    assert out == "" and "abandoned" in err


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_exec_terminated_removes_its_sandbox(tools_file: Path, tmp_path: Path, signum: int, docker_image: str) -> None:
    # A supervisor's SIGTERM (or a closed terminal's SIGHUP): no container, session directory or
    # workspace mount is left for a later start to clean up.
    marks, code = tmp_path / "marks", tmp_path / "slow.py"
    code.write_text(SLOW)
    proc = start(["exec", str(code), "--tools", str(tools_file), "--backend", "docker", "--json"], marks)
    wait_for(marks_at_least(marks, 1), proc, "the first tool call")
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum and out == "", err[-2000:]
    assert f"terminated by {signal.Signals(signum).name}" in err
    assert containers_of(proc.pid) == []


def test_exec_under_nohup_survives_a_hangup(tools_file: Path, tmp_path: Path) -> None:
    # An ignored SIGHUP (nohup) stays ignored: closing the terminal must not end the run.
    marks, code = tmp_path / "marks", tmp_path / "slow.py"
    code.write_text(SLOW)
    proc = start(["exec", str(code), "--tools", str(tools_file), "--backend", "local", "--json"], marks,
                 preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    wait_for(marks_at_least(marks, 1), proc, "the first tool call")
    proc.send_signal(signal.SIGHUP)
    time.sleep(1.0)
    assert proc.poll() is None  # still running
    proc.send_signal(signal.SIGINT)
    out, _ = finish(proc)
    assert json.loads(out)["termination"] == "interrupted"


CODE_REPLY = "Let me start.\n```python\nmark('one')\nimport time\ntime.sleep(120)\n```"


def test_agent_sigint_keeps_the_episode_and_trace(tools_file: Path, tmp_path: Path, backend: str) -> None:
    marks, trace = tmp_path / "marks", tmp_path / "trace.jsonl"
    with FakeModelServer([CODE_REPLY, "never asked"]) as server:
        proc = start(["agent", "Mark and wait.", "--model", "openai:fake", "--base-url", server.openai_base_url,
                      "--tools", str(tools_file), "--backend", backend, "--trace", str(trace), "--json"], marks)
        wait_for(marks_at_least(marks, 1), proc, "the first tool call")
        proc.send_signal(signal.SIGINT)
        out, err = finish(proc, backend)
        assert len(server.requests) == 1  # no model call after the interrupt
    episode = json.loads(out)
    assert (episode["status"], episode["stop_reason"]) == ("incomplete", "interrupted")
    assert episode["tool_calls"] == 1 and [r["result"] for r in episode["records"]] == ["ONE"]
    events = [json.loads(line) for line in trace.read_text().splitlines()]
    assert events[-1]["event"] == "episode_end"
    assert [r["name"] for r in events[-1]["episode"]["records"]] == ["mark"]
    execution = next(e for e in events if e["event"] == "execution")
    assert execution["result"]["termination"] == "interrupted"
    assert "CancelledError" not in err


def test_batch_sigint_keeps_finished_results_and_resumes(tools_file: Path, tmp_path: Path, backend: str) -> None:
    marks, code, inputs, out = tmp_path / "marks", tmp_path / "b.py", tmp_path / "in.jsonl", tmp_path / "res.jsonl"
    inputs.write_text("".join(json.dumps({"n": n}) + "\n" for n in range(20)))
    code.write_text('mark(str(item["n"]))\nimport time\ntime.sleep(0 if item["n"] < 3 else 120)\nitem["n"] * 2\n')
    args = ["batch", str(code), str(inputs), "--tools", str(tools_file), "--backend", backend, "--out", str(out),
            "--no-progress", "--concurrency", "2"]
    proc = start(args, marks)
    wait_for(lambda: out.exists() and out.read_text().count("\n") >= 3 and marks_at_least(marks, 5)(),
             proc, "three results and two stuck items")
    proc.send_signal(signal.SIGINT)
    finish(proc, backend)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    done = {r["index"]: r for r in rows}
    assert {i for i, r in done.items() if r["ok"]} == {0, 1, 2}
    assert all(r["termination"] == "interrupted" for i, r in done.items() if i >= 3)  # stopped mid-run: kept
    assert len(rows) < 20  # nothing started after the Ctrl-C

    code.write_text('mark(str(item["n"]))\nitem["n"] * 2\n')
    again = start(args, marks)
    _, err = again.communicate(timeout=300)
    assert again.returncode == 0, err[-2000:]
    assert "resuming: 3 results already" in err and "20 results, 0 failed" in err
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["index"] for r in rows] == list(range(20)) and [r["value"] for r in rows] == [2 * n for n in range(20)]
    runs = marks.read_text().split()
    assert runs.count("0") == runs.count("1") == runs.count("2") == 1  # finished items were not run again


SUITE_PY = '''\
import os, pathlib
from codeact import tool
from codeact.evals.suite import Task
from codeact.evals.suites._script import py


def tools():
    @tool
    def mark(text: str) -> str:
        """Note progress on the host."""
        with pathlib.Path(os.environ["MARK_FILE"]).open("a") as fh:
            fh.write(text + "\\n")
        return text

    return [mark]


TASKS = [
    Task(id="fast", instruction="Answer 1.", tools=tools, expected=1,
         scripts={"code": [py("mark('fast')\\nfinal_answer(1)")]}),
    Task(id="slow", instruction="Answer 2.", tools=tools, expected=2,
         scripts={"code": [py("mark('slow')\\nimport time\\nwhile True:\\n    try:\\n        time.sleep(120)\\n"
                              "    except KeyboardInterrupt:\\n        pass")]}),
]
'''


def test_eval_second_sigint_abandons_and_keeps_finished(tmp_path: Path, docker_image: str) -> None:
    marks, suite, run = tmp_path / "marks", tmp_path / "suite.py", tmp_path / "run"
    suite.write_text(SUITE_PY)
    proc = start(["eval", str(suite), "--out", str(run), "--modes", "code", "--concurrency", "2", "--no-progress",
                  "--backend", "docker", "--timeout", "300"], marks)
    results = run / "results.jsonl"
    wait_for(lambda: results.exists() and '"fast"' in results.read_text() and marks_at_least(marks, 2)(),
             proc, "the fast episode's result and the slow one running")
    proc.send_signal(signal.SIGINT)
    time.sleep(1.0)
    assert proc.poll() is None  # finishing the running episode
    proc.send_signal(signal.SIGINT)
    _, err = finish(proc, "docker")
    assert "abandoned" in err
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert [(r["task_id"], r["correct"]) for r in rows] == [("fast", True)]


def test_agent_sigint_during_a_model_call(tools_file: Path, tmp_path: Path) -> None:
    marks, trace = tmp_path / "marks", tmp_path / "trace.jsonl"
    first = "Step one.\n```python\nmark('one')\n```"
    with FakeModelServer([first, {"delay": 120, "text": "too late"}]) as server:
        proc = start(["agent", "Mark.", "--model", "openai:fake", "--base-url", server.openai_base_url,
                      "--tools", str(tools_file), "--backend", "local", "--trace", str(trace)], marks)
        wait_for(lambda: len(server.requests) >= 2, proc, "the second model call")
        proc.send_signal(signal.SIGINT)
        out, err = finish(proc)  # without waiting for the model's reply
    assert "interrupted" in out and "tool calls 1" in out and "CancelledError" not in err + out
    end = json.loads(trace.read_text().splitlines()[-1])
    assert end["event"] == "episode_end" and end["episode"]["stop_reason"] == "interrupted"
    assert [r["result"] for r in end["episode"]["records"]] == ["ONE"]
