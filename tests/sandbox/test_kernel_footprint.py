"""An idle kernel holds only what serving needs: modules that a cell's compile, a failed cell's
traceback or a date/Decimal value need are imported when they are needed (each costs every idle
session memory), and the values they serve still come back right."""

from __future__ import annotations

from codeact import Runtime

LAZY = ("ast", "traceback", "datetime", "decimal", "socket", "selectors")


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
