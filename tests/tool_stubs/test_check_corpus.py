"""The check's false-positive and detection rates: the project's own code actions (examples, the
eval suites' scripted code, the restricted-fidelity corpus, the code strings the tests run) and
generated calls against real tool schemas (the test servers' OpenAPI documents, the large
GitHub-like one, GitHub's own when cached) produce no error; the same calls mutated produce one at
their line. Both rates are printed (``pytest -s``) and quoted in docs/check.md."""

from __future__ import annotations

import ast
import importlib
import random
from pathlib import Path
from typing import Any

from codeact.agent.code_agent import extract_code
from codeact.errors import ToolArgumentsError
from codeact.evals.suites import BUILTIN
from codeact.runtime.discovery import ToolViews
from codeact.runtime.session import Runtime
from codeact.runtime.toolset import Toolset
from codeact.tool_stubs.check import Checker, cell_names
from codeact.tool_stubs.render import stub_signature
from codeact.tool_stubs.spec import ToolSpec, python_names
from tests.servers.big_openapi import big_document
from tests.servers.github_tasks import github_document
from tests.servers.openapi_doc import OPENAPI

ROOT = Path(__file__).resolve().parents[2]
_NO_VALUE = object()


def _errors(checker: Checker, cells: list[str], defined: set[str] | None = None) -> list[tuple[int, str, Any]]:
    """Check ``cells`` as one session's cells in order (each sees the names the ones before bind)."""
    names = set(defined or ())
    found = []
    for i, code in enumerate(cells):
        found += [(i, code, d) for d in checker.check(code, names) if d.severity == "error"]
        names |= cell_names(code)[0]
    return found


def _sandbox_checker(tools: Toolset) -> Checker:
    with Runtime(tools, check="off") as runtime:
        return runtime.checker


def _suite_cells() -> list[tuple[str, Toolset, list[str]]]:
    out = []
    for name, module_name in BUILTIN.items():
        suite = getattr(importlib.import_module(module_name), "SUITE", None)
        if suite is None:  # a suite built from an installed package (bfcl-multi-turn): no code of ours
            continue
        for task in suite:
            cells = [extract_code(r["text"] if isinstance(r, dict) else r) for r in task.scripts.get("code", [])]
            out.append((f"{name}/{task.id}", task.make_tools(), [c for c in cells if c]))
    return out


def _restricted_corpus() -> list[str]:
    text = (ROOT / "tests/data/restricted_corpus.txt").read_text()
    blocks = text.split("# ---\n")  # as tests/sandbox/test_restricted_fidelity.py reads it
    return [b for b in blocks if any(line.strip() and not line.startswith("#") for line in b.splitlines())]


def _test_strings() -> list[str]:
    """The code strings the tests hand to ``run`` / ``arun`` / ``stream`` / ``map`` as literals."""
    found = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("run", "arun", "stream", "map") and node.args
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                found.append(node.args[0].value)
    return found


def test_the_projects_own_code_actions_have_no_false_error() -> None:
    corpus = 0
    weather = _sandbox_checker(Toolset.from_module(ROOT / "examples/weather_tools.py"))
    action = (ROOT / "examples/weather_action.py").read_text()
    assert _errors(weather, [action]) == []
    corpus += 1
    for label, tools, cells in _suite_cells():
        assert _errors(_sandbox_checker(tools), cells) == [], label
        corpus += len(cells)
    snippets = _restricted_corpus()
    # The one snippet written to raise NameError (test_restricted_fidelity compares how it fails): a true error.
    found = [(snippets[i], d.code) for i, _, d in _errors(_sandbox_checker(Toolset([])), snippets)]
    assert found == [("x = undefined_name + 1\n", "undefined-name")]
    corpus += len(snippets)
    # The tests' strings run against tools the checker is not shown here, and many are meant to fail
    # at run time: checked with an unknown namespace and no tools (so ``aio.<tool>`` is not judged),
    # an error is only a call of a built-in the test makes to see it refused.
    strings = _test_strings()
    bare = _sandbox_checker(Toolset([]))
    meant = []
    for code in strings:
        for d in bare.check(code, None):
            if d.severity != "error" or d.code == "unknown-tool":
                continue
            assert d.message.startswith(("search_tools(", "describe_tool(", "read_result(")), (code, d)
            meant.append(code)
    print(f"\ncheck corpus: the tests' calls of the built-ins meant to be refused, found: {meant}")
    corpus += len(strings)
    print(f"\ncheck corpus: {corpus} code actions of the project, 0 false errors")
    assert len(strings) > 200 and corpus > 300


# -- generated calls --------------------------------------------------------------------------------

def _resolve(schema: Any, root: Any) -> Any:
    while isinstance(schema, dict) and isinstance(schema.get("$ref"), str) and schema["$ref"].startswith("#/"):
        target = root
        for part in schema["$ref"][2:].split("/"):
            target = target[part.replace("~1", "/").replace("~0", "~")]
        schema = target
    return schema


def _value(schema: Any, root: Any, rng: random.Random, depth: int = 0) -> Any:
    """A value meant to be valid for ``schema`` (the host's validation has the last word)."""
    schema = _resolve(schema, root)
    if not isinstance(schema, dict) or depth > 6:
        return "x"
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return rng.choice(schema["enum"])
    if "default" in schema and rng.random() < 0.2:
        return schema["default"]
    for key in ("oneOf", "anyOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return _value(rng.choice(schema[key]), root, rng, depth + 1)
    if isinstance(schema.get("allOf"), list) and schema["allOf"]:
        merged: dict[str, Any] = {}
        for part in schema["allOf"]:
            part = _resolve(part, root)
            if isinstance(part, dict):
                merged.setdefault("properties", {}).update(part.get("properties", {}))
                merged.setdefault("required", []).extend(part.get("required", []))
                merged.setdefault("type", part.get("type"))
        return _value(merged, root, rng, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = rng.choice(kind)
    if kind is None and "properties" in schema:
        kind = "object"
    if kind == "null" or (schema.get("nullable") and rng.random() < 0.1):
        return None
    return _of_kind(kind, schema, root, rng, depth)


def _of_kind(kind: Any, schema: dict[str, Any], root: Any, rng: random.Random, depth: int) -> Any:
    if kind == "integer":
        low = schema.get("minimum", 1)
        return int(low) + rng.randint(0, 5) if isinstance(low, (int, float)) else 1
    if kind == "number":
        return float(schema.get("minimum", 0)) + 0.5
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "array":
        count = max(schema.get("minItems", 1), 1)
        return [_value(schema.get("items", {}), root, rng, depth + 1) for _ in range(count)]
    if kind == "object":
        props = schema.get("properties") or {}
        required = set(schema.get("required") or [])
        return {k: _value(v, root, rng, depth + 1) for k, v in props.items() if k in required or rng.random() < 0.4}
    if kind == "string" or kind is None:
        text = "ab" * max(1, int(schema.get("minLength", 1)))
        return text[: schema["maxLength"]] if isinstance(schema.get("maxLength"), int) else text
    return "x"


def _valid(spec: ToolSpec, args: dict[str, Any]) -> bool:
    try:
        spec.validate_arguments(args)
    except ToolArgumentsError:
        return False
    return True


def _source(stub: str, spec: ToolSpec, args: dict[str, Any], rng: random.Random) -> str:
    params, _ = stub_signature(spec, stub)
    parts: list[str] = []
    positional = True
    for p in params:
        if p.key not in args:
            positional = False
            continue
        literal = repr(args[p.key])
        if positional and p.required and rng.random() < 0.5:
            parts.append(literal)
        else:
            positional = False
            parts.append(f"{p.name}={literal}")
    return f"{stub}({', '.join(parts)})"


#: What the other documents lack: oneOf / anyOf / allOf, unions of types, arrays of objects, deep nesting.
UNIONS: dict[str, Any] = {
    "openapi": "3.0.3", "info": {"title": "unions", "version": "1"},
    "paths": {"/things/{id}": {"put": {
        "operationId": "putThing",
        "parameters": [{"name": "id", "in": "path", "required": True,
                        "schema": {"oneOf": [{"type": "integer", "minimum": 1}, {"type": "string", "pattern": "^t-"}]}},
                       {"name": "mode", "in": "query", "schema": {"type": "string", "enum": ["fast", "safe"],
                                                                  "default": "safe"}}],
        "requestBody": {"required": True, "content": {"application/json": {"schema": {
            "oneOf": [{"$ref": "#/components/schemas/Shape"}, {"$ref": "#/components/schemas/Label"}]}}}},
        "responses": {"200": {"description": "ok"}}}},
        "/search": {"post": {
            "operationId": "searchThings",
            "requestBody": {"required": True, "content": {"application/json": {"schema": {
                "type": "object", "required": ["filters"],
                "properties": {
                    "filters": {"type": "array", "minItems": 1, "items": {"anyOf": [
                        {"type": "object", "required": ["field"], "properties": {
                            "field": {"type": "string"}, "op": {"type": "string", "enum": ["eq", "lt", "gt"]},
                            "value": {"anyOf": [{"type": "string"}, {"type": "number"}, {"type": "boolean"}]}}},
                        {"type": "string", "minLength": 2}]}},
                    "page": {"allOf": [{"$ref": "#/components/schemas/Page"}]},
                    "note": {"type": "string", "nullable": True}}}}}},
            "responses": {"200": {"description": "ok"}}}}},
    "components": {"schemas": {
        "Shape": {"type": "object", "required": ["kind", "size"], "properties": {
            "kind": {"type": "string", "enum": ["circle", "square"]},
            "size": {"type": "number", "minimum": 0},
            "tags": {"type": "array", "items": {"type": "string"}},
            "owner": {"type": "object", "nullable": True, "properties": {
                "name": {"type": "string"}, "address": {"type": "object", "properties": {
                    "city": {"type": "string"}, "zip": {"type": "string", "nullable": True}}}}}}},
        "Label": {"type": "object", "required": ["text"], "properties": {"text": {"type": "string"},
                                                                          "color": {"type": "string"}}},
        "Page": {"type": "object", "properties": {"size": {"type": "integer", "minimum": 1, "default": 30},
                                                   "cursor": {"type": "string", "nullable": True}}}}},
}


def _toolsets() -> list[tuple[str, list[ToolSpec]]]:
    sets = [("test-server OpenAPI", Toolset.from_openapi(OPENAPI, base_url="http://127.0.0.1:9").specs),
            ("unions OpenAPI", Toolset.from_openapi(UNIONS, base_url="http://127.0.0.1:9").specs),
            ("GitHub-like OpenAPI", Toolset.from_openapi(big_document()).specs)]
    if github_document().is_file():
        sets.append(("GitHub OpenAPI", Toolset.from_openapi(str(github_document()),
                                                            base_url="http://127.0.0.1:9").specs))
    return sets


def _generated(count: int) -> list[tuple[str, ToolSpec, dict[str, Any], Checker, dict[str, str]]]:
    rng = random.Random(30)
    out = []
    for _, specs in _toolsets():
        names = python_names(specs)
        checker = Checker(specs, names)
        pool = [s for s in specs if s.input_schema.get("properties")]
        tries = 0
        while sum(1 for o in out if o[3] is checker) < count and tries < count * 10:
            tries += 1
            spec = rng.choice(pool)
            schema = spec.input_schema
            args = _value(schema, schema, rng)
            if isinstance(args, dict) and _valid(spec, args):
                out.append((names[spec.name], spec, args, checker, names))
    return out


def _mutations(stub: str, spec: ToolSpec, args: dict[str, Any], names: dict[str, str],
               rng: random.Random) -> list[tuple[str, str]]:
    """(kind, source) of calls the host or Python certainly refuses."""
    params, kwargs = stub_signature(spec, stub)
    out = []
    for key in list(args):
        wrong = 12345 if not isinstance(args[key], int) or isinstance(args[key], bool) else "twelve"
        if not _valid(spec, {**args, key: wrong}):
            out.append(("wrong type", _source(stub, spec, {**args, key: wrong}, rng)))
            break
    if not kwargs:
        call = _source(stub, spec, args, rng)
        out.append(("unknown keyword", call[:-1] + (", " if args else "") + "zz_not_a_parameter=1)"))
    required = [p for p in params if p.required and p.key in args]
    if required:
        drop = rng.choice(required).key
        out.append(("missing required", _source(stub, spec, {k: v for k, v in args.items() if k != drop}, rng)))
    for cut in range(1, len(stub) - 1):
        misspelt = stub[:cut] + stub[cut + 1] + stub[cut] + stub[cut + 2:]
        if misspelt != stub and misspelt not in names.values():
            out.append(("misspelt tool", _source(misspelt, spec, args, rng)))
            break
    return out


def test_generated_calls_have_no_false_error_and_mutations_are_found() -> None:
    rng = random.Random(7)
    calls = _generated(120)
    false = 0
    caught: dict[str, list[int]] = {}
    for stub, spec, args, checker, names in calls:
        line = rng.randint(1, 4)
        prefix = "".join(f"note_{i} = {i}\n" for i in range(line - 1))
        code = prefix + f"result = {_source(stub, spec, args, rng)}\nprint(result)\n"
        errors = [d for d in checker.check(code) if d.severity == "error"]
        false += bool(errors)
        assert errors == [], (code, errors)
        for kind, call in _mutations(stub, spec, args, names, rng):
            found = [d for d in checker.check(prefix + f"result = {call}\n") if d.severity == "error"]
            hit = caught.setdefault(kind, [0, 0])
            hit[1] += 1
            hit[0] += any(d.line == line for d in found)
    total = sum(t for _, t in caught.values())
    found_all = sum(h for h, _ in caught.values())
    print(f"\ncheck on {len(calls)} generated valid calls: {false} false errors ({100 * false / len(calls):.1f} %); "
          f"{found_all}/{total} mutated calls found at their line ({100 * found_all / total:.1f} %): "
          + ", ".join(f"{k} {h}/{t}" for k, (h, t) in sorted(caught.items())))
    assert len(calls) >= 330 and false == 0
    assert all(h == t for h, t in caught.values()), caught


def test_views_give_the_checker_every_sandbox_stub() -> None:
    """search_tools, describe_tool and read_result are stubs too: their calls are checked."""
    with Runtime(Toolset([]), check="off") as runtime:
        assert isinstance(runtime.views, ToolViews)
        found = runtime.check("read_result('c1', offest=0)\nsearch_tools(quer='x')\ndescribe_tool('a')")
    assert [(d.line, d.code) for d in found if d.severity == "error"] == [
        (1, "unknown-argument"), (2, "missing-argument"), (2, "unknown-argument")]
