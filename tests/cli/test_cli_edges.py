"""The CLI at its edges: bad flags and files (one line on stderr, exit 2), untrusted text printed
verbatim (never parsed as Rich markup), host output kept off stdout, and the small honesty fixes."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from codeact import ExecutionResult, __version__

CODEACT = str(Path(sys.executable).with_name("codeact"))
NO_ENGINE = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}

NOISY_TOOLS = '''\
import os
import sys

from codeact import ToolError, tool

print("noise at import")
os.system("echo noise from a subprocess")


@tool
def shout(text: str) -> str:
    """Shout the text back."""
    print("noise in a call", text)
    sys.stdout.flush()
    os.write(1, b"noise on fd 1\\n")
    if text == "fail":
        raise ToolError("not_found", "no [bold]such[/bold] thing [/x]")
    return text.upper() + " [/oops]"
'''


def codeact(*args: str, stdin: str | bytes | None = None, env: dict[str, str] | None = None,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
    full.update(COLUMNS="200", **(env or {}))
    data = stdin.encode() if isinstance(stdin, str) else stdin
    proc = subprocess.run([CODEACT, *args], input=data, capture_output=True, timeout=180, env=full, cwd=cwd)
    return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.decode(errors="replace"),
                                       proc.stderr.decode(errors="replace"))


@pytest.fixture
def noisy(tmp_path: Path) -> Path:
    path = tmp_path / "noisy_tools.py"
    path.write_text(NOISY_TOOLS)
    return path


def assert_usage_error(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def test_bad_flag_values_are_one_line_exit_2(tmp_path: Path) -> None:
    code = tmp_path / "ok.py"
    code.write_text("1\n")
    run = [str(code), "--backend", "local"]
    assert_usage_error(codeact("exec", *run, "--timeout", "-1"), "--timeout", "greater than 0", "-1")
    assert_usage_error(codeact("exec", *run, "--memory", "0"), "--memory", "0")
    assert_usage_error(codeact("exec", str(code), "--backend", "podman"), "--backend", "podman")
    assert_usage_error(codeact("exec", *run, "--bogus-flag"), "--bogus-flag")
    assert_usage_error(codeact("agent", "t", "--model", "scripted:x", "--backend", "local", "--timeout", "0"),
                       "--timeout")
    assert_usage_error(codeact("agent", "t", "--model", "openai:m", "--backend", "local", "--max-turns", "0"),
                       "--max-turns")
    assert_usage_error(codeact("batch", str(code), str(code), "--backend", "local", "--memory", "0"), "--memory")
    assert_usage_error(codeact("eval", "weather", "--out", str(tmp_path / "r"), "--backend", "local",
                               "--timeout", "-1"), "--timeout")
    assert_usage_error(codeact("serve-mcp", "--backend", "local", "--timeout", "-1"), "--timeout")


def test_bad_files_are_one_line_exit_2(tmp_path: Path) -> None:
    binary = tmp_path / "latin1.py"
    binary.write_bytes(b"x = 1\nname = '\xe9t\xe9'\n")
    offset = binary.read_bytes().index(b"\xe9")
    assert_usage_error(codeact("exec", str(binary), "--backend", "local"), str(binary), f"offset {offset}", "UTF-8")
    assert_usage_error(codeact("exec", "-", "--backend", "local", stdin=b"\xff\n"), "standard input", "offset 0")
    assert_usage_error(codeact("exec", str(tmp_path), "--backend", "local"), "is a directory")
    assert_usage_error(codeact("exec", str(tmp_path / "missing.py"), "--backend", "local"), "no such")
    no_tools = tmp_path / "no_tools.py"
    no_tools.write_text("def helper():\n    return 1\n")
    assert_usage_error(codeact("exec", "-", "--backend", "local", "--tools", str(no_tools), stdin="1"),
                       str(no_tools), "no @codeact.tool")
    assert_usage_error(codeact("exec", "-", "--backend", "local", "--tools", str(binary), stdin="1"), "UTF-8")
    assert_usage_error(codeact("exec", "-", "--backend", "local", "--tool-spec", str(binary), stdin="1"), "UTF-8")
    assert_usage_error(codeact("stubs", str(tmp_path)), "is a directory")
    assert_usage_error(codeact("batch", str(binary), str(binary), "--backend", "local"), "UTF-8")
    assert_usage_error(codeact("batch", str(tmp_path), str(binary), "--backend", "local"), "is a directory")


def test_exec_json_stdout_holds_only_the_result(noisy: Path) -> None:
    proc = codeact("exec", "-", "--tools", str(noisy), "--backend", "local", "--json", stdin="shout('hi')")
    assert proc.returncode == 0, proc.stderr
    result = ExecutionResult.model_validate_json(proc.stdout)  # nothing but the one JSON object
    assert result.value == "HI [/oops]"
    for noise in ("noise at import", "noise from a subprocess", "noise in a call hi", "noise on fd 1"):
        assert noise in proc.stderr and noise not in proc.stdout


def test_serve_mcp_stdio_frames_stay_clean(noisy: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    params = StdioServerParameters(command=CODEACT, args=["serve-mcp", "--tools", str(noisy), "--backend", "local"])

    async def main() -> Any:
        with (tmp_path / "server.log").open("w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                return await session.call_tool("execute_python", {"code": "shout('hi')"})

    with caplog.at_level(logging.DEBUG):
        result = asyncio.run(asyncio.wait_for(main(), 60))
    assert ExecutionResult.model_validate(result.structured_content).value == "HI [/oops]"
    problems = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING or "JSON" in r.getMessage()]
    assert problems == []
    log = (tmp_path / "server.log").read_text()
    assert "noise at import" in log and "noise in a call hi" in log


MARKUP_CODE = """\
print("[bold]out[/bold] [/x]")
try:
    shout("fail")
except Exception as exc:
    caught = str(exc)
shout("[bold]loud[/bold] [/x]")
raise ValueError("[/x] bad [tool_exception] [bold]")
"""


def test_untrusted_text_is_printed_verbatim(noisy: Path) -> None:
    proc = codeact("exec", "-", "--tools", str(noisy), "--backend", "local", stdin=MARKUP_CODE)
    assert proc.returncode == 1 and "MarkupError" not in proc.stderr and "Traceback" not in proc.stderr
    out = proc.stdout
    for text in ("[bold]out[/bold] [/x]", "[/oops]", "not_found", "[/x] bad [tool_exception] [bold]"):
        assert text in out, (text, out)
    value = codeact("exec", "-", "--backend", "local", stdin='"[/x] [bold]v"')
    assert value.returncode == 0 and "[/x] [bold]v" in value.stdout
    answer = codeact("exec", "-", "--backend", "local", stdin='final_answer("[/done] [bold]yes")')
    assert answer.returncode == 0 and 'final_answer: "[/done] [bold]yes"' in answer.stdout


def test_agent_human_output_keeps_brackets(noisy: Path) -> None:
    from codeact.testing.fake_server import FakeModelServer

    reply = "Trying [/x].\n```python\nshout('[/y]')\nfinal_answer('[bold]done[/z]')\n```"
    with FakeModelServer([reply]) as server:
        proc = codeact("agent", "Do [/it] [bold]now", "--model", "openai:fake", "--base-url", server.openai_base_url,
                       "--tools", str(noisy), "--backend", "local")
    assert proc.returncode == 0, proc.stderr[-2000:]
    for text in ("Do [/it] [bold]now", "Trying [/x].", "[bold]done[/z]", "[/Y] [/oops]"):
        assert text in proc.stdout, (text, proc.stdout)
    assert "noise" not in proc.stdout


def test_version_and_stubs_from_a_python_file(noisy: Path) -> None:
    version = codeact("--version")
    assert version.returncode == 0 and version.stdout.strip() == f"codeact {__version__}"
    stubs = codeact("stubs", str(noisy))
    assert stubs.returncode == 0, stubs.stderr
    assert "def shout(text: str) -> str:" in stubs.stdout and "noise" not in stubs.stdout
    compile(stubs.stdout, "<stubs>", "exec")


def test_no_engine_checked_before_the_model_is_called(noisy: Path) -> None:
    from codeact.testing.fake_server import FakeModelServer

    with FakeModelServer(["never sent"]) as server:
        proc = codeact("agent", "t", "--model", "openai:fake", "--base-url", server.openai_base_url,
                       "--tools", str(noisy), "--backend", "docker", env=NO_ENGINE)
        assert server.requests == []
    assert proc.returncode == 3
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].count("sandbox unavailable") == 1


def test_eval_without_engine_says_it_once(tmp_path: Path) -> None:
    proc = codeact("eval", "weather", "--out", str(tmp_path / "run"), "--no-progress", env=NO_ENGINE)
    assert proc.returncode == 3
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].count("sandbox unavailable") == 1


def test_cleanup_without_engine_is_an_error() -> None:
    proc = codeact("cleanup", env=NO_ENGINE)
    assert proc.returncode == 3 and "containers not checked" in proc.stderr and "sandbox unavailable" in proc.stderr


def test_exec_uses_image_flag(docker_image: str) -> None:
    ok = codeact("exec", "-", "--image", docker_image, "--json", stdin="import sys\nsys.version_info[0]")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["value"] == 3
    missing = codeact("exec", "-", "--image", "codeact-sandbox:does-not-exist", stdin="1")
    assert missing.returncode == 3 and missing.stderr.count("sandbox unavailable") == 1


def test_live_lines_print_untrusted_text_verbatim() -> None:
    import io

    from rich.console import Console

    from codeact.cli._live import LivePrinter
    from codeact.results import ToolCallError
    from codeact.runtime.events import CallFinished, CallStarted, OutputChunk

    buffer = io.StringIO()
    printer = LivePrinter(Console(file=buffer, width=200, color_system=None))
    printer(OutputChunk(type="stdout", text="[bold]out[/x]\n", t=0.0))
    printer(CallStarted(id="call_1", name="t[/oops]", arguments={"q": "[/x] [bold]"}, t=0.0))
    printer(CallFinished(id="call_1", name="t[/oops]", ok=True, result="[/x]", t=0.0))
    printer(CallFinished(id="call_2", name="t", ok=False, t=0.0,
                         error=ToolCallError(code="[tool_exception]", message="m", retryable=False)))
    text = buffer.getvalue()
    for piece in ("[bold]out[/x]", "t[/oops]", "[/x] [bold]", "[tool_exception]"):
        assert piece in text, text
