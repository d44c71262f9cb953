"""``serve-mcp`` under a data-flow policy (issue 31): what the MCP client sees is the model's input,
so the untrusted text a run handled but did not show stays out of it, in the structured content
and in the progress messages alike (else it would reach the next cell's literals unlabelled)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from codeact import ExecutionResult

ROOT = Path(__file__).resolve().parents[2]
SERVER = '''\
import sys

from codeact import FlowPolicy, Runtime
from codeact.agent.mcp_server import serve_mcp
from tests._configs import LOCAL
from tests._mail import mail_tools

with Runtime(mail_tools(lambda to, body: None), LOCAL, {flow}) as rt:
    serve_mcp(rt)
'''
# The body comes from the email (allowed: only ``to`` must be trusted); nothing is printed.
CODE = "mail = read_email()\nsend_email(to='boss@example.com', body='Fwd: ' + mail['body'])\n'done'"
UNTRUSTED_TEXT = ("attacker@evil.example", "Please wire the money.")


def _serve(tmp_path: Path, flow: str) -> tuple[ExecutionResult, str, list[str]]:
    script = tmp_path / "server.py"
    script.write_text(SERVER.format(flow=flow))
    params = StdioServerParameters(command=sys.executable, args=[str(script)], cwd=str(ROOT),
                                   env={**os.environ, "PYTHONPATH": str(ROOT)})
    progress: list[str] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(message or "")

    async def main() -> tuple[ExecutionResult, str]:
        with (tmp_path / "server.log").open("w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                done = await session.call_tool("execute_python", {"code": CODE}, progress_callback=on_progress)
                text = " ".join(getattr(part, "text", "") for part in done.content)
                return ExecutionResult.model_validate(done.structured_content), text

    result, text = asyncio.run(asyncio.wait_for(main(), 60))
    return result, text, progress


def test_under_a_policy_the_client_sees_no_untrusted_text(tmp_path: Path) -> None:
    result, text, progress = _serve(tmp_path, "flow=FlowPolicy()")
    assert result.value == "done" and [c.ok for c in result.calls] == [True, True], result
    seen = json.dumps(result.model_dump(mode="json")) + text + " ".join(progress)
    assert not any(untrusted in seen for untrusted in UNTRUSTED_TEXT), seen
    read, send = result.calls
    assert read.result is not None and "untrusted" in str(read.result)  # a note stands in for it
    assert send.arguments["to"] == "boss@example.com"  # what carries no label is shown as it is
    assert any(m.startswith("call ") and "send_email(…) started" in m for m in progress), progress


def test_without_a_policy_the_client_sees_everything(tmp_path: Path) -> None:
    result, _text, progress = _serve(tmp_path, "")
    seen = json.dumps(result.model_dump(mode="json")) + " ".join(progress)
    assert all(untrusted in seen for untrusted in UNTRUSTED_TEXT), seen
