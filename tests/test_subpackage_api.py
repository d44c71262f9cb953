"""Each subpackage's public names are a contract too (httpx pins its own): a change is made here."""

from __future__ import annotations

import ast
import importlib
import re
import sys
import warnings
from pathlib import Path
from types import ModuleType

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "codeact"

PINNED = {
    "codeact.tool_stubs": ["ToolSpec", "python_names", "render_stubs"],
    "codeact.tool_stubs.check": ["SANDBOX_NAMES", "CheckMode", "Checker", "cell_names", "has_errors"],
    "codeact.sandbox": ["Egress", "ExitStatus", "Sandbox", "SandboxConfig", "create_sandbox"],
    "codeact.image": [
        "BASE_IMAGE_REPO", "DEFAULT_IMAGE_REPO", "DEFAULT_KEEP", "IMAGE_FORMAT", "ImageSpec", "PruneReport",
        "RootfsParams", "build_image", "default_base_tag", "doctor", "ensure_base", "ensure_image", "image_tag",
        "prune_images", "resolve_python",
    ],
    "codeact.runtime": ["SECRET", "UNTRUSTED", "CallLimits", "FlowCall", "FlowPolicy", "FlowRule", "Lifecycle",
                        "Runtime", "Session", "Snapshot", "Tool", "ToolPolicy", "Toolset", "tool"],
    "codeact.agent": [
        "AnthropicClient", "Budget", "CODE_SYSTEM_PROMPT", "CodeActAgent", "Episode", "FunctionCallingAgent",
        "JSON_SYSTEM_PROMPT", "Message", "ModelClient", "ModelResponse", "OpenAIClient", "ReplayModel",
        "ScriptedModel", "ToolCall", "ToolResult", "Usage", "execute_python_tool", "extract_code", "load_trace",
        "make_model",
    ],
    "codeact.agent.models": [
        "AnthropicClient", "HTTPOptions", "ModelClient", "OpenAIClient", "ScriptedModel",
        "ScriptedRequest", "ToolChoice", "ToolDef", "load_script", "make_model",
    ],
    "codeact.evals": [
        "Check", "EpisodeKey", "EpisodeResult", "MODES", "ModelSpec", "ResultsStore", "RunMeta", "RunSummary",
        "ScriptedProvider", "Suite", "Task", "custom", "exact", "function_code", "list_equal", "load_run",
        "load_suite", "map_code", "numeric", "run_suite", "set_equal", "summarize", "wilson", "write_report",
    ],
    "codeact.progress": ["Bar", "ModeRates"],
    "codeact.tracing": ["RunTrace", "attached", "carrier", "disable", "enable", "enabled", "failed", "model_call",
                        "pool_acquired", "run_trace", "span", "watch"],
    "codeact.cluster": ["SLOTS_RESOURCE", "ClusterFull", "ClusterSession", "RayCluster", "init_ray", "ray_module"],
    "codeact.viewer": ["CallSpan", "EpisodeTimeline", "Span", "build_timeline", "render_run", "render_trace",
                       "write_view"],
    "codeact.testing": ["FakeModelServer"],
    "codeact.cli": ["app", "main"],
    "codeact.evals.suites": ["BUILTIN"],
    "codeact.runtime.sources": [],  # each source is its own module, imported by name
    "codeact.kernel": [],  # the in-sandbox files, shipped flat; nothing re-exported
}

#: Packages whose ``__all__`` is pinned elsewhere, each with the reason.
EXEMPT = {
    "codeact": "pinned by PUBLIC in tests/test_public_api.py",
}


def _packages() -> list[str]:
    return sorted(".".join(("codeact", *init.parent.relative_to(PACKAGE).parts))
                  for init in PACKAGE.rglob("__init__.py"))


def test_every_package_is_pinned_or_exempt() -> None:
    found = _packages()
    assert "codeact.runtime.sources" in found and "codeact.kernel" in found  # the walk sees nesting
    unlisted = [p for p in found if p not in PINNED and p not in EXEMPT]
    assert unlisted == [], f"add each to PINNED (its __all__) or to EXEMPT (why): {unlisted}"
    assert set(EXEMPT) <= set(found), "an exempt package no longer exists"
    assert not set(PINNED) & set(EXEMPT)


@pytest.mark.parametrize("package", sorted(PINNED))
def test_subpackage_public_names_are_pinned(package: str) -> None:
    module = importlib.import_module(package)
    assert sorted(module.__all__) == sorted(PINNED[package])
    for name in module.__all__:
        assert getattr(module, name) is not None


#: Modules that moved, kept as deprecated re-exports: their names (as before the move), where they went,
#: and what their warning names as the new path.
MOVED = {
    "codeact.sandbox.image": (
        ["BASE_IMAGE_REPO", "DEFAULT_IMAGE_REPO", "IMAGE_FORMAT", "KERNEL_FILES", "ImageSpec", "build_image",
         "default_base_tag", "ensure_base", "ensure_image", "image_tag", "resolve_python"],
        ["codeact.image", "codeact.kernel.files"],
    ),
    "codeact.sandbox.engine": (
        ["APIError", "BuildError", "DockerException", "ImageNotFound", "docker_client", "doctor", "engine_host",
         "ensure_engine", "runtimes"],
        ["codeact.image.engine", "codeact.image.doctor"],
    ),
    "codeact.sandbox.prune": (["DEFAULT_KEEP", "PruneReport", "auto_prune", "prune_images"], ["codeact.image.prune"]),
    "codeact.runtime.openapi": (["load_openapi", "openapi_endpoints", "openapi_tools"],
                                ["codeact.runtime.sources.openapi"]),
    "codeact.runtime.http_tools": (
        ["HttpAuth", "HttpClient", "HttpEndpoint", "HttpParam", "Location", "Secret", "http_tool", "http_tools"],
        ["codeact.runtime.sources.http"],
    ),
    "codeact.runtime.mcp_tools": (["MCPConnection", "MCPServerRef", "MCPTools", "is_mcp_server"],
                                  ["codeact.runtime.sources.mcp"]),
    "codeact.evals.batch": (["Isolation", "function_code", "map_code"], ["codeact.runtime.batch"]),
}
#: Names a moved module still defines itself (the old functions that returned a ``Toolset``).
KEPT = {"codeact.runtime.mcp_tools": ["amcp_toolset", "mcp_toolset", "mcp_toolsets"]}


def _import_fresh(name: str) -> ModuleType:
    """Import ``name`` as if for the first time in this process (its body runs again)."""
    sys.modules.pop(name, None)
    parent, _, child = name.rpartition(".")
    package = importlib.import_module(parent)
    if hasattr(package, child):
        delattr(package, child)
    __import__(name)  # not importlib.import_module, whose own frame the warning would point at
    return sys.modules[name]


@pytest.mark.parametrize("old", sorted(MOVED))
def test_moved_modules_warn_once_and_still_export_their_names(old: str) -> None:
    names, homes = MOVED[old]
    with pytest.warns(DeprecationWarning, match=rf"^{re.escape(old)} is deprecated; import from {homes[0]}\b") as caught:
        module = _import_fresh(old)
    assert len(caught) == 1 and caught[0].filename == __file__  # at the line that imported the old path
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert importlib.import_module(old) is module  # imported again: no second warning
    assert sorted(module.__all__) == sorted(names + KEPT.get(old, []))
    new = [vars(importlib.import_module(home)) for home in homes]
    for name in names:
        assert any(getattr(module, name) is home.get(name) for home in new), f"{old}.{name} is not the moved one"
    for name in KEPT.get(old, []):
        assert callable(getattr(module, name)), f"{old}.{name}"


def _imported_modules(path: Path, root: Path) -> set[str]:
    """Every module ``path`` imports (relative imports resolved), whether ``import x`` or ``from x import y``
    (``from x import y`` counts ``x.y`` too: ``y`` may be a module)."""
    package = path.parent.relative_to(root).parts
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = ".".join([*package[: len(package) - node.level + 1], *([node.module] if node.module else [])]) \
                if node.level else (node.module or "")
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def test_nothing_in_the_package_imports_a_deprecated_path() -> None:
    """The suite turns warnings into errors, so an import of a moved path from the package, the tests or
    the benchmarks would fail somewhere; this names the file instead."""
    root = PACKAGE.parent
    shims = {root / (m.replace(".", "/") + ".py") for m in MOVED}
    found = [f"{path.relative_to(root)}: {name}"
             for path in [*PACKAGE.rglob("*.py"), *(root / "tests").rglob("*.py"), *(root / "benchmarks").rglob("*.py")]
             if path not in shims
             for name in sorted(_imported_modules(path, root) & set(MOVED))]
    assert found == []
