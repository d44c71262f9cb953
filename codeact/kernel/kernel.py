"""The kernel: runs the model's code inside the sandbox. Standard library only.

One process per session, one persistent namespace. The main thread executes cells; what the code
writes is captured (``_capture``: fd 1 and 2 are pipes drained into capped buffers, so nothing the
code writes, print, os.write or a subprocess, can reach the channel, which is a separate socket)
and, for a run that asks, streamed as it is written (``_live``). A cell is compiled and evaluated
by ``_cells``, what it left (error, value) described by ``_describe``; which thread reads the
channel at a time is ``_reading``'s. Frames are declared in ``frames``. This module ties them into
the request loop: setup, runs, ``reset`` and ``bind``, and the ``done`` frame of each run.
"""

from __future__ import annotations

import _ast as ast  # the parser's node types; the ast module itself costs an idle kernel memory
import _signal
import _socket  # socket.py (its enums, selectors) costs every idle kernel memory
import collections
import os
import select
import signal
import sys
import threading
import time
import types

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs every idle kernel memory; annotations are never evaluated
    from typing import Any

try:  # flat in the sandbox image; a package when imported on the host
    from . import client, frames, lazy_stubs, protocol, rich_output, running
    from ._capture import Capture, OutputLimit
    from ._cells import Evaluator, compile_plain, parse, statements_only
    from ._describe import MAX_MESSAGE, MAX_VALUE, describe, encode_value, fitted, safe_text
    from ._live import PERIOD, LiveOutput
    from ._reading import Reading
    from ._sources import CellSources
except ImportError:
    import client  # type: ignore[no-redef]
    import frames  # type: ignore[no-redef]
    import lazy_stubs  # type: ignore[no-redef]
    import protocol  # type: ignore[no-redef]
    import rich_output  # type: ignore[no-redef]
    import running  # type: ignore[no-redef]
    from _capture import Capture, OutputLimit  # type: ignore[no-redef]
    from _cells import Evaluator, compile_plain, parse, statements_only  # type: ignore[no-redef]
    from _describe import MAX_MESSAGE, MAX_VALUE, describe, encode_value, fitted, safe_text  # type: ignore[no-redef]
    from _live import PERIOD, LiveOutput  # type: ignore[no-redef]
    from _reading import Reading  # type: ignore[no-redef]
    from _sources import CellSources  # type: ignore[no-redef]

__all__ = ["Kernel", "OutputLimit", "main"]

DEFAULT_SOCKET = "/run/codeact/channel.sock"
#: A run's call lanes are reported up to this many calls (past it: not at all).
_MAX_LANES = 100_000
#: At most this many new names (each at most ``_MAX_NAME_CHARS``) in a ``done`` frame; more: "unknown".
_MAX_NAMES = 5000
_MAX_NAME_CHARS = 200
assert set(frames.TERMINATIONS) == {"completed", "error", "output_limit"}


class _FinalAnswer(BaseException):
    """Raised by ``final_answer(x)`` to end the cell successfully with an answer."""


class Kernel:
    """Executes cells in one namespace; talks to the host through a FrameSocket."""

    def __init__(self, channel: protocol.FrameSocket, policy: str) -> None:
        self.channel = channel
        self.policy = policy
        #: The largest frame the host reads (``setup`` says; a larger ``done`` is cut to fit).
        self.max_frame = protocol.DEFAULT_MAX_FRAME
        self.write_lock = threading.Lock()
        self.runs: collections.deque[dict[str, Any]] = collections.deque()
        self.running = False
        self.cell_count = 0
        self._evaluate = Evaluator()
        self.sources = CellSources()  # the cells' lines for tracebacks (linecache, once imported)
        self.reading = Reading(self)
        self.on_sigint = self.reading.on_sigint  # one bound method, so the handler's identity can be checked
        self.client = client.ToolClient(self.send, wait=self.reading.await_reply, on_async=self.reading.want_reader)
        self.capture = Capture()
        self.output = self.capture.output
        self.final: list[Any] = []
        self.rich = rich_output.Outputs()
        #: The lane of each call this run sent, in sending order (see ``_lane``); None between runs.
        self.lanes: list[str] | None = None
        self.left_running = running.LeftRunning(set())  # its own threads are known once it serves
        self.live = LiveOutput(self.output, self._write)
        self.namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": __builtins__}
        #: The namespace as setup left it (taken at the first frame after setup): what ``reset`` restores.
        self.baseline: dict[str, Any] | None = None
        self._compile: lazy_stubs.Compile = compile_plain
        #: The lazy stubs, when ``_compile`` is compile_plain wrapped to install the ones a cell names.
        self._lazy: lazy_stubs.LazyStubs | None = None
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
        if self.live.run_id is not None and message.get("type") == "call":
            self.live.flush(self.max_frame)  # what the code printed before the call reaches the host before it
        data = protocol.encode(message)
        if len(data) - 4 > self.max_frame and message.get("type") == "done":  # the host would refuse it
            data = protocol.encode(fitted(message, self.max_frame))
        with self.write_lock:
            self.channel.sock.sendall(data)
            if self.lanes is not None and message.get("type") == "call":
                self.lanes.append(self._lane())

    def _write(self, data: bytes) -> None:
        with self.write_lock:
            self.channel.sock.sendall(data)

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
        capture = self.capture
        names = {fd: name for name, fd in capture.read_fds.items()}
        # poll, not select: gVisor's seccomp filter refuses select() (EPERM), and this thread died.
        poller = select.poll()
        for fd in names:
            poller.register(fd, select.POLLIN)
        while True:
            streaming = self.live.run_id is not None
            ready = poller.poll((PERIOD if streaming else 1.0) * 1000)
            for fd, _events in ready:
                with capture.fd_lock:
                    if not self.output.pump(names[fd], fd):
                        poller.unregister(fd)  # at EOF poll would report it readable forever
            if streaming and time.monotonic() - self.live.flushed >= PERIOD:
                self.live.flush(self.max_frame)
            if self.output.limit_hit and self.running:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)

    # -- cells ---------------------------------------------------------------------------------
    def _execute(self, source: str, filename: str) -> tuple[Any, BaseException | None]:
        try:
            # A cell that certainly does not end with an expression compiles straight from its
            # source when nothing needs the tree (no restricted policy, no flow labels): parsing
            # to Python AST objects and compiling those is a visible share of a warm run. Lazy
            # stubs need only the code objects' names, so they take this path too.
            tracked = self.output.flow is not None
            lazy = self._lazy if self._compile is not compile_plain else None  # not in the warm-up
            exec_code = statements_only(source, filename) \
                if (lazy is not None or self._compile is compile_plain) and not tracked else None
            if exec_code is not None and lazy is not None:
                lazy.install_named((exec_code,), self.namespace)
            eval_code = None
            if tracked:
                exec_code, eval_code = self._compile_flow(parse(source, filename), filename)
            elif exec_code is None:
                exec_code, eval_code = self._compile(parse(source, filename), filename)
            if exec_code is not None:
                self._evaluate(exec_code, self.namespace)
            value = self._evaluate(eval_code, self.namespace) if eval_code is not None else None
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

    def run_cell(self, request: dict[str, Any]) -> dict[str, Any]:
        source = str(request.get("code", ""))
        self.cell_count += 1
        filename = f"<cell-{self.cell_count}>"
        self.sources.add(filename, source)
        self.output.reset(int(request.get("output_cap", 1 << 20)), int(request.get("output_limit", 128 << 20)))
        if request.get("stream"):  # the host listens for events: stream output as it is written
            self.live.start(str(request.get("id")))
        self.final.clear()
        self._start_flow(request)
        saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = self.capture.writers
        self.lanes = []
        self.reading.run_started()
        try:
            value, exc = self._execute(source, filename)
        finally:
            self.running = False  # from here a SIGINT is ignored (see Reading.on_sigint)
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
        self.capture.drain_now()
        if self.live.run_id is not None:
            self.live.flush(self.max_frame, last=True)
        done: dict[str, Any] = {"type": "done", "id": request.get("id"), "termination": "completed"}
        if isinstance(exc, _FinalAnswer):
            done["final"] = {"value": encode_value(self.final[0] if self.final else None)}
            exc = None
        if exc is not None:
            done["error"] = describe(exc, filename, self.tool_names)
            done["termination"] = "error"
        if self.output.limit_hit:
            done["termination"] = "output_limit"
        elif exc is None:
            done["value"] = encode_value(value)
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
                done["value"] = encode_value(self.flow_plain(value))
            if done.get("final") is not None:
                done["final"] = {"value": encode_value(self.flow_plain(self.final[0] if self.final else None))}
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
        if type(message.get("spin_us")) is int:
            self.channel.spin_s = min(max(message["spin_us"], 0), protocol.MAX_SPIN_US) / 1e6
        stubs, later = lazy_stubs.split(str(message.get("stubs", "")))
        scope: dict[str, Any] = {"__builtins__": __builtins__, "__name__": "codeact_tools"}
        scope["__codeact_call__"] = self.client.call
        self.stub_scope = scope
        exec(compile(stubs, "<codeact-tools>", "exec", flags=lazy_stubs.FLAGS, dont_inherit=True), scope)
        eager = {key: obj for key, obj in scope.items()
                 if isinstance(obj, types.FunctionType) and obj.__module__ == "codeact_tools"}
        self.namespace.update(eager)
        lazy = lazy_stubs.LazyStubs(scope, later)
        lazy.bind(self.namespace)
        if later:
            if self._compile is compile_plain:  # not the restricted compiler: cells may skip the tree
                self._lazy = lazy
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
                done["value"] = safe_text(repr, done.get("value"), MAX_VALUE)
                self.send(done)

    def _warm_up(self) -> None:
        """Take the cell path once on a no-op, in a scratch namespace, nothing sent: the first real
        run then does not pay for first-time work (a visible share of a pooled session's first result).
        Runs while the host has nothing to ask yet (a pooled kernel waits for its session)."""
        namespace, count, compile_cell = self.namespace, self.cell_count, self._compile
        self.namespace = {"__name__": "__main__", "__builtins__": __builtins__}
        self._compile = compile_plain
        try:
            protocol.encode(self.run_cell({"id": "", "code": "None"}))
        except Exception:  # only a warm-up: the first real run does the same and reports
            pass
        finally:
            self.namespace, self.cell_count, self._compile = namespace, count, compile_cell
            self.sources.discard(f"<cell-{count + 1}>")

    def _reply_setup(self, request: dict[str, Any]) -> None:
        try:
            self.setup(request)
            self.send({"type": "ready"})
        except Exception as exc:
            self.send({"type": "ready", "error": safe_text(str, exc, MAX_MESSAGE)})

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
            error = safe_text(str, exc, MAX_MESSAGE)
            self.send({"type": "ready", "error": error} if reset else {"type": "bound", "error": error})
            return
        self.send({"type": "ready"} if reset else {"type": "bound"})



def _kill_copies(fd: int) -> None:
    """Point every other descriptor of ``fd``'s socket at a socket whose peer is closed (writes
    fail, reads see EOF): the numbers stay taken, so an object the code holds closes its own."""
    own = os.fstat(fd)
    dead, peer = _socket.socketpair()
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


def _connect(path: str, deadline_s: float = 10.0) -> _socket.socket:
    end = time.monotonic() + deadline_s
    while True:
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
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
    channel = protocol.FrameSocket(sock)
    channel.wait_in_poll()
    kernel = Kernel(channel, args["policy"])
    kernel.serve()


if __name__ == "__main__":
    main()
