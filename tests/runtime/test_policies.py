"""Per-tool policies on the host: permission (allow / deny / ask / callable), max calls, rate limit,
timeout, idempotent retries. Each is checked from sandboxed code and by the tool's own counter."""

from __future__ import annotations

import asyncio
import textwrap
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from codeact import Runtime, SandboxConfig, ToolError, ToolPolicy, tool
from codeact.errors import ToolDefinitionError
from codeact.runtime.ledger import CallLedger
from tests._configs import LOCAL
from tests.conftest import Counter


def run(rt: Runtime, code: str) -> Any:
    with rt.session() as session:
        return session.run(textwrap.dedent(code))


def codes(result: Any) -> list[str | None]:
    return [c.error.code if c.error else None for c in result.calls]


@pytest.fixture
def counter() -> Counter:
    return Counter()


def make_delete(counter: Counter, **policy: Any) -> Any:
    @tool(**policy)
    def delete_file(path: str) -> str:
        """Delete a file.

        Args:
            path: Which file.
        """
        counter.hit("delete_file")
        return f"deleted {path}"

    return delete_file


def test_denied_call_is_recorded_and_not_executed(counter: Counter) -> None:
    delete = make_delete(counter, permission="deny", deny_reason="deleting is not allowed here")
    with Runtime([delete], LOCAL) as rt:
        result = run(rt, """
            try:
                delete_file("/etc/passwd")
            except ToolError as e:
                print(e.code, e.retryable, e.message)
        """)
    assert result.ok, result.error
    assert result.stdout == "permission_denied False call to 'delete_file' denied: deleting is not allowed here\n"
    assert codes(result) == ["permission_denied"]
    assert result.calls[0].arguments == {"path": "/etc/passwd"}
    assert counter.count("delete_file") == 0


def test_callable_permission_decides_by_arguments(counter: Counter) -> None:
    def only_tmp(name: str, args: dict[str, Any]) -> bool | str:
        verdict = True if args["path"].startswith("/tmp/") else "only files under /tmp/"
        args["path"] = "/changed"  # a hook cannot change what the tool gets
        return verdict

    async def allow_all(name: str, args: dict[str, Any]) -> bool:
        return True

    delete = make_delete(counter, permission=lambda n, a: a["path"].startswith("/tmp/") or "only files under /tmp/")
    other = make_delete(Counter(), permission=allow_all)
    with Runtime([delete], LOCAL) as rt:
        result = run(rt, """
            print(delete_file("/tmp/a"))
            try:
                delete_file("/home/a")
            except ToolError as e:
                print(e.message)
        """)
    assert result.stdout == "deleted /tmp/a\ncall to 'delete_file' denied: only files under /tmp/\n"
    assert counter.count("delete_file") == 1
    with Runtime([other], LOCAL, permission=only_tmp) as rt:  # a runtime-wide hook too
        record = rt.host.call(CallLedger(), "delete_file", {"path": "/tmp/b"})
    assert record.ok and record.result == "deleted /tmp/b"


def test_ask_consults_the_approver(counter: Counter) -> None:
    asked: list[tuple[str, dict[str, Any]]] = []

    def approver(name: str, args: dict[str, Any]) -> bool | str:
        asked.append((name, args))
        time.sleep(0.05)  # a human takes a while; the host's loop must not stall meanwhile
        return True if args["path"] == "/tmp/ok" else "the user said no"

    delete = make_delete(counter, permission="ask")
    with Runtime([delete], LOCAL, ask=approver) as rt:
        result = run(rt, """
            print(delete_file("/tmp/ok"))
            try:
                delete_file("/tmp/precious")
            except ToolError as e:
                print(e.code, e.message)
        """)
    assert result.stdout == ("deleted /tmp/ok\n"
                             "permission_denied call to 'delete_file' denied: the user said no\n")
    assert asked == [("delete_file", {"path": "/tmp/ok"}), ("delete_file", {"path": "/tmp/precious"})]
    assert counter.count("delete_file") == 1
    with Runtime([make_delete(counter, permission="ask")], LOCAL) as rt:  # nobody to ask: denied
        record = rt.host.call(CallLedger(), "delete_file", {"path": "/tmp/x"})
    assert record.error is not None and "no approver is configured" in record.error.message


def test_a_failing_permission_hook_denies() -> None:
    def broken(name: str, args: dict[str, Any]) -> bool:
        raise RuntimeError("approval service down")

    with Runtime([make_delete(Counter(), permission=broken)], LOCAL) as rt:
        record = rt.host.call(CallLedger(), "delete_file", {"path": "/tmp/x"})
    assert record.error is not None and record.error.code == "permission_denied"
    assert "approval service down" in record.error.message


def test_max_calls_per_execution(counter: Counter) -> None:
    delete = make_delete(counter, max_calls=2)
    with Runtime([delete], LOCAL) as rt:
        result = run(rt, """
            out = []
            for i in range(4):
                try:
                    out.append(delete_file(f"/tmp/{i}"))
                except ToolError as e:
                    out.append(e.code)
            out
        """)
        assert result.value == ["deleted /tmp/0", "deleted /tmp/1", "permission_denied", "permission_denied"]
        assert codes(result) == [None, None, "permission_denied", "permission_denied"]
        assert "at most 2 times per execution" in result.calls[2].error.message  # type: ignore[union-attr]
        again = run(rt, "delete_file('/tmp/next')")  # a new execution starts a new count
    assert again.ok and counter.count("delete_file") == 3


def test_max_calls_holds_for_concurrent_calls(counter: Counter) -> None:
    with Runtime([make_delete(counter, max_calls=3)], LOCAL) as rt:
        result = run(rt, "[getattr(r, 'code', 'ok') for r in parallel(lambda i: delete_file(f'/tmp/{i}'), range(8))]")
    assert result.ok, result.error
    assert sorted(result.value) == ["ok"] * 3 + ["permission_denied"] * 5
    assert counter.count("delete_file") == 3
    assert sorted(codes(result), key=str) == [None] * 3 + ["permission_denied"] * 5


def test_rate_limit_spaces_calls() -> None:
    times: list[float] = []

    @tool(rate_limit_per_s=20)
    async def ping() -> bool:  # async: it starts soon after the limiter lets it
        """Ping."""
        times.append(time.monotonic())
        return True

    with Runtime([ping], LOCAL) as rt:
        result = run(rt, "parallel(lambda _: ping(), range(5))")
    assert result.value == [True] * 5
    times.sort()
    # At most 20 per second, even when asked all at once: the k-th call is let through k intervals
    # after the first was. The tool's own clock reads a call a little after that, and the first
    # call's reading may be late on a loaded machine, so the k-th is at least k - 1 intervals
    # past it (all five at once, as without the limit, fails from k = 2).
    assert [k for k, t in enumerate(times) if k and t - times[0] < (k - 1) * 0.05 * 0.95] == []


def test_timeout_ends_an_async_tool_and_frees_it() -> None:
    cancelled = threading.Event()

    @tool(timeout_s=0.2)
    async def hang() -> None:
        """Never answers."""
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    with Runtime([hang], LOCAL) as rt:
        result = run(rt, "try:\n    hang()\nexcept ToolError as e:\n    print(e.code, e.retryable)")
    assert result.stdout == "timeout True\n"
    assert cancelled.is_set()


def test_idempotent_tools_are_retried_and_others_are_not() -> None:
    attempts: dict[str, list[float]] = {"safe": [], "unsafe": [], "waits": [], "bad": []}

    def flaky(kind: str, fail_times: int, error: ToolError) -> Any:
        attempts[kind].append(time.monotonic())
        if len(attempts[kind]) <= fail_times:
            raise error
        return len(attempts[kind])

    @tool(idempotent=True, max_retries=3)
    def safe() -> int:
        """Read something flaky."""
        return flaky("safe", 2, ToolError("upstream_error", "blip"))  # type: ignore[no-any-return]

    @tool
    def unsafe() -> int:
        """Write something flaky."""
        return flaky("unsafe", 2, ToolError("upstream_error", "blip"))  # type: ignore[no-any-return]

    @tool(idempotent=True)
    def waits() -> int:
        """Says when to come back."""
        return flaky("waits", 1, ToolError("rate_limited", "slow down", retry_after=0.3))  # type: ignore[no-any-return]

    @tool(idempotent=True)
    def bad() -> int:
        """Fails for good."""
        return flaky("bad", 5, ToolError("not_found", "gone"))  # type: ignore[no-any-return]

    with Runtime([safe, unsafe, waits, bad], LOCAL) as rt:
        result = run(rt, """
            out = []
            for f in (safe, unsafe, waits, bad):
                try:
                    out.append(f())
                except ToolError as e:
                    out.append(e.code)
            out
        """)
    assert result.value == [3, "upstream_error", 2, "not_found"]
    assert [len(attempts[k]) for k in ("safe", "unsafe", "waits", "bad")] == [3, 1, 2, 1]
    assert attempts["waits"][1] - attempts["waits"][0] >= 0.3 * 0.95  # retry_after honoured
    assert len(result.calls) == 4  # retries are inside one recorded call


def test_policy_values_are_checked() -> None:
    for bad in ({"timeout_s": 0}, {"permission": "maybe"}, {"max_calls": -1}, {"rate_limit_per_s": 0},
                {"max_retries": -1}):
        with pytest.raises(ToolDefinitionError):
            ToolPolicy(**bad)


@pytest.fixture
def docker_runtime(docker_image: str, counter: Counter) -> Iterator[Runtime]:
    config = SandboxConfig(backend="docker", timeout_s=30)
    with Runtime([make_delete(counter, permission="deny", max_calls=1)], config) as rt:
        yield rt


def test_denied_in_docker(docker_runtime: Runtime, counter: Counter) -> None:
    result = run(docker_runtime, "try:\n    delete_file('/x')\nexcept ToolError as e:\n    print(e.code)")
    assert result.stdout == "permission_denied\n" and counter.count("delete_file") == 0
    assert codes(result) == ["permission_denied"]


def test_connection_errors_of_python_tools_are_retryable_upstream_errors() -> None:
    tries: list[int] = []

    @tool(idempotent=True)
    def fetch() -> str:
        """Flaky network read."""
        tries.append(1)
        if len(tries) == 1:
            raise ConnectionResetError("peer reset")
        return "ok"

    @tool
    def push() -> str:
        """Flaky network write."""
        raise ConnectionRefusedError("nobody home")

    with Runtime([fetch, push], LOCAL) as rt:
        ledger = CallLedger()
        fetched = rt.host.call(ledger, "fetch", {})
        pushed = rt.host.call(ledger, "push", {})
    assert fetched.ok and fetched.result == "ok" and len(tries) == 2
    assert pushed.error is not None and (pushed.error.code, pushed.error.retryable) == ("upstream_error", True)
    assert "ConnectionRefusedError: nobody home" in pushed.error.message
