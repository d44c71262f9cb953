"""System prompts of the two agents and the ``execute_python`` tool definition.

The code-mode prompt shows the tools' prompt view (the typed stubs) and states the conventions
:mod:`codeact.agent.code_agent` implements: act with a fenced ```python block (or the
``execute_python`` tool); finish with ``final_answer(x)`` in code or a plain-text reply.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..runtime.session import Runtime
from ..runtime.toolset import Toolset
from ..tool_stubs import ToolSpec

__all__ = ["CODE_SYSTEM_PROMPT", "EXECUTE_PYTHON", "JSON_SYSTEM_PROMPT", "code_system_prompt", "execute_python_tool"]

EXECUTE_PYTHON = "execute_python"

CODE_SYSTEM_PROMPT = """\
You solve tasks by writing Python code that runs in a persistent, sandboxed Python session.

How to act
- To run code, reply with a ```python fenced block (or call the `execute_python` tool with the code).
- After each run you see what it produced: stdout, the value of a trailing expression, one line
  per tool call with its result, and any error with its line number. Then write the next action.
- Variables, imports and functions persist between runs: build on earlier results.
- The tools below are ordinary Python functions, already defined in the session: call them
  directly, no import needed. Do several calls in one action with variables, loops and
  comprehensions, and compute with the results in the same code.
- A failed tool call raises ToolError (.code, .message, .retryable); catch it to keep partial results.
- The sandbox has no network access; reach outside only through the tools.
- display(obj) shows a table, image or figure to the user (open matplotlib figures are shown
  too); you are only told that it was shown, so print what you need to read yourself.

How to finish
- Call final_answer(value) in your code to give the final answer; the task ends there. Or
- reply with plain text and no code block: that text is your final answer.

Tools
```python
{tools}
```"""

JSON_SYSTEM_PROMPT = """\
You solve tasks by calling the provided tools. Independent calls can be made together, in
parallel, in one reply. A failed call returns an error object with code, message and retryable
(true when the same call may succeed later); fix the arguments or try another way. When you
have the answer, reply with it in plain text, without calling a tool."""

_EXECUTE_DESCRIPTION = """\
Run Python code in a persistent, sandboxed Python session (variables persist between calls) and \
return what it produced: stdout, the value of a trailing expression, each tool call with its \
result, and any error with its line number. Call final_answer(value) in the code to give a final \
answer."""

_EXECUTE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"code": {"type": "string", "description": "Python source code to run"}},
    "required": ["code"],
    "additionalProperties": False,
}


def _prompt_view(tools: Runtime | Toolset | Iterable[Any]) -> str:
    if isinstance(tools, Runtime):
        return tools.prompt_view
    return (tools if isinstance(tools, Toolset) else Toolset(tools)).prompt_view()


def code_system_prompt(prompt_view: str, custom: str | None = None) -> str:
    """The code-mode system prompt; a ``custom`` one gets the stubs where it says ``{tools}``."""
    template = CODE_SYSTEM_PROMPT if custom is None else custom
    return template.replace("{tools}", prompt_view.rstrip("\n"))


def execute_python_tool(runtime_or_toolset: Runtime | Toolset | Iterable[Any] | None = None) -> ToolSpec:
    """The ``execute_python`` tool (``{"code": str}``) for people running their own loop.

    Given a runtime or tools, the description lists the functions available inside the code
    (their prompt view). Use ``.to_openai()``, ``.to_anthropic()`` or ``.to_mcp()`` for the wire
    shape; run the ``code`` argument with ``Session.run`` and answer with ``render_observation``.
    """
    description = _EXECUTE_DESCRIPTION
    if runtime_or_toolset is not None:
        view = _prompt_view(runtime_or_toolset).rstrip("\n")
        description += f"\n\nFunctions available inside the code:\n```python\n{view}\n```"
    return ToolSpec(name=EXECUTE_PYTHON, description=description, input_schema=_EXECUTE_SCHEMA)
