"""``python -m benchmarks.kernel_cpu [REV]``: the kernel's own CPU time for a warm ``x = 1``.

What the kernel does for one run, without the channel or the host: ``run_cell`` on a ``run``
request and the ``done`` frame's encoding, in one kernel process (``time.thread_time``, best of
repeats, so other processes on the machine weigh little). With REV, that revision's kernel files
are measured too, and the raw floor's work for the same run (compile, exec, a JSON reply), all
alternating process by process; the kernel's lines in the profile
breakdown (``benchmarks.ab`` measures the whole path) come from here.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Run in a fresh interpreter with the kernel's directory first on the path; prints µs per run.
_PROBE = r"""
import os, socket, sys, threading, time, timeit
sys.path.insert(0, sys.argv[1])
out = os.fdopen(os.dup(1), "w")  # the kernel takes fd 1 and 2 over
import kernel, protocol
a, b = socket.socketpair()
k = kernel.Kernel(protocol.FrameSocket(a), "none")
k.setup({"type": "setup", "stubs": ""})
k.left_running.own = set(threading.enumerate())
req = {"type": "run", "id": "r1", "code": "x = 1", "output_cap": 1 << 20, "output_limit": 128 << 20}
fn = lambda: protocol.encode(k.run_cell(req))
out.write(f"{min(timeit.repeat(fn, number=2000, repeat=15, timer=time.thread_time)) / 2000 * 1e6:.2f}\n")
"""


#: The raw floor's work for the same run (``floor.py``'s script): compile, exec, a small JSON reply.
_FLOOR = r"""
import json, struct, time, timeit
ns = {}
def fn():
    exec(compile("x = 1", "<cell>", "exec"), ns)
    body = json.dumps({"type": "done", "id": "1", "termination": "completed", "stdout": "", "stderr": ""},
                      separators=(",", ":")).encode()
    return struct.pack("!I", len(body)) + body
print(f"{min(timeit.repeat(fn, number=2000, repeat=15, timer=time.thread_time)) / 2000 * 1e6:.2f}")
"""


def _kernel_dir(tree: Path, into: Path) -> Path:
    """The kernel files of ``tree`` laid out flat, as the image has them (every in-sandbox file)."""
    into.mkdir()
    for src in (tree / "codeact" / "kernel").glob("*.py"):
        if src.name not in ("__init__.py", "files.py"):
            (into / src.name).write_bytes(src.read_bytes())
    return into


def _probe(kernel_dir: Path | None) -> float:
    code, args = (_FLOOR, []) if kernel_dir is None else (_PROBE, [str(kernel_dir)])
    out = subprocess.run([sys.executable, "-s", "-B", "-c", code, *args],
                         capture_output=True, text=True, check=True, env={"PYTHONHASHSEED": "0"})
    return float(out.stdout.strip())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.kernel_cpu", description=__doc__.split("\n")[0])
    parser.add_argument("rev", nargs="?", help="a git revision to compare the working tree with")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="codeact-kcpu-") as tmp:
        dirs: dict[str, Path | None] = {"floor": None, "working tree": _kernel_dir(ROOT, Path(tmp) / "wt")}
        if args.rev:
            tree = Path(tmp) / "tree"
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-f", str(tree), args.rev],
                           check=True, capture_output=True)
            try:
                dirs[args.rev] = _kernel_dir(tree, Path(tmp) / "rev")
            finally:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                               capture_output=True)
        samples: dict[str, list[float]] = {label: [] for label in dirs}
        for _ in range(args.rounds):
            for label, path in dirs.items():
                samples[label].append(_probe(path))
    for label, values in samples.items():
        print(f"kernel CPU, warm x = 1: {label:14s} median {statistics.median(values):6.2f} µs  "
              f"best {min(values):6.2f} µs  ({len(values)} processes)")


if __name__ == "__main__":
    main()
