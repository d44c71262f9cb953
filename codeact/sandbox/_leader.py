"""Who reads a run's frames: the thread that started the run, until a call comes with work to run
on the reading thread (a plain tool's call, see :data:`CallDeadline`); from then on leader threads
read in turn and run such work, while the caller keeps the run's deadline (:func:`watch`) and hands
the reading on to a new leader whenever the current one stays busy in a call, so a hung tool never
holds the run. Exactly one thread reads the channel at a time.

What a leader's turn ends with is a :class:`Lead` (or the run's outcome, or a protocol
:class:`Violation`); the driver (``driver.py``) starts the run and owns the channel (:class:`Kernel`).
"""

from __future__ import annotations

import enum
import functools
import heapq
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from .._text import one_line
from ..kernel.protocol import FrameError, FrameSocket, PeerClosed
from ._outcome import DoneFrame, RunOutcome, call_problem, done_problem

__all__ = ["CALLER", "LEADERS", "LEAD_WAIT_S", "WATCH_S", "CallDeadline", "CallHandler", "Kernel", "Lead", "Run",
           "Violation", "busy", "guarded", "watch"]

#: (monotonic deadline, expire, work): a call's timeout, kept by the driver, which calls
#: ``expire()`` once the deadline passes (it wakes for it while it waits for frames anyway), and
#: runs ``work()``, when not None, on the thread that reads frames: a plain call runs there with no
#: hand-off, and when it stays busy longer than :data:`WATCH_S` another thread takes over the reading.
CallDeadline = tuple[float, Callable[[], None], Callable[[], None] | None]

#: (seq, tool name, arguments, frame size in bytes[, labels]) → None (answered, or answered later),
#: or the call's :data:`CallDeadline`. Apart from the deadline's ``work``, must not block: answer
#: with ``driver.reply``. A call frame with data-flow ``labels`` (checked, see ``sandbox.labels``)
#: passes them as a fifth argument; one without is called with four.
CallHandler = Callable[..., CallDeadline | None]


class Lead(enum.Enum):
    """How a thread's turn at reading a run's frames ended, when not with the run's outcome."""

    #: (one frame handled) read the next
    GO_ON = "go on"
    #: another thread ended the run or took over the reading, or the caller handed it on
    LEFT = "left"
    #: the sandbox closed the channel
    DIED = "died"
    #: a frame read by a thread that no longer leads the run (a frame meant for what comes next)
    STALE = "stale"


_GO_ON, _LEFT, _DIED, _STALE = Lead.GO_ON, Lead.LEFT, Lead.DIED, Lead.STALE  # compared per frame
_STALE_REASON = "a frame read by a thread that no longer leads the run"


class Violation:
    """A frame out of protocol (or one the host failed on): the run ends, the sandbox is killed."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


class Kernel(Protocol):
    """What the leaders use of the ``KernelDriver`` whose run they read."""

    @property
    def _chan(self) -> FrameSocket: ...

    def _recv(self, run_id: str, wait: float, max_call_bytes: int | None, until: float) -> dict[str, Any] | None: ...

    def _died(self, interrupted: bool) -> RunOutcome: ...

    def _violation(self, reason: str) -> RunOutcome: ...

    def interrupt(self) -> None: ...

    def kill(self) -> None: ...


#: How often the thread that started a run looks whether the leader reading its frames is still
#: busy in the call it was in at the last look (then a new leader takes over the reading).
WATCH_S = 0.005
#: The longest a leader waits for a frame before it looks whether the run is still its own.
LEAD_WAIT_S = 0.5
#: The leader number of the thread that started the run (it reads until the first call with work).
CALLER = 0


def _ignored_interrupt() -> RunOutcome:
    return RunOutcome("timeout", interrupted=True, state_lost=True,
                      reason="the code ignored the interrupt and was killed")


#: A call's (deadline, seq, expire, call to run on the reading thread or None).
Timer = tuple[float, int, Callable[[], None], Callable[[], None] | None]


class Run:
    """One run's state, shared by the thread that started it and the leader threads that read its
    frames in turn (``lock`` guards ``leader``, ``outcome``, ``timers`` and ``busy``'s reset)."""

    __slots__ = ("busy", "cond", "deadline", "grace_s", "id", "interrupted", "leader", "lock", "max_call_bytes",
                 "on_call", "outcome", "timers")

    def __init__(self, run_id: str, on_call: CallHandler, deadline: float, grace_s: float,
                 max_call_bytes: int | None) -> None:
        self.id = run_id
        self.on_call = on_call
        self.deadline = deadline
        self.grace_s = grace_s
        self.max_call_bytes = max_call_bytes
        self.lock = threading.Lock()
        #: Made at the hand-off to a leader (over ``lock``): the caller waits on it from then on.
        self.cond: threading.Condition | None = None
        #: (deadline, seq, expire, call) of the calls handed off: their timeouts, soonest first.
        self.timers: list[Timer] = []
        self.interrupted = False
        #: Which thread reads the frames: CALLER, then 1, 2, … as leaders take over; -1 once ended.
        self.leader = CALLER
        #: The call the leader is running now, if any (its timer joins ``timers`` at a take-over).
        self.busy: Timer | None = None
        self.outcome: RunOutcome | None = None


class Leaders:
    """Daemon threads that lead runs (read frames, run plain calls), kept a while for reuse."""

    IDLE_S = 60.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue[Callable[[], None]]] = []

    def start(self, fn: Callable[[], None]) -> None:
        with self._lock:
            inbox = self._idle.pop() if self._idle else None
        if inbox is None:
            inbox = queue.SimpleQueue()
            threading.Thread(target=self._serve, args=(inbox,), name="codeact-leader", daemon=True).start()
        inbox.put(fn)

    def _serve(self, inbox: queue.SimpleQueue[Callable[[], None]]) -> None:
        while True:
            try:
                fn = inbox.get(timeout=self.IDLE_S)
            except queue.Empty:
                with self._lock:
                    if any(q is inbox for q in self._idle):
                        self._idle.remove(inbox)
                        return
                continue  # handed work just now: it is on its way
            try:
                fn()
            except BaseException:  # fn reports its own outcome; the thread serves on
                pass
            del fn
            with self._lock:
                self._idle.append(inbox)


LEADERS = Leaders()


def guarded(k: Kernel, run: Run, me: int, work: Timer | None) -> RunOutcome | None:
    """Lead ``run`` (see :func:`_lead`); the outcome when this thread ended it, else None."""
    try:
        ended = _lead(k, run, me, work)
    except (RecursionError, MemoryError) as exc:
        ended = Violation(f"the host could not process a frame ({type(exc).__name__})")
    except Exception as exc:  # a bug in codeact: the channel's state is unknown, so the sandbox goes now
        ended = Violation(f"the host failed handling a frame: {type(exc).__name__}: {one_line(str(exc), 200)}")
    if ended is _LEFT:
        return None
    if isinstance(ended, RunOutcome):
        return ended
    if me != CALLER and (run.outcome is not None or run.leader != me):
        if ended is not _DIED:
            # This thread read a frame after its run had ended or passed to another leader:
            # a frame meant for whatever comes next (a bug: see busy). Never drop it
            # silently, so that its reader waits out its timeout: the sandbox goes now, and
            # that reader fails at once.
            k.kill()
        return None
    if ended is _DIED:
        return k._died(run.interrupted)
    return k._violation(ended.reason if isinstance(ended, Violation) else _STALE_REASON)


def _follow(k: Kernel, run: Run, me: int, work: Timer | None) -> None:
    """A leader thread's part: lead, then publish the outcome if this thread ended the run."""
    outcome = guarded(k, run, me, work)
    if outcome is not None:
        assert run.cond is not None
        with run.cond:
            if run.outcome is None:
                run.outcome = outcome
                run.leader = -1
                run.cond.notify_all()


def _lead(k: Kernel, run: Run, me: int, work: Timer | None) -> RunOutcome | Violation | Lead:
    """Read and handle frames while ``me`` leads ``run``. Returns the outcome of a ``done``
    frame, ``Lead.DIED`` or a protocol :class:`Violation` when this thread ended the run;
    ``Lead.LEFT`` when another thread ended it or took over, or when the caller handed the
    reading on; ``Lead.STALE`` for a frame read when the run was no longer this thread's."""
    if work is not None and not busy(run, me, work):
        return _LEFT
    timers = run.timers
    while True:
        with run.lock:
            if me != CALLER and (run.outcome is not None or run.leader != me):
                return _LEFT
            now = time.monotonic()
            due = []
            while timers and timers[0][0] <= now:
                due.append(heapq.heappop(timers)[2])
            wait = min(timers[0][0] - now, LEAD_WAIT_S) if timers else LEAD_WAIT_S
        for expire in due:
            expire()
        if me == CALLER:  # until it hands the reading on, the caller keeps the deadline here
            remaining = run.deadline - now
            if remaining <= 0:
                if run.interrupted:
                    k.kill()
                    return _ignored_interrupt()
                run.interrupted = True
                k.interrupt()
                run.deadline = time.monotonic() + run.grace_s
                continue
            wait = min(wait, remaining) if timers else remaining
        try:
            message = k._recv(run.id, wait, run.max_call_bytes, now + max(wait, 0.001))
        except TimeoutError:
            continue
        except PeerClosed:
            return _DIED
        except (FrameError, OSError) as exc:
            return Violation(f"unreadable frame: {one_line(str(exc), 300)}")
        if message is None:  # streamed output, passed on
            continue
        if me != CALLER and (run.outcome is not None or run.leader != me):
            return _STALE  # a frame meant for whatever comes next: see guarded
        ended = _frame(k, run, me, message)
        if ended is not _GO_ON:
            return ended


def _frame(k: Kernel, run: Run, me: int, message: dict[str, Any]) -> RunOutcome | Violation | Lead:
    """Handle one frame of ``run`` (see :func:`_lead`); ``Lead.GO_ON`` to read the next."""
    kind = message.get("type")
    if kind == "done":
        issue = done_problem(message)
        if issue is not None:
            return Violation(f"malformed done frame: {one_line(issue, 300)}")
        if message["id"] != run.id:
            return Violation("a 'done' frame for a run that is not in progress")
        return RunOutcome(message["termination"], done=DoneFrame.of(message), interrupted=run.interrupted)
    if kind != "call":
        return Violation(f"unexpected frame type {str(kind)[:40]!r}")
    issue = call_problem(message)
    if issue is not None:
        return Violation(f"malformed call frame: {issue}")
    seq = message["seq"]
    labels = message.get("labels")
    handled = (run.on_call(seq, message["name"], message.get("arguments"), k._chan.last_size) if labels is None
               else run.on_call(seq, message["name"], message.get("arguments"), k._chan.last_size, labels))
    if handled is None:
        return _GO_ON
    timer = (handled[0], seq, handled[1], handled[2])
    if handled[2] is None:
        with run.lock:
            heapq.heappush(run.timers, timer)
        return _GO_ON
    if me == CALLER:  # the first call to run here: a leader takes the reading, the caller the watch
        run.leader = 1
        run.busy = timer
        run.cond = threading.Condition(run.lock)
        LEADERS.start(functools.partial(_follow, k, run, 1, timer))
        return _LEFT
    return _GO_ON if busy(run, me, timer) else _LEFT


def busy(run: Run, me: int, timer: Timer) -> bool:
    """Run the call on this leader thread; whether this thread still leads afterwards (the watch
    hands the reading on to a new leader when a call keeps it busy)."""
    with run.lock:
        # Only the leader marks the run busy: a leader that started late, after the watch
        # had already handed its call on, must not make the watch take the reader of the
        # moment for a busy one and start a second reader beside it (which then eats the
        # answer to whatever comes next: the next run's frames, a reset, a bind).
        if run.leader == me:
            run.busy = timer
    call = timer[3]
    assert call is not None
    try:
        call()
    finally:
        with run.lock:
            still = run.leader == me
            if still:
                run.busy = None
    return still


def watch(k: Kernel, run: Run) -> RunOutcome:
    """The caller's part once a leader reads: keep the deadline (interrupt, then kill after the
    grace), and start a new leader when the current one was busy in the same call at two checks
    in a row (a call busy longer than :data:`WATCH_S` to 2× that)."""
    seen: object = None
    cond = run.cond
    assert cond is not None
    while True:
        with cond:
            if run.outcome is not None:
                return run.outcome
            now = time.monotonic()
            expired = now >= run.deadline
            killed = None
            if expired and run.interrupted:
                killed = run.outcome = _ignored_interrupt()
                run.leader = -1
            elif expired:
                run.interrupted = True
                run.deadline = now + run.grace_s
            elif run.busy is not None and run.busy is seen:
                heapq.heappush(run.timers, run.busy)  # its timeout is the next leader's to keep
                run.leader += 1
                run.busy = seen = None
                LEADERS.start(functools.partial(_follow, k, run, run.leader, None))
                continue
            else:
                seen = run.busy
                cond.wait(min(WATCH_S, run.deadline - now))
                continue
        if killed is not None:
            k.kill()
            return killed
        k.interrupt()  # expired: the grace starts
