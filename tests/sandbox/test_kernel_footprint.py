"""An idle kernel holds only what serving needs: modules that a cell's compile, a failed cell's
traceback or a date/Decimal value need are imported when they are needed (each costs every idle
session memory), and the values they serve still come back right: the cells' source lines reach
``linecache`` whenever it is first imported, even within the cell whose lines it shows."""

from __future__ import annotations

from codeact import Runtime

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
