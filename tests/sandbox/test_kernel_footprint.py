"""An idle kernel holds only what serving needs: modules that a cell's compile, a failed cell's
traceback or a date/Decimal value need are imported when they are needed (each costs every idle
session memory), and the values they serve still come back right: the cells' source lines reach
``linecache`` whenever it is first imported, even within the cell whose lines it shows."""

from __future__ import annotations

from codeact import Runtime, SandboxConfig

LAZY = ("ast", "traceback", "datetime", "decimal", "socket", "selectors", "linecache", "tokenize")


def test_an_idle_kernel_has_not_imported_what_it_does_not_need(runtime: Runtime) -> None:
    with runtime.session() as session:
        assert session.run("x = 1").ok
        assert session.run("x + 1").value == 2  # a cell with a value parses its tree
        loaded = session.run(f"import sys\nsorted(set(sys.modules) & {set(LAZY)!r})")
        assert (loaded.ok, loaded.value) == (True, []), loaded


def test_what_the_lazy_modules_serve_still_works(runtime: Runtime) -> None:
    with runtime.session() as session:
        failed = session.run("def f():\n    1 / 0\nf()")
        assert failed.error is not None and failed.error.type == "ZeroDivisionError"
        assert "line 2" in failed.error.traceback and "<cell-" in failed.error.traceback
        values = session.run("import datetime, decimal\n"
                             "[datetime.date(2026, 12, 3), decimal.Decimal('1.5'), decimal.Decimal('0.1')]")
        assert values.value == ["2026-12-03", 1.5, "0.1"], values


def test_the_cells_lines_reach_linecache_whoever_imports_it_first(runtime: Runtime) -> None:
    with runtime.session() as session:
        assert session.run("def f():\n    return 1 / 0").ok  # kept while nothing has imported linecache
        shown = session.run("import sys\nbefore = 'linecache' in sys.modules\nimport inspect, traceback\n"
                            "try:\n    f()\nexcept ZeroDivisionError:\n    text = traceback.format_exc()\n"
                            "[before, text, inspect.getsource(f)]")
        assert shown.ok, shown
        before, text, source = shown.value
        assert before is False
        assert "return 1 / 0" in text and "    f()" in text, text  # an earlier cell's line and this cell's
        assert source == "def f():\n    return 1 / 0"
        failed = session.run("f()")
        assert failed.error is not None and "return 1 / 0" in failed.error.traceback, failed.error


#: What the built-in tools' stubs showed before their typed part became lazy (annotations postponed).
SIGNATURES = ["(call_id: 'str', offset: 'int' = 0, limit: 'int | None' = None) -> 'ReadResultResult'",
              "(query: 'str', limit: 'int' = 10) -> 'list[ToolHit]'", "(name: 'str') -> 'str'"]


def test_an_idle_kernel_with_the_default_tools_has_not_imported_typing(backend: str) -> None:
    config = SandboxConfig(backend=backend, timeout_s=10, grace_s=1, policy="none")  # type: ignore[arg-type]
    with Runtime([], config) as rt, rt.session() as session:
        assert "from typing import TypedDict" in rt.prompt_view  # what the model sees is unchanged
        idle = session.run("import sys\n'typing' in sys.modules")
        assert (idle.ok, idle.value) == (True, False), idle
        shown = session.run("import inspect, pydoc, typing\n"
                            "[[str(inspect.signature(f)) for f in (read_result, search_tools, describe_tool)],\n"
                            " pydoc.render_doc(search_tools, renderer=pydoc.plaintext).splitlines()[2],\n"
                            " sorted(typing.get_type_hints(read_result)['return'].__required_keys__),\n"
                            " typing.is_typeddict(typing.get_type_hints(search_tools)['return'].__args__[0])]")
        assert shown.value == [SIGNATURES, "search_tools(query: 'str', limit: 'int' = 10) -> 'list[ToolHit]'",
                               ["call_id", "next_offset", "offset", "text", "total_chars"], True], shown
        calls = session.run("[repr(read_result.__defaults__), repr(search_tools.__defaults__), aio.read_result.__name__]")
        assert calls.value == ["(0, None)", "(10,)", "read_result"], calls


def test_a_typed_stub_reached_by_a_computed_name_is_compiled_with_its_classes(backend: str) -> None:
    config = SandboxConfig(backend=backend, timeout_s=10, grace_s=1, policy="none")  # type: ignore[arg-type]
    with Runtime([], config) as rt, rt.session() as session:
        found = session.run("globals()['search_' + 'tools']('read a large result', limit=1)")
        assert found.ok and isinstance(found.value, list), found
        assert session.run("import sys\n'typing' in sys.modules").value is True
