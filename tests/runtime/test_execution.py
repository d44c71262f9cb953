"""The core behaviour suite, run on every backend (local subprocess and Docker)."""

from __future__ import annotations

import asyncio
import resource
import textwrap

import pytest

from codeact import Runtime, SandboxConfig
from tests.conftest import Counter


def run(runtime: Runtime, code: str, **kwargs: object) -> object:
    with runtime.session() as session:
        return session.run(textwrap.dedent(code), **kwargs)  # type: ignore[arg-type]


def test_weather_comparison_two_records(runtime: Runtime) -> None:
    result = run(runtime, """
        pit = get_weather("Pittsburgh")
        bj = get_weather(city="Beijing")
        bj_c = (bj["temperature"] - 32) * 5 / 9
        warmer = "Pittsburgh" if pit["temperature"] > bj_c else "Beijing"
        print(f"Beijing is {bj_c:.1f} C")
        warmer
    """)
    assert result.ok, result.error
    assert result.value == "Beijing"
    assert result.stdout == "Beijing is 20.0 C\n"
    assert [c.name for c in result.calls] == ["get_weather", "get_weather"]
    assert [c.arguments for c in result.calls] == [{"city": "Pittsburgh"}, {"city": "Beijing"}]
    assert result.calls[1].result == {"city": "Beijing", "temperature": 68.0, "unit": "fahrenheit"}
    assert all(c.ok and c.finished and c.duration_ms >= 0 for c in result.calls)
    assert result.calls[0].id != result.calls[1].id


def test_partial_success_caught(runtime: Runtime) -> None:
    result = run(runtime, """
        got = []
        for i in range(1, 6):
            try:
                got.append(fetch_item(i))
            except ToolError as e:
                print("failed", i, e.code, e.retryable)
        print(got)
    """)
    assert result.ok
    assert len(result.calls) == 5
    assert [c.ok for c in result.calls] == [True, True, False, True, True]
    assert result.calls[2].error is not None and result.calls[2].error.code == "upstream_error"
    assert result.calls[2].error.retryable is True
    assert result.stdout == "failed 3 upstream_error True\n['item-1', 'item-2', 'item-4', 'item-5']\n"


def test_partial_success_uncaught(runtime: Runtime) -> None:
    result = run(runtime, """
        for i in range(1, 6):
            print(fetch_item(i))
    """)
    assert not result.ok and result.termination == "error"
    assert len(result.calls) == 3
    assert result.stdout == "item-1\nitem-2\n"
    assert result.error is not None
    assert result.error.type == "ToolError" and result.error.lineno == 3
    assert "item 3 is unavailable" in result.error.message
    assert "<cell-" in result.error.traceback and "kernel.py" not in result.error.traceback


def test_persistence_and_isolation(runtime: Runtime) -> None:
    with runtime.session() as s1, runtime.session() as s2:
        assert s1.run("x = 41\nimport math\ndef double(v):\n    return 2 * v").ok
        r = s1.run("double(x + 1) // 2 + math.floor(0.5)")
        assert r.value == 42
        other = s2.run("x")
        assert other.error is not None and other.error.type == "NameError"


def test_syntax_error_has_its_line(runtime: Runtime) -> None:
    result = run(runtime, "a = 1\nb = 2\nc = (a +\nd = 4\n")
    assert result.termination == "error" and result.error is not None
    assert result.error.type == "SyntaxError"
    assert result.error.lineno in (3, 4)


def test_runtime_error_line_in_nested_function(runtime: Runtime) -> None:
    result = run(runtime, "def f(d):\n    return d['missing']\n\nx = 1\nf({})\n")
    assert result.error is not None and result.error.type == "KeyError"
    assert result.error.lineno == 2


def test_infinite_loop_times_out(runtime: Runtime) -> None:
    result = run(runtime, "while True:\n    pass\n", timeout_s=1.0)
    assert result.termination == "timeout" and not result.ok
    assert result.duration_ms < (1.0 + 2.0) * 1000


def test_loop_swallowing_interrupts_is_killed(runtime: Runtime) -> None:
    code = "import time\nwhile True:\n    try:\n        time.sleep(0.05)\n    except BaseException:\n        pass\n"
    with runtime.session() as session:
        session.run("keep = 1")
        result = session.run(code, timeout_s=1.0)
        assert result.termination == "timeout" and result.state_lost
        assert result.duration_ms < (1.0 + 2.0) * 1000
        after = session.run("'keep' in globals()")
        assert after.ok and after.value is False


def test_huge_output_truncated_and_bounded(runtime: Runtime) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = run(runtime, "import sys\nfor _ in range(100):\n    sys.stdout.write('x' * 1_000_000)\n'done'")
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert result.ok and result.value == "done"
    assert result.stdout_truncated
    assert len(result.stdout) == runtime.config.output_cap
    assert after - before < 60 * 1024  # KiB: the host never held the 100 MB


def test_direct_fd_writes_are_captured(runtime: Runtime) -> None:
    result = run(runtime, """
        import os, subprocess
        print("a")
        os.write(1, b"b\\n")
        os.write(2, b"e\\n")
        subprocess.run(["echo", "c"], check=True)
        'ok'
    """)
    assert result.ok, result.error
    assert sorted(result.stdout.split()) == ["a", "b", "c"]
    assert result.stderr == "e\n"


def test_unknown_tool_and_invalid_arguments_not_run(runtime: Runtime, counter: Counter) -> None:
    before = counter.count("get_weather")
    result = run(runtime, """
        try:
            __codeact_call__("no_such_tool", {})
        except ToolError as e:
            print(e.code)
        try:
            get_weather(city=42)
        except ToolError as e:
            print(e.code, e.retryable)
    """)
    assert result.ok, result.error
    assert result.stdout == "unknown_tool\ninvalid_arguments False\n"
    assert [c.error.code for c in result.calls if c.error] == ["unknown_tool", "invalid_arguments"]
    assert counter.count("get_weather") == before


def test_hostile_exceptions_are_bounded(runtime: Runtime) -> None:
    for body in ("raise RuntimeError('inner')", "while True: pass", "return 'x' * 20_000_000"):
        result = run(runtime, f"class Bad(Exception):\n    def __str__(self):\n        {body}\nraise Bad()\n")
        assert result.termination == "error", body
        assert result.error is not None and result.error.type == "Bad"
        assert len(result.error.message) < 20_000
        assert result.error.lineno == 4


def test_exits_are_failures(runtime: Runtime) -> None:
    for code, kind in (("import sys\nsys.exit(0)", "SystemExit"), ("raise KeyboardInterrupt", "KeyboardInterrupt")):
        result = run(runtime, code)
        assert not result.ok and result.error is not None and result.error.type == kind
    with runtime.session() as session:
        result = session.run("import os\nos._exit(3)")
        assert not result.ok and result.termination == "killed" and result.state_lost
        assert "exit status 3" in (result.reason or "")
        assert session.run("1 + 1").value == 2  # a clean sandbox took its place


def test_calls_from_threads_are_concurrent(runtime: Runtime, counter: Counter) -> None:
    counter.max_in_flight = 0
    result = run(runtime, """
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(4) as pool:
            out = list(pool.map(slow, [0.3] * 4))
        out
    """)
    assert result.ok, result.error
    assert result.value == [0.3] * 4
    assert len(result.calls) == 4 and len({c.id for c in result.calls}) == 4
    assert counter.max_in_flight >= 2


def test_tool_timeout_and_run_timeout_while_waiting(runtime: Runtime) -> None:
    result = run(runtime, "try:\n    stuck()\nexcept ToolError as e:\n    print(e.code, e.retryable)")
    assert result.stdout == "timeout True\n"
    assert result.calls[0].error is not None and result.calls[0].error.code == "timeout"
    waiting = run(runtime, "slow(30)", timeout_s=1.0)
    assert waiting.termination == "timeout"
    assert waiting.calls[0].error is not None and waiting.calls[0].error.code == "timeout"


def test_a_sandbox_dying_after_the_interrupt_is_a_timeout(runtime: Runtime) -> None:
    # The code's own SIGINT handler ends the kernel when the run's timeout interrupts it: the run
    # timed out (it is not a crash of the sandbox), and its state is gone.
    code = "import os, signal, time\nsignal.signal(signal.SIGINT, lambda *a: os._exit(1))\ntime.sleep(60)"
    with runtime.session() as session:
        result = session.run(code, timeout_s=1.0)
        assert result.termination == "timeout", (result.termination, result.reason)
        assert result.state_lost and not result.ok
        assert result.reason == "the sandbox died after the interrupt"
        assert session.run("1 + 1").value == 2  # a clean sandbox took its place


def test_values_json_or_repr(runtime: Runtime) -> None:
    assert run(runtime, "{'a': [1, 2.5, None, True]}").value == {"a": [1, 2.5, None, True]}
    assert run(runtime, "object()").value.startswith("<object object at")
    assert run(runtime, "x = 3").value is None


def test_non_identifier_tool_name(runtime: Runtime, counter: Counter) -> None:
    result = run(runtime, "math_factorial(5)")
    assert result.value == 120
    assert result.calls[0].name == "math.factorial"


def test_final_answer(runtime: Runtime) -> None:
    result = run(runtime, "final_answer({'city': 'Beijing'})\nprint('not reached')")
    assert result.ok and result.answered and result.final_answer == {"city": "Beijing"}
    assert result.stdout == ""


def test_top_level_await_and_parallel_helper(runtime: Runtime, counter: Counter) -> None:
    result = run(runtime, """
        import asyncio
        a, b = await asyncio.gather(asyncio.to_thread(slow, 0.2), asyncio.to_thread(slow, 0.2))
        r = parallel(lambda c: get_weather(c), ["Pittsburgh", "Atlantis"])
        [a + b, r[0]["city"], type(r[1]).__name__]
    """)
    assert result.ok, result.error
    assert result.value == [0.4, "Pittsburgh", "ToolError"]


def test_lone_surrogates_do_not_kill_the_kernel(runtime: Runtime) -> None:
    # Regression: a lone surrogate made the frame unencodable and the kernel exited.
    with runtime.session() as session:
        result = session.run("print('a\\ud800b')\n'x\\udc00'")
        assert result.ok and result.stdout == "a?b\n" and result.value == "x?"
        assert not result.state_lost and session.run("1 + 1").value == 2
        result.model_dump_json()  # and the result itself serializes


def test_closing_stdout_fds_leaves_the_kernel_working(runtime: Runtime) -> None:
    # Regression: at EOF on the capture pipes the drainer thread spun forever.
    with runtime.session() as session:
        result = session.run("import os\nos.close(1)\nos.close(2)\nprint('still captured')")
        assert result.ok and result.stdout == "still captured\n"
        assert session.run("sum(range(1000))").value == 499500


@pytest.mark.parametrize("bad", [0, 0.0, -1, float("nan"), float("inf")])
def test_a_timeout_that_is_not_positive_is_refused(bad: float) -> None:
    # ``timeout_s=0`` used to mean "the config's default" (``timeout_s or ...``), silently.
    with Runtime([], SandboxConfig(backend="local", policy="none", timeout_s=5)) as rt, rt.session() as s:
        with pytest.raises(ValueError, match="timeout_s must be a positive number"):
            s.run("1", timeout_s=bad)
        with pytest.raises(ValueError, match="timeout_s must be a positive number"):
            s.run("1", timeout_s=bad, on_event=lambda e: None)
        with pytest.raises(ValueError, match="timeout_s must be a positive number"):
            asyncio.run(s.arun("1", timeout_s=bad))
        with pytest.raises(TypeError, match="timeout_s must be a number"):
            s.run("1", timeout_s="3")  # type: ignore[arg-type]
        assert not s.history and s.run("2", timeout_s=1).value == 2
