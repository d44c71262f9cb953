"""Batch data processing: ``map_code`` and ``codeact batch`` — every result kept, in order."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from codeact import Runtime, SandboxConfig, ToolError, tool
from codeact.cli import app
from codeact.evals.batch import function_code, map_code

LOCAL = SandboxConfig(backend="local", policy="none", timeout_s=10)


@tool
def price(sku: str) -> float:
    """Unit price of a product.

    Args:
        sku: Product code.
    """
    if sku == "missing":
        raise ToolError("not_found", "no such product")
    return float(len(sku))


CODE = """
qty = item["qty"]
total = price(sku=item["sku"]) * qty
{"sku": item["sku"], "total": total}
"""


def _inputs(n: int, bad: set[int]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(n):
        if i in bad:
            out.append({"sku": "missing", "qty": 1} if i % 2 else {"sku": "ab", "qty": "x"})
        else:
            out.append({"sku": "a" * (1 + i % 5), "qty": i})
    return out


@pytest.fixture(scope="module")
def runtime() -> Any:
    with Runtime([price], LOCAL) as rt:
        yield rt


def test_500_inputs_3_failing_all_kept_in_order(runtime: Runtime) -> None:
    bad = {17, 250, 498}
    items = _inputs(500, bad)
    results = map_code(runtime, CODE, items, concurrency=4)
    assert len(results) == 500
    assert {i for i, r in enumerate(results) if not r.ok} == bad
    for i, (item, result) in enumerate(zip(items, results, strict=True)):
        if i not in bad:
            assert result.value == {"sku": item["sku"], "total": float(len(item["sku"])) * item["qty"]}
    assert results[17].error is not None and results[17].error.type == "ToolError"  # 17 is odd: a missing sku
    assert results[250].error is not None and results[250].error.type == "TypeError"


def test_each_item_gets_a_fresh_namespace(runtime: Runtime) -> None:
    code = """
seen = globals().get("leftover", "clean")
leftover = item
price = None          # rebinding a tool stub must not leak into the next item
import math
[seen, item]
"""
    results = map_code(runtime, code, list(range(20)), concurrency=2)
    assert [r.value for r in results] == [["clean", i] for i in range(20)]
    check = map_code(runtime, 'price(sku="abc")', [0, 1], concurrency=1)
    assert [r.value for r in check] == [3.0, 3.0]


def test_a_function_is_shipped_by_source(runtime: Runtime) -> None:
    def total(item: dict[str, Any]) -> float:
        return price(sku=item["sku"]) * item["qty"]

    assert function_code(total).rstrip().endswith("total(item)")
    results = map_code(runtime, total, [{"sku": "abc", "qty": 2}, {"sku": "a", "qty": 5}])
    assert [r.value for r in results] == [6.0, 5.0]
    with pytest.raises(TypeError, match="lambda"):
        map_code(runtime, lambda item: item, [1])


def test_a_crashed_sandbox_fails_only_its_item(runtime: Runtime) -> None:
    code = "import os\nif item == 2:\n    os._exit(9)\nitem * 10"
    results = map_code(runtime, code, [0, 1, 2, 3, 4], concurrency=1)
    assert [r.ok for r in results] == [True, True, False, True, True]
    assert [r.value for r in results if r.ok] == [0, 10, 30, 40]


def test_restricted_policy_uses_a_sandbox_per_item() -> None:
    with Runtime([price], SandboxConfig(backend="local", timeout_s=10)) as rt:  # local defaults to restricted
        results = map_code(rt, "x = item + 1\nx", [1, 2, 3], concurrency=2)
        assert [r.value for r in results] == [2, 3, 4]
        with pytest.raises(ValueError, match="restricted"):
            map_code(rt, "item", [1], isolation="namespace")


def test_inputs_must_be_json(runtime: Runtime) -> None:
    with pytest.raises(TypeError, match="input 1"):
        map_code(runtime, "item", [1, {1, 2}])
    assert map_code(runtime, "item", []) == []


def test_cli_batch_500_inputs_3_failing(tmp_path: Path) -> None:
    tools_file = tmp_path / "tools.py"
    tools_file.write_text(
        "from codeact import tool, ToolError\n\n"
        "@tool\ndef price(sku: str) -> float:\n"
        '    """Unit price.\n\n    Args:\n        sku: Product code.\n    """\n'
        '    if sku == "missing":\n        raise ToolError("not_found", "no such product")\n'
        "    return float(len(sku))\n"
    )
    code_file = tmp_path / "action.py"
    code_file.write_text(CODE)
    inputs = tmp_path / "inputs.jsonl"
    bad = {3, 100, 499}
    inputs.write_text("".join(json.dumps(item) + "\n" for item in _inputs(500, bad)))
    out = tmp_path / "results.jsonl"
    result = CliRunner().invoke(app, ["batch", str(code_file), str(inputs), "--tools", str(tools_file),
                                      "--backend", "local", "--policy", "none", "--concurrency", "4",
                                      "--out", str(out), "--no-progress"])
    assert result.exit_code == 1, result.output  # some inputs failed
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["index"] for r in rows] == list(range(500))
    assert {r["index"] for r in rows if not r["ok"]} == bad
    assert rows[4]["value"] == {"sku": "aaaaa", "total": 20.0}
    assert "500 results, 3 failed (inputs 3, 100, 499)" in result.output


def test_cli_batch_usage_errors(tmp_path: Path) -> None:
    code_file = tmp_path / "a.py"
    code_file.write_text("item")
    inputs = tmp_path / "in.jsonl"
    inputs.write_text("1\n{oops\n")
    result = CliRunner().invoke(app, ["batch", str(code_file), str(inputs), "--backend", "local"])
    assert result.exit_code == 2 and "in.jsonl:2" in result.output
