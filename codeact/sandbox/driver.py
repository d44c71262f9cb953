"""Drives one kernel over its channel: handshake, setup, runs; enforces the protocol and limits.

Everything the kernel sends is hostile input: frames are size-capped by the FrameSocket and every
message is validated (``_outcome.py``'s checks); anything out of protocol kills the sandbox with a
clear reason. Which thread reads a run's frames, and when the reading passes to another, is
``_leader.py``'s.
"""

from __future__ import annotations

import _socket
import functools
import itertools
import json
import math
import os
import select
import socket
import struct
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from .._text import one_line
from ..errors import ProtocolViolation, SandboxError, SandboxUnavailable
from ..kernel.frames import FROM_KERNEL, problem
from ..kernel.protocol import (
    VERSION,
    FrameError,
    FrameSocket,
    OversizedFrame,
    PeerClosed,
    RefusedArguments,
    bindable,
    decode_bounded,
    encode,
    refused_call,
)
from ._leader import CALLER, LEAD_WAIT_S, CallDeadline, CallHandler, Run, guarded, watch
from ._outcome import CodeErrorFrame, DoneFrame, RunOutcome, call_problem
from .base import Sandbox

__all__ = ["CallDeadline", "CallHandler", "CodeErrorFrame", "DoneFrame", "KernelDriver", "OutputHandler", "RunOutcome"]

#: (stream name, text) → None: output of a streaming run, in the order the code wrote it per stream
#: (one call per stream per ``output`` frame: within a frame, the order between streams is lost). Must not block.
OutputHandler = Callable[[str, str], None]

#: How long one frame's write to the kernel may take in all before the host gives up on the kernel
#: and kills it (a kernel that stops reading must not hold a host thread).
SEND_TIMEOUT_S = 5.0
_INTERRUPT = encode({"type": "interrupt"})
_TIMEVAL = struct.Struct("@ll")
#: How long the host waits for the kernel's answer to ``reset`` or ``bind`` (it answers at once).
CONTROL_TIMEOUT_S = 30.0
_STRAY_CALL = {"ok": False, "error": {"code": "tool_exception", "retryable": False,
                                      "message": "no run is in progress: a tool call made between runs is refused"}}


class KernelDriver:
    """The host's side of one kernel's protocol."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox
        self._write_lock = threading.Lock()
        self.dead = False
        self._on_output: OutputHandler | None = None
        #: Whatever a SandboxPool's ``prepare`` step left here for the kernel's user (opaque here).
        self.prepared: Any = None
        # Run ids only need to differ within one kernel's life: a counter (os.urandom per run
        # was a syscall on the hot path), behind a random prefix so ids differ across kernels.
        self._id_prefix = os.urandom(4).hex() + "-"
        self._run_ids = itertools.count(1)
        self._rcv_timeout = -1.0  # the socket's SO_RCVTIMEO while it blocks (see _wait_at_most)
        #: When the run in progress is killed at the latest (no write waits past it), else None.
        self._kill_at: float | None = None
        #: Why a write gave up on the kernel (it stopped reading), for the run's reason.
        self._stalled: str | None = None
        #: An interrupt frame not sent yet: the write lock was taken (see :meth:`interrupt`).
        self._interrupt_due = False

    @functools.cached_property
    def _chan(self) -> FrameSocket:
        return self.sandbox.channel  # a property of the sandbox's: looked up once, not per frame

    def _send(self, message: dict[str, Any], seconds: float | None = None) -> None:
        self._write(encode(message), seconds)

    def _write(self, data: bytes, seconds: float | None = None) -> None:
        """Write one whole frame within ``seconds`` (:data:`SEND_TIMEOUT_S`; never past the kill
        time of the run in progress), or kill the sandbox and raise OSError: a frame half written
        must never stay on a live channel, and a kernel that stops reading must not hold a host
        thread. Waiting for another writer counts against the same deadline."""
        deadline = time.monotonic() + (SEND_TIMEOUT_S if seconds is None else seconds)
        if self._kill_at is not None:
            deadline = min(deadline, self._kill_at)
        if self.dead:
            raise BrokenPipeError("the sandbox is gone")
        if not self._write_lock.acquire(timeout=max(deadline - time.monotonic(), 0.0)):
            self._fault("another write to it did not finish in time")
            raise TimeoutError("the channel is held by a write that does not finish")
        gone = False
        try:
            if self.dead:
                raise BrokenPipeError("the sandbox is gone")
            _send_by(self._chan.sock, data, deadline)
        except _Unsent as exc:
            self._fault(str(exc))
            raise
        except OSError:
            gone, self.dead = not self.dead, True  # the peer closed its end: nothing more is written
            raise
        finally:
            self._write_lock.release()
            if self._interrupt_due:
                self._flush_interrupt()
            if gone:
                # Reaped, or killed if it lingers, outside the lock: a kernel that exited on its
                # own keeps its status (a kill first would report SIGKILL instead).
                self.sandbox.exit_status()

    def _fault(self, why: str) -> None:
        """The kernel stopped reading its channel: kill it, and say so as the run's reason."""
        if not self.dead:
            self._stalled = why
            self.kill()

    def reply(self, seq: int, payload: dict[str, Any]) -> None:
        """Answer a call; safe from any thread; a dead kernel is ignored. A payload that cannot be
        encoded is answered with an error: the calling code never waits for an answer that never comes.
        A write that cannot finish in time kills the sandbox (see :meth:`_write`)."""
        try:
            data = encode({"type": "result", "seq": seq, **payload})
        except (TypeError, ValueError, RecursionError) as exc:
            data = encode({"type": "result", "seq": seq, "ok": False, "error": {
                "code": "tool_exception", "retryable": False,
                "message": f"the host could not send this call's result: {one_line(str(exc), 300)}"}})
        try:
            self._write(data)
        except (OSError, ValueError):
            pass

    def handshake(self, stubs: str, timeout_s: float = 30.0) -> None:
        """Read the kernel's hello, install the tool stubs, wait until it is ready."""
        chan = self._chan
        chan.sock.settimeout(timeout_s)
        try:
            hello = _expect(chan.recv(), "hello")
            if hello["v"] != VERSION:
                raise ProtocolViolation(f"kernel speaks protocol v{hello['v']}, host v{VERSION}")
            self._send({"type": "setup", "stubs": stubs, "max_frame": chan.max_frame,
                        "spin_us": round(chan.spin_s * 1e6)}, timeout_s)
            ready = _expect(chan.recv(), "ready")
        except (FrameError, OSError) as exc:
            raise SandboxUnavailable(f"the kernel did not start properly: {one_line(str(exc), 300)}") from None
        if ready.get("error"):
            raise SandboxUnavailable(f"the tool stubs did not load in the sandbox: {ready['error']}")

    def reset(self, timeout_s: float = CONTROL_TIMEOUT_S) -> None:
        """Put the namespace back to its baseline (a ``reset`` frame: no code runs).

        Raises ProtocolViolation (the sandbox is killed) for an answer out of protocol, and
        SandboxError when the kernel died, did not answer in time (killed) or refused."""
        self._control("reset", encode({"type": "reset"}), "ready", timeout_s)

    def bind(self, values: Mapping[str, Any], timeout_s: float = CONTROL_TIMEOUT_S) -> None:
        """Set names in the namespace to JSON values (a ``bind`` frame: the kernel decodes JSON,
        nothing is evaluated). Raises ValueError for a name that cannot be bound and TypeError
        for a value that is not JSON, before anything is sent (the kernel is untouched); else as
        :meth:`reset`."""
        bad = [name for name in values if not bindable(name)]
        if bad:
            raise ValueError(f"cannot bind {', '.join(map(repr, bad[:5]))}: names are identifiers, "
                             "not keywords, not starting with '__'")
        try:
            data = encode({"type": "bind", "values": dict(values)})
        except (TypeError, ValueError, RecursionError) as exc:
            raise TypeError(_not_json(values, exc)) from None
        self._control("bind", data, "bound", timeout_s)

    def _control(self, kind: str, data: bytes, answer: str, timeout_s: float) -> None:
        """Send a reset/bind frame, wait for its one answer (refusing stray calls meanwhile)."""
        chan = self._chan
        deadline = time.monotonic() + timeout_s
        try:
            with self._write_lock:  # the socket's mode changes under the lock writers take
                chan.sock.settimeout(timeout_s)
            self._flush_interrupt()
            self._write(data, timeout_s)
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                chan.sock.settimeout(left)
                message = decode_bounded(chan.recv_body(deadline))
                if message.get("type") != "call":
                    break
                problem = call_problem(message)  # a thread the code left running calls a tool between runs
                if problem is not None:
                    raise FrameError(f"malformed call frame: {problem}")
                self.reply(message["seq"], _STRAY_CALL)
            reply = _expect(message, answer)
        except _Unsent:
            raise SandboxError(f"the kernel did not read {kind!r} within {timeout_s:g} s and was killed") from None
        except TimeoutError:
            self.kill()
            raise SandboxError(f"the kernel did not answer {kind!r} within {timeout_s:g} s and was killed") from None
        except (PeerClosed, OSError):
            raise SandboxError(self._died(interrupted=False).reason) from None
        except (FrameError, RecursionError, MemoryError) as exc:
            raise ProtocolViolation(self._violation(f"answer to {kind!r}: {one_line(str(exc), 300)}").reason) from None
        if reply.get("error"):
            raise SandboxError(f"the kernel refused {kind!r}: {reply['error']}")

    def run(self, code: str, on_call: CallHandler, timeout_s: float, *, output_cap: int,
            output_limit: int, grace_s: float, display: dict[str, int] | None = None,
            max_call_bytes: int | None = None, flow: dict[str, Any] | None = None,
            on_output: OutputHandler | None = None, after_send: Callable[[], None] | None = None) -> RunOutcome:
        """Run one cell; returns when the kernel reports, dies, or is killed at the deadline.

        A call frame larger than ``max_call_bytes`` reaches ``on_call`` unparsed, its arguments a
        :class:`RefusedArguments`. Nothing the kernel sends makes this raise: a frame the host
        cannot take (even one that exhausts recursion or memory) is a protocol violation.
        ``on_output``: the kernel streams the output as it is written (``output`` frames).
        ``display``: the rich outputs' caps (``display_cap``, ``display_limit``, ``display_count``).
        ``flow``: the run frame's ``flow`` (``{"context": [labels]}``: the kernel tracks labels in this cell).
        ``after_send``: called once the run frame is sent, while the kernel runs the code (work
        moved off the latency path; what it raises is ignored).

        This thread reads the kernel's frames until a call comes with work to run on the reading
        thread (see :data:`CallHandler`); from then on a leader thread reads frames and runs such
        work, and this thread keeps the run's deadline and hands the reading on to a new leader
        whenever the current one stays busy in a call (a hung tool never holds the run).
        """
        started = time.monotonic()
        self._on_output = on_output
        self._kill_at = started + timeout_s + grace_s
        run = Run(f"{self._id_prefix}{next(self._run_ids)}", on_call, started + timeout_s, grace_s, max_call_bytes)
        try:
            self._send({"type": "run", "id": run.id, "code": code, "output_cap": output_cap,
                        "output_limit": output_limit, **(display or {}), **self._streaming(),
                        **({"flow": flow} if flow is not None else {})})
        except OSError:
            outcome: RunOutcome | None = self._died(interrupted=False)
        except BaseException as exc:  # raised into mid-send: how much of the frame went is unknown
            self.kill()
            outcome = RunOutcome("killed", state_lost=True, reason="interrupted while the run was sent", raised=exc)
        else:
            try:
                if after_send is not None:
                    try:
                        after_send()
                    except Exception:  # never with the run in flight: the caller meets it again after the run
                        pass
                outcome = guarded(self, run, CALLER, None)
                if outcome is None:
                    outcome = watch(self, run)
            except BaseException as exc:  # e.g. Ctrl-C's KeyboardInterrupt in the caller's thread
                outcome = self._after_raised(run, exc)
        self._kill_at = None
        assert outcome is not None
        outcome.wall_ms = (time.monotonic() - started) * 1000
        return outcome

    def _after_raised(self, run: Run, raised: BaseException) -> RunOutcome:
        """The caller's thread was raised into mid-run: interrupt the code and wait the grace for the
        kernel's ``done`` (killed after it, as at a timeout), so that the kernel is idle, its
        namespace kept, when the caller records the run and raises ``raised`` again. Raised into a
        second time while it waits (a second Ctrl-C), the sandbox is killed at once."""
        with run.lock:
            run.interrupted = True
            run.deadline = min(run.deadline, time.monotonic() + run.grace_s)
        try:
            self.interrupt()
            outcome = guarded(self, run, CALLER, None) if run.cond is None else None
            if outcome is None:
                outcome = watch(self, run)
        except BaseException:
            self.kill()
            outcome = RunOutcome("killed", interrupted=True, state_lost=True,
                                 reason="interrupted again while the code was stopping; the sandbox was killed")
        outcome.raised = raised
        return outcome

    def _streaming(self) -> dict[str, Any]:
        return {"stream": True} if self._on_output is not None else {}

    def _recv(self, run_id: str, wait: float, max_call_bytes: int | None, until: float) -> dict[str, Any] | None:
        """The next frame, or None for streamed output (passed to ``on_output`` here);
        ``TimeoutError`` after ``wait`` seconds (at ``until``, even while a frame trickles in),
        ``FrameError`` for output out of protocol."""
        self._wait_at_most(wait)
        try:
            body = self._chan.recv_body(until)
        except BlockingIOError:  # SO_RCVTIMEO passed (a partial frame stays buffered)
            raise TimeoutError from None
        except OversizedFrame as exc:
            # Ordinary code passing a huge value to a tool: the call is refused (and recorded) like
            # any oversized call, its bytes skipped unread; any other frame that large is a violation.
            refused = refused_call(exc.head)
            if refused is None:
                raise
            if max_call_bytes is None or exc.size <= max_call_bytes:  # else the usual message says it
                refused["arguments"] = RefusedArguments(
                    f"the call's frame of {exc.size} bytes exceeds the channel's limit of "
                    f"{self._chan.max_frame} (max_frame_bytes); pass large data through files in the workspace")
            return refused
        message = decode_bounded(body, max_call_bytes)
        if message.get("type") != "output":
            return message
        if self._on_output is None:
            raise FrameError("an 'output' frame for a run that did not ask for streaming")
        issue = problem(message, _OUTPUT)
        if issue is not None:
            raise FrameError(f"malformed output frame: {one_line(issue, 300)}")
        if message["id"] != run_id:
            raise FrameError("an 'output' frame for a run that is not in progress")
        chunks = message["chunks"]
        if len(chunks) == 1:
            self._on_output(*chunks[0])
            return None
        # One call per stream per frame, whatever the code wrote: one-character writes alternating
        # stdout and stderr would otherwise be a call (an event, for a listener) per character.
        streams: dict[str, list[str]] = {}
        for name, text in chunks:
            streams.setdefault(name, []).append(text)
        for name, texts in streams.items():
            self._on_output(name, "".join(texts))
        return None

    def _wait_at_most(self, seconds: float) -> None:
        """Bound the next reads to ``seconds``: the socket blocks and the kernel's SO_RCVTIMEO ends
        a wait, so a read is one ``recv`` (a socket with a Python timeout polls before each one, a cost
        on every frame that an interleaved A/B showed). Waits of ``LEAD_WAIT_S`` or more wait that long and the
        caller looks again, so the timeout rarely changes (each change is a syscall)."""
        sock = self._chan.sock
        if sock.gettimeout() is not None:  # a handshake or a reset/bind used a Python timeout
            with self._write_lock:  # no write while the mode changes (see _send_by)
                sock.settimeout(None)
            self._flush_interrupt()
            self._rcv_timeout = -1.0
        seconds = min(max(seconds, 0.001), LEAD_WAIT_S)  # 0 would mean forever
        if seconds != self._rcv_timeout:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _timeval(seconds))
            self._rcv_timeout = seconds

    def interrupt(self) -> None:
        """Interrupt the running code (from any thread) with an ``interrupt`` frame. Never waits:
        a writer blocked on a kernel that stopped reading holds the write lock until its own
        deadline, and the kill after the grace must not wait behind it. When the lock is taken
        (a call's result being written), its holder sends the frame as it releases it.

        The backend's SIGINT is the fallback for a channel that takes no frame this instant, never
        sent beside the frame: the kernel answers the frame with a SIGINT of its own, ordered with
        its runs, while the engine's signal travels through the engine and may land after this
        run ended, interrupting the next one."""
        self._interrupt_due = True
        self._flush_interrupt()

    def _flush_interrupt(self) -> None:
        """Send the interrupt that is due if the write lock is free. The flag is set before the
        lock is tried and looked at after every release, so one side or the other sends it."""
        while self._interrupt_due and self._write_lock.acquire(blocking=False):
            sent = True
            try:
                due, self._interrupt_due = self._interrupt_due, False
                if due and not self.dead:  # a frame half taken is finished by the kill time at the latest
                    until = time.monotonic() + SEND_TIMEOUT_S
                    sent = _send_by(self._chan.sock, _INTERRUPT, min(until, self._kill_at or until), or_nothing=True)
            except _Unsent as exc:
                self._stalled = str(exc)
                self.kill()
            except OSError:
                sent = False
            finally:
                self._write_lock.release()
            if not sent:
                self.sandbox.interrupt()

    def kill(self) -> None:
        """Kill the sandbox (from any thread): the run in progress ends ``killed``."""
        self.dead = True
        self.sandbox.kill()

    def _violation(self, reason: str) -> RunOutcome:
        self.kill()
        return RunOutcome("killed", state_lost=True, reason=f"protocol violation: {reason}")

    def _died(self, interrupted: bool) -> RunOutcome:
        self.dead = True
        if self._stalled is not None:
            return RunOutcome("killed", interrupted=interrupted, state_lost=True,
                              reason=f"the kernel stopped reading its channel ({self._stalled}) and was killed")
        status = self.sandbox.exit_status()
        if status.oom_killed:
            return RunOutcome("memory", state_lost=True, reason="the sandbox ran out of memory and was killed")
        if interrupted:
            return RunOutcome("timeout", interrupted=True, state_lost=True,
                              reason="the sandbox died after the interrupt")
        how = f"signal {status.signal}" if status.signal else f"exit status {status.exit_code}"
        detail = f" ({status.detail})" if status.detail else ""
        return RunOutcome("killed", state_lost=True, reason=f"the sandbox process ended: {how}{detail}")


_OUTPUT = FROM_KERNEL["output"]


def _expect(message: dict[str, Any], kind: str) -> dict[str, Any]:
    """``message`` if it is a well-formed frame of type ``kind``; else FrameError."""
    if message.get("type") != kind:
        raise FrameError(f"expected a {kind!r} frame, got {str(message.get('type'))[:40]!r}")
    issue = problem(message, FROM_KERNEL[kind])
    if issue is not None:
        raise FrameError(f"malformed {kind} frame: {issue}")
    return message


class _Unsent(TimeoutError):
    """A frame the kernel did not take (all of it) by the write's deadline."""


def _send_by(sock: _socket.socket, data: bytes, deadline: float, *, or_nothing: bool = False) -> bool:
    """Write all of ``data`` by ``deadline`` (``time.monotonic()``): non-blocking sends, a poll
    between them, so the deadline bounds the whole frame, not each send. With ``or_nothing``,
    False when the socket takes none of it at once (the channel is left as it was). Raises
    :class:`_Unsent` at the deadline. Called with the write lock held (the socket's mode is stable)."""
    view = memoryview(data)
    fd = sock.fileno()
    # A socket with a Python timeout is O_NONBLOCK already, and its send() would poll first.
    raw = sock.gettimeout() is not None
    poller = None
    while True:
        try:
            sent = os.write(fd, view) if raw else sock.send(view, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            sent = 0
        view = view[sent:]
        if not view:
            return True
        if or_nothing and len(view) == len(data):
            return False
        left = deadline - time.monotonic()
        if left <= 0:
            part = "all of " if len(view) < len(data) else ""
            raise _Unsent(f"it did not read {part}a frame of {len(data)} bytes in time")
        if poller is None:
            poller = select.poll()
            poller.register(fd, select.POLLOUT)
        poller.poll(math.ceil(left * 1000))


def _timeval(seconds: float) -> bytes:
    whole = int(seconds)
    return _TIMEVAL.pack(whole, int((seconds - whole) * 1_000_000))


def _not_json(values: Mapping[str, Any], exc: BaseException) -> str:
    """Which bound value is not JSON, and why."""
    for name, value in values.items():
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as inner:
            return f"the value for {name!r} is not JSON ({one_line(str(inner), 300)}); bound values are JSON values"
    return f"the values are not JSON ({one_line(str(exc), 300)})"
