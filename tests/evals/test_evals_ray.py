"""``--engine ray``: on a local Ray cluster (loopback only) the episodes and batch items give the local
engine's results, their code actions running on the cluster's sessions (``codeact.cluster``)."""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from codeact import Toolset, tool
from codeact.evals.runner import run_suite
from tests._configs import LOCAL

try:
    import ray  # noqa: F401
except ImportError:  # the optional extra ``ray``; under CI=true it must be there (like the Docker engine)
    if os.environ.get("CI") == "true":
        raise
    pytest.skip("ray is not installed (pip install 'codeact[ray]')", allow_module_level=True)

COMPARED = ("correct", "answer", "status", "stop_reason", "turns", "model_calls", "tokens_in", "tokens_out",
            "tool_calls", "tool_errors", "errors")


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Any]:
    import ray

    from codeact.cluster import init_ray

    assert init_ray(num_cpus=2)
    try:
        yield ray
    finally:
        ray.shutdown()


def _listening() -> dict[str, str]:
    """inode → local address of every listening TCP socket (from /proc/net)."""
    found = {}
    for name in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{name}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":  # LISTEN
                found[fields[9]] = fields[1].split(":")[0]
    return found


def _ray_pids() -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if b"gcs_server" in cmd or b"raylet" in cmd or cmd.startswith(b"ray::") or b"ray/_private" in cmd:
                pids.append(int(entry.name))
    return pids


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    try:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        pass
    return inodes


LOOPBACK = {"0100007F", "0000000000000000FFFF00000100007F", "00000000000000000000000001000000"}


def test_local_cluster_listens_on_loopback_only(ray_cluster: Any) -> None:
    listening = _listening()
    mine = {inode: listening[inode] for pid in _ray_pids() for inode in _socket_inodes(pid) if inode in listening}
    assert len(mine) >= 3  # gcs, raylet, workers…
    assert set(mine.values()) <= LOOPBACK, mine


def _rows(out: Path) -> dict[tuple[str, str, int], dict[str, Any]]:
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    return {(r["task_id"], r["mode"], r["repeat"]): r for r in rows}


def test_ray_engine_gives_the_local_results(ray_cluster: Any, tmp_path: Path) -> None:
    local, distributed = tmp_path / "local", tmp_path / "ray"
    run_suite("weather", out=local, sandbox=LOCAL, concurrency=2, progress=False)
    before = {a["ActorID"] for a in _actors() if a["ActorClassName"] == "NodeAgent"}
    summary = run_suite("weather", out=distributed, sandbox=LOCAL, engine="ray", workers=2, concurrency=2,
                        progress=False)
    assert summary.ran == 14 and not summary.failures
    a, b = _rows(local), _rows(distributed)
    assert a.keys() == b.keys() and len(b) == 14
    for key in a:
        assert {f: b[key][f] for f in COMPARED} == {f: a[key][f] for f in COMPARED}, key
        calls = lambda row: [(c["name"], c["arguments"], c["ok"], c["result"]) for c in row["records"]]  # noqa: E731
        assert calls(b[key]) == calls(a[key])
    assert {r["worker"].split(":")[1] for r in b.values()} == {str(os.getpid())}  # the agent loops ran here
    agents = [a for a in _actors() if a["ActorClassName"] == "NodeAgent" and a["ActorID"] not in before]
    assert len([k for k in b if k[1] == "code"]) == 7
    # the 7 code episodes' runtimes were attached to the one node's one agent, stopped with the run
    assert len(agents) == 1 and agents[0]["State"] == "DEAD", agents


def _actors() -> list[dict[str, Any]]:
    from ray._private import state

    return list(state.actors().values())


@tool
def square(x: int) -> int:
    """x squared.

    Args:
        x: An integer.
    """
    return x * x


def _tools() -> Toolset:
    return Toolset([square])


CODE = "if item in (13, 77):\n    raise ValueError(item)\nsquare(x=item)"


def test_batch_on_ray_keeps_order_and_failures(ray_cluster: Any, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from codeact.cli import app

    (tmp_path / "tools.py").write_text("from codeact import tool\n\n@tool\ndef square(x: int) -> int:\n"
                                       '    """x squared."""\n    return x * x\n')
    (tmp_path / "code.py").write_text(CODE)
    (tmp_path / "in.jsonl").write_text("".join(f"{i}\n" for i in range(100)))
    before = {a["ActorID"] for a in _actors() if a["ActorClassName"] == "NodeAgent"}
    ran = CliRunner().invoke(app, ["batch", str(tmp_path / "code.py"), str(tmp_path / "in.jsonl"), "--tools",
                                   str(tmp_path / "tools.py"), "--engine", "ray", "--workers", "2", "--concurrency",
                                   "2", "--backend", "local", "--policy", "none", "--out", str(tmp_path / "out.jsonl"),
                                   "--no-progress"])
    assert ran.exit_code == 1, ran.output  # two items failed
    results = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [r["index"] for r in results] == list(range(100))
    assert [r["index"] for r in results if not r["ok"]] == [13, 77]
    assert all(r["value"] == r["index"] ** 2 for r in results if r["ok"])
    assert len({a["ActorID"] for a in _actors() if a["ActorClassName"] == "NodeAgent"} - before) == 1  # on the cluster


def test_the_old_ray_engine_warns_and_runs_on_the_cluster(ray_cluster: Any) -> None:
    from codeact.evals.ray_engine import map_code_ray

    with pytest.warns(DeprecationWarning, match="cluster"):
        results = map_code_ray(functools.partial(_tools), LOCAL, CODE, list(range(20)), workers=2, threads=2)
    assert [i for i, r in enumerate(results) if not r.ok] == [13]
    assert all(r.value == i * i for i, r in enumerate(results) if r.ok)
