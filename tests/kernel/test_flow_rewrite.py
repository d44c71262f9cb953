"""The cell rewrite of data-flow tracking (``kernel/_flow_rewrite.py``) keeps what code does: each
program below prints the same under tracking (with every literal labeled) as plain, in-process."""

from __future__ import annotations

import ast
import contextlib
import io
import threading

import pytest

from codeact.kernel import flow
from codeact.kernel._flow_rewrite import instrument

PROGRAMS = {
    "arith": "x = 7\nx += 3\nx //= 2\nprint(x, -x, ~x, x ** 2, 7 / 2, 1 < x <= 5, x in [5], x not in {5})",
    "none_and_bools": "d = {}\nv = d.get('k')\nprint(v is None, v is not None, not v, True and 3, 0 or None, [v, True])",
    "strings": "s = 'Hello'\nprint(s.upper(), s[1:3], s[::-1], f'{s!r:>9}|{len(s):03d}', '%s-%d' % (s, 4), s * 2)",
    "containers": ("a = [3, 1, 2]\na.append(0)\na.sort()\nd = {k: v for k, v in zip('abc', a)}\n"
                   "print(a, d, {**d, 'z': 9}, [*a, 5], sorted(d.items()), tuple(x for x in a if x))"),
    "unpack": "a, (b, *c) = 1, (2, 3, 4)\nfor i, (k, v) in enumerate({'x': 1}.items()):\n    print(i, k, v, a, b, c)",
    "functions": ("def f(x, *args, y=2, **kw):\n    '''doc'''\n    return x + y + sum(args) + len(kw)\n"
                  "g = lambda z=1: z * 2\nprint(f(1, 2, 3, y=4, q=5), g(), f.__doc__)"),
    "generators": "def gen(n):\n    for i in range(n):\n        yield i * i\nprint(list(gen(4)), sum(gen(3)), next(gen(2)))",
    "classes": ("class A:\n    k = 1\n    def __init__(self, v):\n        self.v = v\n    def __repr__(self):\n"
                "        return f'A({self.v})'\nclass B(A):\n    def __init__(self):\n        super().__init__(5)\n"
                "print(B(), A(2).k, isinstance(B(), A))"),
    "control": ("n = 0\nwhile n < 5:\n    n += 1\n    if n == 2:\n        continue\n    if n == 4:\n        break\n"
                "else:\n    n = -1\nprint(n)\nmatch [1, 2]:\n    case [x, y]:\n        print('m', x, y)"),
    "exceptions": ("try:\n    1 / 0\nexcept ZeroDivisionError as e:\n    print('caught', type(e).__name__)\n"
                   "try:\n    assert 1 == 2, 'no'\nexcept AssertionError as e:\n    print(e)\nfinally:\n    print('f')"),
    "with_and_walrus": "import io\nwith io.StringIO('ab') as f:\n    print(f.read())\nif (n := 3) > 2:\n    print(n)",
    "scopes": ("def outer():\n    x = 1\n    def inner():\n        nonlocal x\n        x += 1\n        return x\n"
               "    return inner()\nG = 0\ndef bump():\n    global G\n    G += 1\nbump()\nprint(outer(), G, dir()[:0])"),
    "json_and_exec": ("import json\nprint(json.dumps({'a': [1, None, True, 2.5]}))\nexec('q = 40 + 2')\n"
                      "print(q, eval('q + 1'), locals() is globals())"),
}


def _plain(source: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(source, "<plain>", "exec"), {"__name__": "__main__"})
    return out.getvalue()


def _tracked(source: str, context: list[str]) -> tuple[str, flow.Flow]:
    tracker = flow.Flow(threading.get_ident())
    code = compile(instrument(ast.parse(source), tracker.begin(context)), "<cell-1>", "exec")
    tracker.register(code)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(code, {"__name__": "__main__", "__flow__": tracker})
    return out.getvalue(), tracker


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_instrumented_code_prints_what_plain_code_prints(name: str) -> None:
    source = PROGRAMS[name]
    assert _tracked(source, ["ctx"])[0] == _plain(source)
    assert _tracked(source, [])[0] == _plain(source)


def test_printing_a_literal_under_a_context_labels_stdout() -> None:
    _out, tracker = _tracked("print('hi')", ["untrusted"])
    assert tracker.out == {"stdout": frozenset({"untrusted"})}
    _out, tracker = _tracked("print('hi')", [])
    assert tracker.out == {}


def test_a_label_never_lands_on_a_shared_object() -> None:
    labels = frozenset({"x"})
    for shared in (0, 1, 256, "", "a", None, True, False, ()):
        boxed = flow.add(shared, labels)
        assert boxed is not shared and flow.own(shared) == flow.EMPTY and flow.own(boxed) == labels
        assert boxed == shared and flow.plain(boxed) == shared and type(flow.plain(boxed)) is type(shared)
