"""Rich outputs on the local backend (standard library only): ``display(obj)``, ``_repr_*_``
bundles, each cap firing, the host's check of what a hostile kernel sends, cell values as JSON."""

from __future__ import annotations

import base64
import textwrap

from codeact import Runtime, SandboxConfig
from codeact.results import ExecutionResult, render_observation
from codeact.runtime._rich import checked
from tests.conftest import Counter, make_tools


def _run(code: str, **config: object) -> ExecutionResult:
    cfg = SandboxConfig(backend="local", timeout_s=10, grace_s=1, policy="none", **config)  # type: ignore[arg-type]
    with Runtime(make_tools(Counter()), cfg) as rt, rt.session() as session:
        return session.run(textwrap.dedent(code))


#: A real (tiny, grey) PNG made with the standard library: run here and in the sandbox alike.
_PNG_CODE = """
import struct, zlib
def _png(width, height):
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    raw = b"".join(b"\\x00" + b"\\x80" * width for _ in range(height))
    return (b"\\x89PNG\\r\\n\\x1a\\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
"""
_NS: dict[str, object] = {}
exec(_PNG_CODE, _NS)
_png = _NS["_png"]


_REPRS = _PNG_CODE + textwrap.dedent("""
    class Pic:
        def _repr_png_(self): return _png(7, 3)
    class Table:
        def _repr_html_(self): return "<table><tr><td>1</td></tr></table>"
        def _repr_markdown_(self): return "| a |"
    class Data:
        def _repr_json_(self): return ({"a": {1, 2}}, {"expanded": True})
    class Vector:
        def _repr_svg_(self): return "<svg xmlns='http://www.w3.org/2000/svg'/>"
    display(Pic(), Table(), Data(), Vector())
    print("after")
""")


def test_display_gives_mime_bundles_and_the_observation_says_an_image() -> None:
    result = _run(_REPRS)
    assert result.ok, result.error
    assert result.stdout == "after\n"
    outputs = result.outputs
    assert [sorted(b) for b in outputs] == [["image/png", "text/plain"], ["text/html", "text/markdown", "text/plain"],
                                            ["application/json", "text/plain"], ["image/svg+xml", "text/plain"]]
    assert base64.b64decode(outputs[0]["image/png"]) == _png(7, 3)  # type: ignore[operator]
    assert outputs[1]["text/html"].startswith("<table>")
    assert outputs[2]["application/json"] == '{"a": [1, 2]}'  # the data of a (data, metadata) pair, as JSON
    observation = render_observation(result)
    assert "2 images produced" in observation and "image/png 7×3" in observation
    assert outputs[0]["image/png"][:20] not in observation  # never the base64


def test_nothing_displayed_leaves_outputs_out() -> None:
    result = _run("x = 1\nx + 1")
    assert result.outputs == [] and "outputs" not in result.model_dump()
    assert result.value == 2


def test_display_cap_replaces_a_large_entry() -> None:
    result = _run("class Big:\n    def _repr_html_(self): return 'x' * 5000\ndisplay(Big())", display_cap=1000)
    bundle = result.outputs[0]
    assert "text/html" not in bundle
    assert "over display_cap=1000" in bundle["text/plain"]


def test_display_limit_drops_what_is_past_the_total() -> None:
    code = "class H:\n    def _repr_html_(self): return 'h' * 400\ndisplay(H(), H(), H())"
    result = _run(code, display_limit=1000)
    assert [("text/html" in b) for b in result.outputs] == [True, True, False]
    assert "1 more output(s) dropped" in result.outputs[-1]["text/plain"]


def test_display_count_drops_the_rest() -> None:
    result = _run("display(*range(5))", display_count=3)
    assert [b["text/plain"] for b in result.outputs[:3]] == ["0", "1", "2"]
    assert "2 more output(s) dropped: over display_count=3" in result.outputs[3]["text/plain"]
    assert len(result.outputs) == 4


def test_a_rich_cell_value_is_displayed() -> None:
    result = _run("class T:\n    def _repr_html_(self): return '<b>t</b>'\n    def __repr__(self): return 'T()'\nT()")
    assert result.outputs == [{"text/html": "<b>t</b>", "text/plain": "T()"}]
    assert result.value == "T()"


def test_an_object_that_fails_to_render_says_so() -> None:
    code = """
        class Bad:
            def _repr_html_(self): raise RuntimeError("no")
            def __repr__(self): raise ValueError("nope")
        display(Bad())
        print("still here")
    """
    result = _run(code)
    assert result.ok and result.stdout == "still here\n"
    assert result.outputs == [{"text/plain": "<Bad could not be displayed: RuntimeError: no>"}]


def test_the_host_checks_what_a_hostile_kernel_sends() -> None:
    """The code replaces the kernel's own capping with one that returns junk: the host drops it."""
    code = """
        import sys
        module = next(m for n, m in list(sys.modules.items()) if n.endswith("rich_output"))
        module.capped = lambda *a: [{"text/x-evil": "x", "text/plain": "kept"}, "not a dict",
                                    {"image/png": "A" * 5000}, {"image/png": "iVBOR!!"}, {"text/html": 5},
                                    {"image/png": "QUJDREVGR0g="}] + [{"text/plain": str(i)} for i in range(60)]
        display(1)
    """
    result = _run(code, display_cap=1000, display_count=5)
    assert result.ok, result.error
    assert result.outputs[0] == {"text/plain": "kept"}
    note = result.outputs[-1]["text/plain"]
    for why in ("1 of an unknown MIME type", "1 not an object", "image/png over display_cap=1000",
                "image/png not base64", "text/html not a string", "image/png not a PNG", "60 over display_count=5"):
        assert why in note, (why, note)
    assert len(result.outputs) == 2  # "kept" and the note: the rest were junk or past the count


def test_checked_refuses_what_is_not_a_list_and_bounds_the_total() -> None:
    config = SandboxConfig(backend="local", display_limit=100)
    assert checked(None, config) == []
    assert "not a list" in checked({"text/plain": "x"}, config)[0]["text/plain"]
    assert "3 entries past" in checked([{f"x/{i}": "" for i in range(10)}], config)[0]["text/plain"]
    out = checked([{"text/plain": "a" * 60}, {"text/plain": "b" * 60}, {7: "x"}], config)
    assert out[0] == {"text/plain": "a" * 60}
    assert "1 over display_limit=100" in out[1]["text/plain"] and "key that is not a string" in out[1]["text/plain"]


def test_values_become_json_not_reprs() -> None:
    code = """
        import datetime, decimal
        ({1, 3, 2}, (1, 2), datetime.date(2024, 5, 1), decimal.Decimal("1.5"), decimal.Decimal("0.1"),
         {"when": datetime.datetime(2024, 5, 1, 12, 30), "tags": frozenset({"b", "a"})})
    """
    result = _run(code)
    assert result.value == [[1, 2, 3], [1, 2], "2024-05-01", 1.5, "0.1",
                            {"when": "2024-05-01T12:30:00", "tags": ["a", "b"]}]
