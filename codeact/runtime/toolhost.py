"""Dispatch of tool calls on the host, one pipeline for every call:
bound → lookup → validate → permit → admit → execute → record → reply.

Calls from sandboxed code (``dispatch``) and from a JSON function-calling loop (``acall``) share
it: the same bounds, validation, policies, records and error mapping. The front (``_front``) runs on
the caller's thread and decides everything once: the bounds (the ledger's ``arrive``), the tool, the
arguments (``_arguments.check_arguments``), and the lane (``_accepted.Lane``). It gives an
``Accepted`` call, which its lane executes without deciding anything again: a plain sync tool on
that very thread (the inline lane: when the tool was quick lately and the session has a slot) or on
a pool thread (one hand-off; the caller enforces its timeout either way), the host's own tools on
the caller's thread, and every other call through the host's event loop (permission hooks, rate
limits, the cache, retries, async tools). Whatever a tool raises, even ``SystemExit`` or
``KeyboardInterrupt``, becomes a ``tool_exception`` record; nothing a tool does stops the loop or
the pool. What a call cut short records (a timeout, a cancellation) is ``cutoffs.py``'s.

Under a data-flow policy (``flow``, ``runtime/flow.py``) every call goes through the loop (no
plain path, no inline lane) and *permit* judges it with ``flow.evaluate`` first: one check for
calls from code and from the JSON agent. Each record then carries its arguments' labels, the
control flow's, its result's and the decision, and each reply its result's labels. Without a
policy, the only cost is the attribute check that keeps the fast paths.

A result larger than ``max_result_chars`` (as JSON text) reaches the sandbox as a truncated view
``{"truncated": True, "call_id", "total_chars", "preview", "hint"}``; the host keeps the full
text for the session, and the built-in tool ``read_result(call_id, offset, limit)`` pages through it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import inspect
import random
import time
from collections.abc import Callable
from typing import Any

from .._text import valid_text
from ..errors import ToolError
from ..results import FlowDecision, ToolCallError, ToolCallRecord, oversized_json
from ..sandbox.driver import CallDeadline  # a plain call's timeout, kept by whoever dispatched it
from ..tool_stubs import ToolSpec
from ..tool_stubs.hints import unknown_tool_message
from ._accepted import Accepted, Lane, Refusal
from ._admission import RateLimiter, SessionGate
from ._arguments import ArgumentCheck, ArgumentsRefused, check_arguments
from ._calls import _describe, _enter, _error, _guarded, _invoke, _jsonable, _max_calls_error, _Once, _retrieved
from ._loop import LoopThread
from .cutoffs import CANCELLED, NOT_STARTED, RUNTIME_CLOSED, UNFINISHED, tool_timeout
from .flow import FlowApprover, FlowCall, FlowPolicy, FlowVerdict, Labels, evaluate, wire_call
from .ledger import CallLedger, CallStore, cache_key
from .limits import CallLimits
from .toolset import Tool, Toolset

__all__ = ["READ_RESULT", "CallDeadline", "PermissionHook", "ToolHost"]

#: (tool name, validated arguments) → True to allow, False or a reason string to deny (may be async).
PermissionHook = Callable[[str, dict[str, Any]], Any]

#: The built-in tool that pages through a large result kept on the host.
READ_RESULT = "read_result"
_BACKOFF_S = 0.1
_DEFAULT_LIMITS = CallLimits()
#: A plain call that runs longer than this marks its tool slow: its calls go to the pool rather
#: than run on the thread that reads the sandbox's frames (see ``dispatch``'s ``inline``).
INLINE_BUDGET_S = 0.001
#: An upstream asking to wait longer than this before a retry gets its error passed on instead.
_MAX_RETRY_WAIT_S = 30.0

#: The lanes, as module constants (read on every call).
_INLINE, _POOL, _LOOP, _BUILTIN = Lane.INLINE, Lane.POOL, Lane.LOOP, Lane.BUILTIN

_READ_RESULT_SPEC = ToolSpec(
    name=READ_RESULT,
    description=(
        "Read part of a tool result that was too large to return whole.\n\n"
        "Such a call returns {'truncated': True, 'call_id': ..., 'total_chars': ..., 'preview': ...} instead "
        "of its value. The full value is kept on the host as JSON text; this returns up to `limit` characters "
        "of it from `offset`. Join the pages' 'text' until 'next_offset' is None and json.loads the whole, "
        "or read only the part you need."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "call_id": {"type": "string", "description": "The 'call_id' of the truncated result."},
            "offset": {"type": "integer", "minimum": 0, "default": 0, "description": "First character to read."},
            "limit": {"type": "integer", "minimum": 1, "description": "Most characters to read (capped by the host)."},
        },
        "required": ["call_id"],
        "additionalProperties": False,
    },
    output_schema={
        "type": "object",
        "description": "One page: 'text' from 'offset'; 'next_offset' is None after the last page.",
        "properties": {
            "call_id": {"type": "string"},
            "offset": {"type": "integer"},
            "text": {"type": "string"},
            "total_chars": {"type": "integer"},
            "next_offset": {"type": ["integer", "null"]},
        },
        "required": ["call_id", "offset", "text", "total_chars", "next_offset"],
    },
)


class _Route:
    """What the pipeline needs of one tool, worked out at its first call and kept while the tool,
    its spec and its policy stay the same objects (each call then costs one dict lookup)."""

    __slots__ = ("check", "fn", "name", "plain", "policy", "spec", "timeout_s", "tool")

    def __init__(self, host: ToolHost, tool: Tool) -> None:
        self.tool, self.spec, self.policy, self.fn, self.name = tool, tool.spec, tool.policy, tool.fn, tool.name
        self.check = ArgumentCheck(tool.spec, tool.fn)
        self.timeout_s = host.timeout_of(tool)
        policy = tool.policy
        # The pool's size bounds the fast path; a tighter max_concurrency needs the loop's semaphore.
        self.plain = (host.labels_off and tool.fn is not None and not tool.is_async and policy.permission == "allow"
                      and host.permission is None and not policy.rate_limit_per_s and not policy.cacheable
                      and not policy.idempotent and host.limits.max_concurrency >= host.loop.max_workers)

    def current(self, tool: Tool) -> bool:
        return self.tool is tool and self.spec is tool.spec and self.policy is tool.policy and self.fn is tool.fn


class _PlainCall(_Once):
    """A plain call on the inline or the pool lane: its work (``run``, on whichever thread runs it;
    ``start`` puts it on the pool) and its expiry (``expire``), which race to claim the session's
    slot back (see :class:`_Once`)."""

    __slots__ = ("args", "host", "ledger", "pooled", "record", "reply", "route")

    def __init__(self, host: ToolHost, ledger: CallLedger, call: Accepted, reply: Callable[[dict[str, Any]], None],
                 pooled: bool) -> None:
        super().__init__()
        # The accepted call's parts, not the Accepted: one object fewer kept alive per call
        # (the ledger holds this one until the run ends), so fewer garbage collections.
        self.record, self.route, self.args = call.record, call.route, call.args
        self.host, self.ledger, self.reply, self.pooled = host, ledger, reply, pooled

    def run(self) -> None:
        self.host._run_plain(self)

    def expire(self) -> None:
        self.host._expire(self)

    def start(self) -> None:
        """Given the session's slot: on to the pool (``SessionGate.enter``'s start, never raising)."""
        host, ledger = self.host, self.ledger
        try:
            host.loop.pool.run_soon(self.run)
        except RuntimeError:  # the runtime is closing
            record = self.record
            if host._closed_call(ledger, record):
                self.reply(host._payload(ledger, record))
            if self.claim():
                ledger.store.gate.leave()


class ToolHost:
    """Runs tool calls for a runtime: bounds, policies, timeouts, retries, the cache, records."""

    def __init__(self, toolset: Toolset, loop: LoopThread, *, permission: PermissionHook | None = None,
                 ask: PermissionHook | None = None, limits: CallLimits = _DEFAULT_LIMITS,
                 flow: FlowPolicy | None = None,
                 replay_labels: Callable[[str], list[str] | None] | None = None) -> None:
        self.toolset = toolset
        #: The data-flow policy every call is judged by (``runtime.flow``), or None.
        self.flow = flow
        #: A replay host's source of the recorded result labels (by tool name): sent, not judged.
        self.replay_labels = replay_labels
        #: Neither: no call is labeled, and the fast paths (plain, inline) stay open.
        self.labels_off = flow is None and replay_labels is None
        self.loop = loop
        self.permission = permission
        self.ask = ask
        #: The bounds of every call (one frozen object: replace it whole to change one).
        self.limits = limits
        #: Tools the host answers itself; a user tool of the same name takes precedence.
        self.builtins: dict[str, Tool] = {READ_RESULT: Tool(spec=_READ_RESULT_SPEC)}
        self._limiters: dict[str, RateLimiter] = {}
        self._routes: dict[int, _Route] = {}
        self._slots: asyncio.Semaphore | None = None
        #: Plain tools seen running longer than INLINE_BUDGET_S: their calls go to the pool (until
        #: one answers within the budget again), and the start of each plain call running inline.
        self._slow: set[str] = set()
        self._inline_since: dict[str, float] = {}

    @property
    def specs(self) -> list[ToolSpec]:
        """What the sandbox gets stubs for: the toolset's tools, then the built-ins it does not shadow."""
        return [*self.toolset.specs, *(t.spec for n, t in self.builtins.items() if n not in self.toolset)]

    def timeout_of(self, tool: Tool) -> float:
        """A call's time limit: the tool's policy, else the runtime's default."""
        return tool.policy.timeout_s if tool.policy.timeout_s is not None else self.limits.tool_timeout_s

    def new_store(self) -> CallStore:
        """A session's call store, with its share of the tool pool: three quarters of it, so a
        second session always finds threads free however many calls the first one queues."""
        return CallStore(max_running=max(1, self.loop.max_workers * 3 // 4))

    # -- entry points ------------------------------------------------------------------------
    def dispatch(self, ledger: CallLedger, name: str, arguments: Any,
                 reply: Callable[[dict[str, Any]], None], size: int | None = None, *,
                 inline: bool = False, labels: Any = None) -> CallDeadline | None:
        """Run one call from the sandbox; ``reply`` with the sandbox's payload exactly once.

        ``size`` is the call frame's size in bytes (measured here when None). A plain sync tool
        runs straight on a pool thread, or with ``inline`` (when the session has a slot free) is
        returned for the caller to run on its own thread: no hand-off at all. Its timeout is then
        the caller's to enforce: call the returned deadline's callback when it passes (a late
        answer is dropped). ``labels``: the call frame's data-flow labels (checked by the driver).
        """
        try:
            call = self._front(ledger, name, arguments, size, labels, _INLINE if inline else _POOL)
        except Exception as exc:
            call = self._fault(ledger, name, exc)
        if type(call) is Refusal:
            reply(call.payload)
            return None
        return self.execute(ledger, call, reply)

    def execute(self, ledger: CallLedger, call: Accepted,
                reply: Callable[[dict[str, Any]], None]) -> CallDeadline | None:
        """Run an accepted call on its lane; ``reply`` exactly once. A plain call gives back its
        deadline (and, on :attr:`Lane.INLINE`, the work for the caller's thread), as ``dispatch``."""
        lane = call.lane
        if lane is _INLINE or lane is _POOL:
            plain = _PlainCall(self, ledger, call, reply, lane is _POOL)
            ledger.holds[call.record.id] = plain
            deadline = time.monotonic() + call.route.timeout_s
            if plain.pooled:
                ledger.store.gate.enter(plain.start)
                return deadline, plain.expire, None
            return deadline, plain.expire, plain.run
        record = call.record
        if lane is _BUILTIN:
            self._run_builtin(ledger, call)
            reply(self._payload(ledger, record))
            return None
        work = self._back(ledger, call)
        try:
            future = self.loop.submit(work)
        except RuntimeError:  # the runtime is closing
            work.close()
            self._closed_call(ledger, record)
            reply(self._payload(ledger, record))
            return None
        future.add_done_callback(lambda _f: reply(self._payload(ledger, record)))
        return None

    async def acall(self, ledger: CallLedger, name: str, arguments: Any, labels: Any = None, *,
                    omitted_nulls: bool = False) -> ToolCallRecord:
        """Run one call from a JSON function-calling loop; the same pipeline as :meth:`dispatch`.
        Returns the call's record, ended (a call refused before it was recorded gets a record
        of its own, outside the ledger). ``labels``: as a call frame's (``{"args", "pc"}``);
        ``omitted_nulls``: the arguments come from strict decoding (its nulls for omitted arguments go)."""
        try:
            call = self._front(ledger, name, arguments, None, labels, _LOOP, omitted_nulls)
        except Exception as exc:
            call = self._fault(ledger, name, exc)
        if type(call) is Refusal:
            if call.record is not None:
                return call.record
            error = ToolCallError.model_validate(call.payload["error"])
            return ToolCallRecord(id="refused", name=valid_text(str(name)[:200]), arguments=None, ok=False, error=error,
                                  finished=True)
        if call.lane is _BUILTIN:
            self._run_builtin(ledger, call)
            return call.record
        work = self._back(ledger, call)
        if asyncio.get_running_loop() is self.loop.loop:
            await work
        else:
            await asyncio.wrap_future(self.loop.submit(work))
        return call.record

    def call(self, ledger: CallLedger, name: str, arguments: Any) -> ToolCallRecord:
        """Run one call synchronously (from any thread but the loop's)."""
        return self.loop.run(self.acall(ledger, name, arguments))

    # -- the front: bound → lookup → validate → lane ---------------------------------------------
    def _front(self, ledger: CallLedger, name: str, arguments: Any, size: int | None, labels: Any = None,
               via: Lane = _LOOP, omitted_nulls: bool = False) -> Accepted | Refusal:
        """Decide everything about one arriving call, once: its bounds, its tool, its arguments
        (``_arguments.check_arguments``), its record (``CallLedger.arrive``) and its lane, the
        fastest ``via`` allows (INLINE: a plain tool, quick lately, with the session's slot free,
        which it then holds; POOL: a plain tool; LOOP: every other). Returns the accepted call,
        or the refusal (recorded when it can be)."""
        limits = self.limits
        tool = self.toolset.get(name)
        builtin = tool is None and name in self.builtins
        if builtin:
            tool = self.builtins[name]
        route = self._route(tool) if tool is not None else None
        problem: ToolError | None = None
        early = False
        try:
            args, size, arguments = check_arguments(route.check if route is not None else None, arguments, size,
                                                    limits.max_argument_bytes, omitted_nulls=omitted_nulls)
        except ArgumentsRefused as refused:
            args, size, arguments = {}, refused.size, refused.arguments
            problem, early = refused.error, refused.early
        gate = ledger.store.gate
        if not early:  # after the run's bounds (the ledger's): the lent threads, then the lookup
            if gate.lent >= limits.max_lent_threads_per_session:
                problem = ToolError("rate_limited", f"{gate.lent} calls of this session still hold host threads "
                                    "past their timeout (the most it may hold); new calls are refused until some "
                                    "return", retryable=True)
            elif route is None:
                problem = ToolError("unknown_tool", unknown_tool_message(name, self.toolset.names,
                                                                         searchable="search_tools" in self.builtins))
        record = ledger.arrive(name, arguments, size, limits, problem, early)
        if type(record) is Refusal:
            return record
        assert route is not None
        if not self.labels_off:
            self._label(ledger, record, route.tool, args, arguments, labels, builtin)
        if builtin:
            lane = _BUILTIN
        elif via is _LOOP or not route.plain:
            lane = _LOOP
        elif via is _INLINE and self._fast(route.name) and gate.try_enter():
            lane = _INLINE
        else:
            lane = _POOL
        return Accepted(record, route, args, lane)

    def _fault(self, ledger: CallLedger, name: str, exc: Exception) -> Refusal:
        """An unexpected exception in :meth:`_front` (a bug in codeact): the call fails as
        ``tool_exception``, recorded when it can be, and the run goes on."""
        error = ToolError("tool_exception", f"internal error accepting the call: {_describe(exc)}")
        try:
            refused = ledger.arrive(name, None, 0, self.limits, error)
        except Exception:
            refused = None
        if type(refused) is Refusal and refused.record is not None:
            return refused
        return Refusal.of(None, _error(error))

    # -- data-flow labels (``runtime.flow``) -------------------------------------------------------
    def _label(self, ledger: CallLedger, record: ToolCallRecord, tool: Tool, args: dict[str, Any],
               passed: Any, raw: Any, builtin: bool) -> None:
        """Put the call's labels on its record: what its arguments and the control flow carry (from
        the frame, or everything the call could have seen when the frame says nothing), and what
        its result will carry (the tool's declaration; a replay host: the recorded labels)."""
        if self.replay_labels is not None:
            record.result_labels = self.replay_labels(tool.name)
            return
        call = wire_call(tool.name, args, passed, raw, self._fallback(ledger))
        record.labels = {k: sorted(v) for k, v in call.labels.items()}
        record.pc_labels = sorted(call.pc)
        if builtin:  # a page of a large result carries that result's labels; discovery, none
            kept = ledger.store.kept_labels.get(args.get("call_id", "")) if tool.name == READ_RESULT else None
            record.result_labels = list(kept or ())
        else:
            record.result_labels = sorted(tool.policy.labels or ())

    def _fallback(self, ledger: CallLedger) -> Labels:
        """The labels of a call the kernel did not label: the run's context and every label a tool declares."""
        declared = frozenset().union(*(t.policy.labels or () for t in self.toolset))
        return ledger.flow_context | declared

    async def _flow_permit(self, policy: FlowPolicy, tool: Tool, args: dict[str, Any],
                           record: ToolCallRecord, session_ask: FlowApprover | None = None) -> None:
        """Judge the call by the flow policy (``flow.evaluate``), record the decision, and raise
        ``policy_denied`` when it is refused (by the policy, or by the approver it asked: the
        policy's ``ask``, else the session's ``flow_approver``, else the runtime's ``ask`` hook)."""
        call = FlowCall(tool.name, args, {k: frozenset(v) for k, v in (record.labels or {}).items()},
                        frozenset(record.pc_labels or ()))
        verdict: FlowVerdict
        if policy.check is None:
            verdict, call = evaluate(policy, tool, call)
        else:  # the user's check may be slow: not on the loop
            verdict, call = await asyncio.get_running_loop().run_in_executor(
                self.loop.pool, evaluate, policy, tool, call)
        decision, reason = verdict
        if decision == "ask":
            approver = policy.ask or session_ask
            if approver is not None:
                answer = await self._decide(lambda _n, _a: approver(call), tool.name, args)
            elif self.ask is not None:
                answer = await self._decide(self.ask, tool.name, args)
            else:
                answer = "no approver is configured"
            if answer is True:
                record.flow = FlowDecision(decision="approved", reason=reason)
                return
            refused = answer if isinstance(answer, str) and answer else "the approver refused"
            record.flow = FlowDecision(decision="refused", reason=f"{reason}; approval refused: {refused}"[:1000])
        elif decision == "deny":
            record.flow = FlowDecision(decision="deny", reason=reason)
        else:
            record.flow = FlowDecision(decision=decision, reason=reason)
            return
        record.result_labels = []  # nothing of the tool comes back: the refusal is the host's own text
        raise ToolError("policy_denied", f"call to {tool.name!r} refused by the data-flow policy: "
                        f"{record.flow.reason}", retryable=False)

    def _route(self, tool: Tool) -> _Route:
        route = self._routes.get(id(tool))
        if route is None or not route.current(tool):
            route = self._routes[id(tool)] = _Route(self, tool)
        return route

    def arguments_for(self, tool: Tool, arguments: Any) -> dict[str, Any]:
        """``arguments`` checked and converted as a call of ``tool`` passes them to it (and keys
        them in the cache); raises ValueError as a call would be refused."""
        try:
            return check_arguments(self._route(tool).check, arguments, 0, self.limits.max_argument_bytes)[0]
        except ArgumentsRefused as exc:
            raise ValueError(exc.error.message) from None

    # -- execute: on a pool thread ---------------------------------------------------------------
    def _fast(self, name: str) -> bool:
        """Whether a plain tool's calls are run inline: none was slow lately, and none is running
        inline for longer than the budget now (that one has kept a thread from reading frames)."""
        if name in self._slow:
            return False
        since = self._inline_since.get(name)
        return since is None or time.perf_counter() - since < INLINE_BUDGET_S

    def _run_plain(self, call: _PlainCall) -> None:
        """A plain call, on a pool thread (``pooled``) or on the thread that read its frame (the
        inline lane): admit, run, record, reply. The same steps on either lane, so the same record."""
        ledger, record, route, reply, pooled = call.ledger, call.record, call.route, call.reply, call.pooled
        try:
            admitted = ledger.start(record, route.policy.max_calls)
            if admitted is None:  # its run ended (or it timed out) while it waited: never run it
                return
            fn, name, args = route.fn, route.name, call.args
            assert fn is not None
            if ledger.trace is not None:  # the call's span is current while the tool runs
                fn = ledger.trace.wrap(record, fn)
            elapsed = None
            if admitted:
                started = time.perf_counter()
                if not pooled:
                    self._inline_since[name] = started
                done = self._finish(ledger, record, lambda: (_jsonable(name, _invoke(fn, args)), False))
                elapsed = time.perf_counter() - started
            else:
                done = ledger.finish(record, error=_error(_max_calls_error(route.tool)))
            try:
                if done:
                    reply(self._payload(ledger, record))
            finally:
                if elapsed is not None:  # after the reply: the sandbox need not wait for this
                    self._timed(name, elapsed, pooled)
        finally:
            ledger.holds.pop(record.id, None)  # done: nothing is left to let go of at the run's end
            gate = ledger.store.gate
            if call.claim():
                gate.leave()
            elif pooled:  # it had expired: the expiry lent the pool a thread meanwhile, or kept the slot
                if gate.returned(call):
                    self.loop.pool.grow(-1)
                else:
                    gate.leave()

    def _timed(self, name: str, seconds: float, pooled: bool) -> None:
        """Note how long a plain call ran: a slow one sends its tool's next calls to the pool, a
        quick one on the pool brings them back inline."""
        if not pooled:
            self._inline_since.pop(name, None)
        if seconds > INLINE_BUDGET_S:
            self._slow.add(name)
        elif pooled:
            self._slow.discard(name)

    def _expire(self, call: _PlainCall) -> None:
        """A plain call past its timeout (the caller keeps the deadline): recorded as such, and let go."""
        ledger, record, route = call.ledger, call.record, call.route
        if ledger.finish(record, error=tool_timeout(route.name, route.timeout_s).error()):
            call.reply(self._payload(ledger, record))
        self._let_go(ledger, record, call, call.pooled)

    def _let_go(self, ledger: CallLedger, record: ToolCallRecord, once: _Once, pooled: bool) -> None:
        """A plain call given up while still running (hung): free the session's slot and, on the
        pool, lend it a thread meanwhile, while the session holds fewer than its cap of lent
        threads; past the cap the call keeps its slot (only that session's share shrinks) until its
        thread returns. A call still queued keeps its place; it will find its record ended and not
        run (and give its slot back then)."""
        if not ledger.begun(record):
            return
        gate = ledger.store.gate
        if not pooled:
            if once.claim():
                gate.leave()
            return
        lent = gate.lend_for(once, self.limits.max_lent_threads_per_session)
        if lent:
            gate.leave()
            self.loop.pool.grow(1)

    def release_abandoned(self, ledger: CallLedger) -> None:
        """After a run's records were ended: let go of its plain calls still running, as their
        expiry would have. The run's timers ended with it, so a call hung past the run's end would
        otherwise hold its slot for good."""
        for plain in list(ledger.holds.values()):
            if plain.unclaimed():
                self._let_go(ledger, plain.record, plain, plain.pooled)
        ledger.holds.clear()

    # -- execute: through the loop --------------------------------------------------------------
    async def _back(self, ledger: CallLedger, call: Accepted) -> None:
        """permit → admit → execute → record, for one accepted call (the loop's lane); never raises."""
        record, tool, args = call.record, call.route.tool, call.args
        try:
            await self._permit(tool, args, record, ledger.flow_ask)
            if not ledger.admit(tool.name, tool.policy.max_calls):
                raise _max_calls_error(tool)
            if tool.policy.cacheable:
                result, cached = await self._cached(ledger, record, tool, args)
            else:
                result, cached = await self._execute_with_retries(ledger, record, tool, args), False
            ledger.finish(record, result=result, cached=cached)
        except ToolError as exc:
            ledger.finish(record, error=_error(exc))
        except asyncio.CancelledError:  # the runtime is closing, or the caller gave the call up
            ledger.finish(record, error=CANCELLED.error())
        except BaseException as exc:  # a bug here or in a tool: data, not a host crash
            ledger.finish(record, error=ToolCallError(code="tool_exception", message=_describe(exc)))

    async def _cached(self, ledger: CallLedger, record: ToolCallRecord, tool: Tool,
                      args: dict[str, Any]) -> tuple[Any, bool]:
        """Answer from the session's cache; an equal call already running is waited for, not repeated."""
        store = ledger.store
        key = cache_key(tool.name, args)
        while True:
            if key in store.cache:
                return store.cache[key], True
            pending = store.inflight.get(key)
            if pending is None:
                break
            ok, value = await asyncio.shield(pending)
            if ok:
                return value, True
        future: asyncio.Future[tuple[bool, Any]] = asyncio.get_running_loop().create_future()
        store.inflight[key] = future
        outcome: tuple[bool, Any] = (False, None)  # a failed call is never cached
        try:
            result = await self._execute_with_retries(ledger, record, tool, args)
            store.cache[key] = result
            outcome = (True, result)
            return result, False
        finally:
            store.inflight.pop(key, None)
            if not future.done():
                future.set_result(outcome)

    async def _permit(self, tool: Tool, args: dict[str, Any], record: ToolCallRecord,
                      flow_ask: FlowApprover | None = None) -> None:
        if self.flow is not None:
            await self._flow_permit(self.flow, tool, args, record, flow_ask)
        policy = tool.policy
        verdicts: list[Any] = []
        if policy.permission == "deny":
            verdicts.append(policy.deny_reason or "this tool is not allowed")
        elif policy.permission == "ask":
            verdicts.append(await self._decide(self.ask, tool.name, args) if self.ask else
                            "this tool needs approval and no approver is configured")
        elif callable(policy.permission):
            verdicts.append(await self._decide(policy.permission, tool.name, args))
        if self.permission is not None:
            verdicts.append(await self._decide(self.permission, tool.name, args))
        for verdict in verdicts:
            if verdict is not True:
                reason = verdict if isinstance(verdict, str) and verdict else policy.deny_reason or "denied by policy"
                raise ToolError("permission_denied", f"call to {tool.name!r} denied: {reason}")

    async def _decide(self, hook: Callable[..., Any], name: str, args: dict[str, Any]) -> Any:
        """A hook's verdict. A sync hook runs on a worker thread: an approver may wait for a human."""
        mine = copy.deepcopy(args)  # the hook cannot change what the tool will get
        try:
            if inspect.iscoroutinefunction(hook) or inspect.iscoroutinefunction(type(hook).__call__):
                verdict = await _guarded(lambda: hook(name, mine))
            else:
                verdict = await asyncio.get_running_loop().run_in_executor(self.loop.pool, _invoke, hook, (name, mine))
            if inspect.isawaitable(verdict):
                verdict = await _guarded(lambda: verdict)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # a broken check denies rather than allows
            why = exc.message if isinstance(exc, ToolError) else _describe(exc)
            return f"the permission check failed: {why}"[:500]
        return verdict

    async def _execute_with_retries(self, ledger: CallLedger, record: ToolCallRecord, tool: Tool,
                                    args: dict[str, Any]) -> Any:
        """Run the tool; an idempotent tool's retryable failures are retried with backoff,
        waiting what the upstream asked for (``retry_after``) when it said."""
        policy = tool.policy
        attempts = 1 + (policy.max_retries if policy.idempotent else 0)
        for attempt in range(attempts):
            try:
                return await self._execute(ledger, record, tool, args)
            except ToolError as exc:
                delay = exc.retry_after if exc.retry_after is not None else _BACKOFF_S * 2**attempt
                if not exc.retryable or attempt == attempts - 1 or delay > _MAX_RETRY_WAIT_S or record.finished:
                    if attempt:
                        raise ToolError(exc.code, f"{exc.message} (after {attempt + 1} attempts)", exc.retryable,
                                        retry_after=exc.retry_after, data=exc.data) from None
                    raise
                await asyncio.sleep(max(delay, 0.0) * (1 + random.random() * 0.1))
        raise AssertionError("unreachable")

    async def _execute(self, ledger: CallLedger, record: ToolCallRecord, tool: Tool, args: dict[str, Any]) -> Any:
        if tool.fn is None:
            raise ToolError("not_implemented", f"tool {tool.name!r} has no implementation on this host: it is a "
                            "definition only (--tool-spec, a ToolSpec); give it one with a @tool function of that "
                            f"name (@tool(name={tool.name!r}) in the --tools file, or Tool(spec, fn=...))")
        if tool.policy.rate_limit_per_s:
            limiter = self._limiters.setdefault(tool.name, RateLimiter(tool.policy.rate_limit_per_s))
            await limiter.wait()
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.limits.max_concurrency)
        timeout = self.timeout_of(tool)
        async with self._slots:
            gate = ledger.store.gate
            await _enter(gate)
            kept = False  # the slot stays with a call abandoned past the session's cap of lent threads
            try:
                if not ledger.begin(record):  # its run ended while it waited: it never runs
                    raise NOT_STARTED.exception()
                fn, name = tool.fn, tool.name
                if ledger.trace is not None:  # the call's span is current while the tool runs
                    fn = ledger.trace.wrap(record, fn, tool.is_async)
                job: concurrent.futures.Future[Any] | None = None
                if tool.is_async:
                    work: asyncio.Future[Any] = asyncio.ensure_future(_guarded(lambda: fn(**args)))
                else:  # the value is made JSON on the pool thread too: within the timeout, off the loop
                    job = self.loop.pool.submit(lambda: _jsonable(name, _invoke(fn, args)))
                    work = asyncio.wrap_future(job)
                try:
                    done, _ = await asyncio.wait((work,), timeout=timeout)
                except asyncio.CancelledError:  # the runtime is closing, or the caller gave the call up
                    kept = self._abandon(work, job, gate)
                    raise
                if not done:
                    kept = self._abandon(work, job, gate)
                    raise tool_timeout(name, timeout).exception()
                result = work.result()
            finally:
                if not kept:
                    gate.leave()
        return result if job is not None else _jsonable(tool.name, result)

    def _abandon(self, work: asyncio.Future[Any], job: concurrent.futures.Future[Any] | None,
                 gate: SessionGate) -> bool:
        """A call past its timeout: nothing waits for it any more (an async tool that ignores its
        cancellation runs on unawaited); a sync one keeps its pool thread until it returns, so
        the pool is lent a thread meanwhile (as for a plain call's expiry) while the session is
        under its cap of lent threads. True when, past the cap, the call keeps the session's slot
        instead (given back when its thread returns)."""
        work.cancel()
        work.add_done_callback(_retrieved)
        if job is None:
            return False
        if not gate.lend(self.limits.max_lent_threads_per_session):
            job.add_done_callback(lambda _f: gate.leave())
            return True
        pool = self.loop.pool
        pool.grow(1)

        def returned(_f: concurrent.futures.Future[Any]) -> None:
            pool.grow(-1)
            gate.unlend()

        job.add_done_callback(returned)
        return False

    # -- record -----------------------------------------------------------------------------
    def _finish(self, ledger: CallLedger, record: ToolCallRecord, run: Callable[[], tuple[Any, bool]]) -> bool:
        """Run ``run`` and record its value, or its error mapped to a tool-call error."""
        try:
            result, cached = run()
        except ToolError as exc:
            return ledger.finish(record, error=_error(exc))
        except BaseException as exc:  # a tool's bug is data
            return ledger.finish(record, error=ToolCallError(code="tool_exception", message=_describe(exc)))
        return ledger.finish(record, result=result, cached=cached)

    def _closed_call(self, ledger: CallLedger, record: ToolCallRecord) -> bool:
        return ledger.finish(record, error=RUNTIME_CLOSED.error())

    def _run_builtin(self, ledger: CallLedger, call: Accepted) -> None:
        """The builtin lane: the host's own tool answers on the caller's thread."""
        tool, args = call.route.tool, call.args
        self._finish(ledger, call.record, lambda: (self._builtin(tool, ledger.store, args), False))

    # -- large results ---------------------------------------------------------------------------
    @property
    def page_chars(self) -> int:
        """The most characters one ``read_result`` page holds (its JSON stays within about the limit)."""
        return max(1, self.limits.max_result_chars // 2)

    def _builtin(self, tool: Tool, store: CallStore, args: dict[str, Any]) -> Any:
        """The host's own tools (read_result, search_tools, describe_tool): no user policy applies."""
        return tool.fn(**args) if tool.fn is not None else self._read_result(store, args)

    def _read_result(self, store: CallStore, args: dict[str, Any]) -> dict[str, Any]:
        call_id = args["call_id"]
        text = store.kept(call_id)
        if text is None:
            raise ToolError("not_found", f"no large result is kept for call {call_id!r} in this session "
                                         "(read_result pages only through results that came back truncated)")
        offset = args.get("offset", 0)
        limit = min(args.get("limit") or self.page_chars, self.page_chars)
        chunk = text[offset:offset + limit]
        end = offset + len(chunk)
        return {"call_id": call_id, "offset": offset, "text": chunk, "total_chars": len(text),
                "next_offset": end if end < len(text) else None}

    # -- the sandbox's view ------------------------------------------------------------------
    def _payload(self, ledger: CallLedger, record: ToolCallRecord) -> dict[str, Any]:
        payload = self._answer(ledger, record)
        if record.result_labels:  # an error's text may come from the tool too: it carries them as well
            payload["labels"] = record.result_labels
        return payload

    def _answer(self, ledger: CallLedger, record: ToolCallRecord) -> dict[str, Any]:
        if not record.ok:
            error = record.error or UNFINISHED.error()
            return {"ok": False, "error": error.model_dump()}
        if record.name in self.builtins and record.name not in self.toolset:
            return {"ok": True, "value": record.result}  # pages are sized to fit already
        try:
            text = oversized_json(record.result, self.limits.max_result_chars)
        except (ValueError, TypeError, RecursionError) as exc:  # e.g. circular: nothing the sandbox can use
            return {"ok": False, "error": {"code": "tool_exception", "message": f"unsendable result: {exc}",
                                           "retryable": False}}
        if text is None:
            return {"ok": True, "value": record.result}
        ledger.store.keep(record.id, text)
        if record.result_labels:  # its pages (read_result) carry them
            ledger.store.kept_labels[record.id] = record.result_labels
        return {"ok": True, "value": {
            "truncated": True, "call_id": record.id, "total_chars": len(text),
            "preview": text[: self.limits.max_result_chars // 2],
            "hint": f"the result is too large to return whole; page through its JSON text with "
                    f"read_result({record.id!r}, offset, limit)",
        }}
