"""Batch data processing: one code action per input, over warm sessions, every result kept.

``map_code(runtime, code_or_fn, inputs)`` returns one :class:`~codeact.ExecutionResult` per input,
in input order, failures included. Each input is bound as the variable ``item`` (a JSON literal
decoded in the sandbox) in a fresh namespace:

* ``isolation="namespace"`` (the default when the policy allows it): each worker thread keeps one
  warm session; before every item a reset cell deletes every name the previous item bound and
  restores the session's original names (tool stubs, helpers) from a snapshot taken when the
  session started. The process, its imported modules and the workspace are shared by the items
  of one worker. About 2 ms per item on the local backend instead of ~90 ms for a new sandbox.
* ``isolation="sandbox"``: a new sandbox per item (nothing shared). Used automatically under the
  ``restricted`` policy, which forbids ``globals()``.

``code_or_fn`` is code (a string) or a function: its source is shipped and called as
``fn(item)``, its return value becoming the result's ``value``; it must be self-contained (its
closure and module globals stay on the host; the tools are in scope in the sandbox).
"""

from __future__ import annotations

import ast
import inspect
import json
import textwrap
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

from ..errors import SandboxUnavailable
from ..results import CodeError, ExecutionResult
from ..runtime.session import Runtime, Session
from ._progress import Bar

__all__ = ["Isolation", "function_code", "map_code"]

Isolation = Literal["auto", "namespace", "sandbox"]

_RESET = """\
if "__codeact_base__" not in globals():
    __codeact_base__ = dict(globals())
    __codeact_base__["__codeact_base__"] = __codeact_base__
    __codeact_base__["__codeact_k"] = None
for __codeact_k in [k for k in globals() if k not in __codeact_base__]:
    del globals()[__codeact_k]
globals().update(__codeact_base__)
"""


def function_code(fn: Callable[..., Any]) -> str:
    """The code that defines ``fn`` (decorators dropped) and evaluates ``fn(item)`` last."""
    name = getattr(fn, "__name__", "")
    if not name.isidentifier():
        raise TypeError("pass a def function (a lambda's source cannot be shipped) or a code string")
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as exc:
        raise TypeError(f"cannot read the source of {name}: {exc}; pass a code string") from None
    node = ast.parse(source).body[0]
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        raise TypeError(f"{name} is not a plain function definition")
    lines = source.splitlines()[node.lineno - 1:]
    call = f"await {name}(item)" if isinstance(node, ast.AsyncFunctionDef) else f"{name}(item)"
    return "\n".join(lines) + f"\n{call}\n"


def _bind(literal: str) -> str:
    return f"import json\nitem = json.loads({literal!r})\ndel json\n"


def _harness_failure(exc: BaseException) -> ExecutionResult:
    message = f"{type(exc).__name__}: {exc}"
    return ExecutionResult(ok=False, termination="killed", reason=f"the batch runner failed on this item: {message}",
                           error=CodeError(type=type(exc).__name__, message=str(exc)))


class _Worker:
    """One thread's warm session (namespace isolation) or a fresh one per item."""

    def __init__(self, runtime: Runtime, reuse: bool) -> None:
        self.runtime = runtime
        self.reuse = reuse
        self.session: Session | None = None

    def run(self, code: str, literal: str) -> ExecutionResult:
        if not self.reuse:
            with self.runtime.session() as session:
                bound = session.run(_bind(literal))
                return session.run(code) if bound.ok else bound
        if self.session is None:
            self.session = self.runtime.session()
        bound = self.session.run(_RESET + _bind(literal))
        if not bound.ok:
            self.close()  # a poisoned namespace: start the next item in a new sandbox
            bound.reason = bound.reason or "binding `item` failed"
            return bound
        return self.session.run(code)

    def close(self) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None


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
    """Run one code action per input (bound as ``item``); results in input order, none dropped.

    ``on_result(index, result)`` is called as each item finishes (from worker threads). Once
    ``stop`` is set no item starts (``runtime.interrupt()`` stops the running ones); the items
    that never ran get an ``interrupted`` result.

    Raises ``SandboxUnavailable`` when no sandbox can be started at all; any other failure of
    the harness on one item becomes that item's failed result (``termination="killed"``).
    """
    code = code_or_fn if isinstance(code_or_fn, str) else function_code(code_or_fn)
    items = list(inputs)
    literals: list[str] = []
    for i, item in enumerate(items):
        try:
            literals.append(json.dumps(item, ensure_ascii=False, allow_nan=False))
        except (TypeError, ValueError) as exc:
            raise TypeError(f"input {i} is not JSON ({exc}); batch inputs are JSON values") from None
    if isolation == "auto":
        isolation = "sandbox" if runtime.config.effective_policy() == "restricted" else "namespace"
    if isolation == "namespace" and runtime.config.effective_policy() == "restricted":
        raise ValueError("isolation='namespace' needs policy 'none' (the restricted policy forbids globals())")
    results: list[ExecutionResult | None] = [None] * len(items)
    local = threading.local()
    workers: list[_Worker] = []
    lock = threading.Lock()

    def one(index: int, bar: Bar) -> None:
        if stop is not None and stop.is_set():
            return
        worker = getattr(local, "worker", None)
        if worker is None:
            worker = local.worker = _Worker(runtime, reuse=isolation == "namespace")
            with lock:
                workers.append(worker)
        try:
            result = worker.run(code, literals[index])
        except SandboxUnavailable:
            raise
        except Exception as exc:
            worker.close()
            result = _harness_failure(exc)
        results[index] = result
        if on_result is not None:
            on_result(index, result)
        bar.advance(failed=not result.ok)

    pool = ThreadPoolExecutor(max(1, min(concurrency, len(items) or 1)), thread_name_prefix="codeact-map")
    try:
        with Bar(len(items), "batch", enabled=progress) as bar:
            for fut in [pool.submit(one, i, bar) for i in range(len(items))]:
                fut.result()
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        for worker in workers:
            worker.close()
    return [r if r is not None else _not_run(stop) for r in results]


def _not_run(stop: threading.Event | None) -> ExecutionResult:
    if stop is not None and stop.is_set():
        return ExecutionResult(ok=False, termination="interrupted", reason="not run: the batch was interrupted")
    return _harness_failure(RuntimeError("no result"))
