"""Batches with a progress bar: :func:`map_code` as in :mod:`codeact.runtime.batch`, with
``progress=True`` drawing the bar on stderr. The batch itself lives in the runtime; this module
keeps the import path ``codeact.evals.batch`` (and ``codeact.evals``) working.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ..results import ExecutionResult
from ..runtime import batch as _batch
from ..runtime.batch import Isolation, function_code
from .progress import Bar

if TYPE_CHECKING:
    from ..runtime.session import Runtime

__all__ = ["Isolation", "function_code", "map_code"]


def map_code(
    runtime: Runtime,
    code_or_fn: str | Callable[..., Any],
    inputs: Iterable[Any],
    *,
    concurrency: int = 4,
    progress: bool = False,
    isolation: Isolation = "auto",
    on_result: Callable[[int, ExecutionResult], None] | None = None,
    stop: threading.Event | None = None,
) -> list[ExecutionResult]:
    """:func:`codeact.runtime.batch.map_code`; ``progress=True`` shows a bar (done, failed, ETA)."""
    items = list(inputs)
    bar = Bar(len(items), "batch") if progress else None
    return _batch.map_code(runtime, code_or_fn, items, concurrency=concurrency, progress=bar,
                           isolation=isolation, on_result=on_result, stop=stop)
