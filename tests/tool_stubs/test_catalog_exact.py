"""The tool catalog, exactly: lookups by either name, the describe cache and cut, the flattened
signature, search hits, the batched fit check, and the budgeted index view (group order, examples,
fewer groups at worst)."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

import pytest

from codeact.tool_stubs import catalog as catalog_module
from codeact.tool_stubs.catalog import SEARCH_HELP, ToolCatalog, _first_paragraph, _index_text
from codeact.tool_stubs.render import HEADER, render_module
from codeact.tool_stubs.spec import ToolSpec


def _spec(name: str, description: str = "", props: dict[str, Any] | None = None,
          required: list[str] | None = None) -> ToolSpec:
    schema: dict[str, Any] = {"type": "object", "properties": props or {}}
    if required:
        schema["required"] = required
    return ToolSpec(name=name, description=description, input_schema=schema)


def test_names_groups_and_resolve() -> None:
    specs = [_spec("a_b"), _spec("a-b"), _spec("ping")]
    cat = ToolCatalog(specs, groups={"a_b": "g", "a-b": None})
    assert cat.names == {"a_b": "a_b", "a-b": "a_b_2", "ping": "ping"}
    assert cat.by_python_name == {"a_b": "a_b", "a_b_2": "a-b", "ping": "ping"}
    assert cat.groups == {"a_b": "g", "a-b": "other", "ping": "other"}
    assert cat.resolve("a_b") is specs[0]  # a tool name wins over another's python name
    assert cat.resolve("a_b_2") is specs[1]
    assert cat.resolve("a-b") is specs[1]
    assert cat.resolve("nope") is None
    assert ToolCatalog(specs).groups == {"a_b": "other", "a-b": "other", "ping": "other"}
    given = ToolCatalog(specs, names={"a_b": "x", "a-b": "y", "ping": "z"})
    assert given.resolve("y") is specs[1] and given.resolve("a_b_2") is None


def test_index_is_built_once_and_prepare_builds_it_on_a_daemon_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    cat = ToolCatalog([_spec("ping", "send a ping")])
    first = cat.index()
    assert cat.index() is first and len(first) == 1
    started: list[threading.Thread] = []

    class Recording(threading.Thread):
        def start(self) -> None:
            started.append(self)
            super().start()

    monkeypatch.setattr(threading, "Thread", Recording)  # the module catalog uses
    other = ToolCatalog([_spec("ping", "send a ping")])
    other.prepare()
    assert len(started) == 1 and started[0].daemon is True and started[0].name == "codeact-tool-index"
    started[0].join()
    assert other._index is not None and other.index() is other._index


def test_describe_renders_once_and_is_none_for_an_unknown_tool() -> None:
    spec = _spec("get-issue", "Get an issue.\n\nMore.", {"n": {"type": "integer"}}, ["n"])
    cat = ToolCatalog([spec])
    text = cat.describe("get_issue")
    assert text == render_module([spec], cat.names, prompt=True, header="").strip("\n") + "\n"
    assert text == 'from typing import Any\n\n\ndef get_issue(n: int) -> Any:\n    """Get an issue.\n\n    More.\n    """\n    ...\n'
    assert cat.describe("get-issue") is text
    assert cat._described == {"get-issue": text}
    assert cat.describe("nope") is None
    assert cat.signature("nope") == ""


def test_describe_is_cut_over_its_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _spec("t", "x " * 50)
    full = ToolCatalog([spec]).describe("t")
    assert full is not None
    monkeypatch.setattr(catalog_module, "MAX_DESCRIBE_CHARS", len(full))
    assert ToolCatalog([spec]).describe("t") == full
    monkeypatch.setattr(catalog_module, "MAX_DESCRIBE_CHARS", len(full) - 3)
    cut = ToolCatalog([spec]).describe("t")
    assert cut == full[: len(full) - 3] + "\n# … [3 more characters of type definitions]\n"


def test_signature_flattens_a_wrapped_def_line() -> None:
    props = {f"parameter_number_{i}": {"type": "string"} for i in range(8)}
    spec = _spec("wide", "Many parameters.", props, list(props))
    cat = ToolCatalog([spec, _spec("ping", "Ping.")])
    text = cat.describe("wide")
    assert text is not None and "def wide(\n" in text  # rendered over several lines
    params = ", ".join(f"parameter_number_{i}: str" for i in range(8))
    assert cat.signature("wide") == f"def wide({params}) -> Any:"
    assert cat.signature("ping") == "def ping() -> Any:"


def test_search_hits_have_the_documented_keys() -> None:
    long = "word " * 100
    specs = [_spec("create_comment", "Create a comment on an issue.\n\nDetails here.", {"body": {"type": "string"}},
                   ["body"]), _spec("list-repos", long + "\n\nrest"), _spec("delete_comment", "Delete a comment.")]
    cat = ToolCatalog(specs, groups={"create_comment": "issues"})
    hits = cat.search("create a comment", limit=1)
    assert hits == [{"name": "create_comment", "python_name": "create_comment",
                     "signature": "def create_comment(body: str) -> Any:",
                     "description": "Create a comment on an issue.", "group": "issues"}]
    assert [h["name"] for h in cat.search("comment", limit=5)] == [n for n, _ in cat.index().search("comment", 5)]
    repos = cat.search("list repos", limit=1)[0]
    assert repos["python_name"] == "list_repos" and repos["group"] == "other"
    assert repos["description"] == _first_paragraph(long)


def test_first_paragraph_flattens_and_cuts_at_300() -> None:
    assert _first_paragraph("  One\n  two\tthree.\n\nSecond.") == "One two three."
    assert _first_paragraph("\n\nLead.\n\nNext") == "Lead."
    at = "a" * 300
    assert _first_paragraph(at) == at
    assert _first_paragraph("a" * 301) == "a" * 299 + "…"
    assert _first_paragraph("a" * 298 + " bcd") == "a" * 298 + "…"  # cut, trailing space dropped


class _Counting(ToolCatalog):
    def __init__(self, specs: list[ToolSpec]) -> None:
        super().__init__(specs)
        self.rendered: list[int] = []

    def full_view(self, shown: Iterable[ToolSpec]) -> str:
        shown = list(shown)
        self.rendered.append(len(shown))
        return super().full_view(shown)


def test_fits_renders_in_growing_batches_and_allows_exactly_the_budget() -> None:
    specs = [_spec(f"tool_{i}", "Does a thing.") for i in range(40)]
    cat = _Counting(specs)
    full = ToolCatalog(specs).full_view(specs)
    assert cat.fits(specs, len(full)) == full
    assert cat.rendered == [8, 32, 40]
    assert cat.fits(specs, len(full) - 1) is None
    eight = _Counting(specs[:8])
    view8 = eight.full_view(specs[:8])
    eight.rendered.clear()
    assert eight.fits(specs[:8], len(view8)) == view8 and eight.rendered == [8]
    first = len(ToolCatalog(specs).full_view(specs[:8]))
    over = _Counting(specs)
    assert over.fits(specs, first - 1) is None and over.rendered == [8]
    assert over.prompt_view(specs, len(full)) == full


def _groups_catalog() -> ToolCatalog:
    specs = ([_spec(n) for n in ("repos_get_everything", "repos_get", "repos_list_all", "repos_x", "repos_yy")]
             + [_spec(n) for n in ("issues_b", "issues_a")] + [_spec("alpha_one"), _spec("ping")])
    groups = {s.name: s.name.split("_")[0] for s in specs}
    groups["ping"] = None  # type: ignore[assignment]
    return ToolCatalog(specs, groups=groups)


def _top(count: int, extra: str = "") -> str:
    return "\n\n".join(t for t in (HEADER, SEARCH_HELP.format(count=count), extra) if t)


def test_index_view_orders_groups_and_examples() -> None:
    cat = _groups_catalog()
    lines = ["#   repos (5): repos_x, repos_yy, repos_get, repos_list_all, …",
             "#   issues (2): issues_b, issues_a, …",
             "#   alpha (1): alpha_one, …",
             "#   other (1): ping, …"]
    view = cat.index_view(100_000)
    assert view == _index_text(_top(9), lines, 4)
    assert view == _top(9) + "\n\n# Tool groups (tools in it): examples\n" + "\n".join(lines) + "\n"
    assert "9 tools are available" in view
    with_help = cat.index_view(100_000, extra_help="# extra help")
    assert with_help == _index_text(_top(9, "# extra help"), lines, 4)


def _fitted(examples: int) -> str:
    groups = [("repos", ["repos_x", "repos_yy", "repos_get", "repos_list_all", "repos_get_everything"]),
              ("issues", ["issues_b", "issues_a"]), ("alpha", ["alpha_one"]), ("other", ["ping"])]
    lines = [f"#   {g} ({len(n)}): " + ", ".join(n[:examples]) + (", …" if examples else "") for g, n in groups]
    lines = [line.removesuffix(": ") for line in lines]
    return _index_text(_top(9), lines, 4)


@pytest.mark.parametrize("examples", [3, 2, 1, 0])
def test_index_view_shows_fewer_examples_to_fit(examples: int) -> None:
    cat = _groups_catalog()
    want = _fitted(examples)
    assert cat.index_view(len(want)) == want
    if examples:
        assert cat.index_view(len(want) - 1) != want
    if examples == 0:
        assert "#   repos (5)\n" in want and "#   other (1)\n" in want


def test_index_view_drops_groups_at_worst() -> None:
    # groups with long names: their lines outweigh the "… and N more groups" one
    groups = {f"t{i}": f"group_with_a_rather_long_name_that_takes_up_most_of_a_line_number_{i}" for i in range(4)}
    cat = ToolCatalog([_spec(n) for n in groups], groups=groups)
    names = [f"#   group_with_a_rather_long_name_that_takes_up_most_of_a_line_number_{i} (1)" for i in range(4)]
    all_four = _index_text(_top(4), names, 4)
    assert "more groups" not in all_four
    assert cat.index_view(len(all_four)) == all_four
    one = _index_text(_top(4), names[:1], 4)
    assert one.endswith(names[0] + "\n#   … and 3 more groups: search_tools finds their tools\n")
    assert cat.index_view(len(one)) == one
    two = _index_text(_top(4), names[:2], 4)
    assert cat.index_view(len(two)) == two
    assert cat.index_view(len(two) - 1) == one
    three = _index_text(_top(4), names[:3], 4)
    assert len(three) < len(all_four)
    assert cat.index_view(len(all_four) - 1) == three
    none = _index_text(_top(4), [], 4)
    assert cat.index_view(len(one) - 1) == none
    assert cat.index_view(10) == none


def test_prompt_view_falls_back_to_the_index() -> None:
    cat = _groups_catalog()
    shown = list(cat.specs.values())
    full = cat.full_view(shown)
    assert cat.prompt_view(shown, len(full)) == full
    assert cat.prompt_view(shown, len(full) - 1, "# h") == cat.index_view(len(full) - 1, "# h")
    assert cat.prompt_view(shown[:1]) == cat.full_view(shown[:1])  # the default budget fits one tool


def test_full_view_is_the_prompt_rendering() -> None:
    cat = _groups_catalog()
    shown = list(cat.specs.values())[:3]
    assert cat.full_view(shown) == render_module(shown, cat.names, prompt=True)
    assert cat.full_view(iter(shown)) == cat.full_view(shown)


def test_index_view_breaks_ties_of_size_by_group_name() -> None:
    cat = ToolCatalog([_spec("a_tool"), _spec("z_tool")], groups={"a_tool": "zeta", "z_tool": "beta"})
    lines = ["#   beta (1): z_tool, …", "#   zeta (1): a_tool, …"]
    assert cat.index_view(100_000) == _index_text(_top(2), lines, 2)


def test_index_view_keeps_a_prefix_of_the_groups() -> None:
    long = "a_group_whose_name_is_far_longer_than_the_line_that_says_how_many_more_groups_there_are"
    groups = {"t1": long, "t2": long, "t3": "b", "t4": "c"}
    cat = ToolCatalog([_spec(n) for n in groups], groups=groups)
    short = _index_text(_top(4), ["#   b (1)"], 3)
    assert len(_index_text(_top(4), [f"#   {long} (2)"], 3)) > len(short)
    # the largest group does not fit: none is shown, though a smaller one would
    assert cat.index_view(len(short)) == _index_text(_top(4), [], 3)
