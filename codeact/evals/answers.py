"""One answer protocol for both modes, and one parser from an answer to a typed value.

Both modes are asked for the final answer as one plain value, in the form natural to the mode:
code mode calls ``final_answer(value)``; JSON mode (and a code-mode reply in prose) ends its last
reply with a line ``ANSWER: <value>``. :func:`to_value` turns either into the same typed value:
the ``ANSWER:`` payload (or, failing that, the whole text) is read as JSON, then as a Python
literal, then kept as text without Markdown emphasis; a number keeps its sign (a Unicode minus
counts). The runner appends :func:`instruction` to every task's instruction, the same words in
both modes apart from the mechanism.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

__all__ = ["ANSWER_LINE", "instruction", "kept_answer", "to_value"]

_VALUE = ("one plain value: a number (no units), a string, a list or an object/dict, exactly as the task "
          "asks for it")
_INSTRUCTIONS = {
    "code": f"When you have the answer, call final_answer(value) in your code with {_VALUE}.",
    "json": f"When you have the answer, end your last reply with a line `ANSWER: <value>` with {_VALUE} "
            "(lists and objects as JSON).",
}
#: The answer line of a prose reply (the last one counts); Markdown emphasis around it is allowed.
ANSWER_LINE = re.compile(r"^[ \t>*_#-]*(?:final[ \t]+)?answer[*_ \t]*[:=][ \t]*(.*?)[ \t]*$", re.I | re.M)
_MAX_PARSED = 100_000  # longer text is no single value; parsing it would only cost time
_FENCE = re.compile(r"^```[a-zA-Z]*\n(.*?)\n?```$", re.S)
_EMPHASIS = re.compile(r"^(\*\*|__|\*|_|`)(.+)\1$", re.S)
_MINUS = str.maketrans({"\u2212": "-", "\u2012": "-", "\u2013": "-", "\u2014": "-", "\u00a0": " ",
                        "\u2009": " ", "\u202f": " "})


def instruction(mode: str) -> str:
    """The answer-format sentence the runner appends to a task's instruction in ``mode``."""
    return _INSTRUCTIONS.get(mode, _INSTRUCTIONS["json"])


def _strip(text: str) -> str:
    text = text.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    while True:
        emphasized = _EMPHASIS.match(text)
        if not emphasized:
            return text
        text = emphasized.group(2).strip()


def to_value(answer: Any) -> Any:
    """The typed value of an answer (see the module docstring); non-text answers are returned as is."""
    if not isinstance(answer, str):
        return answer
    text = answer.translate(_MINUS)
    lines = [m.group(1) for m in ANSWER_LINE.finditer(text) if m.group(1).strip()]
    payload = _strip(lines[-1] if lines else text)
    if len(payload) > _MAX_PARSED:
        return payload
    for parse in (json.loads, ast.literal_eval):
        try:
            value = parse(payload)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        if isinstance(value, (str, int, float, bool, list, dict, tuple, set)) or value is None:
            return list(value) if isinstance(value, (tuple, set)) else value
    return payload


def kept_answer(answer: Any) -> Any:
    """The answer as a result keeps it: a reply ending in an ``ANSWER:`` line is kept as its typed
    value (``76``, not ``"Total: 76 USD.\\nANSWER: 76"``; the reply itself is in the trace), as a
    code-mode ``final_answer(76)`` is; any other answer as it came."""
    if isinstance(answer, str) and any(m.group(1).strip() for m in ANSWER_LINE.finditer(answer.translate(_MINUS))):
        return to_value(answer)
    return answer
