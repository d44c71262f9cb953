"""What a session keeps of its runs (``cells`` for replay, ``history``) is budgeted, results
included, and ``read_result`` pages are kept as their place in the large result, not as copies
(issue 25, finding 3)."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Iterator

import pytest

from codeact import Runtime, SandboxConfig, SnapshotError, tool
from codeact.runtime import Session

BIG_CHARS = 2_000_000
PAGE_CHARS = 20_000
PAGES = 400
#: The bound docs/tools.md states: what the host keeps of one ``read_result`` page (its record and its
#: place in the large result, never its text) is under this many bytes.
PAGE_BOUND = 2560


@tool
def big() -> str:
    """A 2 MB result: far over the limit, so the code pages through it."""
    return "x" * BIG_CHARS


@tool
def small(i: int) -> int:
    """A small result.

    Args:
        i: Echoed.
    """
    return i


def _config() -> SandboxConfig:
    return SandboxConfig(backend="local", policy="none", timeout_s=60)


@pytest.fixture
def rt() -> Iterator[Runtime]:
    with Runtime([big, small], _config(), max_result_chars=2 * PAGE_CHARS) as runtime:
        yield runtime


PAGE_THROUGH = f"""
for i in range({PAGES}):
    page = read_result(v["call_id"], offset=(i * {PAGE_CHARS}) % {BIG_CHARS})
    assert len(page["text"]) == {PAGE_CHARS}
"""


def _traced(session: Session) -> int:
    assert session.cells  # settles the last run
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def test_host_memory_stays_flat_while_code_pages_a_large_result(rt: Runtime) -> None:
    with rt.session() as s:
        assert s.run("v = big()").ok
        first = s.run(PAGE_THROUGH)
        assert first.ok, first.error
        assert len(first.calls[0].result["text"]) == PAGE_CHARS  # the caller's result has the text
        tracemalloc.start()
        try:
            before = _traced(s)
            for _ in range(4):
                result = s.run(PAGE_THROUGH)
                assert result.ok, result.error
                del result
            grown = _traced(s) - before
        finally:
            tracemalloc.stop()
        # Four runs of 400 pages of 20,000 characters: 32 MB of page text kept before the fix.
        assert grown < 4 * PAGES * PAGE_BOUND, f"{grown:,} bytes kept for {4 * PAGES} pages"
        page = s.cells[-1].calls[0]
        assert page.result == {"call_id": "call_1", "offset": 0, "text_chars": PAGE_CHARS,
                               "total_chars": BIG_CHARS + 2, "next_offset": PAGE_CHARS}
        assert s.history[-1].calls[0].result == page.result
        with rt.restore(s.snapshot()) as restored:  # the replay pages through the result again
            assert restored.run("len(page['text'])").value == PAGE_CHARS


def test_a_run_over_the_run_budget_is_kept_inexact_and_listed() -> None:
    with Runtime([big, small], _config(), max_result_chars=2 * PAGE_CHARS,
                 max_run_record_bytes=BIG_CHARS // 2) as rt, rt.session() as s:
        s.run("a = small(1)")
        s.run("v = big()")
        s.run("b = small(2)")
        cells = s.cells
        assert [c.status for c in cells] == ["completed", "inexact", "completed"]
        assert cells[1].calls == [] and "over the per-run budget" in (cells[1].reason or "")
        assert "max_run_record_bytes" in (cells[1].reason or "")
        assert [(k.index, k.reason) for k in s.skipped] == [(2, cells[1].reason)]
        with pytest.raises(SnapshotError, match=r"cell 2 .* over the per-run budget"):
            s.snapshot()
        snap = s.snapshot(allow_inexact=True)
        assert [k.index for k in snap.skipped] == [2]  # listed once, not again when left out
        assert not s.suspend()  # a rebuild could not reproduce cell 2
        assert s.run("(a, v['total_chars'], b)").value == [1, BIG_CHARS + 2, 2]  # the live state has it all


def test_the_session_budget_fires_and_a_forgetting_reset_frees_it() -> None:
    runs = "for i in range(20):\n    small(i)\n"
    with Runtime([big, small], _config(), max_session_record_bytes=60_000) as rt, rt.session() as s:
        for _ in range(3):  # 20 records a run, about 21 KB: the third would pass 60 KB
            s.run(runs)
        assert [c.status for c in s.cells] == ["completed", "completed", "inexact"]
        reason = s.cells[2].reason or ""
        assert "over its budget of 60,000 bytes" in reason and "max_session_record_bytes" in reason
        assert [k.index for k in s.skipped] == [3]
        with rt.restore(s.snapshot(allow_inexact=True)) as restored:  # its two cells count there too
            restored.run(runs)
            assert [c.status for c in restored.cells] == ["completed", "completed", "inexact"]
        s.reset_namespace(forget=True)  # a batch worker's reset: its cells leave, and so do their bytes
        s.run(runs)
        s.run(runs)
        assert [c.status for c in s.cells] == ["completed", "completed"]


def test_history_counts_results_not_only_arguments() -> None:
    with Runtime([big], _config(), max_session_record_bytes=3_000_000) as runtime, runtime.session() as s:
        s.run("v = big()")
        s.run("w = big()")  # 2 MB of result each, a few bytes of arguments
        assert len(s.history) == 1 and s.history[0].calls[0].id == "call_2"
        assert [c.status for c in s.cells] == ["completed", "inexact"]

