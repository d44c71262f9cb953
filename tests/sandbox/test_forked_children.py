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
