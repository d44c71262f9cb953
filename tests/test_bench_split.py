"""The "where the time goes" rows: per operation, wall = host CPU + sandbox CPU + neither, for
codeact and the floor, from the container's own CPU cgroup. Timings are never asserted."""

from __future__ import annotations

import time
from pathlib import Path

from rich.console import Console

from benchmarks import split
from benchmarks._common import Context, make_configs


def test_cpu_time_is_read_from_either_cgroup_version(tmp_path: Path) -> None:
    v1 = tmp_path / "cpuacct.usage"
    v1.write_text("2500000000\n")
    v2 = tmp_path / "cpu.stat"
    v2.write_text("usage_usec 1250000\nuser_usec 1000000\nsystem_usec 250000\n")
    assert split.cpu_seconds(v1) == 2.5
    assert split.cpu_seconds(v2) == 1.25


def test_the_split_adds_up_and_names_both_sides(docker_ready: str) -> None:
    subject, floor = make_configs("docker")
    ctx = Context(quick=True, subject=subject, floor=floor, deadline=time.monotonic() + 300,
                  console=Console(quiet=True))
    rows = {row.key: row for row in split.measure(ctx)}
    assert set(rows) == {key for key, *_ in split.ROWS}
    for row in rows.values():
        assert row.status == "ok", row.note
        for side in ("codeact", "floor"):
            parts = row.extra[side]
            assert parts["wall"] > 0 and parts["host"] > 0 and parts["sandbox"] > 0, (row.key, side, parts)
            assert abs(parts["host"] + parts["sandbox"] + parts["neither"] - parts["wall"]) < 1e-6 * parts["wall"]
        assert row.median == row.extra["codeact"]["wall"]
        assert row.ratio == row.extra["codeact"]["wall"] / row.extra["floor"]["wall"]
        assert "over the floor: host" in row.note
    assert len(rows["pooled_split"].baselines) == 4  # both sides after idle, and both back to back


def test_without_docker_every_row_says_why() -> None:
    subject, floor = make_configs("local")
    ctx = Context(quick=True, subject=subject, floor=floor, deadline=time.monotonic() + 60,
                  console=Console(quiet=True))
    rows = split.measure(ctx)
    assert [row.key for row in rows] == [key for key, *_ in split.ROWS]
    assert all(row.status == "n/a" and row.median is None and row.note for row in rows)
