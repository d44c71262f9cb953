"""``serve-mcp`` under a flow policy that asks (issue 31): the question goes to the MCP client as an
elicitation. A real server process over stdio, a real ``ClientSession`` answering it: accept runs
the call, decline refuses it with ``policy_denied``, and a client that cannot answer one is refused
without being asked. The question never shows the untrusted value."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client

from codeact import ExecutionResult

ROOT = Path(__file__).resolve().parents[2]
SERVER = '''\
import sys

from codeact import FlowPolicy, Runtime
from codeact.agent.mcp_server import serve_mcp
from tests._configs import LOCAL
from tests._mail import mail_tools

with Runtime(mail_tools(lambda to, body: print("SENT", to, file=sys.stderr, flush=True)), LOCAL,
             flow=FlowPolicy(on_violation="ask")) as rt:
    serve_mcp(rt)
'''
SEND = ("mail = read_email()\ntry:\n    out = send_email(to=mail['reply_to'], body='hi')\n"
        "except ToolError as e:\n    out = e.code\nout")


def _run(tmp_path: Path, answer: str | None) -> tuple[ExecutionResult, list[types.ElicitRequestParams], str]:
    """One ``SEND`` run through a fresh server; the client answers each elicitation with ``answer``
    (``accept``: yes, ``decline``), or declares no elicitation at all (None)."""
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    asked: list[types.ElicitRequestParams] = []

    async def elicit(_ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params)
        if answer == "accept":
            return types.ElicitResult(action="accept", content={"approve": True})
        return types.ElicitResult(action="decline")

    params = StdioServerParameters(command=sys.executable, args=[str(script)], cwd=str(ROOT),
                                   env={**os.environ, "PYTHONPATH": str(ROOT)})
    log = tmp_path / "server.log"

    async def main() -> ExecutionResult:
        with log.open("w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write), \
                    ClientSession(read, write, elicitation_callback=elicit if answer else None) as session:
                await session.initialize()
                done = await session.call_tool("execute_python", {"code": SEND})
                return ExecutionResult.model_validate(done.structured_content)

    return asyncio.run(asyncio.wait_for(main(), 60)), asked, log.read_text()


def test_an_accepted_elicitation_runs_the_call(tmp_path: Path) -> None:
    result, asked, log = _run(tmp_path, "accept")
    assert result.value == "sent", result
    call = result.calls[-1]
    assert call.name == "send_email" and call.ok and call.flow is not None and call.flow.decision == "approved"
    assert "SENT attacker@evil.example" in log  # the tool really ran
    (question,) = asked
    assert "send_email" in question.message and "untrusted" in question.message and "to" in question.message
    assert "attacker@evil.example" not in question.message  # the labels, never the untrusted value
    assert question.requested_schema["properties"]["approve"]["type"] == "boolean"


def test_a_declined_elicitation_or_a_client_that_cannot_answer_refuses_the_call(tmp_path: Path) -> None:
    declined, asked, log = _run(tmp_path, "decline")
    assert declined.value == "policy_denied", declined
    call = declined.calls[-1]
    assert not call.ok and call.error is not None and call.error.code == "policy_denied"
    assert call.flow is not None and call.flow.decision == "refused" and "declined" in (call.flow.reason or "")
    assert len(asked) == 1 and "SENT" not in log
    unasked, asked, log = _run(tmp_path, None)  # no elicitation capability: refused, nothing sent to it
    assert unasked.value == "policy_denied", unasked
    call = unasked.calls[-1]
    assert call.flow is not None and call.flow.decision == "refused" and "no approver" in (call.flow.reason or "")
    assert asked == [] and "SENT" not in log
