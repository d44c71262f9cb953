"""Batch data processing: one code action per input, over warm sessions, every result kept.

``map_code(runtime, code_or_fn, inputs)`` returns one :class:`~codeact.ExecutionResult` per input,
in input order, failures included. Each input is bound as the variable ``item`` in a fresh
namespace, by protocol frames (``reset``, ``bind``: see ``kernel/protocol.py``), never by
code: the kernel decodes the JSON value, nothing is evaluated, and no extra run is made.

* ``isolation="namespace"`` (the default when the policy allows it): each worker thread keeps one
  warm session; before every item a ``reset`` frame removes every name the previous item bound and
  restores the session's original names (tool stubs, helpers) as the sandbox started with them.
  The process, its imported modules and the workspace are shared by the items of one worker.
  Far cheaper per item than a new sandbox (``make bench`` measures both).
* ``isolation="sandbox"``: a new sandbox per item (nothing shared). Used automatically under the
  ``restricted`` policy.

``code_or_fn`` is code (a string) or a function: its source is shipped and called as
``fn(item)``, its return value becoming the result's ``value``; it must be self-contained (its
closure and module globals stay on the host; the tools are in scope in the sandbox).

``progress=True`` draws a bar on stderr (:class:`codeact.progress.Bar`: done, failed, ETA); or
pass any context manager with ``advance(failed=...)``.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import json
import textwrap
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal, Protocol

from ..errors import SandboxError, SandboxUnavailable
from ..progress import Bar
from ..results import CodeError, ExecutionResult
from ..sandbox import SandboxConfig

__all__ = ["BatchProgress", "Isolation", "function_code", "map_code"]

Isolation = Literal["auto", "namespace", "sandbox"]


class BatchProgress(Protocol):
    """What a batch reports to: entered once the inputs are checked, advanced once per finished
    item (from worker threads), exited at the end."""

    def __enter__(self) -> object: ...

    def __exit__(self, *exc: object) -> None: ...

    def advance(self, *, failed: bool = False) -> None: ...


class _Session(Protocol):
    """What a batch uses of a ``Session`` (or a cluster's ``ClusterSession``): its reset and bind
    (protocol frames, no code runs) and its runs."""

    def reset_namespace(self, *, forget: bool = False) -> None: ...

    def bind_names(self, values: Mapping[str, Any]) -> None: ...

    def run(self, code: str) -> ExecutionResult: ...

    def close(self) -> None: ...

    def __enter__(self) -> _Session: ...

    def __exit__(self, *exc: Any) -> None: ...


class _Runtime(Protocol):
    """What a batch uses of a ``Runtime``."""

    @property
    def config(self) -> SandboxConfig: ...

    def session(self) -> _Session: ...


def function_code(fn: Callable[..., Any]) -> str:
    """The code that defines ``fn`` (decorators dropped) and evaluates ``fn(item)`` last. Its
    annotations are postponed: they name the caller's imports, which the sandbox need not have."""
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
    return "from __future__ import annotations\n" + "\n".join(lines) + f"\n{call}\n"


def _harness_failure(exc: BaseException) -> ExecutionResult:
    message = f"{type(exc).__name__}: {exc}"
    return ExecutionResult(ok=False, termination="killed", reason=f"the batch runner failed on this item: {message}",
                           error=CodeError(type=type(exc).__name__, message=str(exc)))


def _not_bound(exc: Exception) -> ExecutionResult:
    """The item's result when ``item`` could not be bound: a value that is not JSON (TypeError,
    the sandbox untouched), or a sandbox that failed on the reset or the bind."""
    if isinstance(exc, SandboxError):
        return ExecutionResult(ok=False, termination="killed", state_lost=True,
                               reason=f"binding `item` failed: {exc}")
    return ExecutionResult(ok=False, termination="error", reason=f"binding `item` failed: {exc}",
                           error=CodeError(type=type(exc).__name__, message=str(exc)))


def _bind_item(session: _Session, item: Any, *, reset: bool) -> ExecutionResult | None:
    """Reset the namespace (when asked) and bind ``item``; the item's failed result if that failed.
    SandboxUnavailable (no sandbox at all) is raised: it stops the batch."""
    try:
        if reset:
            session.reset_namespace(forget=True)
        session.bind_names({"item": item})
    except SandboxUnavailable:
        raise
    except (SandboxError, TypeError, ValueError) as exc:
        return _not_bound(exc)
    return None


class _Worker:
    """One thread's warm session (namespace isolation) or a fresh one per item."""

    def __init__(self, runtime: _Runtime, reuse: bool, stop: threading.Event | None = None,
                 started: threading.Event | None = None) -> None:
        self.runtime = runtime
        self.reuse = reuse
        self.stop = stop
        self.session: _Session | None = None
        #: Set once any sandbox of the batch is up (its item bound): a sandbox can be had.
        self.started = started
        #: Whether a start of this worker's already failed (each worker counts once: see map_code).
        self.refused = False

    def run(self, code: str, item: Any) -> ExecutionResult:
        if not self.reuse:
            with self.runtime.session() as session:
                return self._bound_run(session, code, item, reset=False)
        if self.session is None:
            self.session = self.runtime.session()
        return self._bound_run(self.session, code, item, reset=True)

    def _bound_run(self, session: _Session, code: str, item: Any, *, reset: bool) -> ExecutionResult:
        failed = _bind_item(session, item, reset=reset)
        if failed is not None:
            if failed.state_lost:
                self.close()  # the sandbox failed: start the next item in a new one
            return failed
        if self.started is not None:
            self.started.set()
        if self.stop is not None and self.stop.is_set():  # interrupted while binding: no run starts now
            return _not_run(self.stop)
        return session.run(code)

    def close(self) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None


def _check_json(items: list[Any]) -> None:
    for i, item in enumerate(items):
        try:
            json.dumps(item, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"input {i} is not JSON ({exc}); batch inputs are JSON values") from None


def map_code(
    runtime: _Runtime,
    code_or_fn: str | Callable[..., Any],
    inputs: Iterable[Any],
    *,
    concurrency: int = 4,
    progress: bool | BatchProgress = False,
    isolation: Isolation = "auto",
    on_result: Callable[[int, ExecutionResult], None] | None = None,
    stop: threading.Event | None = None,
) -> list[ExecutionResult]:
    """Run one code action per input (bound as ``item``); results in input order, none dropped.

    ``on_result(index, result)`` is called as each item finishes (from worker threads), then
``progress.advance(failed=...)`` (``progress=True``: a bar on stderr). Once ``stop`` is set no item starts
    (``runtime.interrupt()`` stops the running ones); the items that never ran get an
    ``interrupted`` result.

    Raises TypeError for an input that is not JSON (before anything runs), ``SandboxUnavailable``
    when no sandbox can be started at all (before any item ran); once one has, a sandbox that
    fails to start, or any other failure of the harness on one item, becomes that item's failed
    result (``termination="killed"``).
    """
    code = code_or_fn if isinstance(code_or_fn, str) else function_code(code_or_fn)
    items = list(inputs)
    _check_json(items)
    bar = progress if not isinstance(progress, bool) else Bar(len(items), "batch") if progress else None
    if isolation == "auto":
        isolation = "sandbox" if runtime.config.effective_policy() == "restricted" else "namespace"
    if isolation == "namespace" and runtime.config.effective_policy() == "restricted":
        raise ValueError("isolation='namespace' needs policy 'none' (the restricted policy forbids globals())")
    results: list[ExecutionResult | None] = [None] * len(items)
    local = threading.local()
    workers: list[_Worker] = []
    lock = threading.Lock()
    started = threading.Event()  # some sandbox came up: one can be had
    refused = [0]  # workers whose start failed

    def one(index: int) -> None:
        if stop is not None and stop.is_set():
            return
        worker = getattr(local, "worker", None)
        if worker is None:
            worker = local.worker = _Worker(runtime, reuse=isolation == "namespace", stop=stop, started=started)
            with lock:
                workers.append(worker)
        try:
            result = worker.run(code, items[index])
        except SandboxUnavailable as exc:
            with lock:
                if not worker.refused:
                    worker.refused = True
                    refused[0] += 1
                # No sandbox could be had at all: every worker's start failed, and none ever came up.
                hopeless = not started.is_set() and refused[0] >= workers_count
            if hopeless:
                raise
            worker.close()  # one start failed after others worked: this item's result, not the batch's end
            result = ExecutionResult(ok=False, termination="killed", state_lost=True,
                                     reason=f"the sandbox for this item could not start: {exc}")
        except Exception as exc:
            worker.close()
            result = _harness_failure(exc)
        results[index] = result
        if on_result is not None:
            on_result(index, result)
        if bar is not None:
            bar.advance(failed=not result.ok and result.termination != "interrupted")  # counted apart

    workers_count = max(1, min(concurrency, len(items) or 1))
    pool = ThreadPoolExecutor(workers_count, thread_name_prefix="codeact-map")
    try:
        with bar if bar is not None else contextlib.nullcontext():
            for fut in [pool.submit(one, i) for i in range(len(items))]:
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
