"""``codeact exec`` with files and session files (issue 28, items 3 and 5): ``--put``/``--get``,
``--session`` refusing an inexact cell unless ``--allow-inexact``, and three parallel invocations
on one session file taking turns (``n += 1`` three times is 3). The real CLI in subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from codeact.runtime.snapshot import Snapshot

CODEACT = str(Path(sys.executable).with_name("codeact"))
COUNT = "try:\n    n += 1\nexcept NameError:\n    n = 1\nprint('n =', n)\n"


def _env() -> dict[str, str]:
    return {**os.environ, "COLUMNS": "160"}


def codeact(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CODEACT, "exec", *args], capture_output=True, text=True, timeout=180, env=_env(), cwd=cwd)


@pytest.mark.parametrize("backend", ["local", "docker"])
def test_put_and_get_round_trip(tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> None:
    if backend == "docker":
        request.getfixturevalue("docker_image")
    (tmp_path / "in.txt").write_text("hello")
    (tmp_path / "in.bin").write_bytes(bytes(range(256)))
    (tmp_path / "job.py").write_text(
        "text = open('data/in.txt').read()\nopen('data/up.txt', 'w').write(text.upper())\n"
        "open('rev.bin', 'wb').write(open('in.bin', 'rb').read()[::-1])\n")
    run = codeact("job.py", "--backend", backend, "--json",
                  "--put", "in.txt:data/in.txt", "--put", "in.bin:in.bin",
                  "--get", "data/up.txt:up.txt", "--get", f"rev.bin:{tmp_path / 'rev.bin'}", cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert (tmp_path / "up.txt").read_text() == "HELLO"
    assert (tmp_path / "rev.bin").read_bytes() == bytes(range(255, -1, -1))


def test_put_and_get_errors_are_one_line(tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text("x = 1\n")
    missing = codeact("job.py", "--backend", "local", "--put", "nosuch.txt:a.txt", cwd=tmp_path)
    assert missing.returncode == 2 and "nosuch.txt" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1, missing.stderr
    (tmp_path / "in.txt").write_text("x")
    escaping = codeact("job.py", "--backend", "local", "--put", "in.txt:../out.txt", cwd=tmp_path)
    assert escaping.returncode == 2 and "refusing" in escaping.stderr, escaping.stderr
    gone = codeact("job.py", "--backend", "local", "--get", "nosuch.txt:x.txt", cwd=tmp_path)
    assert gone.returncode == 1 and "no file nosuch.txt" in gone.stderr, gone.stderr
    assert gone.stderr.strip().splitlines()[-1].startswith("codeact: --get nosuch.txt")
    assert not (tmp_path / "x.txt").exists()


def test_an_inexact_cell_is_not_saved_unless_allowed(tmp_path: Path) -> None:
    state = tmp_path / "state.snap"
    (tmp_path / "count.py").write_text(COUNT)
    (tmp_path / "slow.py").write_text("m = 5\nimport time\ntime.sleep(60)\n")
    assert codeact("count.py", "--backend", "local", "--session", str(state), cwd=tmp_path).returncode == 0
    saved = state.read_bytes()

    refused = codeact("slow.py", "--backend", "local", "--session", str(state), "--timeout", "1", cwd=tmp_path)
    assert refused.returncode == 1
    last = refused.stderr.strip().splitlines()[-1]
    assert "not saved" in last and "--allow-inexact" in last and "allow_inexact=True" not in last, refused.stderr
    assert state.read_bytes() == saved  # the session file is as it was

    allowed = codeact("slow.py", "--backend", "local", "--session", str(state), "--timeout", "1",
                      "--allow-inexact", cwd=tmp_path)
    assert allowed.returncode == 1 and "not saved" not in allowed.stderr, allowed.stderr
    snap = Snapshot.load(state)
    assert [s.code for s in snap.skipped] == ["m = 5\nimport time\ntime.sleep(60)\n"]


def test_parallel_invocations_on_one_session_file_take_turns(tmp_path: Path) -> None:
    state = tmp_path / "state.snap"
    (tmp_path / "count.py").write_text(COUNT)
    procs = [subprocess.Popen([CODEACT, "exec", "count.py", "--backend", "local", "--session", str(state)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=tmp_path)
             for _ in range(3)]
    outs = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outs
    assert sorted(o[0].split("n = ")[1].split()[0] for o in outs) == ["1", "2", "3"], outs
    (tmp_path / "show.py").write_text("n\n")
    shown = codeact("show.py", "--backend", "local", "--session", str(state), "--json", cwd=tmp_path)
    assert shown.returncode == 0 and '"value":3' in shown.stdout.replace(" ", ""), shown.stdout
