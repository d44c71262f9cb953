"""Helpers to write reference model responses (FakeModelServer neutral entries) compactly."""

from __future__ import annotations

import json
import textwrap
from typing import Any

__all__ = ["answer", "call", "calls", "py"]


def py(source: str, say: str = "") -> dict[str, Any]:
    """A code-mode turn: optional prose, then one fenced Python block."""
    block = textwrap.dedent(source).strip("\n")
    return {"text": (f"{say}\n\n" if say else "") + f"```python\n{block}\n```"}


def call(tool_name: str, /, **arguments: Any) -> dict[str, Any]:
    """One tool call (for :func:`calls`)."""
    return {"name": tool_name, "arguments": arguments}


def calls(*tool_calls: dict[str, Any], say: str = "") -> dict[str, Any]:
    """A JSON-mode turn requesting these tool calls (in parallel)."""
    return {"text": say, "tool_calls": list(tool_calls)}


def answer(value: Any, say: str = "") -> str:
    """A JSON-mode final reply in the answer protocol: optional prose, then ``ANSWER: <value>``."""
    return (f"{say}\n" if say else "") + f"ANSWER: {json.dumps(value, ensure_ascii=False)}"
