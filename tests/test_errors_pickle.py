"""Every codeact error survives pickling whole: a cluster node's errors reach the caller through Ray."""

from __future__ import annotations

import pickle

import codeact.errors as errors

#: The errors whose constructor takes more than a message, made as they are raised.
SPECIAL: dict[str, BaseException] = {
    "RestoreDiverged": errors.RestoreDiverged("diverged", cell=3, call=2),
    "ReplayInterrupted": errors.ReplayInterrupted("stopped", cell=2, requested=True),
    "ToolArgumentsError": errors.ToolArgumentsError("lookup", ["key: required"]),
    "ToolError": errors.ToolError("not_found", "no such key", retryable=True),
}


def test_every_error_pickles_with_its_fields() -> None:
    found = [c for c in vars(errors).values()
             if isinstance(c, type) and issubclass(c, BaseException) and c.__module__ == errors.__name__]
    assert len(found) > len(SPECIAL)
    for cls in found:
        made = SPECIAL.get(cls.__name__) or cls("a message")
        back = pickle.loads(pickle.dumps(made))
        assert type(back) is cls and str(back) == str(made) and vars(back) == vars(made), cls.__name__
