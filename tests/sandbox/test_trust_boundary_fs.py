"""The host never follows a path the sandbox controls (issue 25, findings 1 and 2).

Unit tests drive ``sandbox.hostfs`` on a tmp dir, through ``openat2`` and through the component walk
(forced by its module flag). The racing tests start a process inside a real sandbox that keeps
swapping workspace entries for symlinks to a canary file outside (renameat2 RENAME_EXCHANGE, rename,
unlink/create) and flipping a file into a FIFO, while the host snapshots, forks, suspends and
resumes, recovers, writes back and scans; the canary (0600, root's, random) must never come back.
"""

from __future__ import annotations

import base64
import os
import secrets
import socket
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from codeact import ExecutionResult, Runtime, SandboxConfig, Session
from codeact.errors import SnapshotError
from codeact.runtime import _files, _workspace
from codeact.runtime.snapshot import SnapshotFile
from codeact.sandbox import hostfs
from codeact.sandbox.hostfs import Limits, Tree, TreeLimit
from tests.conftest import Counter, make_tools

ROOT = os.geteuid() == 0
T = TypeVar("T")


@pytest.fixture(params=["openat2", "walk"])
def resolver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each unit test twice: with openat2 (where the kernel has it) and with the component walk."""
    if request.param == "openat2":
        if not hostfs.openat2_available():
            pytest.skip("this kernel (or its seccomp filter) has no openat2")
    else:
        monkeypatch.setattr(hostfs, "USE_OPENAT2", False)

        def refuse(*_args: object) -> int:
            raise AssertionError("openat2 used although USE_OPENAT2 is False")

        monkeypatch.setattr(hostfs, "_openat2", refuse)
    return str(request.param)


@pytest.fixture
def canary(tmp_path: Path) -> Iterator[tuple[Path, bytes]]:
    """A directory outside every workspace holding ``f.txt``: 0600, root's, unique content."""
    where = tmp_path / "canary"
    where.mkdir(mode=0o700)
    content = b"CANARY-" + secrets.token_hex(16).encode()
    (where / "f.txt").write_bytes(content)
    os.chmod(where / "f.txt", 0o600)
    yield where, content


@pytest.fixture
def hostile(tmp_path: Path, canary: tuple[Path, bytes]) -> tuple[Path, Path, bytes]:
    """(a tree holding one of everything the host must not follow or open, the canary's dir, its content)."""
    canary_dir, secret = canary
    root = tmp_path / "ws"
    root.mkdir()
    (root / "ok.txt").write_text("fine")
    (root / "sub").mkdir()
    (root / "sub" / "deep.txt").write_text("deep")
    (root / "dl").symlink_to(canary_dir)
    (root / "fl").symlink_to(canary_dir / "f.txt")
    os.mkfifo(root / "pipe")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(root / "sock"))
    sock.close()
    os.link(canary_dir / "f.txt", root / "hard.txt")
    if ROOT:
        os.mknod(root / "zero", stat.S_IFCHR | 0o600, os.makedev(1, 5))
    return root, canary_dir, secret


def test_listing_and_reads_skip_everything_but_plain_files(hostile: tuple[Path, Path, bytes], resolver: str) -> None:
    root, _canary_dir, secret = hostile
    with Tree(root) as tree:
        found = tree.listing()
        assert set(found.files) == {"ok.txt", "sub/deep.txt"} and found.dirs == ["sub"] and found.complete
        expected = {"dl": "symlink", "fl": "symlink", "pipe": "fifo", "sock": "socket", "hard.txt": "hard link"}
        if ROOT:
            expected["zero"] = "device"
        assert found.skipped == expected
        for rel in ("dl/f.txt", "fl", "pipe", "sock", "hard.txt", "zero", "sub/../ok.txt"):
            try:
                assert tree.read(rel, 1 << 20) is None, rel  # a FIFO opened blocking would hang here
            except hostfs.UnsafePath:
                assert ".." in rel
        assert tree.read("sub/deep.txt", 100) is not None and tree.digest("dl/f.txt") is None
    with Tree(root, hardlinks=True) as tree:  # a user's own directory: its hard links are its own
        got = tree.read("hard.txt", 100)
        assert got is not None and got[0] == secret


def test_another_filesystem_below_the_root_is_not_entered(tmp_path: Path, resolver: str) -> None:
    if not ROOT:
        pytest.skip("mounting a tmpfs needs root")
    root = tmp_path / "ws"
    (root / "mnt").mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(root / "mnt")], check=True)
    try:
        (root / "mnt" / "other.txt").write_text("other device")
        with Tree(root) as tree:
            found = tree.listing()
            assert found.files == {} and found.skipped == {"mnt": "other device"}
            assert tree.read("mnt/other.txt", 100) is None
    finally:
        subprocess.run(["umount", "-l", str(root / "mnt")], check=True)


def test_writes_replace_planted_links_and_never_write_through(hostile: tuple[Path, Path, bytes], resolver: str) -> None:
    root, canary_dir, secret = hostile
    with Tree(root) as tree:
        tree.write("hard.txt", b"new", mode=0o640)  # a hard link to the canary: replaced, not truncated
        tree.write("fl", b"new", mode=0o600)  # a symlink to the canary
        tree.write("pipe", b"new", mode=0o600)  # a FIFO: opened O_WRONLY it would block
        with pytest.raises(NotADirectoryError):
            tree.write("dl/f.txt", b"new", mode=0o600, replace=False)  # the user's-directory rule
        tree.write("dl/f.txt", b"new", mode=0o600)  # the workspace rule: the link becomes a directory
        assert not tree.remove("sub") and not tree.remove("missing")
    assert (canary_dir / "f.txt").read_bytes() == secret
    for rel in ("hard.txt", "fl", "pipe", "dl/f.txt"):
        st = os.lstat(root / rel)
        assert stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and (root / rel).read_bytes() == b"new", rel
    assert stat.S_IMODE(os.stat(root / "hard.txt").st_mode) == 0o640


@pytest.mark.skipif(not ROOT, reason="dropping to the sandbox user's identity needs root")
def test_a_tree_the_sandbox_wrote_is_opened_as_its_owner(tmp_path: Path, resolver: str) -> None:
    """Even a path that resolved to a host file (here a root-only file placed in the tree, as a
    resolver bug or a bind mount would expose one) is opened as the sandbox's user, who cannot."""
    root = tmp_path / "ws"
    (root / "sub").mkdir(parents=True)
    os.chown(root, 1000, 1000)
    os.chown(root / "sub", 1000, 1000)
    (root / "sub" / "mine.txt").write_bytes(b"the code's")
    os.chown(root / "sub" / "mine.txt", 1000, 1000)
    secret = root / "sub" / "root-only.txt"
    secret.write_bytes(b"host secret")
    os.chmod(secret, 0o600)  # root's, like a host file
    with Tree(root, as_owner=True) as tree:
        assert tree.opens_as == (1000, 1000)
        assert tree.read("sub/mine.txt", 100) is not None
        assert tree.read("sub/root-only.txt", 100) is None
        assert tree.digest("sub/root-only.txt") is None
    with Tree(root) as tree:  # the host's own identity otherwise (a user's DIR copied in)
        got = tree.read("sub/root-only.txt", 100)
        assert got is not None and got[0] == b"host secret"
    # The identity is put back on this thread: root reads a root-only file again.
    assert secret.read_bytes() == b"host secret"
    with open("/proc/thread-self/status") as fh:
        fs_ids = [line.split()[4] for line in fh if line.startswith(("Uid:", "Gid:"))]
    assert fs_ids == ["0", "0"]


def test_each_limit_fires(tmp_path: Path, resolver: str) -> None:
    for i in range(50):
        (tmp_path / f"f{i}").write_bytes(b"x" * 100)
    with Tree(tmp_path, Limits(entries=10)) as tree:
        found = tree.listing()
        assert not found.complete and found.reason == "over 10 entries" and len(found.files) <= 10
    with Tree(tmp_path, Limits(bytes=250)) as tree:
        assert tree.read("f0", 1000) is not None and tree.read("f1", 1000) is not None
        with pytest.raises(TreeLimit, match="250 bytes"):
            tree.read("f2", 1000)
        assert tree.digest("f3") is None
    with Tree(tmp_path, Limits(seconds=0.0)) as tree:
        found = tree.listing()
        assert not found.complete and found.reason == "over 0 s"


def test_the_snapshot_and_scan_callers_refuse_or_go_partial(hostile: tuple[Path, Path, bytes],
                                                            monkeypatch: pytest.MonkeyPatch, resolver: str) -> None:
    root, _canary_dir, secret = hostile
    restore = threading.Thread(target=_workspace.lay_files, daemon=True,  # O_WRONLY on a FIFO blocks
                               args=(root, [SnapshotFile(path="pipe", data="c2F2ZWQ=")]), kwargs={"keep": {"ok.txt", "sub/deep.txt"}, "uid": None})
    restore.start()
    restore.join(10)
    if restore.is_alive():
        os.close(os.open(root / "pipe", os.O_RDONLY | os.O_NONBLOCK))  # let the host go, then fail
    assert not restore.is_alive() and stat.S_ISREG(os.lstat(root / "pipe").st_mode)
    assert (root / "pipe").read_bytes() == b"saved"
    files = _workspace.collect_files(root, 1 << 20)
    assert {f.path for f in files} == {"ok.txt", "sub/deep.txt", "pipe"}  # the FIFO is a file now
    assert all(secret not in f.content() for f in files)
    before = _files.snapshot(root)
    assert set(before.sigs) == {"ok.txt", "sub/deep.txt", "pipe"}
    monkeypatch.setattr(_workspace, "LIMITS", Limits(entries=3))
    with pytest.raises(SnapshotError, match="could not be collected: over 3 entries"):
        _workspace.collect_files(root, 1 << 20)
    assert _workspace.list_files(root) is None  # incomplete: a restore removes nothing on its word
    monkeypatch.setattr(_files, "LIMITS", Limits(entries=3))
    _found, removed = _files.written_files(root, before)
    assert removed == []  # a partial scan calls nothing removed


# -- racing a real sandbox --------------------------------------------------------------------------

RACER = r'''
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
canary_dir, seconds, pairs, fifo = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "fifo"
def exchange(a, b):
    libc.renameat2(-100, a.encode(), -100, b.encode(), 2)  # AT_FDCWD, RENAME_EXCHANGE
for i in range(pairs):
    os.makedirs(f"d{i}", exist_ok=True)
    with open(f"d{i}/f.txt", "w") as fh:
        fh.write("inner")
    if not os.path.lexists(f"dl{i}"):
        os.symlink(canary_dir, f"dl{i}")
    with open(f"g{i}.txt", "w") as fh:
        fh.write("plain")
    if not os.path.lexists(f"gl{i}"):
        os.symlink(canary_dir + "/f.txt", f"gl{i}")
for name in ("p.txt", "p.fifo"):
    if os.path.lexists(name):
        os.unlink(name)
open("p.txt", "w").write("regular")
if fifo:
    os.mkfifo("p.fifo")
open("ready", "w").write("1")
end = time.monotonic() + seconds
while time.monotonic() < end:
    for i in range(pairs):
        exchange(f"d{i}", f"dl{i}")  # a directory and a symlink to the canary's directory
        exchange(f"g{i}.txt", f"gl{i}")  # a file and a symlink to the canary
    if fifo:
        exchange("p.txt", "p.fifo")  # a file, then a FIFO, under the same name
    try:
        os.symlink(canary_dir + "/f.txt", "r.tmp")
        os.rename("r.tmp", "r.txt")  # rename a symlink over a file
        os.unlink("r.txt")
        with open("r.txt", "w") as fh:  # unlink, create
            fh.write("plain")
    except OSError:
        pass
'''

START = ("import subprocess, sys, time\n"
         "racer = subprocess.Popen([sys.executable, '-c', {racer!r}, {canary!r}, '{seconds}', '{pairs}', '{fifo}'],"
         " start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
         "import os\n"
         "while not os.path.exists('ready'): time.sleep(0.01)\n")

#: What the code sees of its workspace: every regular file's bytes (its own racer is running too).
READ_ALL = ("import os, stat\n"
            "seen = b''\n"
            "for d, dirs, names in os.walk('.'):\n"
            "    for n in names:\n"
            "        try:\n"
            "            fd = os.open(os.path.join(d, n), os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)\n"
            "        except OSError:\n"
            "            continue\n"
            "        if stat.S_ISREG(os.fstat(fd).st_mode):\n"
            "            seen += os.read(fd, 1 << 20)\n"
            "        os.close(fd)\n"
            "{canary!r} in seen.decode('latin-1')")


def _config(backend: str, **extra: object) -> SandboxConfig:
    return SandboxConfig(backend=backend, timeout_s=10, grace_s=1, policy="none", **extra)


def _start_racer(session: Session, canary_dir: Path, seconds: float, pairs: int = 8, fifo: bool = True) -> None:
    code = START.format(racer=RACER, canary=str(canary_dir), seconds=seconds, pairs=pairs,
                        fifo="fifo" if fifo else "none")
    result = session.run(code)
    assert result.ok, result.error


STOP = "racer.kill()\nracer.wait()"


def _no_canary_in_tree(root: Path, secret: bytes) -> None:
    """Checked from the host once the racer is stopped (``os.walk`` itself is not race-free)."""
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = Path(dirpath) / name
            if path.is_file() and not path.is_symlink():
                assert secret not in path.read_bytes(), path


def _timed(session: Session, call: Callable[[], T], bound_s: float) -> tuple[T, float]:
    """``call()`` in a thread, so that a hung host (the FIFO case) fails the test, not the suite:
    a host blocked opening a FIFO is let go by opening its other end, then the test fails."""
    box: list[T] = []
    start = time.monotonic()
    worker = threading.Thread(target=lambda: box.append(call()), daemon=True)
    worker.start()
    worker.join(bound_s)
    took = time.monotonic() - start
    while worker.is_alive():
        driver = session.sandbox_state.driver  # not session.workspace: that may start a rebuild of its own
        for fifo in Path(driver.sandbox.workspace if driver else "/nonexistent").glob("p.*"):
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
        worker.join(0.1)
    assert box and took < bound_s, f"the host did not return within {bound_s} s"
    return box[0], took


def _timed_run(session: Session, code: str, timeout_s: float) -> tuple[ExecutionResult, float]:
    """A run that must end within its timeout + grace + a few seconds, whatever the workspace holds."""
    return _timed(session, lambda: session.run(code, timeout_s=timeout_s), timeout_s + 1 + 5)


@pytest.mark.parametrize("backend", ["local", "docker"])
def test_snapshot_fork_and_scans_under_a_racing_process(backend: str, canary: tuple[Path, bytes],
                                                        tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if backend == "docker":
        request.getfixturevalue("docker_image")
    canary_dir, secret = canary
    with Runtime(make_tools(Counter()), _config(backend)) as rt, rt.session() as s:
        _start_racer(s, canary_dir, seconds=6, fifo=False)  # the links here; the FIFO below
        end = time.monotonic() + 4
        rounds = 0
        while time.monotonic() < end:
            snap, _took = _timed(s, s.snapshot, 10)
            path = tmp_path / f"snap{rounds}.codeact"
            snap.save(path, key=b"k" * 32)
            assert all(secret not in f.content() for f in snap.files)
            assert secret not in path.read_bytes() and base64.b64encode(secret)[:20] not in path.read_bytes()
            result, _took = _timed_run(s, "x = 1", timeout_s=2)
            assert result.ok, result
            rounds += 1
        [child], _took = _timed(s, s.fork, 30)
        with child:
            seen = child.run(READ_ALL.format(canary=secret.decode()))
            assert seen.ok and seen.value is False, seen
            assert child.run(STOP).ok  # the replay started the child's own racer
            _no_canary_in_tree(child.workspace, secret)
        assert s.run(STOP).ok
        _no_canary_in_tree(s.workspace, secret)
    assert rounds >= 2


@pytest.mark.parametrize("backend", ["local", "docker"])
def test_suspend_resume_and_recover_under_a_racing_process(backend: str, canary: tuple[Path, bytes],
                                                           request: pytest.FixtureRequest) -> None:
    if backend == "docker":
        request.getfixturevalue("docker_image")
    canary_dir, secret = canary
    config = _config(backend, recover=True)
    with Runtime(make_tools(Counter()), config, suspend_idle_s=0.3) as rt, rt.session() as s:
        _start_racer(s, canary_dir, seconds=3)  # replayed at each rebuild: it races the rebuild too
        assert rt.suspender is not None
        deadline = time.monotonic() + 20
        while not s.suspended and time.monotonic() < deadline:
            time.sleep(0.05)  # the idle suspender collects the files while the racer runs
        assert s.suspended
        resumed = s.run(READ_ALL.format(canary=secret.decode()))
        # The racer may defeat its own restore (a name swapped at every try): then the state starts
        # empty and the run says why; either way nothing of the host's comes in.
        assert resumed.ok and resumed.value is False, resumed
        assert resumed.restored or "cannot restore" in (resumed.reason or ""), resumed
        lost = s.run("import os\nos._exit(3)")
        assert lost.state_lost
        after, _took = _timed_run(s, READ_ALL.format(canary=secret.decode()), timeout_s=5)
        assert after.ok and after.restored and after.value is False, after
        stopped = s.run(STOP + "\n" + READ_ALL.format(canary=secret.decode()))  # now without a race
        assert stopped.ok and stopped.value is False, stopped


def test_write_back_to_a_user_directory_under_a_racing_process(docker_image: str, canary: tuple[Path, bytes],
                                                                tmp_path: Path) -> None:
    from codeact.sandbox._workspace import loop_available

    if not loop_available():
        pytest.skip("write-back is the copy-in mode: root and loop devices")
    canary_dir, secret = canary
    user = tmp_path / "mine"
    user.mkdir()
    (user / "data.txt").write_text("the user's")
    with Runtime([], _config("docker")) as rt, rt.session(workspace=user) as s:
        _start_racer(s, canary_dir, seconds=4, fifo=False)  # FIFOs: the scan tests; here the links
        end = time.monotonic() + 3
        while time.monotonic() < end:
            result, _took = _timed_run(s, "open('w.txt', 'w').write('w')", timeout_s=2)
            assert result.ok, result
        assert s.run(STOP).ok
    _no_canary_in_tree(user, secret)
    for dirpath, dirs, names in os.walk(user):
        for name in [*dirs, *names]:
            st = os.lstat(Path(dirpath) / name)
            assert stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode), name  # no link, no FIFO came back
    assert (user / "data.txt").read_text() == "the user's" and (user / "w.txt").read_text() == "w"
    assert any(p.read_text() == "inner" for p in user.glob("*/f.txt"))  # the racer's own files came back


@pytest.mark.parametrize("backend", ["local", "docker"])
def test_a_fifo_flip_cannot_hang_a_run(backend: str, canary: tuple[Path, bytes], request: pytest.FixtureRequest) -> None:
    if backend == "docker":
        request.getfixturevalue("docker_image")
    canary_dir, _secret = canary
    with Runtime([], _config(backend)) as rt, rt.session() as s:
        _start_racer(s, canary_dir, seconds=4, pairs=0)  # only the FIFO flip and the renames
        for _ in range(15):  # each run's scans look at p.txt, recent, so hashed: opened
            result, _took = _timed_run(s, "x = 1", timeout_s=1)
            assert result.ok, result
        for _ in range(5):  # collecting for a snapshot opens every file
            _timed(s, s.snapshot, 10)


def test_hard_links_and_devices_in_a_plain_directory_workspace(canary: tuple[Path, bytes], tmp_path: Path) -> None:
    canary_dir, secret = canary
    user = tmp_path / "plain"
    user.mkdir()
    os.link(canary_dir / "f.txt", user / "hard.txt")  # made outside the sandbox, as root can
    if ROOT:
        os.mknod(user / "zero", stat.S_IFCHR | 0o600, os.makedev(1, 5))  # reads forever
    with Runtime([], _config("local")) as rt, rt.session(workspace=user) as s:
        ran = s.run("open('mine.txt', 'w').write('mine')")
        assert [f.path for f in ran.files] == ["mine.txt"]
        snap = s.snapshot()
        assert [f.path for f in snap.files] == ["mine.txt"]
        [child] = s.fork()
        with child:
            assert sorted(os.listdir(child.workspace)) == ["mine.txt"]
            _no_canary_in_tree(child.workspace, secret)


def test_a_low_scan_bound_fires_on_a_real_workspace(monkeypatch: pytest.MonkeyPatch) -> None:
    with Runtime([], _config("local")) as rt, rt.session() as s:
        assert s.run("import os\nfor i in range(300): open(f'f{i}', 'w').write('x')").ok
        monkeypatch.setattr(_files, "LIMITS", Limits(entries=50))
        monkeypatch.setattr(_workspace, "LIMITS", Limits(entries=50))
        more = s.run("open('f0', 'w').write('yy')\nopen('new', 'w').write('n')")
        assert more.ok and len(more.files) <= 50
        with pytest.raises(SnapshotError, match="over 50 entries"):
            s.snapshot()
        monkeypatch.setattr(_files, "LIMITS", Limits(seconds=0.0))
        assert s.run("open('late', 'w').write('z')").files == []  # cut at once: nothing looked at


def test_copy_in_and_write_back_bounds_fire(docker_image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from codeact.errors import SandboxUnavailable
    from codeact.sandbox import _workspace as docker_workspace
    from codeact.sandbox._workspace import loop_available

    if not loop_available():
        pytest.skip("copy-in and write-back are the quota mode: root and loop devices")
    user = tmp_path / "mine"
    user.mkdir()
    for i in range(5):
        (user / f"f{i}").write_text("x")
    monkeypatch.setattr(docker_workspace, "_COPY_LIMITS", Limits(entries=2))
    with Runtime([], _config("docker")) as rt, rt.session(workspace=user) as s, \
            pytest.raises(SandboxUnavailable, match="over 2 entries"):
        s.start()
    monkeypatch.setattr(docker_workspace, "_COPY_LIMITS", Limits(bytes=10))
    with Runtime([], _config("docker")) as rt, rt.session(workspace=user) as s:
        big = s.run("open('big', 'w').write('y' * 100)\nopen('f0').read()")
        assert big.value == "x" and [f.path for f in big.files] == ["big"]  # listed, not written back
    assert not (user / "big").exists() and list(user.glob(".codeact-*")) == []  # no partial file left


def test_input_links_are_never_made_through_a_planted_link(tmp_path: Path) -> None:
    from codeact.errors import SandboxUnavailable
    from codeact.sandbox import create_sandbox

    outside, workspace, data = tmp_path / "outside", tmp_path / "ws", tmp_path / "data.csv"
    outside.mkdir()
    workspace.mkdir()
    data.write_text("a,b")
    (workspace / "inputs").symlink_to(outside)  # left by the code of an earlier session on this DIR
    with pytest.raises(SandboxUnavailable, match="is not a directory"):
        create_sandbox(_config("local"), tmp_path / "session", workspace, {"data.csv": data})
    assert list(outside.iterdir()) == []
    (workspace / "inputs").unlink()
    create_sandbox(_config("local"), tmp_path / "session", workspace, {"data.csv": data})
    assert (workspace / "inputs" / "data.csv").resolve() == data
