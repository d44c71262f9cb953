"""Replay that behaves otherwise than recorded is caught (issue 25, finding 11): cells that tell a
replay apart (here by a workspace file the host writes, which a replay's fresh workspace lacks
until the saved files are laid after it) must diverge, never run a tool twice or run unbounded."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from pydantic import BaseModel

from codeact import RestoreDiverged, Runtime, SandboxConfig, Session, tool

LIVE = "import os\nlive = os.path.exists('live')\n"


@pytest.fixture
def hits() -> list[object]:
    return []


@pytest.fixture
def rt(docker_image: str, hits: list[object]) -> Iterator[Runtime]:
    @tool
    def ping(n: int) -> int:
        """Count a call on the host.

        Args:
            n: Any number.
        """
        hits.append(n)
        return n

    config = SandboxConfig(backend="docker", timeout_s=10, grace_s=1, policy="none")
    with Runtime([ping], config) as runtime:
        yield runtime


def _live(session: Session) -> Session:
    (session.workspace / "live").write_text("1")
    return session


def test_a_replay_only_thread_calling_a_tool_diverges_and_the_tool_runs_once(rt: Runtime, hits: list[object]) -> None:
    with _live(rt.session()) as s:
        assert s.run(LIVE + "import threading, time\ny = ping(1)\nif not live:\n"
                     "    threading.Thread(target=lambda: (time.sleep(1), ping(2)), daemon=True).start()").ok
        assert s.suspend()
        after = s.run("import time\ntime.sleep(2.5)\n'y' in globals()")
        assert after.ok and after.value is False and after.calls == [], after
        assert after.reason is not None and "threads left running: 1 on replay, 0 when recorded" in after.reason
        assert hits == [1]  # the thread never called for real


def test_cells_slow_only_on_replay_end_within_the_budget(docker_image: str) -> None:
    config = SandboxConfig(backend="docker", timeout_s=2, grace_s=1, policy="none")
    with Runtime([], config) as runtime, _live(runtime.session()) as s:
        for i in range(8):
            assert s.run(LIVE + f"import time\nif not live:\n    time.sleep(1.5)\nx{i} = {i}").ok
        assert s.suspend()
        began = time.monotonic()
        after = s.run("'x0' in globals(), open('live').read()")
        took = time.monotonic() - began
        assert after.ok and after.value == [False, "1"], after  # the namespace given up, the files kept
        assert after.reason is not None and "time budget of 2 s at cell 2" in after.reason, after.reason
        assert "kept: the records of its cells" in after.reason and "1 workspace files" in after.reason
        assert took < 8  # two sandbox starts and the budget, not 8 cells × 1.5 s
        assert not after.restored and not s.run("1").restored  # an empty start is no restore


def test_rebuild_timeout_caps_an_honest_but_slow_rebuild() -> None:
    config = SandboxConfig(backend="local", timeout_s=10, policy="none", rebuild_timeout_s=0.5)
    with Runtime([], config) as runtime, runtime.session() as s:
        assert s.run("import time\ntime.sleep(0.4)\na = 1").ok and s.run("time.sleep(0.4)\nb = 2").ok
        assert s.suspend()
        after = s.run("'a' in globals()")
        assert after.value is False and after.reason is not None and "time budget of 0.5 s" in after.reason


def test_reordered_sequential_calls_diverge(rt: Runtime) -> None:
    with _live(rt.session()) as s:
        assert s.run(LIVE + "got = [ping(n) for n in ((1, 2) if live else (2, 1))]").ok
        with pytest.raises(RestoreDiverged, match=r"at its tool call 1: the replay called ping.*recorded order"):
            rt.restore(s.snapshot())


def test_other_output_on_replay_diverges(rt: Runtime) -> None:
    with _live(rt.session()) as s:
        assert s.run(LIVE + "print('live' if live else 'replay')").ok
        with pytest.raises(RestoreDiverged, match="cell 1 diverged: it wrote other output on replay"):
            rt.restore(s.snapshot())


class Box(BaseModel):
    w: float
    h: float


def test_the_cache_refilled_by_a_restore_keys_on_converted_arguments(docker_image: str) -> None:
    runs: list[str] = []

    @tool(cacheable=True)
    def scale(x: float) -> float:
        """Twice x.

        Args:
            x: A number.
        """
        runs.append("scale")
        return 2 * x

    @tool(cacheable=True)
    def area(box: Box) -> float:
        """The area of a box.

        Args:
            box: The box.
        """
        runs.append("area")
        return box.w * box.h

    code = "scale(2), area({'w': 2, 'h': 3})"
    with Runtime([scale, area], SandboxConfig(backend="docker", policy="none")) as runtime:
        with runtime.session() as s:
            assert s.run(code).value == [4.0, 6.0]
            snap = s.snapshot()
        with runtime.restore(snap) as restored:
            again = restored.run(code)
            assert again.value == [4.0, 6.0] and all(c.cached for c in again.calls), again.calls
            assert runs == ["scale", "area"]


def test_a_cell_that_behaves_alike_replays(rt: Runtime) -> None:
    # Set order (a fixed hash seed), object addresses in output, concurrent calls and a thread left
    # running both times are the same behaviour: no divergence.
    code = ("import threading, time\nnames = {'alpha', 'beta', 'gamma', 'delta', 'epsilon', 'zeta', 'eta', 'theta'}\n"
            "got = [ping(len(n) * 100 + ord(n[0])) for n in names]\nprint(names, object())\n"
            "par = parallel(ping, [1, 2, 3])\nthreading.Thread(target=time.sleep, args=(60,), daemon=True).start()")
    with rt.session() as s:
        assert s.run(code).ok
        with rt.restore(s.snapshot()) as restored:
            assert restored.run("got, par").value == s.run("got, par").value


def test_a_refused_call_made_only_on_replay_diverges(rt: Runtime) -> None:
    with _live(rt.session()) as s:
        assert s.run(LIVE + "if not live:\n    try:\n        ping('x')\n    except ToolError:\n        pass").ok
        with pytest.raises(RestoreDiverged, match=r"the replay called ping\(\{\"n\":\"x\"\}\) -> invalid_arguments"):
            rt.restore(s.snapshot())


def test_lanes_past_a_small_frame_limit_are_left_out() -> None:
    # 70,000 calls (all but 10 refused) under a 64 KiB frame limit: their lanes would not fit the
    # done frame, so they are not reported, and the run ends normally.
    config = SandboxConfig(backend="local", policy="none", max_frame_bytes=64 * 1024)
    with Runtime([], config, max_calls_per_run=10) as runtime, runtime.session() as s:
        result = s.run("for _ in range(70_000):\n    try:\n        search_tools('x')\n    except ToolError:\n        pass")
        assert result.ok, result
        assert s.cells[0].lanes is None and s.cells[0].threads == 0


def test_the_kernel_counts_processes_up_to_its_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess
    import threading

    from codeact.kernel import running

    children = [subprocess.Popen(["sleep", "30"]) for _ in range(3)]
    try:
        left = running.LeftRunning(set(threading.enumerate()))
        assert left.facts()["children"] >= 3
        monkeypatch.setattr(running, "MAX_PROCESSES", 2)
        assert left.facts() == {"threads": 0, "children": 2}
    finally:
        for child in children:
            child.kill()
            child.wait()


def test_kernel_facts_out_of_bounds_are_left_out() -> None:
    from codeact.runtime._replay import kernel_facts

    assert kernel_facts({"lanes": "mcx", "threads": -1, "children": 10**7}) == {}
    assert kernel_facts({"lanes": "mc", "threads": True, "children": 2}) == {"lanes": "mc", "children": 2}
    assert kernel_facts(["not", "a", "dict"]) is None


def test_saved_files_that_cannot_be_laid_after_a_divergence_are_named() -> None:
    from codeact.runtime.snapshot import SnapshotFile

    with Runtime([], SandboxConfig(backend="local", policy="none")) as runtime:
        with runtime.session() as s:
            assert s.run("import random\nprint(random.random())").ok
            snap = s.snapshot()
        snap.files.append(SnapshotFile(path="/abs", data=""))
        restored = runtime.restore(snap, lazy=True)
        after = restored.run("1")
        assert after.ok and after.reason is not None and "not the saved workspace files" in after.reason


def test_a_read_result_of_a_call_numbered_otherwise_on_replay_matches() -> None:
    """``parallel`` numbers its calls in arrival order, so on replay ``read_result`` may name the same
    recorded call by another id; the matcher compares the call it names, not the number."""
    from codeact.results import ToolCallRecord
    from codeact.runtime._replay import _check_calls
    from codeact.runtime.snapshot import CellRecord

    def rec(i: int, name: str, arguments: dict[str, object]) -> ToolCallRecord:
        return ToolCallRecord(id=f"call_{i}", name=name, arguments=arguments, ok=True, finished=True)

    recorded = [rec(1, "page", {"i": 1}), rec(2, "page", {"i": 2}), rec(3, "page", {"i": 3}),
                rec(4, "read_result", {"call_id": "call_3", "offset": 0, "limit": 400})]
    cell = CellRecord(index=1, code="...", status="completed", calls=recorded, lanes="cccm")
    replayed = [rec(1, "page", {"i": 3}), rec(2, "page", {"i": 1}), rec(3, "page", {"i": 2}),
                rec(4, "read_result", {"call_id": "call_1", "offset": 0, "limit": 400})]
    _check_calls(cell, replayed, "cccm")  # the same call (page 3) under the replay's number
    wrong = [*replayed[:3], rec(4, "read_result", {"call_id": "call_2", "offset": 0, "limit": 400})]
    with pytest.raises(RestoreDiverged, match="read_result"):
        _check_calls(cell, wrong, "cccm")  # page 1: another call than recorded
