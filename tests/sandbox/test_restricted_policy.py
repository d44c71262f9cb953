"""The local backend's restricted policy refuses the classic escapes, each cleanly.

Every escape must end the run with a PolicyViolation (or the error CPython raises for a name the
policy does not define: NameError), never kill the kernel: the session stays usable after all of them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from codeact import Runtime, SandboxConfig
from codeact.runtime.session import Session

ESCAPES = [
    # dunder and frame walks
    ("().__class__.__base__.__subclasses__()", "__base__"),
    ("[].__class__.__mro__[-1].__subclasses__()", "__mro__"),
    ("type.__subclasses__(object)", "__subclasses__"),
    ("object.__subclasses__()", "__subclasses__"),
    ("(lambda: 0).__globals__", "__globals__"),
    ("(lambda: 0).__code__", "__code__"),
    ("def f():\n    x = 1\n    return lambda: x\nf().__closure__", "__closure__"),
    ("def g():\n    yield 1\n\nf = g().gi_frame\nf.f_back", "gi_frame"),
    ("def g():\n    yield 1\nx = g()\ngetattr(x, 'gi_frame')", "gi_frame"),
    ("async def c():\n    pass\nco = c()\nco.close()\nco.cr_frame", "cr_frame"),
    ("async def a():\n    yield 1\na().ag_frame", "ag_frame"),
    ("try:\n    1/0\nexcept Exception as e:\n    e.__traceback__.tb_frame.f_globals", "__traceback__"),
    ("try:\n    1/0\nexcept Exception as e:\n    t = getattr(e, '__traceback__')", "__traceback__"),
    ("import sys", "'sys' is not allowed"),
    ("x = 1\ngetattr(x, '__globals__')", "__globals__"),
    ("getattr(len, '__self__')", "__self__"),
    ("print.__self__", "__self__"),
    ("[].append.__self__", "__self__"),
    ("import functools\nfunctools.reduce(getattr, ['__class__', '__base__'], ())", "__base__"),
    ("list(map(getattr, [()], ['__class__']))[0].__base__", "__base__"),
    ("class A:\n    pass\nsuper(A, A()).__getattribute__('__class__')", "__getattribute__"),
    ("type(()).mro()", "mro"),
    # format-string attribute walks
    ('"{0.__class__.__base__}".format(())', "__base__"),
    ('"{0.__init__.__globals__}".format(object())', "__globals__"),
    ('"{x.__class__.__mro__}".format_map({"x": 1})', "__mro__"),
    ('str.format("{0.__class__.__bases__}", 1)', "__bases__"),
    ('fmt = "{0.__globals__}".format\nfmt(lambda: 0)', "__globals__"),
    ("import string\nstring.Formatter().format('{0.__class__}', 1)", "Formatter"),
    ("class S(str):\n    pass\nS.format('{0.__class__.__base__}', 1)", "__base__"),
    ("class S(str):\n    pass\nsuper(S, S('{0.__class__.__base__}')).format(1)", "__base__"),
    ("import operator\noperator.methodcaller('format', 1)('{0.__class__.__base__}')", "__base__"),
    ("import asyncio\nasyncio.current_task().get_stack()", "get_stack"),
    ("import base64\nbase64.main()", "base64.main"),
    ("from string import Formatter", "Formatter"),
    # imports outside the allowlist, and through allowed modules
    ("__import__('os')", "__import__"),
    ("import os", "'os' is not allowed"),
    ("import subprocess", "'subprocess' is not allowed"),
    ("import warnings\nwarnings.sys", "'warnings' is not allowed"),
    ("import doctest\ndoctest.inspect.os", "'doctest' is not allowed"),
    ("import typing\ntyping.sys", "'sys' is not allowed"),
    ("from typing import sys", "'sys' is not allowed"),
    ("import json\njson.decoder.re.enum.sys", "'sys' is not allowed"),
    ("import collections\ncollections._sys", "_sys"),
    ("import random\nrandom._os", "_os"),
    ("import dataclasses\ndataclasses._create_fn", "_create_fn"),
    ("import typing\ndef f(x: '__import__(\"os\")'): pass\ntyping.get_type_hints(f)", "get_type_hints"),
    ("import operator\noperator.attrgetter('__class__.__base__')(())", "__base__"),
    ("import operator\noperator.methodcaller('__subclasses__')(object)", "__subclasses__"),
    ("import io\nio.open('/etc/hostname')", "io.open"),
    ("import io\nio.FileIO('/etc/hostname')", "io.FileIO"),
    ("import asyncio\nawait asyncio.create_subprocess_shell('id')", "create_subprocess_shell"),
    ("import asyncio\nasyncio.get_running_loop()", "get_running_loop"),
    ("import asyncio\nimport asyncio.subprocess", "asyncio.subprocess"),
    ("import asyncio\nasync def f():\n    return 1\nt = asyncio.ensure_future(f())\nt.get_loop()", "get_loop"),
    ("import contextlib\ncontextlib.chdir('/')", "chdir"),
    ("import asyncio\nclass Q(asyncio.Queue):\n    pass\nasync def f():\n    q = Q()\n    await q.put(1)\n    return q._loop\nawait f()",
     "_loop"),
    ("import json.tool", "json.tool"),
    ("from . import x", "is not allowed"),
    # __builtins__ and the guards themselves
    ("__builtins__['__import__']('os')", "__builtins__"),
    ("__builtins__.open", "__builtins__"),
    ("_getattr_ = getattr", "_getattr_"),
    ("def _write_(x):\n    return x", "_write_"),
    ("import json as _getitem_", "_getitem_"),
    ("for _getiter_ in []:\n    pass", "_getiter_"),
    ("globals()['_getattr_']", "KeyError"),
    ("vars()['__builtins__']", "KeyError"),
    ("import json\nvars(json)", "__dict__"),
    ("import json\njson.__dict__", "__dict__"),
    ("import json\njson.dumps = print", "read-only"),
    ("import json\nsetattr(json, 'dumps', print)", "read-only"),
    ("class A:\n    pass\nsetattr(A(), '__class__', int)", "__class__"),
    ("class A:\n    pass\na = A()\na.__class__ = int", "__class__"),
    # type() / object.__new__ / class machinery
    ("object.__new__(object)", "__new__"),
    ("class M(type):\n    pass\nclass K(metaclass=M):\n    pass", "metaclass"),
    ("T = type('T', (), {})\nT.__bases__", "__bases__"),
    ("match ():\n    case object(__class__=c):\n        pass", "private attributes"),
    ("class P:\n    __match_args__ = ('__class__',)", "__match_args__"),
    # eval & co
    ("eval('1')", "Eval calls are not allowed"),
    ("exec('1')", "Exec calls are not allowed"),
    ("compile('1', 'x', 'eval')", "'compile' is not defined"),
    ("breakpoint()", "breakpoint"),
    # files outside the scratch directory
    ("open('/etc/passwd')", "outside the scratch directory"),
    ("open('../escape.txt', 'w')", "outside the scratch directory"),
    ("open(1)", "scratch directory"),
    ("open('x.txt', 'w', opener=print)", "scratch directory"),
    # decorators used to reach frames
    ("def grab(fn):\n    return fn.__globals__\n@grab\ndef f():\n    pass", "__globals__"),
    ("import functools\ndef d(fn):\n    @functools.wraps(fn)\n    def w():\n        return w.__wrapped__.__code__\n    return w\n"
     "@d\ndef f():\n    pass\nf()", "__code__"),
]


@pytest.fixture(scope="module")
def restricted() -> Iterator[Runtime]:
    with Runtime([], SandboxConfig(backend="local", timeout_s=10, isolation="none")) as rt:
        assert rt.config.effective_policy() == "restricted"
        yield rt


@pytest.fixture(scope="module")
def session(restricted: Runtime) -> Iterator[Session]:
    with restricted.session() as s:
        yield s


@pytest.mark.parametrize(("code", "needle"), ESCAPES)
def test_escape_refused(session: Session, code: str, needle: str) -> None:
    result = session.run(code)
    assert not result.ok and result.error is not None, result
    text = f"{result.error.type}: {result.error.message}"
    assert needle in text, text
    assert result.error.type in ("PolicyViolation", "NameError", "KeyError"), text
    assert session.run("1 + 1").value == 2, "the kernel must survive every escape attempt"


def test_import_refusals_are_import_errors(session: Session) -> None:
    code = "try:\n    import os\nexcept ImportError:\n    os = None\nos is None"
    assert session.run(code).value is True
    result = session.run("import surely_not_a_module_xyz")
    assert result.error is not None and result.error.type == "ModuleNotFoundError"


def test_ordinary_code_still_works(restricted: Runtime) -> None:
    code = (
        "import math, json, collections\n"
        "class Point:\n    def __init__(self, x):\n        self.x = x\n"
        "counts = collections.Counter('abca')\n"
        "total = 0\nfor i in range(5):\n    total += i\n"
        "a, *rest = [1, 2, 3]\n"
        "print(json.dumps({'t': total}))\n"
        "[Point(3).x, counts['a'], math.sqrt(16), rest, max(rest), sorted({3, 1})]"
    )
    result = restricted.run(code)
    assert result.ok, result.error
    assert result.stdout == '{"t": 10}\n'
    assert result.value == [3, 2, 4.0, [2, 3], 3, [1, 3]]


def test_print_at_module_scope_after_other_statements(restricted: Runtime) -> None:
    """Regression: ``x = 1`` then ``print`` raised NameError: name '_print' is not defined."""
    result = restricted.run('x = 1\nprint("a")\n')
    assert result.ok and result.stdout == "a\n", result


def test_open_inside_the_scratch_directory(restricted: Runtime) -> None:
    with restricted.session() as s:
        assert s.run("with open('a.txt', 'w') as f:\n    f.write('hi')").ok
        assert s.run("open('a.txt').read()").value == "hi"
        assert "b.txt" in [f.path for f in s.run("open('b.txt', 'w').close()").files]


def test_policy_errors_have_line_numbers(restricted: Runtime) -> None:
    result = restricted.run("a = 1\nb = 2\nc = a.__globals__\n")
    assert result.error is not None and result.error.lineno == 3


def test_cli_print_example_from_the_issue() -> None:
    """``printf 'x = 1\\nprint("a")\\n' | codeact exec - --backend local`` prints ``a``."""
    proc = subprocess.run(
        [sys.executable, "-m", "codeact.cli", "exec", "-", "--backend", "local", "--json"],
        input='x = 1\nprint("a")\n', capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout)
    assert result["ok"] and result["stdout"] == "a\n", result
