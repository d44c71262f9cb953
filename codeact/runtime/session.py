"""``Runtime`` (tools + sandbox settings, shared by many sessions) and ``Session`` (one sandbox,
one persistent namespace, many runs)."""

from __future__ import annotations

import asyncio
import collections
import functools
import json
import os
import threading
import time
import weakref
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from ..errors import SessionClosed
from ..results import CodeError, ExecutionResult, FileInfo, ToolCallRecord, bounded_value
from ..sandbox import SandboxConfig
from ..sandbox._reaper import drain as drain_reaper
from ..sandbox.driver import CallHandler, KernelDriver, RunOutcome
from ..sandbox.pool import SandboxPool, open_kernel
from ..sandbox.protocol import MAX_DEPTH, too_deep
from ..tool_stubs import render_stubs
from ._loop import LoopThread
from .ledger import CallLedger, CallStore
from .toolhost import CallDeadline, PermissionHook, ToolHost
from .toolset import Toolset

__all__ = ["Runtime", "Session"]

_MAX_FILES = 1000
_MAX_VALUE_CHARS = 512 * 1024  # the kernel bounds values at 256 KiB; this is the safety net
_MAX_HISTORY = 32


class Runtime:
    """Tools and sandbox settings; makes sessions. Close it (or use ``with``) when done."""

    def __init__(self, tools: Toolset | Iterable[Any] | None = None, sandbox: SandboxConfig | None = None,
                 *, permission: PermissionHook | None = None, ask: PermissionHook | None = None,
                 max_result_chars: int = 1_000_000, max_calls_per_run: int = 10_000,
                 max_argument_bytes: int = 256 * 1024, max_concurrency: int = 32, tool_timeout_s: float = 30.0,
                 max_run_argument_bytes: int = 64 * 1024 * 1024, max_in_flight_per_session: int = 256,
                 max_session_record_bytes: int = 256 * 1024 * 1024) -> None:
        self.toolset = tools if isinstance(tools, Toolset) else Toolset(list(tools or []))
        self.config = sandbox or SandboxConfig()
        self.loop = LoopThread()
        self.host = ToolHost(self.toolset, self.loop, permission=permission, ask=ask,
                             max_result_chars=max_result_chars, max_concurrency=max_concurrency,
                             tool_timeout_s=tool_timeout_s, max_calls_per_run=max_calls_per_run,
                             max_argument_bytes=max_argument_bytes, max_run_argument_bytes=max_run_argument_bytes,
                             max_in_flight_per_session=max_in_flight_per_session)
        self.stubs = render_stubs(self.host.specs)  # the user's tools and the built-ins (read_result)
        self.max_result_chars = max_result_chars
        self.max_calls_per_run = max_calls_per_run
        self.max_argument_bytes = max_argument_bytes
        #: The argument bytes of the call records a session keeps in ``history``, at most.
        self.max_session_record_bytes = max_session_record_bytes
        self._sessions: weakref.WeakSet[Session] = weakref.WeakSet()
        self._pool: SandboxPool | None = None
        self.closed = False
        if self.config.pool_size:
            self._pool = SandboxPool(self.config, self.config.pool_size, self.stubs)

    @property
    def prompt_view(self) -> str:
        """The tool stubs as the model is shown them."""
        return self.stubs

    def session(self, *, workspace: str | Path | None = None,
                inputs: Mapping[str, str | Path] | None = None,
                config: SandboxConfig | None = None) -> Session:
        """A new isolated session (fresh namespace). ``workspace`` mounts a host directory;
        ``inputs`` maps names to host files made visible read-only under ``/inputs``."""
        if self.closed:
            raise SessionClosed("the runtime is closed")
        session = Session(self, workspace=workspace, inputs=inputs, config=config)
        self._sessions.add(session)
        return session

    def run(self, code: str, **kwargs: Any) -> ExecutionResult:
        """Run one code action in a fresh session."""
        with self.session(**kwargs) as session:
            return session.run(code)

    async def arun(self, code: str, **kwargs: Any) -> ExecutionResult:
        return await asyncio.to_thread(self.run, code, **kwargs)

    def map(self, code_or_fn: Any, inputs: Iterable[Any], *, concurrency: int = 4, progress: bool = False,
            isolation: str = "auto") -> list[ExecutionResult]:
        """One code action per input (bound as ``item``), every result in input order, failures
        included; workers reuse warm sessions. See :func:`codeact.evals.batch.map_code`."""
        from ..evals.batch import map_code

        return map_code(self, code_or_fn, inputs, concurrency=concurrency, progress=progress,
                        isolation=isolation)  # type: ignore[arg-type]

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for session in list(self._sessions):
            session.close()
        if self._pool is not None:
            self._pool.close()
        try:
            self.toolset.close()
        finally:
            self.loop.close()
            drain_reaper()  # containers of closed sessions are removed before close returns

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def pool(self) -> SandboxPool | None:
        """The warm pool (``SandboxConfig.pool_size`` > 0), if any."""
        return self._pool

    def _open_kernel(self, config: SandboxConfig, workspace: Path | None,
                     inputs: Mapping[str, Path]) -> KernelDriver:
        """A started, handshaken kernel: from the warm pool when the session needs nothing special."""
        if self._pool is not None and workspace is None and not inputs and config == self.config:
            pooled = self._pool.acquire()
            if pooled is not None:
                return pooled
        return open_kernel(config, self.stubs, workspace, inputs)


class Session:
    """One sandbox and its persistent namespace; runs are serialized."""

    def __init__(self, runtime: Runtime, *, workspace: str | Path | None = None,
                 inputs: Mapping[str, str | Path] | None = None,
                 config: SandboxConfig | None = None) -> None:
        self.runtime = runtime
        self.config = config or runtime.config
        self.user_workspace = Path(workspace).resolve() if workspace is not None else None
        self.inputs = {k: Path(v).resolve() for k, v in (inputs or {}).items()}
        self.state: Literal["open", "closed"] = "open"
        #: The session's memory of calls across runs: call ids, cached answers, large results.
        self.calls: CallStore = runtime.host.new_store()
        self.cache: dict[str, Any] = self.calls.cache
        #: Recent results, oldest dropped first: at most ``_MAX_HISTORY`` of them and at most the
        #: runtime's ``max_session_record_bytes`` of call arguments in all.
        self.history: collections.deque[ExecutionResult] = collections.deque(maxlen=_MAX_HISTORY)
        self._history_bytes: collections.deque[int] = collections.deque(maxlen=_MAX_HISTORY)
        self._driver: KernelDriver | None = None
        self._lock = threading.Lock()

    @property
    def workspace(self) -> Path:
        """The host directory the code sees as its working directory."""
        return self._ensure().sandbox.workspace

    def _ensure(self) -> KernelDriver:
        if self.state == "closed":
            raise SessionClosed("the session is closed")
        if self._driver is None or self._driver.dead:
            self._discard()
            self._driver = self.runtime._open_kernel(self.config, self.user_workspace, self.inputs)
        return self._driver

    def start(self) -> Session:
        """Start the sandbox now rather than at the first run."""
        with self._lock:
            self._ensure()
        return self

    def run(self, code: str, *, timeout_s: float | None = None) -> ExecutionResult:
        """Run one code action; never raises for anything the code does."""
        if not isinstance(code, str):
            raise TypeError(f"code must be a str, not {type(code).__name__}")
        with self._lock:
            driver = self._ensure()
            ledger = CallLedger(self.calls)
            started_ns = time.time_ns()

            on_call = self._call_handler(driver, ledger)

            timeout = timeout_s or self.config.timeout_s
            outcome = driver.run(code, on_call, timeout,
                                 output_cap=self.config.output_cap, output_limit=self.config.output_limit,
                                 grace_s=self.config.grace_s, max_call_bytes=self.runtime.host.max_argument_bytes)
            result = _assemble(outcome, ledger, self.config, timeout, self.runtime.max_result_chars)
            result.files = _written_files(driver.sandbox.workspace, started_ns)
            if outcome.state_lost:
                self._discard()
            self._remember(result, ledger.argument_bytes)
            return result

    async def arun(self, code: str, *, timeout_s: float | None = None) -> ExecutionResult:
        return await asyncio.to_thread(self.run, code, timeout_s=timeout_s)

    def _call_handler(self, driver: KernelDriver, ledger: CallLedger) -> CallHandler:
        """Every call from the sandbox goes into the host's one pipeline (bounds included)."""
        dispatch = self.runtime.host.dispatch

        def on_call(seq: int, name: str, arguments: Any, size: int) -> CallDeadline | None:
            return dispatch(ledger, name, arguments, functools.partial(driver.reply, seq), size)

        return on_call

    def _remember(self, result: ExecutionResult, argument_bytes: int) -> None:
        if len(self.history) == self.history.maxlen:
            self._history_bytes.popleft()
        self.history.append(result)
        self._history_bytes.append(argument_bytes)
        while len(self.history) > 1 and sum(self._history_bytes) > self.runtime.max_session_record_bytes:
            self.history.popleft()
            self._history_bytes.popleft()

    def _discard(self) -> None:
        driver, self._driver = self._driver, None
        if driver is not None:
            driver.sandbox.close()

    def close(self) -> None:
        """Kill the sandbox and remove its directories. Idempotent."""
        if self.state == "closed":
            return
        with self._lock:
            self.state = "closed"
            self._discard()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.close)


def _bounded_records(records: list[ToolCallRecord], max_chars: int) -> list[ToolCallRecord]:
    """The result's copy of the ledger, each record's result bounded (the ledger keeps everything)."""
    for record in records:
        if record.ok and record.result is not None:
            record.result = bounded_value(_shallow(record.result), max_chars, record.id)
    return records


def _assemble(outcome: RunOutcome, ledger: CallLedger, config: SandboxConfig, timeout_s: float,
              max_result_chars: int) -> ExecutionResult:
    done = outcome.done
    termination = outcome.termination
    if outcome.interrupted and (done is None or done.termination != "completed"):
        termination = "timeout"
    error = CodeError(**done.error.model_dump()) if done is not None and done.error else None
    if termination == "error" and error is not None and error.type == "MemoryError":
        termination = "memory"
    reason = outcome.reason
    if termination == "timeout" and reason is None:
        reason = f"the run passed its time limit of {timeout_s:g} s"
    if termination == "output_limit":
        reason = f"the code wrote more than {config.output_limit} characters"
    ledger.close_pending("timeout" if termination == "timeout" else "tool_exception",
                         f"the run ended ({termination}) before this call finished")
    result = ExecutionResult(ok=termination == "completed", termination=termination,  # type: ignore[arg-type]
                             error=error, calls=_bounded_records(ledger.final_records(), max_result_chars),
                             duration_ms=outcome.wall_ms,
                             state_lost=outcome.state_lost, reason=reason)
    if done is not None:
        cap = config.output_cap
        result.stdout, result.stderr = done.stdout[:cap], done.stderr[:cap]
        result.stdout_truncated = done.stdout_truncated or len(done.stdout) > cap
        result.stderr_truncated = done.stderr_truncated or len(done.stderr) > cap
        result.value = bounded_value(_shallow(done.value), _MAX_VALUE_CHARS, "value")
        if done.final is not None:
            result.final_answer = _shallow(done.final.get("value"))
            result.answered = True
    return result


def _shallow(value: Any) -> Any:
    """A value nesting deeper than the result can serialize becomes its (bounded) JSON text."""
    if not too_deep(value, MAX_DEPTH):
        return value
    try:
        text = json.dumps(value, ensure_ascii=False, default=repr)
    except (ValueError, TypeError, RecursionError):
        text = repr(type(value))
    return text[:_MAX_VALUE_CHARS]


def _written_files(root: Path, since_ns: int) -> list[FileInfo]:
    """Regular files under ``root`` modified since ``since_ns`` (symlinks are not followed)."""
    found: list[FileInfo] = []
    since = since_ns - 10_000_000  # filesystem timestamps can lag the clock by a tick
    stack = [str(root)]
    while stack and len(found) < _MAX_FILES:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    st = entry.stat(follow_symlinks=False)
                    if st.st_mtime_ns >= since:
                        found.append(FileInfo(path=os.path.relpath(entry.path, root), size=st.st_size))
            except OSError:
                continue
    found.sort(key=lambda f: f.path)
    return found[:_MAX_FILES]

