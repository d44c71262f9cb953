"""The kernel: runs the model's code inside the sandbox. Standard library only.

One process per session, one persistent namespace. The main thread executes cells; fd 1 and 2
are pipes drained into capped buffers, so nothing the code writes (print, os.write, a subprocess)
can reach the channel, which is a separate socket. Frames are declared in ``frames``.

Who reads the channel: one thread at a time holds the right to (``_Reading``). Between runs the
main thread reads its next request itself; a thread that made a tool call reads until its own
result arrives (handing the results of other threads' calls to them); the reader thread reads only
when nobody else does and someone must: async calls are waiting, or a run's code has computed for
a while without calling (an interrupt may come). So a warm run or a tool call costs no hand-off
between threads in the kernel. A thread wanting the channel from the reader thread (or the main
thread wanting it back from a caller left over from an ended run) wakes it through a pipe.
"""

from __future__ import annotations

import _ast as ast  # the parser's node types; the ast module itself costs an idle kernel memory
import _signal
import codecs
import collections
import fcntl
import json
import linecache
import os
import re
import select
import signal
import socket
import struct
import sys
import termios
import threading
import time
import types
from typing import Any

try:  # flat in the sandbox image; a package when imported on the host
    from . import client, frames, lazy_stubs, protocol, rich_output, running
except ImportError:
    import client  # type: ignore[no-redef]
    import frames  # type: ignore[no-redef]
    import lazy_stubs  # type: ignore[no-redef]
    import protocol  # type: ignore[no-redef]
    import rich_output  # type: ignore[no-redef]
    import running  # type: ignore[no-redef]

DEFAULT_SOCKET = "/run/codeact/channel.sock"
_MAX_MESSAGE = 8000
_MAX_TRACEBACK = 20000
_MAX_VALUE = 256 * 1024
_LIVE_PERIOD = 0.05  # streamed output is sent at most this often (seconds) ...
_LIVE_FRAME_CHARS = 256 * 1024  # ... in frames of at most this many characters per chunk
#: A run's call lanes are reported up to this many calls (past it: not at all).
_MAX_LANES = 100_000
#: At most this many new names (each at most ``_MAX_NAME_CHARS``) in a ``done`` frame; more: "unknown".
_MAX_NAMES = 5000
_MAX_NAME_CHARS = 200
_CHUNK_BYTES = 32  # what a chunk costs in an output frame beyond its text: ["stdout","…"],
#: While a run's code computes and no caller reads the channel, the reader thread takes it over
#: after this long (to see an interrupt frame; Docker's SIGINT needs no reader); shorter runs and
#: calls never wake it. It also wakes on this period while a run is in progress: each wake costs
#: the main thread a GIL hand-off, so a period much shorter than this one slowed warm runs in an
#: interleaved A/B (the figures are in its commit); this one does not.
_READER_AFTER_S = 0.02
#: After a run, the reader thread keeps waking on that period this long (so back-to-back runs
#: need not wake it each), then sleeps until the next run.
_READER_LINGER_S = 0.05
assert set(frames.TERMINATIONS) == {"completed", "error", "output_limit"}


class _OutputLimit(BaseException):
    """Raised in the code when it has written more than the hard output limit."""


class _FinalAnswer(BaseException):
    """Raised by ``final_answer(x)`` to end the cell successfully with an answer."""


class _Timeout(BaseException):
    pass


class _Stream:
    """One captured stream: keeps the first ``cap`` characters, counts the rest."""

    def __init__(self, cap: int) -> None:
        self.parts: list[str] = []
        self.kept = 0
        self.cap = cap
        self.truncated = False

    def add(self, text: str) -> str:
        """Keep what fits; return the kept part."""
        room = self.cap - self.kept
        if len(text) > room:
            self.truncated = True
            text = text[: max(room, 0)]
        if text:
            self.parts.append(text)
            self.kept += len(text)
        return text


class _Output:
    """Both captured streams and the hard limit on what a cell may write in all."""

    def __init__(self, write_fds: dict[str, int]) -> None:
        self.lock = threading.Lock()
        self.read_fds = write_fds
        self.decoders = {name: codecs.getincrementaldecoder("utf-8")("replace") for name in write_fds}
        #: (stream, text) kept but not yet streamed to the host; None unless the run asked for events.
        self.live: list[tuple[str, str]] | None = None
        #: The run's label tracking (``flow.Flow``), told of output that no tracked print wrote.
        self.flow: Any = None
        self.reset(1 << 20, 128 << 20)

    def reset(self, cap: int, hard_limit: int) -> None:
        with self.lock:
            self.streams = {name: _Stream(cap) for name in self.read_fds}
            self.total = 0
            self.hard_limit = hard_limit
            self.limit_hit = False

    def add(self, name: str, text: str) -> bool:
        """Append; False once the hard limit is passed."""
        with self.lock:
            self.total += len(text)
            if self.total > self.hard_limit:
                self.limit_hit = True
            kept = self.streams[name].add(text)
            if self.live is not None and kept:
                self.live.append((name, kept))
            return not self.limit_hit

    def pump(self, name: str, fd: int) -> bool:
        """Move what is readable on ``fd`` into the stream (caller holds ``fd_lock``); False at EOF
        (the code closed every write end, e.g. ``os.close(1)``)."""
        try:
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            return True
        if data:
            self.add(name, self.decoders[name].decode(data))
            if self.flow is not None:
                self.flow.untracked.add(name)
        return bool(data)


class _Writer:
    """``sys.stdout``/``sys.stderr`` during a cell: in memory, capped, no syscalls."""

    encoding = "utf-8"
    errors = "replace"

    def __init__(self, output: _Output, name: str, fd: int) -> None:
        self._output, self._name, self._fd = output, name, fd
        self.buffer = _BinaryWriter(self)

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        flow = self._output.flow
        if flow is not None and not flow.printing:
            flow.untracked.add(self._name)
        if not self._output.add(self._name, text):
            raise _OutputLimit("output limit exceeded")
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self._fd

    def writable(self) -> bool:
        return True


class _BinaryWriter:
    def __init__(self, text: _Writer) -> None:
        self._text = text

    def write(self, data: bytes) -> int:
        self._text.write(bytes(data).decode("utf-8", "replace"))
        return len(data)

    def flush(self) -> None:
        pass


def _capture_fds() -> dict[str, int]:
    """Point fd 1 and 2 at pipes; return the read ends."""
    read_fds = {}
    for fd, name in ((1, "stdout"), (2, "stderr")):
        r, w = os.pipe()
        os.dup2(w, fd)
        os.close(w)
        os.set_blocking(r, False)
        read_fds[name] = r
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    return read_fds


def _pending_bytes(fd: int) -> int:
    buf = fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0")
    return int(struct.unpack("i", buf)[0])


def _safe_text(fn: Any, obj: Any, limit: int) -> str:
    """str()/repr() of a hostile object: bounded in time and size, never raises."""

    def alarm(signum: int, frame: Any) -> None:
        raise _Timeout

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, 1.0)
    try:
        text = fn(obj)
        if not isinstance(text, str):
            text = f"<{fn.__name__}() returned {type(text).__name__}>"
    except _Timeout:
        text = f"<{fn.__name__}() did not return within 1 s>"
    except BaseException as exc:
        text = f"<{fn.__name__}() raised {type(exc).__name__}>"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    if len(text) > limit:
        text = f"{text[:limit]}… [{len(text) - limit} more characters]"
    return text


#: How a top-level statement that is certainly not an expression starts: a keyword of a simple or
#: compound statement, a decorator, or ``name =`` / ``a.b +=`` (not ``==``). Conservative: any
#: other start (a call, ``x[0] = …``, ``a, b = …``) takes the AST path, which decides exactly.
_NOT_EXPRESSION = re.compile(
    r"(?:(?:import|from|def|class|for|while|if|with|try|del|pass|return|raise|global|nonlocal|assert|async"
    r"|break|continue)\b|@|[A-Za-z_][\w.]*[ \t]*(?:[-+*/%&|^@]|//|\*\*|>>|<<)?=(?!=))")
_POP_TOP: int | None = None


def _parse(source: str, filename: str) -> ast.Module:
    """``ast.parse(source, filename)`` without the ast module."""
    tree = compile(source, filename, "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    assert isinstance(tree, ast.Module)
    return tree


def _statements_only(source: str, filename: str) -> types.CodeType | None:
    """``source`` compiled as it is, when its last top-level statement is certainly not an
    expression (so the cell has no value); None when it may be one (the caller parses the tree).
    Raises SyntaxError as ``ast.parse`` would."""
    global _POP_TOP
    code = compile(source, filename, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
    if _POP_TOP is None:
        import opcode

        _POP_TOP = opcode.opmap["POP_TOP"]
    raw = code.co_code
    if len(raw) >= 6 and raw[-6] == _POP_TOP:  # a value dropped just before the implicit return
        return None
    # The implicit ``return None`` carries the line where the last top-level statement starts.
    last = collections.deque(code.co_lines(), maxlen=1)
    line = last[0][2] if last else None
    if line is None:
        return None
    lines = source.split("\n")
    if line > len(lines) or ";" in "".join(lines[line - 1:]):
        return None
    return code if _NOT_EXPRESSION.match(lines[line - 1]) else None


def _encode_value(value: Any) -> Any:
    """JSON if it is JSON (and not huge), else a bounded repr."""
    if value is None:
        return None
    try:
        try:
            if len(json.dumps(value, allow_nan=False)) <= _MAX_VALUE:
                return value
        except TypeError:  # not JSON as it is: a set, a numpy number, a date ... has a JSON form
            converted = rich_output.json_value(value)
            if len(json.dumps(converted, allow_nan=False)) <= _MAX_VALUE:
                return converted
    except Exception:
        pass
    except BaseException:
        return _safe_text(repr, value, _MAX_VALUE)
    return _safe_text(repr, value, _MAX_VALUE)


def _fitted(done: dict[str, Any], limit: int) -> dict[str, Any]:
    """A ``done`` frame cut to fit the host's frame limit (``max_frame_bytes`` set low): the output
    first (marked truncated), then the value, the traceback and the final answer, each kept to a
    size that fits whatever its characters encode to (at most 6 bytes each, as ``\\u`` escapes)."""
    done = dict(done)
    share = limit // 36  # characters of each of four fields: two thirds of the limit at worst
    for name in ("stdout", "stderr"):
        text = done.get(name) or ""
        if len(text) > share:
            done[name], done[f"{name}_truncated"] = text[:share], True
    if len(protocol.encode(done)) - 4 <= limit:
        return done
    if "value" in done:
        done["value"] = f"<the value did not fit the channel's frame limit of {limit} bytes>"
    if done.get("final") is not None:
        done["final"] = {"value": f"<the final answer did not fit the channel's frame limit of {limit} bytes>"}
    if done.get("outputs"):
        done["outputs"] = [{"text/plain": f"<the rich outputs did not fit the channel's frame limit of {limit} bytes>"}]
    if done.get("names"):
        done["names"] = None  # the host then treats the namespace as unknown
    if done.get("error"):
        error = dict(done["error"])
        error["message"] = str(error.get("message", ""))[:share]
        error["traceback"] = str(error.get("traceback", ""))[:share]
        done["error"] = error
    return done


class Kernel:
    """Executes cells in one namespace; talks to the host through a FrameSocket."""

    def __init__(self, channel: protocol.FrameSocket, policy: str) -> None:
        self.channel = channel
        self.policy = policy
        #: The largest frame the host reads (``setup`` says; a larger ``done`` is cut to fit).
        self.max_frame = protocol.DEFAULT_MAX_FRAME
        self.write_lock = threading.Lock()
        self.fd_lock = threading.Lock()
        self.runs: collections.deque[dict[str, Any]] = collections.deque()
        self.running = False
        self.cell_count = 0
        self._loop: Any = None  # an asyncio loop, made (and asyncio imported) on first top-level await
        self.reading = _Reading(self)
        self.on_sigint = self.reading.on_sigint  # one bound method, so the handler's identity can be checked
        self.client = client.ToolClient(self.send, wait=self.reading.await_reply, on_async=self.reading.want_reader)
        self.read_fds = _capture_fds()
        self.output = _Output(self.read_fds)
        self.writers = _Writer(self.output, "stdout", 1), _Writer(self.output, "stderr", 2)
        self.pending_output = select.poll()  # one poll(0) tells whether fd 1 or 2 has unread bytes
        for fd in self.read_fds.values():
            self.pending_output.register(fd, select.POLLIN)
        self.final: list[Any] = []
        self.rich = rich_output.Outputs()
        #: The lane of each call this run sent, in sending order (see ``_lane``); None between runs.
        self.lanes: list[str] | None = None
        self.left_running = running.LeftRunning(set())  # its own threads are known once it serves
        self.live_lock = threading.Lock()  # one flush at a time, so output frames keep their order
        self.live_id: str | None = None
        self.live_flushed = 0.0
        self.namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": __builtins__}
        #: The namespace as setup left it (taken at the first frame after setup): what ``reset`` restores.
        self.baseline: dict[str, Any] | None = None
        self._compile: lazy_stubs.Compile = self._compile_plain
        #: Label tracking (``flow.Flow``), made at the first run with ``flow``; None before.
        self.flow: Any = None
        self._flow_key = 0
        self.stub_scope: dict[str, Any] | None = None
        self.tool_names: list[str] = []  # for the hint of a NameError
        #: The names the host was told of (in ``done``'s ``names``) or knows from the start.
        self.reported: set[Any] = set(self.namespace)
        if policy == "restricted":
            import _restricted

            self.namespace = _restricted.namespace_globals()
            self._compile = _restricted.compile_cell
        self._install_helpers()

    def _install_helpers(self) -> None:
        def final_answer(answer: Any) -> None:
            """End this code action and give ``answer`` as the final answer."""
            if self.flow is not None and self.output.flow is not None:
                answer = self.flow.pcv(answer)
            self.final[:] = [answer]
            raise _FinalAnswer

        self.baseline_helpers = {"final_answer": final_answer}
        self.namespace.update(
            __codeact_call__=self.client.call,
            ToolError=client.ToolError,
            parallel=client.parallel,
            final_answer=final_answer,
        )

    # -- channel -------------------------------------------------------------------------------
    def send(self, message: dict[str, Any]) -> None:
        if self.live_id is not None and message.get("type") == "call":
            self._flush_live()  # what the code printed before the call reaches the host before it
        data = protocol.encode(message)
        if len(data) - 4 > self.max_frame and message.get("type") == "done":  # the host would refuse it
            data = protocol.encode(_fitted(message, self.max_frame))
        with self.write_lock:
            self.channel.sock.sendall(data)
            if self.lanes is not None and message.get("type") == "call":
                self.lanes.append(self._lane())

    def _lane(self) -> str:
        """``m``: a call of the main thread's own code, which waits for it (so these are ordered);
        ``c``: one of a thread, ``parallel`` or an event loop (concurrent, in no fixed order)."""
        if threading.get_ident() != self.reading.main:
            return "c"
        aio = sys.modules.get("asyncio")
        return "c" if aio is not None and aio.events._get_running_loop() is not None else "m"

    def dispatch(self, message: dict[str, Any]) -> None:
        """Act on one frame from the host, whichever thread read it."""
        kind = message["type"]
        if kind == "result":
            self.client.deliver(message)
            self.reading.wake_waiters()
        elif kind in ("run", "setup", "reset", "bind"):
            self.runs.append(message)
            self.reading.wake_waiters()
        elif kind == "interrupt":
            if self.running:
                os.kill(os.getpid(), signal.SIGINT)

    def _drainer(self) -> None:
        names = {fd: name for name, fd in self.read_fds.items()}
        # poll, not select: gVisor's seccomp filter refuses select() (EPERM), and this thread died.
        poller = select.poll()
        for fd in names:
            poller.register(fd, select.POLLIN)
        while True:
            streaming = self.live_id is not None
            ready = poller.poll((_LIVE_PERIOD if streaming else 1.0) * 1000)
            for fd, _events in ready:
                with self.fd_lock:
                    if not self.output.pump(names[fd], fd):
                        poller.unregister(fd)  # at EOF poll would report it readable forever
            if streaming and time.monotonic() - self.live_flushed >= _LIVE_PERIOD:
                self._flush_live()
            if self.output.limit_hit and self.running:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)

    def _flush_live(self, last: bool = False) -> None:
        """Send the output kept since the last flush as ``output`` frames (streaming runs only)."""
        with self.live_lock:
            run_id = self.live_id
            with self.output.lock:
                chunks = self.output.live or []
                self.output.live = None if last else []
            if last:
                self.live_id = None
            self.live_flushed = time.monotonic()
            # Every frame fits the host's limits whatever its characters encode to: at most 6 bytes
            # a character (a \u escape) and _CHUNK_BYTES a chunk for its brackets and stream name,
            # and fewer chunks than the frame schema's MAX_CHUNKS.
            room = self.max_frame - 1024
            per_chunk = min(_LIVE_FRAME_CHARS, room // 6 - _CHUNK_BYTES)
            merged: list[list[str]] = []
            for name, text in chunks:  # coalesce neighbours of one stream; bound each chunk
                if merged and merged[-1][0] == name and len(merged[-1][1]) + len(text) <= per_chunk:
                    merged[-1][1] += text
                else:
                    merged.extend([name, text[i:i + per_chunk]] for i in range(0, len(text), per_chunk))
            batches: list[list[list[str]]] = []
            size = room
            for chunk in merged:  # as few frames as fit
                cost = 6 * len(chunk[1]) + _CHUNK_BYTES
                if size + cost > room or len(batches[-1]) >= frames.MAX_CHUNKS - 1:
                    batches.append([])
                    size = 0
                batches[-1].append(chunk)
                size += cost
            if run_id is not None:
                try:
                    for frame in batches:
                        data = protocol.encode({"type": "output", "id": run_id, "chunks": frame})
                        with self.write_lock:
                            self.channel.sock.sendall(data)
                except OSError:
                    pass

    def _drain_now(self) -> None:
        # Under fd_lock even when nothing is unread: the drainer may hold bytes it has read but not
        # yet added, and the cell's report must wait for them (they went missing under load).
        with self.fd_lock:
            if not self.pending_output.poll(0):  # nothing unread (the usual case): one syscall, not one per fd
                return
            for name, fd in self.read_fds.items():
                while _pending_bytes(fd) > 0:
                    self.output.pump(name, fd)

    # -- cells ---------------------------------------------------------------------------------
    def _compile_plain(
        self, tree: ast.Module, filename: str
    ) -> tuple[types.CodeType | None, types.CodeType | None]:
        flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        body, last = tree.body, None
        if body and isinstance(body[-1], ast.Expr):
            body, last = body[:-1], body[-1]
        assert last is None or isinstance(last, ast.Expr)
        # dont_inherit: a cell must not inherit this module's ``from __future__ import annotations``
        exec_code = compile(ast.Module(body=body, type_ignores=[]), filename, "exec", flags=flags, dont_inherit=True)
        eval_code = None
        if last is not None:
            eval_code = compile(ast.Expression(body=last.value), filename, "eval", flags=flags, dont_inherit=True)
        return exec_code, eval_code

    def _evaluate(self, code: types.CodeType) -> Any:
        result = eval(code, self.namespace)
        if code.co_flags & 0x80:  # CO_COROUTINE: the cell used top-level await
            if self._loop is None:
                import asyncio

                self._loop = asyncio.new_event_loop()
            result = self._loop.run_until_complete(result)
        return result

    def _execute(self, source: str, filename: str) -> tuple[Any, BaseException | None]:
        try:
            # A cell that certainly does not end with an expression compiles straight from its
            # source when nothing needs the tree (no policy, no lazy stubs): parsing to Python
            # AST objects and compiling those is a visible share of a warm run.
            tracked = self.output.flow is not None
            exec_code = _statements_only(source, filename) if self._compile == self._compile_plain and not tracked \
                else None
            eval_code = None
            if tracked:
                exec_code, eval_code = self._compile_flow(_parse(source, filename), filename)
            elif exec_code is None:
                exec_code, eval_code = self._compile(_parse(source, filename), filename)
            if exec_code is not None:
                self._evaluate(exec_code)
            value = self._evaluate(eval_code) if eval_code is not None else None
            return value, None
        except BaseException as exc:
            return None, exc

    def _compile_flow(
        self, tree: ast.Module, filename: str
    ) -> tuple[types.CodeType | None, types.CodeType | None]:
        """The cell instrumented for label tracking (``_flow_rewrite``), then compiled as usual."""
        try:
            from ._flow_rewrite import instrument
        except ImportError:
            from _flow_rewrite import instrument  # type: ignore[no-redef]
        if self.policy == "restricted":  # its names (``__flow__``) are what RestrictedPython refuses
            raise RuntimeError("data-flow tracking is not available under the restricted policy; nothing ran")
        codes = self._compile(instrument(tree, self._flow_key), filename)
        for code in codes:
            if code is not None:
                self.flow.register(code)
        return codes

    def _start_flow(self, request: dict[str, Any]) -> None:
        """A run with ``flow``: tracking on for it (the state persists across the session's runs)."""
        spec = request.get("flow")
        if spec is None:
            self.output.flow = self.client.flow = None
            return
        if self.flow is None:
            try:
                from . import flow as flow_module
            except ImportError:
                import flow as flow_module  # type: ignore[no-redef]
            self.flow = flow_module.Flow(self.reading.main)
            self.flow.stub_scope = self.stub_scope
            self.flow.transparent.update((self.client.call, self.baseline_helpers["final_answer"]))
            self.flow.sinks = {self.rich.display: "outputs"}
            self.reported.update(("__flow__", "__flowc__", "__flowf__"))
        context = spec.get("context") if isinstance(spec, dict) else None
        self._flow_key = self.flow.begin(context if isinstance(context, list) else [])
        self.namespace["__flow__"] = self.flow
        self.output.flow = self.client.flow = self.flow

    def _describe(self, exc: BaseException, filename: str) -> dict[str, Any]:
        import traceback  # only once a cell failed: an idle kernel need not hold it

        name = type(exc).__name__[:200]
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.startswith("<cell-")]
        here = [f for f in frames if f.filename == filename]
        lineno = here[-1].lineno if here else None
        if isinstance(exc, SyntaxError) and exc.filename == filename:
            lineno = exc.lineno
        lineno = getattr(exc, "lineno", None) if lineno is None and name == "PolicyViolation" else lineno
        if isinstance(exc, SystemExit):
            message = f"the code called exit({_safe_text(repr, exc.code, 200)})"
        elif isinstance(exc, KeyboardInterrupt):
            message = "the run was interrupted"
        else:
            message = _safe_text(str, exc, _MAX_MESSAGE) + lazy_stubs.name_hint(exc, self.tool_names)
        lines = ["Traceback (most recent call last):\n", *traceback.format_list(frames)]
        if isinstance(exc, SyntaxError) and exc.lineno is not None:
            text = (exc.text or "").rstrip("\n")
            lines.append(f'  File "{filename}", line {exc.lineno}\n    {text.strip()}\n')
        lines.append(f"{name}: {message}" if message else name)
        tb = "".join(lines)
        if len(tb) > _MAX_TRACEBACK:
            tb = tb[: _MAX_TRACEBACK // 2] + "\n…\n" + tb[-_MAX_TRACEBACK // 2 :]
        return {"type": name, "message": message, "lineno": lineno, "traceback": tb}

    def run_cell(self, request: dict[str, Any]) -> dict[str, Any]:
        source = str(request.get("code", ""))
        self.cell_count += 1
        filename = f"<cell-{self.cell_count}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        self.output.reset(int(request.get("output_cap", 1 << 20)), int(request.get("output_limit", 128 << 20)))
        if request.get("stream"):  # the host listens for events: stream output as it is written
            with self.live_lock:
                self.output.live, self.live_id = [], str(request.get("id"))
        self.final.clear()
        self._start_flow(request)
        saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = self.writers
        self.lanes = []
        self.reading.run_started()
        try:
            value, exc = self._execute(source, filename)
        finally:
            self.running = False  # from here a SIGINT is ignored (see _Reading.on_sigint)
            self.reading.pending_sigint = False
            sys.stdout, sys.stderr = saved
            # The code may have replaced the handler (only the main thread can, so only during a
            # run): taking it back here covers the time between runs and the next run alike.
            self._own_sigint()
        return self._finish(request, filename, value, exc)

    def _own_sigint(self) -> None:
        """Make sure the kernel's handler is SIGINT's (the code may have replaced it); a C-level
        check, far cheaper than a ``signal.signal`` per run."""
        if _signal.getsignal(signal.SIGINT) is not self.on_sigint:
            signal.signal(signal.SIGINT, self.on_sigint)

    def _finish(
        self, request: dict[str, Any], filename: str, value: Any, exc: BaseException | None
    ) -> dict[str, Any]:
        self._drain_now()
        if self.live_id is not None:
            self._flush_live(last=True)
        done: dict[str, Any] = {"type": "done", "id": request.get("id"), "termination": "completed"}
        if isinstance(exc, _FinalAnswer):
            done["final"] = {"value": _encode_value(self.final[0] if self.final else None)}
            exc = None
        if exc is not None:
            done["error"] = self._describe(exc, filename)
            done["termination"] = "error"
        if self.output.limit_hit:
            done["termination"] = "output_limit"
        elif exc is None:
            done["value"] = _encode_value(value)
        if exc is None and value is not None and rich_output.is_rich(value):
            self.rich.display(value)  # a DataFrame or a figure as the cell's value: shown, as in Jupyter
        outputs = self.rich.collect(int(request.get("display_cap", 2_000_000)),
                                    int(request.get("display_limit", 8_000_000)),
                                    int(request.get("display_count", 50)))
        if outputs:
            done["outputs"] = outputs
        for name, stream in self.output.streams.items():
            done[name] = "".join(stream.parts)
            done[f"{name}_truncated"] = stream.truncated
        done["names"] = self._new_names()
        lanes, self.lanes = self.lanes, None
        done["facts"] = self.left_running.facts()
        if lanes is not None and len(lanes) <= min(_MAX_LANES, self.max_frame // 8):  # leaves room in the frame
            done["facts"]["lanes"] = "".join(lanes)
        if self.output.flow is not None:
            shown = {"stdout": bool(done["stdout"]), "stderr": bool(done["stderr"]), "outputs": bool(outputs)}
            done["labels"] = self.flow.done_labels(shown, value, exc, self.final)
            if "value" in done:
                done["value"] = _encode_value(self.flow_plain(value))
            if done.get("final") is not None:
                done["final"] = {"value": _encode_value(self.flow_plain(self.final[0] if self.final else None))}
        return done

    def flow_plain(self, value: Any) -> Any:
        try:
            from . import flow as flow_module
        except ImportError:
            import flow as flow_module  # type: ignore[no-redef]
        return flow_module.plain(value)

    def _new_names(self) -> list[str] | None:
        """The names bound in the namespace since the last ``done`` (the host's check lets later
        cells use them); None when there are too many to say, so the host knows it cannot tell."""
        try:  # a key of the code's own type may run code when hashed, and a thread may change the dict
            new = [n for n in self.namespace.keys() - self.reported if type(n) is str]
        except Exception:
            return None
        self.reported.update(new)
        if len(new) > _MAX_NAMES or any(len(n) > _MAX_NAME_CHARS for n in new):
            return None
        return new

    def setup(self, message: dict[str, Any]) -> None:
        """Install the tool stubs; those listed after the lazy marker are compiled at their first use
        (see ``lazy_stubs``)."""
        if type(message.get("max_frame")) is int:
            self.max_frame = message["max_frame"]
        stubs, later = lazy_stubs.split(str(message.get("stubs", "")))
        scope: dict[str, Any] = {"__builtins__": __builtins__, "__name__": "codeact_tools"}
        scope["__codeact_call__"] = self.client.call
        self.stub_scope = scope
        exec(compile(stubs, "<codeact-tools>", "exec"), scope)
        eager = {key: obj for key, obj in scope.items()
                 if isinstance(obj, types.FunctionType) and obj.__module__ == "codeact_tools"}
        self.namespace.update(eager)
        lazy = lazy_stubs.LazyStubs(scope, later)
        lazy.bind(self.namespace)
        if later:
            self._compile = lazy.before_cells(self._compile, lambda: self.namespace)
        self.tool_names = [*eager, *later]
        self.namespace["aio"] = client.async_stubs(scope, stubs=lazy.functions(eager))
        self.namespace["display"] = self.rich.display
        self.reported = set(self.namespace)  # what every cell starts with: the host knows these

    def _forked(self) -> None:
        """In a child process the code forked (``multiprocessing``, ``os.fork``): the channel is the
        kernel's, and two processes reading and writing one socket mix their answers. The child
        closes its copy, and every other descriptor of the same socket it inherited (the code's
        ``os.dup`` of it) becomes a dead one; its tool calls are refused with a clear error."""
        self.client.refuse_calls("tools cannot be called from a process the code forked (multiprocessing, "
                                 "os.fork): call them from the main process, e.g. with parallel() or threads")
        try:
            _kill_copies(self.channel.sock.fileno())
        except OSError:
            pass
        try:
            self.channel.sock.close()
        except OSError:
            pass

    def serve(self) -> None:
        # Installed once, not per run (two signal.signal calls a run showed on the hot path); it ignores a
        # SIGINT that lands between runs.
        signal.signal(signal.SIGINT, self.on_sigint)
        os.register_at_fork(after_in_child=self._forked)
        threading.Thread(target=self.reading.reader, name="codeact-reader", daemon=True).start()
        threading.Thread(target=self._drainer, name="codeact-drainer", daemon=True).start()
        self.left_running.own = set(threading.enumerate())
        self.send({"type": "hello", "v": protocol.VERSION, "pid": os.getpid(), "policy": self.policy})
        while True:
            request = self.reading.next_request()
            kind = request["type"]
            if kind == "setup":
                self._reply_setup(request)
                self._warm_up()
                continue
            if self.baseline is None:
                self.baseline = dict(self.namespace)
            if kind in ("reset", "bind"):
                self._reply_control(request)
                continue
            try:
                done = self.run_cell(request)
            except KeyboardInterrupt as exc:  # a second interrupt, in the cell's clean-up: still interrupted
                done = self._finish(request, "<cell>", None, exc)
            try:
                self.send(done)
            except ValueError:  # not JSON after all (e.g. NaN in a value): send it as a repr
                done["value"] = _safe_text(repr, done.get("value"), _MAX_VALUE)
                self.send(done)

    def _warm_up(self) -> None:
        """Take the cell path once on a no-op, in a scratch namespace, nothing sent: the first real
        run then does not pay for first-time work (a visible share of a pooled session's first result).
        Runs while the host has nothing to ask yet (a pooled kernel waits for its session)."""
        namespace, count, compile_cell = self.namespace, self.cell_count, self._compile
        self.namespace = {"__name__": "__main__", "__builtins__": __builtins__}
        self._compile = self._compile_plain
        try:
            protocol.encode(self.run_cell({"id": "", "code": "None"}))
        except Exception:  # only a warm-up: the first real run does the same and reports
            pass
        finally:
            self.namespace, self.cell_count, self._compile = namespace, count, compile_cell
            linecache.cache.pop(f"<cell-{count + 1}>", None)

    def _reply_setup(self, request: dict[str, Any]) -> None:
        try:
            self.setup(request)
            self.send({"type": "ready"})
        except Exception as exc:
            self.send({"type": "ready", "error": _safe_text(str, exc, _MAX_MESSAGE)})

    # -- reset and bind: the namespace changed by frames, never by code ----------------------------
    def reset(self) -> None:
        """Back to the baseline: every name added since is removed, every baseline name (stubs,
        helpers, ``__builtins__``) rebound to its baseline object, even if the code deleted it."""
        if self.baseline is None:  # no frame since setup: the namespace is the baseline
            self.baseline = dict(self.namespace)
        for name in [n for n in self.namespace if n not in self.baseline]:
            del self.namespace[name]
        self.namespace.update(self.baseline)

    def bind(self, values: Any) -> None:
        """Set names to the JSON values of the frame (already decoded: nothing is evaluated)."""
        if not isinstance(values, dict):
            raise TypeError("'values' must be an object of names to JSON values")
        bad = [n for n in values if not protocol.bindable(n)]
        if bad:
            raise ValueError(f"not a name that can be bound: {', '.join(map(repr, bad[:5]))}")
        self.namespace.update(values)

    def _reply_control(self, request: dict[str, Any]) -> None:
        reset = request["type"] == "reset"
        try:
            if reset:
                self.reset()
            else:
                self.bind(request.get("values"))
        except Exception as exc:
            error = _safe_text(str, exc, _MAX_MESSAGE)
            self.send({"type": "ready", "error": error} if reset else {"type": "bound", "error": error})
            return
        self.send({"type": "ready"} if reset else {"type": "bound"})


class _Reading:
    """Which thread reads the channel now (see the module docstring); all state under ``mu``."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self.channel = kernel.channel
        self.mu = threading.Lock()
        self.waiters = threading.Condition(self.mu)  # threads waiting for the channel or their result
        self.idle = threading.Condition(self.mu)  # the reader thread, while it need not read
        self.owner: int | None = None  # thread ident of the reader of the moment
        self.owner_yields = False  # the owner gives the channel up when woken (reader thread, ended run)
        self.nudged = False  # a byte is in the wake pipe
        self.waiting = 0  # threads in ``waiters``
        self.released = self.started = time.monotonic()
        self.reader_timed = False  # the reader thread waits with a timeout (it is notified otherwise)
        self.wake_r, self.wake_w = os.pipe()
        self.poll = select.poll()
        self.poll.register(self.channel.sock.fileno(), select.POLLIN)
        self.poll.register(self.wake_r, select.POLLIN)
        self.main = threading.get_ident()
        #: SIGINT arrived while the main thread was reading a frame: raised once the frame is in.
        self.defer = False
        self.pending_sigint = False

    # -- SIGINT on the main thread -------------------------------------------------------------
    def on_sigint(self, signum: int, frame: Any) -> None:
        if not self.kernel.running:
            return  # between runs an interrupt means nothing
        if self.defer:
            self.pending_sigint = True
            return
        raise KeyboardInterrupt

    def _blocking(self, fn: Any, *args: Any) -> Any:
        """Run a blocking wait where an interrupt may land (the main thread's defer lifted)."""
        if threading.get_ident() != self.main:
            return fn(*args)
        self.defer = False
        try:
            if self.pending_sigint:
                self.pending_sigint = False
                raise KeyboardInterrupt
            return fn(*args)
        finally:
            self.defer = True

    # -- taking and giving back the channel (``mu`` held) -----------------------------------------
    def _take(self, done: Any, evict: bool) -> bool:
        """Become the reader, or wait until ``done()``; False when done first. ``evict``: wake
        whatever thread reads now to give the channel up (else only the reader thread is)."""
        while not done():
            if self.owner is None:
                self.owner = threading.get_ident()
                self.owner_yields = False
                return True
            if (evict or self.owner_yields) and not self.nudged:
                self.nudged = True
                os.write(self.wake_w, b"\0")
            self.waiting += 1
            try:
                self._blocking(self.waiters.wait)
            finally:
                self.waiting -= 1
        return False

    def _give_back(self) -> None:
        self.owner = None
        self.owner_yields = False
        self.released = time.monotonic()
        if self.waiting:
            self.waiters.notify_all()
        elif self.kernel.running and self.kernel.client.has_async_waiting():
            self.idle.notify()

    def wake_waiters(self) -> None:
        if self.waiting:
            with self.mu:
                self.waiters.notify_all()

    def want_reader(self) -> None:
        """An async call is waiting: the reader thread reads for it unless someone else does."""
        with self.mu:
            if self.owner is None:
                self.idle.notify()

    def run_started(self) -> None:
        with self.mu:
            self.kernel.running = True
            self.released = self.started = time.monotonic()
            if not self.reader_timed:
                self.idle.notify()

    # -- reading -----------------------------------------------------------------------------
    def _pump(self, done: Any) -> None:
        """Read and act on frames until ``done()``, or until woken to give the channel up while
        someone waits for it. The caller owns the channel."""
        chan = self.channel
        main = threading.get_ident() == self.main
        try:
            while not done():
                # The main thread reads straight away, without a poll first: no thread needs to
                # evict it (it reads their results for them), and an interrupt needs no wake-up
                # here: the host sends an ``interrupt`` frame with every SIGINT (the handler only
                # defers it while a frame is read; it is raised once that frame is in).
                if not chan.has_buffered() and not main:
                    ready = self._blocking(self.poll.poll)
                    if any(fd == self.wake_r for fd, _ in ready):
                        with self.mu:
                            os.read(self.wake_r, 64)
                            self.nudged = False
                            if self.waiting:
                                return
                        continue
                message = chan.recv()
                self.kernel.dispatch(message)
                if main and self.pending_sigint and self.kernel.running:
                    self.pending_sigint = False
                    raise KeyboardInterrupt
        except (protocol.FrameError, OSError):
            os._exit(0)

    def _read_until(self, done: Any, evict: bool) -> None:
        main = threading.get_ident() == self.main
        if main:
            self.defer = True
        try:
            while not done():
                with self.mu:
                    if not self._take(done, evict):
                        break
                try:
                    self._pump(done)
                finally:
                    with self.mu:
                        self._give_back()
        finally:
            if main:
                self.defer = False
        if main and self.pending_sigint and self.kernel.running:
            self.pending_sigint = False
            raise KeyboardInterrupt

    def await_reply(self, slot: Any) -> None:
        """A thread that sent a call: read until its result is in (or another reader hands it over)."""
        self._read_until(lambda: slot.reply is not None, evict=False)

    def next_request(self) -> dict[str, Any]:
        """The main thread between runs: the next run or setup request, read by itself."""
        runs = self.kernel.runs
        self._read_until(lambda: bool(runs), evict=True)
        return runs.popleft()

    def reader(self) -> None:
        """The reader thread: reads while nobody else does and a run needs it (async calls wait,
        or the code has not called for ``_READER_AFTER_S``); gives the channel up when woken."""
        kernel = self.kernel
        while True:
            with self.mu:
                while True:
                    now = time.monotonic()
                    if self.owner is None and kernel.running and (
                            kernel.client.has_async_waiting() or now - self.released >= _READER_AFTER_S):
                        self.owner = threading.get_ident()
                        self.owner_yields = True
                        break
                    timeout = None
                    if kernel.running:
                        timeout = max(self.released + _READER_AFTER_S - now, 0.0) if self.owner is None \
                            else _READER_AFTER_S
                    elif now - self.started < _READER_LINGER_S:
                        timeout = _READER_AFTER_S
                    self.reader_timed = timeout is not None
                    self.idle.wait(timeout)
                self.reader_timed = False
            try:
                self._pump(lambda: False)
            finally:
                with self.mu:
                    self._give_back()


def _kill_copies(fd: int) -> None:
    """Point every other descriptor of ``fd``'s socket at a socket whose peer is closed (writes
    fail, reads see EOF): the numbers stay taken, so an object the code holds closes its own."""
    own = os.fstat(fd)
    dead, peer = socket.socketpair()
    peer.close()
    try:
        for name in os.listdir("/proc/self/fd"):
            other = int(name)
            try:
                st = os.fstat(other)
            except OSError:
                continue
            if other != fd and (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino):
                os.dup2(dead.fileno(), other)
    finally:
        dead.close()


def _connect(path: str, deadline_s: float = 10.0) -> socket.socket:
    end = time.monotonic() + deadline_s
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
            return sock
        except OSError:
            sock.close()
            if time.monotonic() > end:
                raise
            time.sleep(0.01)


def _parse_args(argv: list[str]) -> dict[str, Any]:
    """``--connect PATH --policy none|restricted --extra-path DIR...`` (no argparse: importing it
    slows every sandbox start, and only the host ever writes this command line)."""
    args: dict[str, Any] = {"connect": DEFAULT_SOCKET, "policy": "none", "extra_path": [], "egress": None}
    pairs = iter(argv)
    for flag in pairs:
        value = next(pairs, None)
        if value is None or flag not in ("--connect", "--policy", "--extra-path", "--egress"):
            raise SystemExit(f"usage: kernel.py [--connect PATH] [--policy none|restricted] [--extra-path DIR] "
                             f"[--egress PORT]; got {flag!r}")
        if flag == "--extra-path":
            args["extra_path"].append(value)
        else:
            args[flag[2:]] = value
    if args["policy"] not in ("none", "restricted"):
        raise SystemExit(f"--policy must be none or restricted, not {args['policy']!r}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    sys.path.extend(args["extra_path"])
    if args["egress"] is not None:  # before the hello: the forwarder's thread is one of the kernel's own
        try:
            from . import egress_forwarder
        except ImportError:
            import egress_forwarder  # type: ignore[no-redef]
        broker = os.path.join(os.path.dirname(args["connect"]), "egress.sock")
        port = egress_forwarder.start(broker, int(args["egress"]))
        egress_forwarder.configure(port, os.path.join(os.getcwd(), ".codeact-packages"))
    sock = _connect(args["connect"])
    kernel = Kernel(protocol.FrameSocket(sock), args["policy"])
    kernel.serve()


if __name__ == "__main__":
    main()
