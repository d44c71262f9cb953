"""Workspaces, read-only inputs, written-file listing; many sessions at once from threads and asyncio."""

from __future__ import annotations

import asyncio
from pathlib import Path

from codeact import Runtime


def test_workspace_and_inputs(runtime: Runtime, tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "existing.txt").write_text("old")
    data = tmp_path / "table.csv"
    data.write_text("city,temp\nPittsburgh,12\nBeijing,20\n")
    with runtime.session(workspace=workspace, inputs={"table.csv": data}) as session:
        result = session.run(
            "import csv, os\n"
            "rows = list(csv.DictReader(open(os.path.join('..', 'inputs', 'table.csv')"
            " if os.path.exists('../inputs/table.csv') else 'inputs/table.csv')))\n"
            "os.makedirs('out', exist_ok=True)\n"
            "open('out/summary.txt', 'w').write(str(sum(int(r['temp']) for r in rows)))\n"
            "try:\n"
            "    open('../inputs/table.csv' if os.path.exists('../inputs/table.csv') else 'inputs/table.csv', 'a')\n"
            "    writable = True\n"
            "except OSError:\n"
            "    writable = False\n"
            "[len(rows), writable if runtime_backend == 'docker' else None]".replace(
                "runtime_backend", repr(runtime.config.backend))
        )
        assert result.ok, result.error
        assert result.value[0] == 2
        if runtime.config.backend == "docker":
            assert result.value[1] is False  # inputs are read-only
        assert [f.path for f in result.files] == ["out/summary.txt"]
        assert (workspace / "out" / "summary.txt").read_text() == "32"
        assert (workspace / "existing.txt").read_text() == "old"
    assert (workspace / "out" / "summary.txt").exists()  # a user's workspace outlives the session


def test_many_sessions_from_asyncio(runtime: Runtime) -> None:
    async def one(i: int) -> list[object]:
        async with runtime.session() as session:
            await session.arun(f"mine = {i}")
            a = await session.arun("mine * 10")
            b = await session.arun("get_weather('Pittsburgh')['temperature']")
            return [a.value, b.value]

    async def main() -> list[list[object]]:
        return await asyncio.gather(*(one(i) for i in range(8)))

    assert asyncio.run(main()) == [[i * 10, 12.0] for i in range(8)]
