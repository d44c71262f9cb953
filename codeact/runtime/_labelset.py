"""A label set declared by a user (a tool's ``labels``, a policy's), checked with the wire's rule
(``sandbox.labels``). Apart from ``flow.py`` so that the tool model (``_tool.py``) can check its
declarations without importing the policy that judges tools."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeAlias

from ..errors import ToolDefinitionError
from ..sandbox.labels import MAX_LABELS, label_problem

__all__ = ["Labels", "label_set"]

#: A set of data-flow labels.
Labels: TypeAlias = frozenset[str]
_NONE: Labels = frozenset()


def label_set(labels: Iterable[str] | str | None, what: str = "labels") -> Labels:
    """``labels`` as a checked frozenset (a single string is one label); raises ToolDefinitionError
    on a label the wire would refuse (``sandbox.labels``)."""
    if labels is None:
        return _NONE
    items = frozenset((labels,) if isinstance(labels, str) else labels)
    if len(items) > MAX_LABELS:
        raise ToolDefinitionError(f"{what}: more than {MAX_LABELS} labels")
    for label in items:
        issue = label_problem(label)
        if issue is not None:
            raise ToolDefinitionError(f"{what}: {issue}: {label!r}"[:300])
    return items
