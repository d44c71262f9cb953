"""render_stubs: the generated module compiles, reads well, and sends the right calls."""

from __future__ import annotations

import builtins
import dis
import inspect
import types
from typing import Any

import pytest

from codeact.tool_stubs import ToolSpec, render_stubs

ORDER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "customer": {
            "type": "object",
            "description": "Who orders.",
            "properties": {"name": {"type": "string"}, "vip": {"type": "boolean", "default": False}},
            "required": ["name"],
        },
        "items": {
            "type": "array",
            "description": "What to ship.",
            "items": {"$ref": "#/$defs/Item"},
        },
        "priority": {"type": "integer", "enum": [1, 2, 3], "default": 2},
        "from": {"type": "string", "description": "Warehouse code."},
        "class": {"type": ["string", "null"], "description": "Shipping class."},
        "note": {"type": "string"},
        "gift": {"type": "boolean", "default": True},
        "coupon": {"type": ["string", "null"], "default": None},
        "meta": {"type": "object"},
    },
    "required": ["customer", "items"],
    "$defs": {
        "Item": {
            "type": "object",
            "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "minimum": 1}},
            "required": ["sku", "qty"],
        }
    },
}

TRICKY_DESCRIPTION = 'Quotes """ inside, a path C:\\temp\\new and a trailing quote"'


def specs() -> list[ToolSpec]:
    return [
        ToolSpec(
            name="place-order",
            description="Place an order.",
            input_schema=ORDER_SCHEMA,
            output_schema={
                "type": "object",
                "description": "The order.",
                "properties": {"id": {"type": "string"}},
                "required": ["id"],
            },
        ),
        ToolSpec(
            name="max",
            description="Largest number.",
            input_schema={
                "properties": {"values": {"type": "array", "items": {"type": "number"}}},
                "required": ["values"],
            },
        ),
        ToolSpec(name="sum", input_schema={"properties": {"values": {"type": "array", "items": {"type": "integer"}}}}),
        ToolSpec(
            name="dict",
            input_schema={"properties": {"d": {"type": "object", "additionalProperties": {"type": "integer"}}}},
        ),
        ToolSpec(name="list", input_schema={"properties": {"xs": {"type": "array"}, "d": {"type": "object"}}}),
        ToolSpec(
            name="str",
            input_schema={
                "properties": {"n": {"type": "integer"}, "o": {"$ref": "#/$defs/O"}},
                "$defs": {"O": {"type": "object", "properties": {"k": {"type": "string"}}}},
            },
        ),
        ToolSpec(name="len", input_schema={"properties": {"s": {"type": "string"}}, "required": ["s"]}),
        ToolSpec(name="print", input_schema={}),
        ToolSpec(name="math.factorial", input_schema={"properties": {"n": {"type": "integer"}}, "required": ["n"]}),
        ToolSpec(
            name="get-weather",
            description=TRICKY_DESCRIPTION,
            input_schema={"properties": {"unit": {"enum": ["celsius", "fahrenheit"], "description": 'Say "c" \\ "f"'}}},
        ),
        ToolSpec(name="class", input_schema={}),
        ToolSpec(name="1st", description="\x00odd\u2028chars\r\nhere", input_schema={}),
    ]


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, name: str, arguments: dict[str, Any]) -> Any:
        self.calls.append((name, arguments))
        return {"tool": name}


def load(source: str) -> tuple[dict[str, Any], Recorder]:
    recorder = Recorder()
    namespace: dict[str, Any] = {"__codeact_call__": recorder}
    # dont_inherit: this test module's `from __future__ import annotations` must not leak into the stubs
    exec(compile(source, "<codeact-tools>", "exec", dont_inherit=True), namespace)
    return namespace, recorder


@pytest.fixture
def stubs() -> tuple[str, dict[str, Any], Recorder]:
    source = render_stubs(specs())
    namespace, recorder = load(source)
    return source, namespace, recorder


def test_all_stubs_compile_and_are_defined(stubs: tuple[str, dict[str, Any], Recorder]) -> None:
    _, ns, _ = stubs
    for name in (
        "place_order",
        "max",
        "sum",
        "dict",
        "list",
        "str",
        "len",
        "print",
        "math_factorial",
        "get_weather",
        "class_",
        "_1st",
    ):
        assert isinstance(ns[name], types.FunctionType), name


def test_calls_send_the_original_name_and_keys(stubs: tuple[str, dict[str, Any], Recorder]) -> None:
    _, ns, rec = stubs
    result = ns["place_order"]({"name": "Ann"}, [{"sku": "a", "qty": 1}], from_="W1", class_=None)
    assert result == {"tool": "place-order"}
    assert rec.calls[-1] == (
        "place-order",
        {
            "customer": {"name": "Ann"},
            "items": [{"sku": "a", "qty": 1}],
            "from": "W1",
            "class": None,  # null is allowed, so an explicit None is sent
        },
    )  # what the code did not pass is not sent: priority, gift and coupon keep the tool's own default
    ns["place_order"](customer={"name": "B"}, items=[], note="n", meta={"k": 1}, gift=False)
    assert rec.calls[-1][1]["note"] == "n" and rec.calls[-1][1]["meta"] == {"k": 1}
    assert rec.calls[-1][1]["gift"] is False and "from" not in rec.calls[-1][1]
    ns["math_factorial"](5)
    assert rec.calls[-1] == ("math.factorial", {"n": 5})
    ns["get_weather"]()
    assert rec.calls[-1] == ("get-weather", {})
    ns["class_"]()
    ns["_1st"]()
    assert [c[0] for c in rec.calls[-2:]] == ["class", "1st"]


def test_builtin_named_tools_shadow_nothing_they_should_not(stubs: tuple[str, dict[str, Any], Recorder]) -> None:
    _, ns, rec = stubs
    assert ns["max"]([1, 5]) == {"tool": "max"}
    assert ns["len"]("abc") == {"tool": "len"}
    assert ns["dict"](d={"a": 1}) == {"tool": "dict"}
    assert ns["list"]() == {"tool": "list"}
    assert ns["str"](n=1) == {"tool": "str"}
    ns["print"]()
    ns["sum"]()
    assert [c[0] for c in rec.calls] == ["max", "len", "dict", "list", "str", "print", "sum"]
    assert rec.calls[0] == ("max", {"values": [1, 5]})
    assert rec.calls[-1] == ("sum", {})
    # every other stub still works with those names bound to tools in the same namespace
    ns["place_order"]({"name": "x"}, [])
    assert rec.calls[-1][0] == "place-order"


def test_stubs_use_no_global_but_the_call_function(stubs: tuple[str, dict[str, Any], Recorder]) -> None:
    _, ns, _ = stubs
    for value in ns.values():
        if isinstance(value, types.FunctionType) and value.__code__.co_filename == "<codeact-tools>":
            if value.__name__.startswith("__codeact"):
                continue  # the module's own machinery
            loaded = {i.argval for i in dis.get_instructions(value) if i.opname == "LOAD_GLOBAL"}
            assert loaded <= {"__codeact_call__", "__codeact_args__"}, value.__name__


def test_stubs_work_with_every_builtin_shadowed(stubs: tuple[str, dict[str, Any], Recorder]) -> None:
    source, _, _ = stubs
    ns, rec = load(source)
    for name in dir(builtins):
        if not name.startswith("__"):
            ns.setdefault(name, None)
    ns["place_order"]({"name": "x"}, [], note="hi")
    assert rec.calls[-1][1]["note"] == "hi"


def test_annotations_and_docs_read_well(stubs: tuple[str, dict[str, Any], Recorder]) -> None:
    source, ns, _ = stubs
    assert source.startswith("# Tools.")
    assert "ToolError" in source.splitlines()[1] + source.splitlines()[2]
    assert "from typing import Any, Literal, TypedDict\n" in source
    assert "class PlaceOrderCustomer(TypedDict, total=False):" in source
    assert "    name: str  # required" in source
    assert "class Item(TypedDict):" in source
    assert "    items: list[Item]," in source
    assert "    priority: Literal[1, 2, 3] = 2," in source
    assert "    from_: str | None = None," in source
    assert "    class_: str | None = None," in source
    assert "    gift: bool = True," in source
    assert "    meta: dict[str, Any] | None = None," in source
    assert ") -> PlaceOrderResult:" in source
    assert "def math_factorial(n: int) -> Any:" in source
    assert 'def get_weather(unit: Literal["celsius", "fahrenheit"] | None = None) -> Any:' in source
    doc = ns["place_order"].__doc__
    assert doc.startswith("Place an order.\n\n    Args:\n        customer: Who orders.\n")
    assert 'from_: Warehouse code. (sent to the tool as "from")' in doc
    assert "priority: One of: 1, 2, 3." in doc
    assert "Returns:\n        The order." in doc
    # required parameters come first, positional-or-keyword
    assert list(ns["place_order"].__code__.co_varnames[:2]) == ["customer", "items"]


def test_docstrings_survive_quotes_backslashes_and_control_characters(
    stubs: tuple[str, dict[str, Any], Recorder],
) -> None:
    _, ns, _ = stubs
    doc = ns["get_weather"].__doc__
    assert doc.startswith(TRICKY_DESCRIPTION)
    assert 'unit: Say "c" \\ "f" One of: "celsius", "fahrenheit".' in doc
    assert inspect.cleandoc(ns["_1st"].__doc__) == "\x00odd\u2028chars\nhere"


def test_builtin_named_stubs_come_last_with_quoted_annotations(stubs: tuple[str, dict[str, Any], Recorder]) -> None:
    source, ns, _ = stubs
    defs = [line.split("(")[0][4:] for line in source.splitlines() if line.startswith("def ")]
    assert defs[-4:] == ["dict", "list", "str", "len"] or defs[-3:] == ["dict", "list", "str"]
    assert 'def dict(d: "dict[str, int] | None" = None) -> "Any":' in source
    assert ns["str"].__annotations__["o"] == "O | None"


def test_recursive_refs_and_unions() -> None:
    schema = {
        "properties": {
            "tree": {"$ref": "#/$defs/Node"},
            "value": {"anyOf": [{"type": "string"}, {"type": "number"}, {"type": "null"}]},
            "mode": {"enum": ["a", None]},
            "ratio": {"enum": [0.5, 1.5]},
            "anything": {},
            "pair": {"type": "array", "prefixItems": [{"type": "string"}]},
        },
        "required": ["tree"],
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {
                    "label": {"type": "string"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
                    "parent": {"anyOf": [{"$ref": "#/$defs/Node"}, {"type": "null"}]},
                },
            }
        },
    }
    source = render_stubs([ToolSpec(name="walk", input_schema=schema)])
    assert "class Node(TypedDict, total=False):" in source
    assert '    children: list["Node"]' in source
    assert '    parent: "Node | None"' in source
    assert "    value: str | float | None = None," in source
    assert '    mode: Literal["a"] | None = None,' in source
    assert "    ratio: float | None = None," in source
    assert "    anything: Any = None," in source
    assert "    pair: list[Any] | None = None," in source
    ns, rec = load(source)
    ns["walk"]({"label": "root"}, mode=None, anything=None)
    # mode and anything admit null, so an explicit None is sent; value was not passed
    assert rec.calls == [("walk", {"tree": {"label": "root"}, "mode": None, "anything": None})]


def test_identical_shapes_share_a_class_and_names_stay_unique() -> None:
    item = {"type": "object", "properties": {"sku": {"type": "string"}}}
    other = {"type": "object", "properties": {"id": {"type": "integer"}}}
    a = ToolSpec(name="a", input_schema={"properties": {"x": {"$ref": "#/$defs/Item"}}, "$defs": {"Item": item}})
    b = ToolSpec(name="b", input_schema={"properties": {"x": {"$ref": "#/$defs/Item"}}, "$defs": {"Item": item}})
    c = ToolSpec(name="c", input_schema={"properties": {"x": {"$ref": "#/$defs/Item"}}, "$defs": {"Item": other}})
    d = ToolSpec(name="Item", input_schema={})
    source = render_stubs([a, b, c, d])
    assert source.count("(TypedDict") == 2
    assert "class Item2(TypedDict, total=False):" in source and "class Item3(TypedDict, total=False):" in source
    load(source)


def test_odd_property_names_use_the_functional_typeddict() -> None:
    schema = {
        "properties": {
            "addr": {"type": "object", "properties": {"first-name": {"type": "string"}, "class": {"type": "integer"}}}
        }
    }
    source = render_stubs([ToolSpec(name="t", input_schema=schema)])
    assert 'TAddr = TypedDict("TAddr", {\n    "first-name": str,\n    "class": int,\n}, total=False)' in source
    load(source)


def test_long_argument_dicts_wrap_and_empty_input_renders() -> None:
    many = {f"parameter_number_{i}": {"type": "integer"} for i in range(6)}
    source = render_stubs([ToolSpec(name="wide", input_schema={"properties": many, "required": list(many)})])
    assert 'return __codeact_call__("wide", {\n        "parameter_number_0": parameter_number_0,' in source
    ns, rec = load(source)
    ns["wide"](*range(6))
    assert rec.calls[0][1] == {f"parameter_number_{i}": i for i in range(6)}
    empty = render_stubs([])
    assert "no tools" in empty
    compile(empty, "<empty>", "exec")


def test_additional_properties_become_kwargs() -> None:
    schema = {"properties": {"q": {"type": "string"}, "kwargs": {"type": "string"}}, "additionalProperties": True}
    source = render_stubs([ToolSpec(name="search", input_schema=schema)])
    assert "**kwargs_: Any" in source
    ns, rec = load(source)
    ns["search"]("x", lang="en")
    assert rec.calls == [("search", {"q": "x", "lang": "en"})]


def test_rendering_is_deterministic() -> None:
    assert render_stubs(specs()) == render_stubs(specs())


def test_omitted_arguments_are_not_sent_but_defaults_show() -> None:
    """Regression (issue 12): stubs sent every documented default (``?page=1&per_page=30``, a BFCL
    ``default: "None"`` as the string "None"); an argument the code did not pass must not be sent."""
    schema = {
        "properties": {
            "owner": {"type": "string"},
            "per_page": {"type": "integer", "default": 30},
            "page": {"type": "integer", "default": 1},
            "flag": {"type": "boolean", "default": False},
            "unit": {"type": "string", "default": "None", "description": "BFCL style."},
        },
        "required": ["owner"],
    }
    spec = ToolSpec(name="repos/list-commits", input_schema=schema)
    prompt = render_stubs([spec], prompt=True)
    assert "per_page: int = 30," in prompt and "flag: bool = False," in prompt
    assert "unit: str | None = None," in prompt and "__codeact_default__" not in prompt
    ns, rec = load(render_stubs([spec]))
    stub = ns["repos_list_commits"]
    assert "per_page: int = 30" in str(inspect.signature(stub))  # help() reads like the prompt
    stub("octo")
    stub("octo", 30, page=1, flag=None)  # the same values passed explicitly are sent; None for a bool is not
    assert rec.calls == [("repos/list-commits", {"owner": "octo"}),
                         ("repos/list-commits", {"owner": "octo", "per_page": 30, "page": 1})]


def test_async_twins_leave_omitted_arguments_out_too() -> None:
    import asyncio

    from codeact.kernel.client import _async_variant

    ns, _ = load(render_stubs([ToolSpec(name="t", input_schema={"properties": {"a": {"type": "integer", "default": 3}}})]))
    sent: list[dict[str, Any]] = []

    async def acall(name: str, arguments: dict[str, Any]) -> Any:
        sent.append(arguments)

    variant = _async_variant(ns["t"], acall)
    asyncio.run(variant())
    asyncio.run(variant(a=4))
    assert sent == [{}, {"a": 4}]


def test_lean_stubs_send_what_the_typed_ones_send() -> None:
    from codeact.tool_stubs.render import render_lean_stubs

    lean = render_lean_stubs(specs())
    assert "TypedDict" not in lean and '"""Place an order' not in lean
    full_ns, full_rec = load(render_stubs(specs()))
    lean_ns, lean_rec = load(lean)
    for ns in (full_ns, lean_ns):
        ns["place_order"]({"name": "Ann"}, [], from_="W1", note=None, class_=None)
        ns["math_factorial"](3)
        ns["get_weather"]()
    assert lean_rec.calls == full_rec.calls
    schema = {"properties": {"q": {"type": "string"}}, "additionalProperties": True}
    ns, rec = load(render_lean_stubs([ToolSpec(name="search", input_schema=schema)]))
    ns["search"]("x", lang="en")
    assert rec.calls == [("search", {"q": "x", "lang": "en"})]
