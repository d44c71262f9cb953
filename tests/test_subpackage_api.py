"""Each subpackage's public names are a contract too (httpx pins its own): a change is made here."""

from __future__ import annotations

import importlib

import pytest

PINNED = {
    "codeact.tool_stubs": ["ToolSpec", "python_names", "render_stubs"],
    "codeact.sandbox": ["ExitStatus", "Sandbox", "SandboxConfig", "create_sandbox"],
    "codeact.image": [
        "BASE_IMAGE_REPO", "DEFAULT_IMAGE_REPO", "DEFAULT_KEEP", "IMAGE_FORMAT", "ImageSpec", "PruneReport",
        "RootfsParams", "build_image", "default_base_tag", "doctor", "ensure_base", "ensure_image", "image_tag",
        "prune_images", "resolve_python",
    ],
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
    "codeact.progress": ["Bar", "ModeRates"],
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


#: Modules that moved, kept as re-exports: their names (as before the move) and where they went.
MOVED = {
    "codeact.sandbox.image": (
        ["BASE_IMAGE_REPO", "DEFAULT_IMAGE_REPO", "IMAGE_FORMAT", "KERNEL_FILES", "ImageSpec", "build_image",
         "default_base_tag", "ensure_base", "ensure_image", "image_tag", "resolve_python"],
        ["codeact.image", "codeact.sandbox.kernel_files"],
    ),
    "codeact.sandbox.engine": (
        ["APIError", "BuildError", "DockerException", "ImageNotFound", "docker_client", "doctor", "engine_host",
         "ensure_engine", "runtimes"],
        ["codeact.image.engine", "codeact.image.doctor"],
    ),
    "codeact.sandbox.prune": (["DEFAULT_KEEP", "PruneReport", "auto_prune", "prune_images"], ["codeact.image.prune"]),
}


@pytest.mark.parametrize("old", sorted(MOVED))
def test_moved_modules_still_export_their_names(old: str) -> None:
    names, homes = MOVED[old]
    module = importlib.import_module(old)
    assert sorted(module.__all__) == sorted(names)
    new = [vars(importlib.import_module(home)) for home in homes]
    for name in names:
        assert any(getattr(module, name) is home.get(name) for home in new), f"{old}.{name} is not the moved one"
