"""Which real type checker could be the check's tier 2: false positives on model-style code first,
speed second (issue 30). Not part of ``make bench``: run it by hand when the candidates change.

    python -m benchmarks.check_tier2 [--bin DIR] [--limit N]

Each cell of the corpus (the eval suites' scripted code actions, the restricted-fidelity corpus,
the weather example, generated valid calls against real OpenAPI schemas) is written as a file
that imports the tools' typed stubs, declares the sandbox helpers and the earlier cells' names as
``Any``, and holds the cell in an ``async def`` (top-level ``await``). Every cell runs in the
sandbox, so any error a checker reports on it is a false positive. The mutated calls (wrong
type, unknown keyword, missing required, misspelt tool) measure what it finds. The checkers come
from PyPI (``ty``, ``pyrefly``, ``basedpyright``, ``mypy``), looked up on PATH or in ``--bin``.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from codeact.tool_stubs import render_stubs
from codeact.tool_stubs.check import cell_names
from codeact.tool_stubs.spec import ToolSpec
from tests.tool_stubs import test_check_corpus as corpus

_HELPERS = ("ToolError", "parallel", "final_answer", "aio", "search_tools", "describe_tool", "read_result")
#: ty and mypy: ``cell_3.py:12:5: error...``; pyrefly: ``ERROR cell_3.py:12:5-9: ...``.
_LINE = re.compile(r"^(?:.*[/\\])?(cell_\d+)\.py:\d+:\d+:\s*error")
_PYREFLY = re.compile(r"^ERROR\s+(?:.*[/\\])?(cell_\d+)\.py:")
COMMANDS: dict[str, list[str]] = {
    "ty": ["ty", "check", "--output-format", "concise", "--python-version", "3.11", "."],
    "pyrefly": ["pyrefly", "check", "--output-format", "min-text", "--python-version", "3.11", "."],
    "basedpyright": ["basedpyright", "--outputjson", "--pythonversion", "3.11", "."],
    "mypy": ["mypy", "--no-error-summary", "--show-column-numbers", "--python-version", "3.11",
             "--ignore-missing-imports", "--no-incremental", "."],
}


def _cell_file(code: str, earlier: set[str]) -> tuple[str, int]:
    """The file of one cell and the line its code starts at."""
    names = sorted(n for n in earlier if n.isidentifier())
    head = ["from typing import Any", "from tools import *  # noqa", *(f"{n}: Any" for n in _HELPERS),
            *(f"{n}: Any" for n in names), "", "async def __cell__() -> None:"]
    body = textwrap.indent(code, "    ") if code.strip() else "    pass"
    return "\n".join(head) + "\n" + body + "\n    pass\n", len(head) + 1


def _valid_cells() -> list[tuple[list[ToolSpec], str, set[str]]]:
    cells: list[tuple[list[ToolSpec], str, set[str]]] = []
    for _, tools, codes in corpus._suite_cells():
        seen: set[str] = set()
        for code in codes:
            cells.append((tools.specs, code, set(seen)))
            seen |= cell_names(code)[0]
    seen = set()
    for code in corpus._restricted_corpus():
        if "undefined_name" not in code:  # the one snippet written to fail
            cells.append(([], code, set(seen)))
        seen |= cell_names(code)[0]
    return cells


def _generated(limit: int) -> tuple[list[tuple[list[ToolSpec], str, set[str]]], list[tuple[list[ToolSpec], str]]]:
    rng = random.Random(7)
    valid, mutated = [], []
    for stub, spec, args, _checker, _names in corpus._generated(limit // 3 + 1)[:limit]:
        valid.append(([spec], f"result = {corpus._source(stub, spec, args, rng)}\n", set()))
        for _kind, call in corpus._mutations(stub, spec, {**args}, {spec.name: stub}, rng):
            mutated.append(([spec], f"result = {call}\n"))
    return valid, mutated


def _run(name: str, binary: str, root: Path) -> tuple[float, str]:
    command = [binary, *COMMANDS[name][1:]]
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=1800)
    return time.perf_counter() - start, proc.stdout + proc.stderr


def _flagged(name: str, output: str) -> set[str]:
    if name == "basedpyright":
        start = output.find("{")
        data: dict[str, Any] = json.loads(output[start:]) if start >= 0 else {}
        return {Path(d["file"]).stem for d in data.get("generalDiagnostics", []) if d.get("severity") == "error"}
    pattern = _PYREFLY if name == "pyrefly" else _LINE
    return {m.group(1) for line in output.splitlines() if (m := pattern.match(line.strip()))}


def _project(cells: list[tuple[list[ToolSpec], str, set[str]]], root: Path) -> None:
    """One directory per toolset would be fairer to a cache; one per cell set keeps it simple."""
    specs: dict[str, ToolSpec] = {}
    for tools, _, _ in cells:
        specs.update({s.name: s for s in tools})
    (root / "tools.py").write_text(render_stubs(list(specs.values()), prompt=True))
    for i, (_, code, earlier) in enumerate(cells):
        (root / f"cell_{i}.py").write_text(_cell_file(code, earlier)[0])


def measure(binaries: dict[str, str], limit: int) -> list[dict[str, Any]]:
    valid = _valid_cells()
    generated, mutated = _generated(limit)
    rows = []
    for name, binary in binaries.items():
        row: dict[str, Any] = {"checker": name}
        for label, cells in (("valid", valid + generated), ("mutated", [(t, c, set()) for t, c in mutated])):
            with tempfile.TemporaryDirectory() as tmp:
                root = Path(tmp)
                _project(cells, root)
                took, output = _run(name, binary, root)
                flagged = _flagged(name, output)
                row[f"{label}_cells"] = len(cells)
                row[f"{label}_flagged"] = len(flagged)
                row[f"{label}_s"] = round(took, 2)
            if label == "valid":
                with tempfile.TemporaryDirectory() as tmp:
                    root = Path(tmp)
                    _project(cells[:1], root)
                    row["one_cell_s"] = round(min(_run(name, binary, root)[0] for _ in range(3)), 3)
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin", type=Path, help="a directory holding the checkers (e.g. a venv's bin)")
    parser.add_argument("--limit", type=int, default=150, help="generated valid calls")
    args = parser.parse_args()
    binaries = {}
    for name in COMMANDS:
        found = (shutil.which(name, path=str(args.bin)) if args.bin else None) or shutil.which(name) \
            or shutil.which(name, path=str(Path(sys.executable).parent))
        if found:
            binaries[name] = found
    for row in measure(binaries, args.limit):
        fp = 100 * row["valid_flagged"] / row["valid_cells"]
        found = 100 * row["mutated_flagged"] / row["mutated_cells"]
        print(f"{row['checker']:>13}: false errors on {row['valid_flagged']}/{row['valid_cells']} valid cells "
              f"({fp:.1f} %), finds {row['mutated_flagged']}/{row['mutated_cells']} mutated ({found:.1f} %); "
              f"{row['valid_s']:.2f} s for all valid cells, {row['one_cell_s'] * 1000:.0f} ms for one cell (cold)")


if __name__ == "__main__":
    main()
