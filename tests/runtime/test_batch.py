"""Batch data processing: ``map_code`` and ``codeact batch`` — every result kept, in order."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from codeact import Runtime, SandboxConfig, SandboxError, Session, ToolError, tool
from codeact.cli import app
from codeact.runtime import batch as runtime_batch
from codeact.runtime.batch import function_code, map_code
from tests._configs import LOCAL


@tool
def price(sku: str) -> float:
    """Unit price of a product.

    Args:
        sku: Product code.
    """
    if sku == "missing":
        raise ToolError("not_found", "no such product")
    return float(len(sku))


CODE = """
qty = item["qty"]
total = price(sku=item["sku"]) * qty
{"sku": item["sku"], "total": total}
"""


def _inputs(n: int, bad: set[int]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(n):
        if i in bad:
            out.append({"sku": "missing", "qty": 1} if i % 2 else {"sku": "ab", "qty": "x"})
        else:
            out.append({"sku": "a" * (1 + i % 5), "qty": i})
    return out


@pytest.fixture(scope="module")
def runtime() -> Any:
    with Runtime([price], LOCAL) as rt:
        yield rt


def test_500_inputs_3_failing_all_kept_in_order(runtime: Runtime) -> None:
    bad = {17, 250, 498}
    items = _inputs(500, bad)
    results = map_code(runtime, CODE, items, concurrency=4)
    assert len(results) == 500
    assert {i for i, r in enumerate(results) if not r.ok} == bad
    for i, (item, result) in enumerate(zip(items, results, strict=True)):
        if i not in bad:
            assert result.value == {"sku": item["sku"], "total": float(len(item["sku"])) * item["qty"]}
    assert results[17].error is not None and results[17].error.type == "ToolError"  # 17 is odd: a missing sku
    assert results[250].error is not None and results[250].error.type == "TypeError"


def test_each_item_gets_a_fresh_namespace(runtime: Runtime) -> None:
    code = """
seen = globals().get("leftover", "clean")
leftover = item
price = None          # rebinding a tool stub must not leak into the next item
import math
[seen, item]
"""
    results = map_code(runtime, code, list(range(20)), concurrency=2)
    assert [r.value for r in results] == [["clean", i] for i in range(20)]
    check = map_code(runtime, 'price(sku="abc")', [0, 1], concurrency=1)
    assert [r.value for r in check] == [3.0, 3.0]


def test_a_function_is_shipped_by_source(runtime: Runtime) -> None:
    def total(item: dict[str, Any]) -> float:
        return price(sku=item["sku"]) * item["qty"]

    assert function_code(total).rstrip().endswith("total(item)")
    results = map_code(runtime, total, [{"sku": "abc", "qty": 2}, {"sku": "a", "qty": 5}])
    assert [r.value for r in results] == [6.0, 5.0]
    with pytest.raises(TypeError, match="lambda"):
        map_code(runtime, lambda item: item, [1])


def test_a_crashed_sandbox_fails_only_its_item(runtime: Runtime) -> None:
    code = "import os\nif item == 2:\n    os._exit(9)\nitem * 10"
    results = map_code(runtime, code, [0, 1, 2, 3, 4], concurrency=1)
    assert [r.ok for r in results] == [True, True, False, True, True]
    assert [r.value for r in results if r.ok] == [0, 10, 30, 40]


@pytest.mark.parametrize("failing", [1, 3])
def test_a_sandbox_that_fails_to_start_fails_only_its_item(monkeypatch: pytest.MonkeyPatch, failing: int) -> None:
    # The first start failing means no sandbox can be had: map raises. A later one is that item's
    # result: the finished ones are kept and the rest run.
    from codeact.errors import SandboxUnavailable
    from codeact.sandbox.local import LocalSandbox

    real, starts, lock = LocalSandbox.start, [0], threading.Lock()

    def flaky(self: LocalSandbox) -> None:
        with lock:
            starts[0] += 1
            nth = starts[0]
        if nth == failing:
            raise SandboxUnavailable("simulated: the engine refused this one")
        real(self)

    monkeypatch.setattr(LocalSandbox, "start", flaky)
    config = LOCAL
    with Runtime([], config) as rt:
        if failing == 1:
            with pytest.raises(SandboxUnavailable, match="refused this one"):
                rt.map("item * 2", range(6), concurrency=1, isolation="sandbox")
            return
        results = rt.map("item * 2", range(6), concurrency=1, isolation="sandbox")
    assert [r.value for r in results] == [0, 2, None, 6, 8, 10]
    assert results[2].termination == "killed" and "could not start" in (results[2].reason or "")


def test_a_start_failing_in_the_first_wave_fails_only_its_item(monkeypatch: pytest.MonkeyPatch) -> None:
    # With two workers, the second start fails while the first item still runs: no item has
    # finished yet, but a sandbox could be had, so the batch goes on.
    from codeact.errors import SandboxUnavailable
    from codeact.sandbox.local import LocalSandbox

    real, starts, lock = LocalSandbox.start, [0], threading.Lock()

    def flaky(self: LocalSandbox) -> None:
        with lock:
            starts[0] += 1
            nth = starts[0]
        if nth == 2:
            raise SandboxUnavailable("simulated: the engine refused this one")
        real(self)

    monkeypatch.setattr(LocalSandbox, "start", flaky)
    config = LOCAL
    with Runtime([], config) as rt:
        results = rt.map("import time\ntime.sleep(0.5)\nitem * 2", range(4), concurrency=2, isolation="sandbox")
    done = [(i, r.value) for i, r in enumerate(results) if r.ok]
    assert len(done) == 3 and all(value == 2 * i for i, value in done)  # which item met the failure varies
    assert sum(1 for r in results if not r.ok and "could not start" in (r.reason or "")) == 1


def test_restricted_policy_uses_a_sandbox_per_item() -> None:
    with Runtime([price], SandboxConfig(backend="local", timeout_s=10)) as rt:  # local defaults to restricted
        results = map_code(rt, "x = item + 1\nx", [1, 2, 3], concurrency=2)
        assert [r.value for r in results] == [2, 3, 4]
        with pytest.raises(ValueError, match="restricted"):
            map_code(rt, "item", [1], isolation="namespace")


def test_inputs_must_be_json(runtime: Runtime) -> None:
    with pytest.raises(TypeError, match="input 1"):
        map_code(runtime, "item", [1, {1, 2}])
    assert map_code(runtime, "item", []) == []


def test_reset_removes_user_names_and_restores_shadowed_stubs_and_builtins(runtime: Runtime) -> None:
    with runtime.session() as session:
        session.run("x = 1\nimport math\nprice = None\nlen = lambda *a: -1\nfinal_answer = 0\n"
                    "parallel = ToolError = aio = None")
        session.reset_namespace()
        result = session.run('[globals().get("x", "gone"), globals().get("math", "gone"), price(sku="abc"), '
                             'len("ab"), callable(final_answer), callable(parallel), aio is not None, '
                             'issubclass(ToolError, Exception)]')
        assert result.value == ["gone", "gone", 3.0, 2, True, True, True, True]


def test_reset_restores_a_stub_the_code_deleted(runtime: Runtime) -> None:
    with runtime.session() as session:
        assert session.run("del price\ndel aio\ndel ToolError\n'price' in globals()").value is False
        assert session.run('price(sku="ab")').error is not None  # NameError: gone for now
        session.reset_namespace()
        assert session.run('[price(sku="abc"), await aio.price(sku="ab"), ToolError.__name__]').value == [
            3.0, 2.0, "ToolError"]


def test_reset_works_under_the_restricted_policy() -> None:
    with Runtime([price], SandboxConfig(backend="local", timeout_s=10)) as rt, rt.session() as session:
        session.run("x = 1\nprice = None")
        session.reset_namespace()
        assert session.run('price(sku="abcd")').value == 4.0
        result = session.run("x")
        assert result.error is not None and result.error.type == "NameError"


def test_bind_sets_nested_json_values(runtime: Runtime) -> None:
    value = {"a": [1, 2.5, None, True, {"b": "ü\n\"'", "c": []}], "n": -3, "empty": {}}
    with runtime.session() as session:
        session.bind_names({"item": value, "other": [[[]]], "flag": False})
        result = session.run("[item, other, flag, type(item['a'][1]).__name__, type(item['n']).__name__]")
        assert result.value == [value, [[[]]], False, "float", "int"]
        session.bind_names({"item": 2})  # binding again replaces
        assert session.run("item").value == 2


def test_bind_refuses_a_value_that_is_not_json_and_binds_nothing(runtime: Runtime) -> None:
    with runtime.session() as session:
        session.run("item = 'before'")
        for bad in ({1, 2}, float("nan"), object()):
            with pytest.raises(TypeError, match="the value for 'item' is not JSON"):
                session.bind_names({"ok": 1, "item": bad})
        with pytest.raises(ValueError, match="cannot bind '__builtins__'"):
            session.bind_names({"__builtins__": 1})
        with pytest.raises(ValueError, match="cannot bind 'not a name', 'class'"):
            session.bind_names({"not a name": 1, "class": 2})
        assert session.run("[item, 'ok' in globals()]").value == ["before", False]  # the same sandbox, untouched
        session.bind_names({"item": 3})
        assert session.run("item").value == 3


def test_a_value_that_is_not_json_fails_only_its_item(runtime: Runtime) -> None:
    worker = runtime_batch._Worker(runtime, reuse=True)
    try:
        failed = worker.run("item", {1, 2})
        assert not failed.ok and failed.termination == "error" and not failed.state_lost
        assert failed.error is not None and failed.error.type == "TypeError" and "not JSON" in failed.error.message
        assert worker.run("item", [1, {"a": 2}]).value == [1, {"a": 2}]
    finally:
        worker.close()


def test_a_stop_that_lands_while_binding_starts_no_run(runtime: Runtime) -> None:
    stop = threading.Event()
    stop.set()
    worker = runtime_batch._Worker(runtime, reuse=True, stop=stop)
    try:
        result = worker.run("item", 1)
        assert result.termination == "interrupted" and result.reason == "not run: the batch was interrupted"
        assert worker.session is not None and not worker.session.history  # bound, never run
    finally:
        worker.close()


def test_a_reset_marks_each_cell_once_and_a_batch_keeps_no_log(runtime: Runtime,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # A batch resets once per item: marking every earlier cell at each reset made a batch quadratic
    # (2.5 ms an item by the 8,000th), and its worker's cell log grew with the batch.
    from codeact.runtime.snapshot import CellRecord

    marked: list[int] = []
    real = CellRecord.__setattr__

    def counting(self: CellRecord, name: str, value: Any) -> None:
        if name == "in_state":
            marked.append(self.index)
        real(self, name, value)

    monkeypatch.setattr(CellRecord, "__setattr__", counting)
    with runtime.session() as session:
        for i in range(4):
            session.reset_namespace()
            session.run(f"v = {i}")
        assert sorted(marked) == [1, 2, 3]  # each cell once, by the reset after it
        assert [c.in_state for c in session.cells] == [False, False, False, True]
        session.reset_namespace(forget=True)
        session.run("w = 1")
        assert [c.code for c in session.cells] == ["w = 1"] and session.snapshot().cells[0].code == "w = 1"


def test_reset_and_bind_run_no_code(runtime: Runtime) -> None:
    with runtime.session() as session:
        for i in range(3):
            session.reset_namespace()
            session.bind_names({"item": i})
            result = session.run("item\n1 / 0")
            assert result.error is not None and f'"<cell-{i + 1}>"' in result.error.traceback  # the kernel's count
        assert len(session.history) == 3 and [c.code for c in session.cells] == ["item\n1 / 0"] * 3
        assert [c.in_state for c in session.cells] == [False, False, True]  # a reset takes earlier cells out
        assert [c.index for c in session.snapshot().cells] == [3]
    results = map_code(runtime, "item\n1 / 0", [0, 1, 2], concurrency=1)  # one cell per item, no more
    assert [f'"<cell-{i + 1}>"' in (r.error.traceback if r.error else "") for i, r in enumerate(results)] == [True] * 3


def _wrote(session: Session) -> None:
    """Wait until the sandbox wrote to its channel (or closed it), between runs."""
    import select

    driver = session.sandbox_state.driver
    assert driver is not None
    assert select.select([driver.sandbox.channel.sock], [], [], 60)[0], "the sandbox wrote nothing"


def test_a_tool_call_between_runs_is_refused_not_answered_later(runtime: Runtime) -> None:
    with runtime.session() as session:
        session.run("import threading, time\nout = []\n"
                    "def late():\n    time.sleep(0.1)\n    try:\n        out.append(price(sku='ab'))\n"
                    "    except ToolError as exc:\n        out.append(exc.message)\n"
                    "t = threading.Thread(target=late)\nt.start()")
        _wrote(session)  # the call frame waits in the channel; the bind reads it, refuses it
        session.bind_names({"item": 1})
        result = session.run("t.join(5)\n[item, out]")
        assert result.value == [1, ["no run is in progress: a tool call made between runs is refused"]]
        assert result.calls == []


def test_a_sandbox_that_dies_before_a_reset_is_replaced(runtime: Runtime) -> None:
    with runtime.session() as session:
        session.run("import os, threading, time\n"
                    "threading.Thread(target=lambda: (time.sleep(0.1), os._exit(3))).start()")
        _wrote(session)
        with pytest.raises(SandboxError, match="exit status 3"):
            session.reset_namespace()
        session.bind_names({"item": 5})  # a new sandbox
        assert session.run("item").value == 5


def test_a_forged_answer_to_bind_kills_the_sandbox(runtime: Runtime) -> None:
    from codeact import ProtocolViolation

    with runtime.session() as session:
        session.run("import json, os, socket, struct, threading, time\n"
                    "fd = next(int(n) for n in os.listdir('/proc/self/fd') "
                    "if os.readlink(f'/proc/self/fd/{n}').startswith('socket:'))\n"
                    "chan = socket.socket(fileno=os.dup(fd))\n"
                    "body = json.dumps({'type': 'done', 'id': 'x', 'termination': 'completed'}).encode()\n"
                    "threading.Thread(target=lambda: (time.sleep(0.1), "
                    "chan.sendall(struct.pack('!I', len(body)) + body))).start()")
        _wrote(session)
        with pytest.raises(ProtocolViolation, match="protocol violation: answer to 'bind'"):
            session.bind_names({"item": 1})
        assert session.run("'chan' in globals()").value is False  # a fresh sandbox


def test_progress_is_an_object_the_runtime_advances(runtime: Runtime) -> None:
    class Progress:
        def __init__(self) -> None:
            self.seen: list[str] = []

        def __enter__(self) -> Progress:
            self.seen.append("enter")
            return self

        def __exit__(self, *exc: object) -> None:
            self.seen.append("exit")

        def advance(self, *, failed: bool = False) -> None:
            self.seen.append("failed" if failed else "ok")

    bar = Progress()
    results = runtime.map("1 / item", [1, 0, 2], concurrency=1, progress=bar)
    assert [r.ok for r in results] == [True, False, True]
    assert bar.seen == ["enter", "ok", "failed", "ok", "exit"]


def test_progress_true_draws_the_bar_on_stderr(runtime: Runtime, capsys: pytest.CaptureFixture[str]) -> None:
    assert [r.value for r in runtime.map("1 / item", [1, 0], concurrency=1, progress=True)] == [1.0, None]
    err = capsys.readouterr().err
    assert "batch" in err and "2/2" in err and "failed 1" in err
    assert [r.value for r in map_code(runtime, "item", [1, 2], progress=True)] == [1, 2]  # the old import path
    assert "2/2" in capsys.readouterr().err


def test_cli_batch_500_inputs_3_failing(tmp_path: Path) -> None:
    tools_file = tmp_path / "tools.py"
    tools_file.write_text(
        "from codeact import tool, ToolError\n\n"
        "@tool\ndef price(sku: str) -> float:\n"
        '    """Unit price.\n\n    Args:\n        sku: Product code.\n    """\n'
        '    if sku == "missing":\n        raise ToolError("not_found", "no such product")\n'
        "    return float(len(sku))\n"
    )
    code_file = tmp_path / "action.py"
    code_file.write_text(CODE)
    inputs = tmp_path / "inputs.jsonl"
    bad = {3, 100, 499}
    inputs.write_text("".join(json.dumps(item) + "\n" for item in _inputs(500, bad)))
    out = tmp_path / "results.jsonl"
    result = CliRunner().invoke(app, ["batch", str(code_file), str(inputs), "--tools", str(tools_file),
                                      "--backend", "local", "--policy", "none", "--concurrency", "4",
                                      "--out", str(out), "--no-progress"])
    assert result.exit_code == 1, result.output  # some inputs failed
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["index"] for r in rows] == list(range(500))
    assert {r["index"] for r in rows if not r["ok"]} == bad
    assert rows[4]["value"] == {"sku": "aaaaa", "total": 20.0}
    assert "500 results, 3 failed (inputs 3, 100, 499)" in result.output


def test_cli_batch_usage_errors(tmp_path: Path) -> None:
    code_file = tmp_path / "a.py"
    code_file.write_text("item")
    inputs = tmp_path / "in.jsonl"
    inputs.write_text("1\n{oops\n")
    # wide: the usage box wraps at the terminal's width, and a long tmp path would split the name
    result = CliRunner().invoke(app, ["batch", str(code_file), str(inputs), "--backend", "local"],
                                env={"COLUMNS": "500"})
    assert result.exit_code == 2 and "in.jsonl:2" in result.output
