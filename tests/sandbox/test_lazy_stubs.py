"""Lazy tool stubs (issue 12): a session with a large toolset compiles only the stubs its code names.

The kernel gets the lean module whole but compiles only what precedes the lazy marker; every tool
name holds a stand-in until a cell names it, and then the real stub function. Observable without
timing: which names hold functions of the stubs' module.
"""

from __future__ import annotations
import __future__

import textwrap
from collections.abc import Iterator
from typing import Any

import pytest

from codeact import Runtime, SandboxConfig, Toolset
from codeact.kernel import lazy_stubs
from codeact.tool_stubs import ToolSpec, python_names
from codeact.tool_stubs.render import LAZY_MARKER, TYPED_MARKER, render_lean_stubs, render_stubs
from tests.servers.big_openapi import big_document
from tests.servers.json_http import json_server

#: The stub functions compiled so far in the session (the preamble's helpers left out).
COMPILED = ("sorted(n for n, v in globals().items() if type(v).__name__ == 'function' "
            "and v.__module__ == 'codeact_tools' and not n.startswith('__codeact'))")


@pytest.fixture(scope="module")
def big() -> Iterator[Toolset]:
    with json_server(lambda request: {"path": request["path"]}) as (url, _seen):
        yield Toolset.from_openapi(big_document(url))


def test_the_marker_is_the_hosts_and_split_finds_every_stub(big: Toolset) -> None:
    assert lazy_stubs.MARKER == LAZY_MARKER
    lean = render_lean_stubs(big.specs)
    now, later = lazy_stubs.split(lean)
    assert list(later) == list(python_names(big.specs).values())
    assert "def " not in now.split("__codeact_mark_defaults__(functions)")[1]  # no stub is compiled up front
    assert later["repos_archive_repository"] == textwrap.dedent("""\
        def repos_archive_repository(owner, repo, repo_id):
            return __codeact_call__("repos/archive-repository", __codeact_args__(__codeact_locals__()))""")
    scope: dict[str, Any] = {"__codeact_call__": lambda name, args: (name, args)}
    exec(compile(now, "<t>", "exec"), scope)
    stubs = lazy_stubs.LazyStubs(scope, later)
    namespace: dict[str, Any] = {}
    stubs.bind(namespace)
    namespace["labels_list_labels"] = "mine"  # the code rebound a tool's name
    assert isinstance(namespace["repos_get_repository"], lazy_stubs.Pending) and stubs.compiled == {}
    code = compile("def f():\n    return [repos_get_repository(o, r, 1) for o, r in x], labels_list_labels", "<c>", "exec")
    stubs.install(lazy_stubs.code_names(code), namespace)  # a name the code rebound stays the code's
    assert list(stubs.compiled) == ["repos_get_repository"]
    assert namespace["repos_get_repository"] is stubs.compiled["repos_get_repository"]
    assert namespace["repos_get_repository"]("o", "r", 1) == ("repos/get-repository", {"owner": "o", "repo": "r",
                                                                                       "repo_id": 1})
    assert namespace["labels_list_labels"] == "mine"
    assert namespace["issues_list_issues"]("o", "r") == ("issues/list-issues", {"owner": "o", "repo": "r"})
    assert "describe_tool('repos_get_repository')" in (namespace["repos_get_repository"].__doc__ or "")


def test_small_toolsets_and_typed_modules_have_nothing_lazy() -> None:
    module = render_stubs([ToolSpec(name="t", input_schema={"properties": {"a": {"type": "integer"}}})])
    assert lazy_stubs.split(module) == (module, {})
    assert lazy_stubs.split(render_lean_stubs([])) == (render_lean_stubs([]), {})


def test_a_typed_module_defers_only_the_stubs_that_need_typing() -> None:
    assert lazy_stubs.TYPED_MARKER == TYPED_MARKER and lazy_stubs.FLAGS == __future__.annotations.compiler_flag
    specs = [ToolSpec(name="plain", input_schema={"properties": {"a": {"type": "integer", "default": 2}}},
                      output_schema={"type": "string"}),  # without one it would return Any, from typing
             ToolSpec(name="pick", input_schema={"properties": {"k": {"enum": ["x", "y"], "default": "x"}}},
                      output_schema={"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}),
             ToolSpec(name="str", input_schema={"properties": {"s": {"type": "string"}}})]  # shadows an annotation
    module = render_stubs(specs, defer_typing=True)
    assert render_stubs(specs, prompt=True, defer_typing=True) == render_stubs(specs, prompt=True)
    now, later = lazy_stubs.split(module)
    assert "typing" not in now and "def plain(" in now and list(later) == ["pick", "str"]
    whole: dict[str, Any] = {"__codeact_call__": lambda name, args: (name, args)}
    exec(compile(module, "<t>", "exec", flags=lazy_stubs.FLAGS, dont_inherit=True), whole)
    scope: dict[str, Any] = {"__codeact_call__": lambda name, args: (name, args)}
    exec(compile(now, "<t>", "exec", flags=lazy_stubs.FLAGS, dont_inherit=True), scope)
    stubs = lazy_stubs.LazyStubs(scope, later)
    assert "TypedDict" not in scope and scope["plain"]() == ("plain", {})  # its default marked: not sent
    assert stubs.function("str")("s") == ("str", {"s": "s"}) and list(stubs.compiled) == ["pick", "str"]
    for name in ("plain", "pick", "str"):
        made, expected = scope[name], whole[name]
        assert (made.__annotations__, made.__doc__, repr(made.__defaults__)) == \
            (expected.__annotations__, expected.__doc__, repr(expected.__defaults__))
    assert scope["pick"]() == ("pick", {}) and scope["PickResult"].__required_keys__ == frozenset({"n"})
    assert render_stubs(specs[:1], defer_typing=True) == render_stubs(specs[:1])  # nothing typed: as it was


@pytest.mark.parametrize("backend_name,policy", [("local", "none"), ("local", "restricted"), ("docker", "none")])
def test_a_session_compiles_only_the_stubs_its_code_names(big: Toolset, backend_name: str, policy: str,
                                                          request: pytest.FixtureRequest) -> None:
    if backend_name == "docker":
        request.getfixturevalue("docker_image")
    config = SandboxConfig(backend=backend_name, policy=policy, timeout_s=30)  # type: ignore[arg-type]
    with Runtime(big, config) as rt, rt.session() as session:
        assert len(rt.views.catalog.specs) == len(big) and "def labels_get_label(" in rt.stubs
        before = session.run(COMPILED)
        signature = 'str(__import__("inspect").signature(labels_list_labels))' if policy == "none" else \
            'labels_list_labels.__name__'
        named = session.run(textwrap.dedent("""
            def later(owner):  # named, not called: compiled before the cell runs
                return labels_get_label(owner, "r", 1)
            SIGNATURE, type(globals()["issues_get_issue"]).__name__
        """).replace("SIGNATURE", signature))
        after = session.run(COMPILED)
        typo = session.run("labels_list_label('o', 'r')")
        snap = session.snapshot()
    assert before.ok and before.value == [], before.error
    assert named.ok, named.error
    assert named.value == ["(owner, repo, per_page=30, page=1, sort='created')" if policy == "none"
                           else "labels_list_labels", "Pending"]
    assert after.value == ["labels_get_label", "labels_list_labels"]
    assert typo.error is not None and typo.error.type == "NameError"
    assert typo.error.message.startswith("name 'labels_list_label' is not defined; did you mean labels_list_labels")
    with Runtime(big, config) as rt, rt.restore(snap) as restored:
        assert restored.run(COMPILED).value == ["labels_get_label", "labels_list_labels"]


def test_a_cell_of_statements_only_installs_the_stubs_it_names(big: Toolset) -> None:
    """A cell with no value compiles from its source without the tree: the stubs it names (at top
    level or in a function it defines) are installed all the same, the others stay stand-ins."""
    config = SandboxConfig(backend="local", policy="none", timeout_s=30)
    with Runtime(big, config) as rt, rt.session() as session:
        top = session.run("f = labels_get_label")
        nested = session.run("def later():\n    return issues_get_issue")
        after = session.run(COMPILED)
        kinds = session.run("[type(f).__name__, type(globals()['labels_' + 'delete_label']).__name__]")
    assert top.ok and nested.ok, (top.error, nested.error)
    assert after.value == ["f", "issues_get_issue", "labels_get_label"]
    assert kinds.value == ["function", "Pending"]


def test_a_typed_stub_named_in_a_cell_of_statements_only_is_compiled_with_its_block() -> None:
    config = SandboxConfig(backend="local", policy="none", timeout_s=30)
    with Runtime([], config) as rt, rt.session() as session:
        named = session.run("f = search_tools")
        kinds = session.run("import sys\n[type(f).__name__, type(read_result).__name__, 'typing' in sys.modules]")
    assert named.ok, named.error
    assert kinds.value == ["function", "function", True], kinds


def test_stand_ins_and_async_twins_compile_on_their_first_use(big: Toolset) -> None:
    config = SandboxConfig(backend="local", policy="none", timeout_s=30)
    with Runtime(big, config) as rt, rt.session() as session:
        result = session.run(textwrap.dedent("""
            import asyncio, inspect
            name = "repos_" + "archive_repository"  # a computed name: the code never names the tool
            fn = globals()[name]
            twin = getattr(aio, "labels_" + "delete_label")
            [repr(fn), str(inspect.signature(fn)), fn("o", "r", 1), await twin("o", "r", 2)]
        """))
    assert result.ok, result.error
    assert result.value == ["<tool stub repos_archive_repository (compiled at its first use)>",
                            "(owner, repo, repo_id)", {"path": "/repos/o/r/repositories/1/archive"},
                            {"path": "/repos/o/r/labels/2"}]
    assert [c.name for c in result.calls] == ["repos/archive-repository", "labels/delete-label"]
    assert result.calls[0].arguments == {"owner": "o", "repo": "r", "repo_id": 1}


def test_a_name_error_near_a_tool_name_says_so() -> None:
    tools = ["labels_list_labels", "repos_get", "__codeact_args__"]
    search = 'search_tools("what you want to do") finds tools by what they do'
    assert lazy_stubs.name_hint(NameError("", name="labels_list_label"), tools) == \
        f"; did you mean labels_list_labels? {search}"
    assert lazy_stubs.name_hint(NameError("", name="repos_frobnicate"), tools) == f"; no tool has that name: {search}"
    assert lazy_stubs.name_hint(NameError("", name="pritn"), tools) == ""  # not like a tool: Python's message alone
    assert lazy_stubs.name_hint(NameError("", name="__codeact_arg__"), tools) == ""
    assert lazy_stubs.name_hint(KeyError("labels_list_label"), tools) == ""
