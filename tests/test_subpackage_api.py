"""Each subpackage's public names are a contract too (httpx pins its own): a change is made here."""

from __future__ import annotations

import importlib

import pytest

PINNED = {
    "codeact.tool_stubs": ["ToolSpec", "python_names", "render_stubs"],
    "codeact.sandbox": ["ExitStatus", "Sandbox", "SandboxConfig", "create_sandbox"],
    "codeact.runtime": ["Runtime", "Session", "Snapshot", "Tool", "ToolPolicy", "Toolset", "tool"],
    "codeact.agent": [
        "AnthropicClient", "Budget", "CODE_SYSTEM_PROMPT", "CodeActAgent", "Episode", "FunctionCallingAgent",
        "JSON_SYSTEM_PROMPT", "Message", "ModelClient", "ModelResponse", "OpenAIClient", "ReplayModel",
        "ScriptedModel", "ToolCall", "ToolResult", "Usage", "execute_python_tool", "extract_code", "load_trace",
        "make_model",
    ],
    "codeact.agent.models": [
        "AnthropicClient", "HTTPOptions", "ModelClient", "OpenAIChatClient", "OpenAIClient", "ScriptedModel",
        "ScriptedRequest", "ToolChoice", "ToolDef", "load_script", "make_model",
    ],
    "codeact.evals": [
        "Check", "EpisodeKey", "EpisodeResult", "MODES", "ModelSpec", "ResultsStore", "RunMeta", "RunSummary",
        "ScriptedProvider", "Suite", "Task", "custom", "exact", "function_code", "list_equal", "load_run",
        "load_suite", "map_code", "numeric", "run_suite", "set_equal", "summarize", "wilson", "write_report",
    ],
    "codeact.evals.progress": ["Bar", "ModeRates"],
    "codeact.viewer": ["CallSpan", "EpisodeTimeline", "Span", "build_timeline", "render_run", "render_trace",
                       "write_view"],
    "codeact.testing": ["FakeModelServer"],
}


@pytest.mark.parametrize("package", sorted(PINNED))
def test_subpackage_public_names_are_pinned(package: str) -> None:
    module = importlib.import_module(package)
    assert sorted(module.__all__) == sorted(PINNED[package])
    for name in module.__all__:
        assert getattr(module, name) is not None
