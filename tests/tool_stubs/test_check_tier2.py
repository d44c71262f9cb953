"""Tier 2 (``Runtime(check_types=True)``, the ``codeact[check]`` extra): ty's findings come as
warnings at the cell's own lines and never block; without ty the runtime says which extra to install."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from codeact.runtime.session import Runtime
from codeact.tool_stubs.spec import ToolSpec

pytest.importorskip("ty")

ISSUES = ToolSpec(name="list_issues", description="List issues.", input_schema={
    "type": "object", "required": ["repo"], "properties": {"repo": {"type": "string"}}},
    output_schema={"type": "object", "properties": {"items": {"type": "array", "items": {"type": "string"}},
                                                    "total": {"type": "integer"}}})


def test_type_findings_are_warnings_at_the_cells_lines() -> None:
    with Runtime([ISSUES], check="block", check_types=True) as runtime:
        found = runtime.check("page = list_issues('a/b')\nfirst = page['itemz'][0]\n")
        assert [(d.line, d.code, d.severity) for d in found] == [(2, "type:invalid-typed-dict-key", "warning")]
        assert "did you mean \"items\"" in found[0].message
        # tier 1's error on a line is said once, not again by ty
        both = runtime.check("list_issues(rep='a/b')")
        assert [(d.code, d.severity) for d in both] == [("missing-argument", "error"), ("unknown-argument", "error")]
        # names earlier cells made are Any to ty too
        session = runtime.session()
        session._names.bind(["frame"])
        assert session.check("frame.whatever(1)") == []


def test_without_ty_the_error_names_the_extra() -> None:
    code = ("import os, sys\nsys.modules['ty'] = None\nos.environ['PATH'] = ''\n"
            "from codeact.errors import CheckerUnavailable\nfrom codeact.runtime.session import Runtime\n"
            "try:\n    Runtime([], check_types=True)\nexcept CheckerUnavailable as exc:\n    print(exc)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert proc.stdout.strip() == "check_types needs the ty type checker: pip install 'codeact[check]'"


def test_a_server_that_dies_or_is_slow_costs_findings_not_the_check() -> None:
    code = "page = list_issues('a/b')\nfirst = page['itemz'][0]\n"
    with Runtime([ISSUES], check="off", check_types=True) as runtime:
        types = runtime.type_check
        assert types is not None and len(runtime.check(code)) == 1
        assert types._client is not None
        types._client._proc.kill()  # the server is gone: that check says nothing, the next one restarts it
        assert runtime.check(code) == []
        assert len(runtime.check(code)) == 1
        types._timeout_s = 1e-9  # too short for any answer
        types._stop()
        assert runtime.check(code) == [] and types._client is None
        types._timeout_s = 10.0
        assert len(runtime.check(code)) == 1


def test_a_message_over_the_cap_drops_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    from codeact.tool_stubs.check import _lsp

    monkeypatch.setattr(_lsp, "_MAX_MESSAGE", 10)
    with Runtime([ISSUES], check="off", check_types=True) as runtime:
        assert runtime.check("page = list_issues('a/b')\npage['itemz']") == []
        assert runtime.type_check is not None and runtime.type_check._client is None


def test_closing_a_client_whose_server_is_gone_with_bytes_unsent_does_not_raise(tmp_path: Path) -> None:
    from codeact.tool_stubs.check._lsp import LspClient

    client = LspClient([sys.executable, "-c", "import sys; sys.stdin.close()"], tmp_path)
    client._proc.wait()
    client._stdin.write(b"x" * 10)  # buffered, never flushed: close() flushes into a closed pipe
    client.close()
    assert client._proc.returncode is not None and client._stdin.closed
