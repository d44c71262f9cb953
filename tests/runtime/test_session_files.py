"""``Session.files`` (issue 28, item 3): text and binary round trips between the host and the code on
both backends, paths that escape refused, links and FIFOs the code planted refused (never followed,
never blocking), and the size cap."""

from __future__ import annotations

from pathlib import Path

import pytest

from codeact import Runtime, SandboxConfig
from codeact.errors import (
    WorkspaceFileError,
    WorkspaceFileNotFound,
    WorkspaceFileTooLarge,
    WorkspacePathRefused,
)

BINARY = bytes(range(256)) * 4


def test_round_trip_text_and_binary(runtime: Runtime) -> None:
    with runtime.session() as session:
        info = session.files.write("data/notes.txt", "héllo\n")
        assert (info.path, info.size) == ("data/notes.txt", len("héllo\n".encode()))
        session.files.write("/workspace/data/blob.bin", BINARY)  # the path the code sees on Docker
        seen = session.run("open('data/notes.txt', encoding='utf-8').read(), open('data/blob.bin', 'rb').read() == "
                           "bytes(range(256)) * 4")
        assert seen.ok and seen.value == ["héllo\n", True], seen

        made = session.run("open('out.bin', 'wb').write(bytes(range(255, -1, -1)))\n"
                           "open('data/notes.txt', 'w').write('changed')")
        assert made.ok, made
        assert session.files.read("out.bin") == bytes(range(255, -1, -1))
        assert session.files.read_text("data/notes.txt") == "changed"
        assert [(f.path, f.size) for f in session.files.list()] == [
            ("data/blob.bin", len(BINARY)), ("data/notes.txt", 7), ("out.bin", 256)]
        assert [f.path for f in session.files.list("data")] == ["data/blob.bin", "data/notes.txt"]

        session.files.remove("out.bin")
        assert session.run("import os; os.path.exists('out.bin')").value is False
        with pytest.raises(WorkspaceFileNotFound):
            session.files.read("out.bin")
        with pytest.raises(WorkspaceFileNotFound):
            session.files.remove("out.bin")
        with pytest.raises(WorkspaceFileNotFound):
            session.files.list("nosuch")


@pytest.mark.parametrize("path", ["../escape.txt", "data/../../escape.txt", "/etc/passwd", "", "/workspace/"])
def test_paths_that_leave_the_workspace_are_refused(runtime: Runtime, path: str) -> None:
    with runtime.session() as session:
        for attempt in (lambda: session.files.read(path), lambda: session.files.write(path, "x"),
                        lambda: session.files.remove(path)):
            with pytest.raises(WorkspacePathRefused, match="refusing"):
                attempt()


def test_links_and_fifos_planted_by_the_code_are_refused(runtime: Runtime, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    with runtime.session() as session:
        planted = session.run(f"import os\nos.symlink({str(secret)!r}, 'link')\nos.symlink({str(tmp_path)!r}, 'dir')\n"
                              "os.mkfifo('fifo')\nos.mkdir('real')\nos.symlink('real', 'reallink')")
        assert planted.ok, planted
        for path, why in (("link", "symlink"), ("dir/secret.txt", "symlink on the way"), ("fifo", "fifo"),
                          ("reallink/x", "symlink on the way"), ("real", "dir")):
            with pytest.raises(WorkspacePathRefused, match=why):
                session.files.read(path)
            with pytest.raises(WorkspacePathRefused):
                session.files.write(path, "overwritten")
            with pytest.raises(WorkspacePathRefused):
                session.files.remove(path)
        with pytest.raises(WorkspacePathRefused, match="symlink"):
            session.files.list("reallink")
        assert secret.read_text() == "host secret"  # nothing written through a link
        assert [f.path for f in session.files.list()] == []  # links and the FIFO are not files
        still = session.run("os.path.islink('link'), os.path.islink('reallink')")
        assert still.value == [True, True], still


def test_the_size_cap_fires_both_ways(backend: str) -> None:
    with Runtime([], SandboxConfig(backend=backend, policy="none"), max_file_bytes=100) as rt, rt.session() as session:  # type: ignore[arg-type]
        assert session.files.max_bytes == 100
        session.files.write("at-cap.bin", b"x" * 100)
        with pytest.raises(WorkspaceFileTooLarge, match="max_file_bytes"):
            session.files.write("over.bin", b"x" * 101)
        assert session.run("import os; os.path.exists('over.bin'), os.path.getsize('at-cap.bin')").value == [False, 100]
        assert session.run("open('big.bin', 'wb').write(b'y' * 101)").ok
        with pytest.raises(WorkspaceFileTooLarge):
            session.files.read("big.bin")
        assert session.files.read("at-cap.bin") == b"x" * 100
        assert issubclass(WorkspaceFileTooLarge, WorkspaceFileError)


def test_bad_arguments_are_type_errors(runtime: Runtime) -> None:
    with runtime.session() as session:
        with pytest.raises(TypeError):
            session.files.write("x.txt", 12)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            session.files.read(None)  # type: ignore[arg-type]


def test_a_user_directory_sees_writes_and_removals(runtime: Runtime, tmp_path: Path) -> None:
    (tmp_path / "old.txt").write_text("old")
    with runtime.session(workspace=tmp_path) as session:
        assert session.files.read_text("old.txt") == "old"
        session.files.write("sub/new.txt", "new")
        session.files.remove("old.txt")
        assert session.run("open('sub/new.txt').read()").value == "new"
    assert (tmp_path / "sub" / "new.txt").read_text() == "new"
    assert not (tmp_path / "old.txt").exists()


def test_a_restore_lays_each_write_before_the_cell_that_followed_it(runtime: Runtime) -> None:
    """The cell log keeps ``session.files`` writes and removals with the next cell, so a cell that
    read a file put in from the host replays exactly (laid after the replay, the read would fail:
    the restore would diverge), and the file's later content is the workspace's at the snapshot."""
    with runtime.session() as s:
        s.files.write("in.txt", "first")
        assert s.run("a = open('in.txt').read()").ok
        s.files.write("in.txt", "second")
        s.files.write("gone.txt", "x")
        assert s.run("b = open('in.txt').read()\nimport os\nhere = os.path.exists('gone.txt')").ok
        s.files.remove("gone.txt")
        assert s.run("c = os.path.exists('gone.txt')").ok
        s.files.write("in.txt", "third")  # after the last cell: only the snapshot's files have it
        assert [[op.path for op in c.files] for c in s.cells] == [["in.txt"], ["in.txt", "gone.txt"], ["gone.txt"]]
        assert s.cells[2].files[0].data is None  # a removal
        snap = s.snapshot()
    with runtime.restore(snap, lazy=True) as r:
        got = r.run("(a, b, here, c, open('in.txt').read())")
        assert got.restored and got.value == ["first", "second", True, False, "third"], (got.reason, got.value)
        assert r.files.read_text("in.txt") == "third" and "gone.txt" not in {f.path for f in r.files.list()}
