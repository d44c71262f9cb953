"""``ExecutionResult.files`` lists exactly the files this run created or modified (both backends)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from codeact import Runtime
from codeact.runtime._files import snapshot, written_files


def test_back_to_back_runs_list_only_their_own_files(runtime: Runtime) -> None:
    # Regression: an mtime check with 10 ms of slack listed f0.txt again for the second run.
    with runtime.session() as s:
        first = s.run("open('f0.txt', 'w').write('a')")
        second = s.run("y = 1")
        third = s.run("open('f0.txt', 'w').write('b')")  # same size, possibly the same clock tick
        fourth = s.run("import os\nos.makedirs('d', exist_ok=True)\nopen('d/g.txt', 'w').write('xyz')")
    assert [f.path for f in first.files] == ["f0.txt"]
    assert second.files == []
    assert [f.path for f in third.files] == ["f0.txt"]
    assert [(f.path, f.size) for f in fourth.files] == [("d/g.txt", 3)]


def test_files_left_untouched_by_a_failed_run_are_not_listed(runtime: Runtime) -> None:
    with runtime.session() as s:
        s.run("open('keep.txt', 'w').write('k')")
        failed = s.run("open('new.txt', 'w').write('n')\nraise ValueError('x')")
    assert failed.ok is False and [f.path for f in failed.files] == ["new.txt"]


def test_same_tick_rewrite_is_caught_by_content(tmp_path: Path) -> None:
    target = tmp_path / "a.txt"
    target.write_text("one")
    before = snapshot(tmp_path)
    assert "a.txt" in before.hashes  # written just now: hashed
    target.write_text("two")
    st = os.stat(target)  # simulate a rewrite within the same timestamp tick: identical signature
    before.sigs["a.txt"] = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    files, removed = written_files(tmp_path, before)
    assert [f.path for f in files] == ["a.txt"] and removed == []
    target.unlink()
    assert written_files(tmp_path, before) == ([], ["a.txt"])


def test_the_scan_looks_at_no_more_entries_than_its_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The cap holds inside one directory too (it was checked once a directory: 150,000 files in one
    # were all stat'ed, twice a run, and a 1 s run took 3 s).
    from codeact.runtime import _files
    from codeact.sandbox.hostfs import Limits

    monkeypatch.setattr(_files, "LIMITS", Limits(entries=25))
    for i in range(200):
        (tmp_path / f"f{i}.txt").write_text("x")
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "deep.txt").write_text("y")
    found = _files.snapshot(tmp_path)
    assert 0 < len(found.sigs) <= 25 and not found.complete, len(found.sigs)  # all 201 before
