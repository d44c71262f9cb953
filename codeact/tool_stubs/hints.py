"""What to tell code that calls a tool the host does not know: the closest names, and how to search."""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from codeact.tool_stubs.spec import python_names

__all__ = ["unknown_tool_message"]

#: A toolset this small is listed whole in the message.
_LIST_UP_TO = 20


def unknown_tool_message(name: object, tools: Sequence[str], searchable: bool = True) -> str:
    """``no tool named 'x'``, then the tools named most like it (by tool or python name), then
    ``search_tools(...)`` when ``searchable``; a small toolset is listed whole instead."""
    text = name if isinstance(name, str) else repr(name)
    message = f"no tool named {text!r}"
    if len(tools) <= _LIST_UP_TO:
        return f"{message} (available: {', '.join(tools) or 'none'})"
    by_alias = {py: tool for tool, py in python_names(tools).items()}
    by_alias.update({tool: tool for tool in tools})
    close = difflib.get_close_matches(text, list(by_alias), n=6, cutoff=0.7)
    suggested = list(dict.fromkeys(by_alias[c] for c in close))[:3]
    if suggested:
        message += "; did you mean " + ", ".join(repr(s) for s in suggested) + "?"
    if searchable:
        message += (" " if suggested else "; ") + 'search_tools("what you want to do") finds tools by what they do'
    return message
