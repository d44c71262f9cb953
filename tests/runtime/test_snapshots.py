"""Snapshots, restore by replay, fork, recover, suspension (issue 11), on every backend."""

from __future__ import annotations

import json
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from codeact import (
    RestoreDiverged,
    Runtime,
    SandboxConfig,
    Snapshot,
    SnapshotError,
    SnapshotInvalid,
    Toolset,
    tool,
)
from codeact.runtime.ledger import cache_key
from codeact.runtime.snapshot import host_key
from tests.conftest import Counter, make_tools


@pytest.fixture(scope="module")
def counter() -> Counter:
    return Counter()


@pytest.fixture(scope="module")
def rt(backend: str, counter: Counter) -> Iterator[Runtime]:
    config = SandboxConfig(backend=backend, timeout_s=10, grace_s=1, policy="none")  # type: ignore[arg-type]
    with Runtime(make_tools(counter), config) as runtime:
        yield runtime


@pytest.fixture
def key(tmp_path: Path) -> bytes:
    return host_key(tmp_path / "snapshot.key")


def _cells(session: object, *codes: str) -> None:
    for code in codes:
        result = session.run(textwrap.dedent(code))  # type: ignore[attr-defined]
        assert result.ok or result.error is not None, result


STATE_CELLS = [
    """
    import fractions
    pit = get_weather("Pittsburgh")
    def celsius(f):
        return (f - 32) * 5 / 9
    class Box:
        def __init__(self, v):
            self.v = v
    box = Box(fetch_item(1))
    import os
    os.makedirs("notes", exist_ok=True)
    with open("notes/a.txt", "w") as f:
        f.write("first")
    """,
    """
    try:
        fetch_item(3)
    except ToolError as e:
        caught = e.code
    half = fractions.Fraction(1, 2)
    """,
    """
    bj = get_weather("Beijing")
    items = [fetch_item(i) for i in (4, 5)]
    raise ValueError("on purpose")
    after = 1
    """,
]
PROBE = ("(pit['temperature'], round(celsius(bj['temperature']), 1), box.v, caught, str(half), items, "
         "'after' in globals(), open('notes/a.txt').read())")
EXPECTED = [12.0, 20.0, "item-1", "upstream_error", "1/2", ["item-4", "item-5"], False, "first"]


def test_state_survives_snapshot_save_load_restore_without_running_a_tool(
        rt: Runtime, counter: Counter, key: bytes, tmp_path: Path) -> None:
    with rt.session() as s:
        _cells(s, *STATE_CELLS)
        assert s.history[-1].error is not None and s.history[-1].error.type == "ValueError"
        assert s.run(PROBE).value == EXPECTED
        snap = s.snapshot()
    assert [c.status for c in snap.cells] == ["completed", "completed", "raised", "completed"]
    assert snap.cells[2].error_lineno == 4 and snap.call_count == 6
    assert [f.path for f in snap.files] == ["notes/a.txt"]
    path = snap.save(tmp_path / "s.snap", key=key)
    before = {name: counter.count(name) for name in ("get_weather", "fetch_item")}
    restored = rt.restore(Snapshot.load(path, key=key))
    with restored:
        assert {name: counter.count(name) for name in ("get_weather", "fetch_item")} == before  # no tool ran
        result = restored.run(PROBE)
        assert result.value == EXPECTED and result.calls == [] and not result.restored
        assert list(restored.history) == [result]  # replayed runs are kept out of results
        new = restored.run("get_weather('Pittsburgh')['temperature']")
        assert new.value == 12.0 and counter.count("get_weather") == before["get_weather"] + 1  # real again
        assert [c.index for c in restored.cells] == [1, 2, 3, 4, 5, 6]


def test_a_restored_session_snapshots_and_restores_again(rt: Runtime, counter: Counter) -> None:
    with rt.session() as s:
        s.run("n = fetch_item(1)")
        first = s.snapshot()
    with rt.restore(first) as again:
        again.run("m = n + '!'")
        second = again.snapshot()
    with rt.restore(second) as third:
        assert third.run("m").value == "item-1!"


def test_fork_three_independent_branches_with_real_separate_calls(rt: Runtime, counter: Counter) -> None:
    with rt.session() as s:
        s.run("seen = [fetch_item(1)]\nopen('log.txt', 'w').write('root')")
        before = counter.count("fetch_item")
        branches = s.fork(3)
        assert counter.count("fetch_item") == before
        try:
            for i, branch in enumerate(branches):
                r = branch.run(f"seen.append(fetch_item({i + 4}))\nopen('log.txt', 'a').write('-{i}')\nseen")
                assert r.ok and r.calls[0].result == f"item-{i + 4}"
            assert counter.count("fetch_item") == before + 3
            views = [b.run("(seen, open('log.txt').read())").value for b in branches]
            assert views == [[["item-1", f"item-{i + 4}"], f"root-{i}"] for i in range(3)]
            assert s.run("(seen, open('log.txt').read())").value == [["item-1"], "root"]
            assert len({b.workspace for b in branches} | {s.workspace}) == 4
        finally:
            for branch in branches:
                branch.close()


def test_a_random_dependent_cell_diverges_with_a_clear_error(rt: Runtime) -> None:
    with rt.session() as s:
        s.run("x = 1")
        s.run("import random\nfetch_item(1)\nfetch_item(random.randrange(10**9) + 10)")
        snap = s.snapshot()
    with pytest.raises(RestoreDiverged) as info:
        rt.restore(snap)
    assert info.value.cell == 2 and info.value.call == 2
    assert "cell 2 diverged at its tool call 2" in str(info.value) and "fetch_item" in str(info.value)
    assert "random" in str(info.value)


def test_fewer_calls_on_replay_diverge(rt: Runtime, tmp_path: Path) -> None:
    with rt.session() as s:
        s.run("import time\nif time.time() % 2 < 3:\n    fetch_item(1)")
        snap = s.snapshot()
    snap.cells[0].code = "pass"
    with pytest.raises(RestoreDiverged, match="without the recorded call fetch_item"):
        rt.restore(snap)


def test_a_raised_cell_must_raise_at_the_same_line(rt: Runtime) -> None:
    with rt.session() as s:
        s.run("a = 1\nraise KeyError('k')")
        snap = s.snapshot()
    snap.cells[0].code = "a = 1\n\nraise KeyError('k')"
    with pytest.raises(RestoreDiverged, match="KeyError at line 2 when recorded but KeyError at line 3"):
        rt.restore(snap)


def test_tampered_foreign_and_alien_files_are_refused(rt: Runtime, key: bytes, tmp_path: Path) -> None:
    with rt.session() as s:
        s.run("x = fetch_item(2)")
        path = s.snapshot().save(tmp_path / "s.snap", key=key)
    line, body = path.read_bytes().split(b"\n", 1)  # the header line, then the compressed body
    payload = bytearray(body)
    payload[len(payload) // 2] ^= 1
    tampered = tmp_path / "tampered.snap"
    tampered.write_bytes(line + b"\n" + payload)
    with pytest.raises(SnapshotInvalid, match="modified after it was saved"):
        Snapshot.load(tampered, key=key)
    with pytest.raises(SnapshotInvalid, match="signed with another key"):
        Snapshot.load(path, key=b"another host's key, 32 bytes...")
    newer = tmp_path / "newer.snap"
    newer.write_bytes(json.dumps({**json.loads(line), "version": 99}).encode() + b"\n" + body)
    with pytest.raises(SnapshotInvalid, match="version 99"):
        Snapshot.load(newer, key=key)
    alien = tmp_path / "alien.snap"
    alien.write_text("{not json")
    with pytest.raises(SnapshotInvalid, match="not a codeact snapshot"):
        Snapshot.load(alien, key=key)
    assert Snapshot.load(path, key=key).cells[0].calls[0].result == "item-2"


def test_the_host_key_is_made_once_private(tmp_path: Path) -> None:
    where = tmp_path / "k" / "snapshot.key"
    first = host_key(where)
    assert host_key(where) == first and len(first) == 32
    assert where.stat().st_mode & 0o777 == 0o600
    where.write_bytes(b"short")
    with pytest.raises(SnapshotError, match="too short"):
        host_key(where)


def test_inexact_cells_refuse_unless_allowed_then_are_skipped_and_listed(rt: Runtime) -> None:
    with rt.session() as s:
        s.run("x = 1")
        cut = s.run("import time\ny = 2\ntime.sleep(30)", timeout_s=0.5)
        assert cut.termination == "timeout" and not cut.state_lost
        s.run("z = x + 1")
        with pytest.raises(SnapshotError, match=r"cell 2 \('import time'\) cannot be replayed exactly"):
            s.snapshot()
        snap = s.snapshot(allow_inexact=True)
    assert [c.index for c in snap.cells] == [1, 3] and [k.index for k in snap.skipped] == [2]
    with rt.restore(snap) as restored:
        assert restored.run("(x, z, 'y' in globals())").value == [1, 2, False]
        assert [k.index for k in restored.skipped] == [2]
        assert [k.index for k in restored.snapshot().skipped] == [2]


def test_workspace_over_the_cap_is_a_clear_error(rt: Runtime) -> None:
    with rt.session() as s:
        s.run("open('big.bin', 'wb').write(b'x' * 5000)")
        with pytest.raises(SnapshotError, match=r"5000 bytes in 1 files, over the snapshot limit of 1000.*big\.bin"):
            s.snapshot(max_workspace_bytes=1000)
        assert len(s.snapshot(max_workspace_bytes=5000).files) == 1


def test_restore_refuses_other_tools(rt: Runtime, backend: str) -> None:
    with rt.session() as s:
        s.run("x = 1")
        snap = s.snapshot()

    @tool
    def other(v: int) -> int:
        """Other."""
        return v

    config = SandboxConfig(backend=backend, policy="none")  # type: ignore[arg-type]
    with Runtime(Toolset([other]), config) as elsewhere, pytest.raises(SnapshotError, match="other tools"):
        elsewhere.restore(snap)


def test_suspend_and_resume_keep_state_and_files(backend: str, counter: Counter) -> None:
    config = SandboxConfig(backend=backend, timeout_s=10, policy="none")  # type: ignore[arg-type]
    with Runtime(make_tools(counter), config, suspend_idle_s=0.2) as runtime, runtime.session() as s:
        s.run("v = fetch_item(2)\nopen('kept.txt', 'w').write('yes')")
        before = counter.count("fetch_item")
        deadline = time.monotonic() + 30
        assert runtime.suspender is not None
        while not (s.suspended and runtime.suspender.suspended) and time.monotonic() < deadline:
            time.sleep(0.05)  # the counter moves just after the session is suspended
        assert s.suspended and runtime.suspender.suspended == 1
        result = s.run("(v, open('kept.txt').read())")
        assert result.value == ["item-2", "yes"] and result.restored
        assert counter.count("fetch_item") == before
        assert not s.run("1").restored


def test_lazy_restore_rebuilds_at_the_first_run(rt: Runtime) -> None:
    with rt.session() as s:
        s.run("x = 5")
        snap = s.snapshot()
    with rt.restore(snap, lazy=True) as lazy:
        assert lazy.suspended
        assert lazy.snapshot().cells[0].code == "x = 5"
        first = lazy.run("x * 2")
        assert first.value == 10 and first.restored and not lazy.suspended


def test_recover_after_a_crash_rebuilds_the_state_before_it(backend: str, counter: Counter) -> None:
    config = SandboxConfig(backend=backend, timeout_s=10, policy="none", recover=True)  # type: ignore[arg-type]
    with Runtime(make_tools(counter), config) as runtime, runtime.session() as s:
        s.run("x = fetch_item(1)")
        before = counter.count("fetch_item")
        lost = s.run("y = fetch_item(2)\nimport os\nos._exit(3)")
        assert lost.state_lost and [c.result for c in lost.calls] == ["item-2"]  # its records stay
        after = s.run("(x, 'y' in globals())")
        assert after.value == ["item-1", False] and after.restored
        assert counter.count("fetch_item") == before + 1  # only the lost cell's own call ran
        assert not s.run("2").restored
        assert [c.index for c in s.snapshot().cells] == [1, 3, 4]


def test_without_recover_a_lost_cell_refuses_snapshots(rt: Runtime) -> None:
    with rt.session() as s:
        s.run("x = 1")
        s.run("import os\nos._exit(3)")
        with pytest.raises(SnapshotError, match=r"cell 2 .* cannot be replayed exactly: the sandbox process ended"):
            s.snapshot()
        assert not s.run("'x' in globals()").value


def test_preload_imports_before_hand_out(backend: str) -> None:
    probe = "import sys\n'fractions' in sys.modules"
    base = SandboxConfig(backend=backend, policy="none")  # type: ignore[arg-type]
    with Runtime([], base) as runtime:
        assert runtime.run(probe).value is False
    with Runtime([], base.model_copy(update={"preload": ("fractions",)})) as runtime:
        with runtime.session() as s:
            assert s.run(probe).value is True
            assert s.run("'fractions' in globals() or '__m' in globals()").value is False
    from codeact import SandboxUnavailable

    with Runtime([], base.model_copy(update={"preload": ("no_such_module_here",)})) as runtime, \
            pytest.raises(SandboxUnavailable, match=r"preloading no_such_module_here failed.*ModuleNotFoundError"):
        runtime.run("1")
    with pytest.raises(ValueError, match="preload takes module names"):
        SandboxConfig(preload=("os; rm",))


def test_recover_after_an_oom_killed_cell_restores_the_earlier_state(docker_image: str, counter: Counter) -> None:
    config = SandboxConfig(backend="docker", timeout_s=20, memory_mb=96, policy="none", recover=True)
    with Runtime(make_tools(counter), config) as runtime, runtime.session() as s:
        s.run("import fractions\nx = fetch_item(1)\nopen('w.txt', 'w').write('kept')")
        oom = s.run("y = fetch_item(2)\nchunks = []\nwhile True:\n    chunks.append(bytearray(1 << 20))")
        assert oom.termination == "memory" and oom.state_lost, oom
        assert [c.result for c in oom.calls] == ["item-2"]
        after = s.run("(x, str(fractions.Fraction(1, 3)), 'y' in globals(), open('w.txt').read())")
        assert after.value == ["item-1", "1/3", False, "kept"] and after.restored


def test_laying_files_never_follows_a_planted_symlink(tmp_path: Path) -> None:
    from codeact.runtime._workspace import collect_files, lay_files
    from codeact.runtime.snapshot import SnapshotFile

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_text("untouched")
    root = tmp_path / "ws"
    root.mkdir()
    (root / "dir").symlink_to(outside)  # the sandbox planted these where the host will write
    (root / "file.txt").symlink_to(outside / "victim.txt")
    (root / "stale.txt").write_text("made by the replay, not saved")
    (root / "mine.txt").write_text("was there before")
    saved = [SnapshotFile(path="dir/victim.txt", data="c2F2ZWQ="), SnapshotFile(path="file.txt", data="c2F2ZWQ=")]
    lay_files(root, saved, keep={"mine.txt"}, uid=None)
    assert (outside / "victim.txt").read_text() == "untouched"
    assert not (root / "dir").is_symlink() and (root / "dir" / "victim.txt").read_text() == "saved"
    assert not (root / "file.txt").is_symlink() and (root / "file.txt").read_text() == "saved"
    assert not (root / "stale.txt").exists() and (root / "mine.txt").exists()
    (root / "link").symlink_to(outside / "victim.txt")
    assert "link" not in {f.path for f in collect_files(root, 10_000)}
    with pytest.raises(SnapshotError, match="escaping"):
        lay_files(root, [SnapshotFile(path="../x", data="")], keep=set(), uid=None)


def test_cli_exec_session_file_continues_across_invocations(backend: str, tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    session_file = tmp_path / "s.snap"

    def exec_(code: str) -> dict[str, object]:
        proc = subprocess.run([sys.executable, "-m", "codeact.cli", "exec", "-", "--backend", backend, "--json",
                               "--tools", "examples/weather_tools.py", "--session", str(session_file)],
                              input=code, capture_output=True, text=True, timeout=120, env=env, cwd=root)
        assert proc.returncode in (0, 1), proc.stderr
        result: dict[str, object] = json.loads(proc.stdout)
        return result

    assert exec_("w = get_weather('Pittsburgh')\ndef city():\n    return w['city']")["ok"]
    second = exec_("n = len(city())\n(city(), n)")
    assert second["value"] == ["Pittsburgh", 10] and second["calls"] == []
    assert exec_("n * 2")["value"] == 20
    session_file.write_bytes(session_file.read_bytes().replace(b'"mac":"', b'"mac":"0', 1))
    proc = subprocess.run([sys.executable, "-m", "codeact.cli", "exec", "-", "--backend", backend,
                           "--session", str(session_file)], input="1", capture_output=True, text=True,
                          timeout=120, env=env, cwd=root)
    assert proc.returncode == 2 and "modified after it was saved" in proc.stderr


def test_exec_prints_the_result_when_the_session_file_cannot_be_saved(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    target = tmp_path / "no-such-dir" / "s.snap"
    proc = subprocess.run([sys.executable, "-m", "codeact.cli", "exec", "-", "--backend", "local", "--json",
                           "--session", str(target)], input="print('ran')\n6 * 7", capture_output=True,
                          text=True, timeout=120, env=env, cwd=root)
    assert proc.returncode == 1, proc.stderr
    result = json.loads(proc.stdout)  # the run's result, whole, although the save failed
    assert result["ok"] and result["value"] == 42 and result["stdout"] == "ran\n"
    assert proc.stderr.strip().count("\n") == 0 and f"session file {target} not saved" in proc.stderr
    assert not target.exists()


def test_cacheable_answers_survive_a_restore(backend: str) -> None:
    hits: list[str] = []

    @tool(cacheable=True)
    def lookup(key: str) -> str:
        """Read-only lookup.

        Args:
            key: Key.
        """
        hits.append(key)
        return key.upper()

    config = SandboxConfig(backend=backend, policy="none")  # type: ignore[arg-type]
    with Runtime([lookup], config) as runtime:
        with runtime.session() as s:
            s.run("a = lookup('x')")
            snap = s.snapshot()
        with runtime.restore(snap) as restored:
            # Only the cached answers, in the session's own store (a second store was planted here).
            assert restored.cache == {cache_key("lookup", {"key": "x"}): "X"}
            assert restored.cache is restored.calls.cache
            again = restored.run("lookup('x')")
            assert again.value == "X" and again.calls[0].cached and hits == ["x"]


def test_recover_that_cannot_replay_says_so_and_starts_empty(backend: str, counter: Counter) -> None:
    config = SandboxConfig(backend=backend, timeout_s=10, policy="none", recover=True)  # type: ignore[arg-type]
    with Runtime(make_tools(counter), config) as runtime, runtime.session() as s:
        s.run("import random\nx = fetch_item(random.randrange(10**9) + 10)")
        assert s.run("import os\nos._exit(3)").state_lost
        after = s.run("'x' in globals()")
        assert after.value is False and not after.restored
        assert after.reason is not None and "could not be rebuilt" in after.reason and "cell 1 diverged" in after.reason
        assert s.snapshot().cells[-1].code == "'x' in globals()" and len(s.snapshot().cells) == 1


SLOW_CELL = "import time\nx = 41\nt = time.monotonic()\nwhile time.monotonic() - t < 2.5:\n    pass"


@pytest.mark.parametrize("stop", ["interrupt", "sandbox_dies"])
def test_a_rebuild_stopped_from_outside_keeps_the_state(rt: Runtime, stop: str) -> None:
    # Not a divergence: the run says so, its code does not run, and the next run rebuilds the state.
    with rt.session() as s:
        s.run(SLOW_CELL)
        assert s.suspend() and s.suspended

        def stop_it() -> None:
            deadline = time.monotonic() + 60
            while s.sandbox_state.replay_host is None and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.3)  # the replay's run frame goes out (its cell then runs 2.5 s)
            if stop == "interrupt":
                s.interrupt()
            elif s.sandbox_state.driver is not None:
                s.sandbox_state.driver.sandbox.kill()

        threading.Thread(target=stop_it, daemon=True).start()
        stopped = s.run("x += 1\nx")
        assert not stopped.ok and stopped.termination == ("interrupted" if stop == "interrupt" else "killed")
        assert stopped.reason is not None and "rebuilt at the next run" in stopped.reason, stopped.reason
        assert not stopped.state_lost and all(c.in_state for c in s.cells)
        after = s.run("x + 1")
        assert after.ok and after.value == 42 and after.restored  # x += 1 never ran


def test_a_replay_that_kills_its_own_sandbox_is_given_up_at_the_second_try(tmp_path: Path) -> None:
    # A sandbox dying once during a rebuild may be bad luck (the state is kept); dying again at the
    # next try is the replay's own doing: the state is given up, or no run would ever start again.
    config = SandboxConfig(backend="local", timeout_s=10, policy="none")
    with Runtime([], config) as runtime, runtime.session(workspace=tmp_path) as s:
        s.run("import os\nx = 41\nif os.path.exists('die'):\n    os.kill(os.getpid(), 9)")
        s.run("open('die', 'w').write('1')")  # from now on, replaying the first cell kills the kernel
        assert s.suspend()
        first = s.run("x + 1")
        assert first.termination == "killed" and first.reason is not None and "rebuilt at the next run" in first.reason
        second = s.run("'x' in globals()")
        assert second.ok and second.value is False, second  # started empty, and says why
        assert second.reason is not None and "at a second try in a row" in second.reason


def test_a_seeded_session_replays_random_dependent_cells(backend: str, counter: Counter) -> None:
    config = SandboxConfig(backend=backend, timeout_s=10, policy="none", seed=7)  # type: ignore[arg-type]
    with Runtime(make_tools(counter), config) as runtime, runtime.session() as s:
        s.run("import random\nn = random.randrange(10**6) + 10\nx = fetch_item(n)")
        with runtime.restore(s.snapshot()) as restored:
            assert restored.run("(n, x)").value == s.run("(n, x)").value


def test_load_caps_the_file_and_the_inflated_payload(rt: Runtime, key: bytes, tmp_path: Path) -> None:
    with rt.session() as s:
        s.run("x = '" + "a" * 100_000 + "'")  # compresses well: the file is small, the payload is not
        path = s.snapshot().save(tmp_path / "s.snap", key=key)
    size = path.stat().st_size
    with pytest.raises(SnapshotInvalid, match=f"{size} bytes is over the snapshot limit of {size - 1}"):
        Snapshot.load(path, key=key, max_bytes=size - 1)
    with pytest.raises(SnapshotInvalid, match=f"inflates past the snapshot limit of {size + 10}"):
        Snapshot.load(path, key=key, max_bytes=size + 10)
    assert Snapshot.load(path, key=key, max_bytes=1_000_000).cells[0].code.startswith("x = ")


def test_collecting_files_caps_their_number(tmp_path: Path) -> None:
    from codeact.runtime._workspace import collect_files

    for i in range(4):
        (tmp_path / f"f{i}").write_text("x")
    with pytest.raises(SnapshotError, match="4 bytes in 4 files, over the snapshot limit of 100 bytes / 3 files"):
        collect_files(tmp_path, 100, max_files=3)
    assert len(collect_files(tmp_path, 100, max_files=4)) == 4


def test_parallel_calls_and_paged_large_results_replay(backend: str) -> None:
    runs: list[int] = []

    @tool
    def page(i: int) -> str:
        """A large text.

        Args:
            i: Which.
        """
        runs.append(i)
        return str(i) * 3000

    config = SandboxConfig(backend=backend, policy="none")  # type: ignore[arg-type]
    with Runtime([page], config, max_result_chars=1000) as runtime:
        with runtime.session() as s:
            first = s.run(textwrap.dedent("""
                views = parallel(page, [1, 2, 3, 4])
                assert all(v["truncated"] for v in views)
                text = read_result(views[2]["call_id"], 0, 400)["text"]
                ids = [v["call_id"] for v in views]
            """))
            assert first.ok, first.error
            expected = s.run("(text, sorted(ids))").value  # concurrent calls get ids in arrival order
            snap = s.snapshot()
        with runtime.restore(snap) as restored:
            assert restored.run("(text, sorted(ids))").value == expected and sorted(runs) == [1, 2, 3, 4]
            more = restored.run("read_result(ids[0], 0, 10)['text']")
            assert more.value == '"111111111' and sorted(runs) == [1, 2, 3, 4]
