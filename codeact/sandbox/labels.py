"""The shape of data-flow labels on the wire (issue 31), checked as hostile input.

A label set is a JSON list of label strings. The kernel joins labels and reports them on ``call``
and ``done`` frames (``kernel/frames.py``); the host gives them meaning (``runtime/flow.py``).
Everything here only says whether a value is well formed: at most :data:`MAX_LABELS` labels per
set, each 1 to :data:`MAX_LABEL_CHARS` printable ASCII characters. The driver treats a frame whose
labels fail as any malformed frame (the sandbox is killed); the runtime checks the labels users
declare with the same rule, so both sides agree on what a label is.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "DONE_PARTS",
    "MAX_LABELED_ARGUMENTS",
    "MAX_LABELS",
    "MAX_LABEL_CHARS",
    "call_labels_problem",
    "done_labels_problem",
    "label_problem",
    "labels_problem",
]

#: The most labels one set may hold.
MAX_LABELS = 64
#: The longest label.
MAX_LABEL_CHARS = 128
#: The most arguments a call frame's ``labels.args`` may name.
MAX_LABELED_ARGUMENTS = 1024
_MAX_ARGUMENT_NAME = 1000
#: The parts of an observation a ``done`` frame's ``labels`` may name.
DONE_PARTS = frozenset({"stdout", "stderr", "value", "error", "outputs"})
_CALL_PARTS = frozenset({"args", "pc"})


def label_problem(label: Any) -> str | None:
    """What is wrong with one label, or None."""
    if type(label) is not str:
        return f"a label must be a string, not {type(label).__name__}"
    if not label or len(label) > MAX_LABEL_CHARS:
        return f"a label must have 1 to {MAX_LABEL_CHARS} characters, not {len(label)}"
    if not (label.isascii() and label.isprintable()):
        return "a label must be printable ASCII"
    return None


def labels_problem(value: Any, where: str = "labels") -> str | None:
    """What is wrong with a label set (a JSON list of labels), or None."""
    if type(value) is not list:
        return f"{where}: must be a list of labels, not {type(value).__name__}"
    if len(value) > MAX_LABELS:
        return f"{where}: more than {MAX_LABELS} labels"
    for label in value:
        issue = label_problem(label)
        if issue is not None:
            return f"{where}: {issue}"
    return None


def call_labels_problem(value: Any) -> str | None:
    """What is wrong with a call frame's ``labels`` (``{"args": {name: [labels]}, "pc": [labels]}``)."""
    if type(value) is not dict:
        return f"labels: must be an object, not {type(value).__name__}"
    if not value.keys() <= _CALL_PARTS:
        return "labels: unknown key (only 'args' and 'pc')"
    args = value.get("args", {})
    if type(args) is not dict:
        return f"labels.args: must be an object, not {type(args).__name__}"
    if len(args) > MAX_LABELED_ARGUMENTS:
        return f"labels.args: more than {MAX_LABELED_ARGUMENTS} arguments"
    for name, labels in args.items():
        if len(name) > _MAX_ARGUMENT_NAME:
            return f"labels.args: an argument name longer than {_MAX_ARGUMENT_NAME}"
        issue = labels_problem(labels, f"labels.args.{name[:40]}")
        if issue is not None:
            return issue
    return labels_problem(value["pc"], "labels.pc") if "pc" in value else None


def done_labels_problem(value: Any) -> str | None:
    """What is wrong with a done frame's ``labels`` (``{part: [labels]}``, parts of :data:`DONE_PARTS`)."""
    if type(value) is not dict:
        return f"labels: must be an object, not {type(value).__name__}"
    for part, labels in value.items():
        if part not in DONE_PARTS:
            return f"labels: unknown part {str(part)[:40]!r}"
        issue = labels_problem(labels, f"labels.{part}")
        if issue is not None:
            return issue
    return None
