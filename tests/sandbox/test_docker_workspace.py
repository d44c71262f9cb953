"""The Docker workspace: a disk quota, user directories left as they were, neutral host paths."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from codeact import Runtime, SandboxConfig
from codeact.errors import SandboxUnavailable
from codeact.sandbox._owner import dir_owner, owner_id, sessions_root
from codeact.sandbox._workspace import loop_available
from tests.sandbox.test_docker_hardening import runsc_or_skip

pytestmark = pytest.mark.docker

QUOTA_MB = 64
CONFIG = SandboxConfig(backend="docker", timeout_s=60, memory_mb=256, tmpfs_mb=8, disk_mb=QUOTA_MB)


@pytest.fixture(autouse=True)
def _needs_loop(docker_image: str) -> None:
    if not loop_available():
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true: the disk quota needs root and loop devices")
        pytest.skip("the disk quota needs root and loop devices")


FILL = textwrap.dedent("""
    import errno, os
    def fill(path):
        written, code = 0, None
        chunk = b"x" * (1 << 20)
        try:
            with open(path, "wb") as fh:
                while written < 4 << 30:
                    fh.write(chunk)
                    fh.flush()
                    written += len(chunk)
        except OSError as e:
            code = e.errno
        return [code, written]
""")


def _free(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


@pytest.mark.parametrize("runtime", ["runc", "runsc"])
def test_fill_loop_stops_at_the_quota_with_enospc(runtime: str) -> None:
    if runtime == "runsc":
        runsc_or_skip()
    with Runtime([], CONFIG.model_copy(update={"runtime": runtime})) as rt, rt.session() as s:
        s.start()
        before = _free(sessions_root())
        result = s.run(FILL + "[fill('big.bin'), fill('/tmp/big.bin'), fill(os.path.expanduser('~/more.bin'))]")
        after = _free(sessions_root())
        assert result.ok, result.error
        (ws_code, ws_bytes), (tmp_code, tmp_bytes), (home_code, home_bytes) = result.value
        assert ws_code == 28 and 0.5 * QUOTA_MB <= ws_bytes / 2**20 <= QUOTA_MB  # ENOSPC in the workspace
        assert tmp_code == 28 and tmp_bytes <= CONFIG.tmpfs_mb * 2**20  # /tmp is its own (memory) tmpfs
        assert home_code == 28 and home_bytes < 2**20  # $HOME is the (full) workspace
        assert before - after < QUOTA_MB * 2**20  # the host's disk lost less than the quota
        assert [f.path for f in result.files] == ["big.bin", "more.bin"]
        # Nothing else broke: the kernel answers, deleting frees the space again.
        again = s.run(FILL + "os.remove('big.bin'); os.remove('more.bin'); fill('again.bin')[0]")
        assert again.ok and again.value == 28
        assert s.run("1 + 1").value == 2


@pytest.mark.parametrize("runtime", ["runc", "runsc"])
def test_user_workspace_keeps_owner_and_mode_and_is_readable(tmp_path: Path, runtime: str) -> None:
    if runtime == "runsc":
        runsc_or_skip()
    user = tmp_path / "mine"
    user.mkdir()
    (user / "secret.txt").write_text("pre-existing")
    (user / "sub").mkdir()
    (user / "sub" / "old.txt").write_text("old")
    for p in (user, user / "secret.txt", user / "sub", user / "sub" / "old.txt"):
        os.chown(p, 4242, 4343)
    os.chmod(user, 0o750)
    os.chmod(user / "secret.txt", 0o600)
    before = {p: (p.stat().st_uid, p.stat().st_gid, p.stat().st_mode) for p in user.rglob("*")}
    before[user] = (user.stat().st_uid, user.stat().st_gid, user.stat().st_mode)
    with Runtime([], CONFIG.model_copy(update={"runtime": runtime})) as rt, rt.session(workspace=user) as s:
        r = s.run("import os\n"
                  "os.makedirs('new/deep')\nopen('new/deep/n.txt', 'w').write('n')\n"
                  "os.remove('sub/old.txt')\n"
                  "open('secret.txt').read()")
        assert r.ok, r.error
        assert r.value == "pre-existing"
        assert [f.path for f in r.files] == ["new/deep/n.txt"]
        assert (user / "new" / "deep" / "n.txt").read_text() == "n"  # written back after the run
        assert not (user / "sub" / "old.txt").exists()  # a deletion too
    after = {p: (p.stat().st_uid, p.stat().st_gid, p.stat().st_mode) for p in [user, *user.rglob("*")]}
    for path, meta in before.items():
        if path.exists():
            assert after[path] == meta, path  # owner and mode kept
    for new in (user / "new", user / "new" / "deep", user / "new" / "deep" / "n.txt"):
        assert (new.stat().st_uid, new.stat().st_gid) == (4242, 4343)  # new files: the directory's owner


def test_user_workspace_larger_than_the_quota_is_refused(tmp_path: Path) -> None:
    user = tmp_path / "big"
    user.mkdir()
    with (user / "blob").open("wb") as fh:
        fh.write(os.urandom(1 << 20) * 20)
    config = CONFIG.model_copy(update={"disk_mb": 16})
    with Runtime([], config) as rt, rt.session(workspace=user) as s, pytest.raises(SandboxUnavailable, match="disk_mb"):
        s.start()
    assert (user / "blob").stat().st_size == 20 << 20  # untouched


def test_host_paths_are_neutral_and_removed_at_close() -> None:
    with Runtime([], CONFIG) as rt:
        with rt.session() as s:
            info = s.run("open('/proc/self/mountinfo').read()").value
            session_dir = s.workspace.parent
            assert dir_owner(session_dir) == owner_id()
    lines = [line for line in info.splitlines() if " /workspace " in line or " /run/codeact " in line]
    assert len(lines) == 2
    text = "\n".join(lines)
    for leak in (owner_id(), f"/{os.getpid()}", f"codeact-{os.geteuid()}"):
        assert leak not in text, (leak, text)
    workspace_line = next(line for line in lines if " /workspace " in line)
    assert workspace_line.split()[3] == "/" and "/dev/loop" in workspace_line  # its own filesystem
    assert not session_dir.exists()
    assert str(session_dir) not in Path("/proc/self/mountinfo").read_text()
    assert session_dir not in list(sessions_root().iterdir())
