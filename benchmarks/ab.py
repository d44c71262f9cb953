"""``python -m benchmarks.ab REV``: the working tree against a git revision, interleaved in one process.

This machine's speed swings by 2x from minute to minute, so two separate bench runs cannot tell a
5 % change from noise. This runs both versions side by side in one process, alternating chunks
with the raw floor (``floor.py``), and prints each one's p50 with its ratio to the floor:

    python -m benchmarks.ab HEAD~3                 # tool call round trip (Docker)
    python -m benchmarks.ab HEAD~3 --mode warm     # warm ``x = 1``
    python -m benchmarks.ab HEAD~3 --mode fresh    # a fresh session without a pool (ms)
    python -m benchmarks.ab HEAD~3 --mode paused   # warm runs in bursts after a pause, as an agent's
    python -m benchmarks.ab HEAD~3 --spin-us 0     # both versions and the floor with blocking reads

REV is checked out with ``git worktree`` into a temporary directory and imported as
``codeact_rev``. Its few absolute ``codeact.`` imports (image building) resolve to the working
tree's, except the list of kernel files (each side builds its image from its own).
``--backend local`` compares the two as local subprocesses (the floor stays the container's).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import codeact

from .floor import FloorContainer, open_floor
from .toolcall import CELL

ROOT = Path(__file__).resolve().parent.parent
#: ``--mode paused``: each burst of warm runs follows this long a pause; the runs after the first are timed.
PAUSE_S = 0.2
BURST = 10


def _echo_for(pkg: ModuleType) -> Any:
    def echo(x: int) -> int:
        """Return ``x``.

        Args:
            x: Any integer.
        """
        return x

    return pkg.tool(echo)


def _import_revision(rev: str, into: Path) -> ModuleType:
    tree = into / "tree"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-f", str(tree), rev],
                   check=True, capture_output=True)
    (into / "pkg").mkdir()
    (into / "pkg" / "codeact_rev").symlink_to(tree / "codeact")
    sys.path.insert(0, str(into / "pkg"))
    rev = importlib.import_module("codeact_rev")
    # The image spec reads the working tree's list of kernel files (an absolute import); the
    # revision's image is built from its own list, which may name other files.
    importlib.import_module("codeact_rev.image.spec").KERNEL_FILES = \
        importlib.import_module("codeact_rev.kernel.files").KERNEL_FILES
    return rev


def _measures(mode: str, sessions: dict[str, Any], floor: Any, runtimes: dict[str, Any],
              config: Any) -> dict[str, Callable[[int], list[float]]]:
    def calls(session: Any) -> Callable[[int], list[float]]:
        return lambda n: list(session.run(CELL.format(n=n)).value["lat_us"])

    def warm(session: Any) -> Callable[[int], list[float]]:
        def loop(n: int) -> list[float]:
            lat = []
            for _ in range(n):
                start = time.perf_counter()
                session.run("x = 1")
                lat.append((time.perf_counter() - start) * 1e6)
            return lat
        return loop

    def paused(run: Callable[[], Any]) -> Callable[[int], list[float]]:
        def loop(n: int) -> list[float]:
            lat = []
            for _ in range(n):
                time.sleep(PAUSE_S)
                run()  # the first after the pause: the wake-ups an idle session always pays
                for _ in range(BURST):
                    start = time.perf_counter()
                    run()
                    lat.append((time.perf_counter() - start) * 1e6)
            return lat
        return loop

    if mode == "paused":
        return {"floor": paused(lambda: floor.exec_loop(1)),
                **{label: paused(functools.partial(session.run, "x = 1")) for label, session in sessions.items()}}
    if mode == "fresh":
        return {"floor": lambda n: [_floor_start_ms(config) for _ in range(n)],
                **{label: _fresh(runtime) for label, runtime in runtimes.items()}}
    make, base = (calls, floor.ping) if mode == "call" else (warm, floor.exec_loop)
    return {"floor": base, **{label: make(session) for label, session in sessions.items()}}


def _fresh(runtime: Any) -> Callable[[int], list[float]]:
    """Fresh sessions without a pool: acquire → first result (ms each), closed after."""
    def loop(n: int) -> list[float]:
        lat = []
        for _ in range(n):
            start = time.perf_counter()
            session = runtime.session()
            session.run("1")
            lat.append((time.perf_counter() - start) * 1000)
            session.close()
        return lat
    return loop


def _floor_start_ms(config: Any) -> float:
    """The raw floor container (``floor.py``) from create to its first exec round trip (ms)."""
    start = time.perf_counter()
    box = FloorContainer(config)
    try:
        box.exec_loop(1)
        return (time.perf_counter() - start) * 1000
    finally:
        box.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ab", description=__doc__.split("\n")[0])
    parser.add_argument("rev", help="the git revision to compare the working tree with")
    parser.add_argument("--mode", choices=["call", "warm", "fresh", "paused"], default="call",
                        help="fresh: a session without a pool, acquire → first result (ms; n: a 200th); "
                             f"paused: bursts of {BURST} warm runs after {PAUSE_S:g} s pauses (n: a 200th bursts)")
    parser.add_argument("--backend", choices=["docker", "local"], default="docker",
                        help="where both versions' kernels run")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--n", type=int, default=2000, help="samples per chunk (warm: a quarter of it)")
    parser.add_argument("--spin-us", type=int, default=None,
                        help="SandboxConfig.spin_us for both versions and the floor (0: blocking reads)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="codeact-ab-") as tmp:
        try:
            rev = _import_revision(args.rev, Path(tmp))
            runtimes, sessions = {}, {}
            spin = {} if args.spin_us is None else {"spin_us": args.spin_us}
            for label, pkg in (("working tree", codeact), (args.rev, rev)):
                config = pkg.SandboxConfig(backend=args.backend, policy="none", timeout_s=600, **spin)
                runtime = pkg.Runtime([_echo_for(pkg)], config)
                runtimes[label] = runtime
                sessions[label] = runtime.session()
            floor_config = codeact.SandboxConfig(backend="docker", policy="none", timeout_s=600, **spin)
            floor, note = open_floor(True, floor_config)
            if floor is None:
                raise SystemExit(f"benchmarks.ab: no floor container: {note}")
            try:
                n = {"call": args.n, "warm": max(1, args.n // 4), "fresh": max(1, args.n // 200),
                     "paused": max(1, args.n // 200)}[args.mode]
                measures = _measures(args.mode, sessions, floor, runtimes, floor_config)
                samples: dict[str, list[float]] = {label: [] for label in measures}
                for fn in measures.values():
                    fn(min(n, 200) if args.mode in ("call", "warm") else 1)  # warm-up
                for i in range(args.rounds):
                    order = list(measures.items())
                    for label, fn in order if i % 2 else order[::-1]:
                        samples[label] += fn(n)
            finally:
                floor.close()
                for session in sessions.values():
                    session.close()
                for runtime in runtimes.values():
                    runtime.close()
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(Path(tmp) / "tree")],
                           capture_output=True)
    floor_p50 = statistics.median(samples["floor"])
    for label, values in samples.items():
        p50 = statistics.median(values)
        unit = "ms" if args.mode == "fresh" else "µs"
        print(f"{args.mode:4s} {label:14s} p50 {p50:7.1f} {unit}  {p50 / floor_p50:.2f}× floor  "
              f"p90 {statistics.quantiles(values, n=10)[-1]:7.1f} {unit}")


if __name__ == "__main__":
    main()
