"""A process the code forks shares the kernel's channel: its tool calls are refused with a clear
error (two processes on one socket mixed their answers and stalled the run), and the kernel's own
calls stay correct."""

from __future__ import annotations

from codeact import Runtime, SandboxConfig, tool


@tool
def ping(x: int) -> int:
    """Ten times x.

    Args:
        x: a number.
    """
    return x * 10


FORKED = """
import multiprocessing as mp
def work(i, q):
    try:
        q.put((i, ping(i)))
    except ToolError as e:
        q.put((i, e.code + ': ' + e.message))
ctx = mp.get_context('fork')
q = ctx.Queue()
procs = [ctx.Process(target=work, args=(i, q)) for i in range(3)]
for p in procs:
    p.start()
got = sorted(q.get(timeout=10) for _ in procs)
for p in procs:
    p.join(5)
(got, [p.exitcode for p in procs], ping(4))
"""


def test_a_forked_child_s_tool_call_is_refused(backend: str) -> None:
    config = SandboxConfig(backend=backend, policy="none", timeout_s=30)  # type: ignore[arg-type]
    with Runtime([ping], config) as rt, rt.session() as s:
        result = s.run(FORKED)
        assert result.ok, (result.error, result.stderr)
        got, exitcodes, mine = result.value
        assert [i for i, _ in got] == [0, 1, 2] and exitcodes == [0, 0, 0] and mine == 40
        assert all("tools cannot be called from a process the code forked" in text for _, text in got)
        assert [c.arguments for c in result.calls] == [{"x": 4}]  # nothing from the children reached the host
        assert s.run("ping(5)").value == 50


DUPED = """
import json, os, struct, time
fd = next(int(n) for n in os.listdir('/proc/self/fd') if os.readlink(f'/proc/self/fd/{n}').startswith('socket:'))
copy = os.dup(fd)  # made before the fork: the child inherits it
body = json.dumps({'type': 'call', 'seq': 77, 'name': 'ping', 'arguments': {'x': 7}}).encode()
pid = os.fork()
if pid == 0:
    try:
        os.write(copy, struct.pack('!I', len(body)) + body)
    except OSError:
        os._exit(3)
    os._exit(0)
_, status = os.waitpid(pid, 0)
time.sleep(0.3)  # a call the child got through would be recorded by now
os.waitstatus_to_exitcode(status)
"""


def test_a_child_forked_after_a_dup_of_the_channel_cannot_reach_it(backend: str) -> None:
    # Before: the dup'ed descriptor survived the fork and the child's call ran on the host.
    config = SandboxConfig(backend=backend, policy="none", timeout_s=30)  # type: ignore[arg-type]
    with Runtime([ping], config) as rt, rt.session() as s:
        result = s.run(DUPED)
        assert result.ok, (result.error, result.stderr)
        assert result.value == 3  # the child's write failed: its copy is a dead socket
        assert result.calls == []
        assert s.run("ping(5)").value == 50
