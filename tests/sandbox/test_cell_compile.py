"""The kernel compiles a cell straight from its source when its last statement is certainly not an
expression (``_cells.statements_only``); any doubt takes the AST path. Pinned here: the shortcut
never fires on a cell that ends with an expression, and a cell's value is the same either way, in
the kernel's own Python (local and Docker)."""

from __future__ import annotations

import ast
import itertools

import pytest

from codeact import Runtime
from codeact.kernel import _cells

HEADS = ["", "x = 1\n", "import os\n", "def f(a=1):\n    return a\n", "y = [i\n     for i in range(3)]\n"]
TAILS = [
    "x = 1", "x += 1", "a.b = 3", "del x", "assert True", "pass", "import os", "from os import path",
    "def g():\n    return 2", "class C:\n    pass", "@staticmethod\ndef h(): pass", "for i in range(2): pass",
    "while False:\n    pass", "if True:\n    z = 1", "if True:\n    z = 1\nelse:\n    z", "with open('/dev/null'): pass",
    "try:\n    pass\nfinally:\n    q = 1", "x: int = 1", "a, b = 1, 2", "l = [0]\nl[0] = 1", "import_x = 3",
    "match = 3", "x = 1; 5", "x = 'a;b'", "print(1)", "f(\na=1)", "x == 1", "x <= 1", "(w := 1)", "lambda: 1",
    "7", "'doc'", "None", "1 + 1", "x", "import_x = 3\nimport_x", "x = (\n    1)\n3", "x = 1 \\\n    + 2",
    "if True:\n    pass\nelif False:\n    x",
]
CASES = [head + tail for head, tail in itertools.product(HEADS, TAILS)]


def _ends_with_expression(source: str) -> bool:
    body = ast.parse(source).body
    return bool(body) and isinstance(body[-1], ast.Expr)


@pytest.mark.parametrize("source", CASES)
def test_the_shortcut_never_fires_on_a_trailing_expression(source: str) -> None:
    code = _cells.statements_only(source, "<cell-1>")
    if _ends_with_expression(source):
        assert code is None, source


def test_the_shortcut_fires_on_plain_statements() -> None:
    """Not a check that cannot fail: the common endings do take the shortcut."""
    for source in ["x = 1", "import os", "def f():\n    return 1", "for i in range(3):\n    pass", "a.b = 1"]:
        assert _cells.statements_only(source, "<cell-1>") is not None, source


def test_a_syntax_error_is_the_parsers() -> None:
    with pytest.raises(SyntaxError) as shortcut:
        _cells.statements_only("x = (1,\n", "<cell-1>")
    with pytest.raises(SyntaxError) as parser:
        ast.parse("x = (1,\n", "<cell-1>")
    assert (shortcut.value.msg, shortcut.value.lineno) == (parser.value.msg, parser.value.lineno)


def test_a_cells_value_is_the_same_in_the_kernels_python(runtime: Runtime) -> None:
    """Each tail after ``x = 41``: the value the kernel reports is the value of the trailing
    expression, or None, whichever way the cell was compiled."""
    expected = {"x = 1": None, "x += 1": None, "pass": None, "7": 7, "'doc'": "doc", "1 + 1": 2, "x": 41,
                "x = 1; 5": 5, "x == 1": False, "x <= 1": False, "(w := 1)": 1, "print(1)": None,
                "import_x = 3\nimport_x": 3, "x = (\n    1)\n3": 3, "x = 1 \\\n    + 2": None,
                "if True:\n    pass\nelif False:\n    x": None, "def g():\n    return 2": None}
    with runtime.session() as session:
        for tail, value in expected.items():
            result = session.run("x = 41\n" + tail)
            assert result.ok, (tail, result.error)
            assert result.value == value, (tail, result.value)
