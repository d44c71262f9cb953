"""Hand-made mutants: realistic bugs, one at a time, each in a temporary copy of the tree, against the
tests it names; a mutant the tests pass with survived (see docs/mutation.md).

For the parts ``make mutate`` does not reach (the host's pipeline, the driver, events, workspace
files: code that needs a kernel to run) and for the audit's kinds of bug in the pure-logic modules.

    python scripts/mutants.py [NAME ...] [--list] [--timeout S]

Exit status 0 when every mutant was killed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]


_LEDGER = ("tests/runtime/test_ledger_exact.py",)
_BOUNDS = ("tests/runtime/test_bounds_exact.py",)
_STRICT = ("tests/tool_stubs/test_strict_exact.py",)

MUTANTS: list[Mutant] = [
    Mutant("max_calls_per_run off by one (arrive)", "codeact/runtime/ledger.py",
           "if self.arrived > max_calls:", "if self.arrived > max_calls + 1:", _LEDGER + _BOUNDS),
    Mutant("max_calls_per_run off by one (inline lane)", "codeact/runtime/ledger.py",
           "if (self.arrived >= max_calls or", "if (self.arrived > max_calls or", _LEDGER),
    Mutant("a tool's max_calls off by one", "codeact/runtime/ledger.py",
           "if limit is not None and admitted >= limit:\n            return False",
           "if limit is not None and admitted > limit:\n            return False", _LEDGER + _BOUNDS),
    Mutant("one rate limiter shared by every tool", "codeact/runtime/toolhost.py",
           "self._limiters.setdefault(tool.name, RateLimiter(", "self._limiters.setdefault(\"*\", RateLimiter(",
           _BOUNDS),
    Mutant("inline lane: a refused call's slot not given back", "codeact/runtime/_inline.py",
           "    if record is None:\n        gate.leave()\n        return None",
           "    if record is None:\n        return None", _BOUNDS),
    Mutant("gate: a leaving call keeps its slot", "codeact/runtime/_admission.py",
           "            if not self._waiting:\n                self._running -= 1\n                return",
           "            if not self._waiting:\n                return", ("tests/runtime/test_admission_exact.py",)),
    Mutant("lend cap off by one", "codeact/runtime/_admission.py",
           "if self.lent >= cap:", "if self.lent > cap:", ("tests/runtime/test_admission_exact.py",)),
    Mutant("no grace before the kill (the caller reading)", "codeact/sandbox/driver.py",
           "run.deadline = time.monotonic() + run.grace_s\n                    continue",
           "run.deadline = time.monotonic()\n                    continue", _BOUNDS),
    Mutant("no grace before the kill (a leader watching)", "codeact/sandbox/driver.py",
           "run.deadline = now + run.grace_s", "run.deadline = now", _BOUNDS),
    Mutant("streamed output cap shared by both streams", "codeact/runtime/events.py",
           "room = self._cap - self._sent[name]", "room = self._cap - sum(self._sent.values())", _BOUNDS),
    Mutant("retained results: budget loop keeps one too many", "codeact/runtime/ledger.py",
           "while self._kept_chars > self.max_kept_chars and len(self._kept) > 1:",
           "while self._kept_chars > self.max_kept_chars and len(self._kept) > 2:", _LEDGER),
    Mutant("strict: anyOf members not visited", "codeact/tool_stubs/strict.py",
           'out["anyOf"] = [_convert(m, root, depth + 1, nullable) for m in out["anyOf"]]',
           'out["anyOf"] = list(out["anyOf"])', _STRICT),
    Mutant("strict: required of an allOf merge dropped", "codeact/tool_stubs/strict.py",
           'req = [*merged.get("required", []), *member.get("required", [])]',
           'req = list(member.get("required", []))', _STRICT),
    Mutant("Wilcoxon: tied ranks not averaged", "codeact/evals/stats.py",
           "ranks2[order[k]] = i + j + 2", "ranks2[order[k]] = 2 * k + 2", ("tests/evals/test_stats_exact.py",)),
    Mutant("task fingerprint leaves out the budget", "codeact/evals/fingerprint.py",
           '"budget": dict(task.budget), ', "", ("tests/evals/test_fingerprint_exact.py",)),
    Mutant("task fingerprint leaves out keyword defaults", "codeact/evals/fingerprint.py",
           'values += [(f"kwdefault:{k}", v) for k, v in (fn.__kwdefaults__ or {}).items()]\n', "",
           ("tests/evals/test_fingerprint_exact.py",)),
    Mutant("task fingerprint leaves out nested code's names", "codeact/evals/fingerprint.py",
           "            names.update(const.co_names)", "            pass", ("tests/evals/test_fingerprint_exact.py",)),
    Mutant("snapshot MAC does not cover the header", "codeact/runtime/_snapshot_file.py",
           'return hmac.new(secret, canonical + b"\\n", hashlib.sha256)',
           'return hmac.new(secret, b"\\n", hashlib.sha256)', ("tests/runtime/test_snapshot_file_exact.py",)),
    Mutant("snapshot MAC skips the body's last chunk", "codeact/runtime/_snapshot_file.py",
           "            raise SnapshotInvalid(f\"{where} is over the snapshot limit (it grew while it was read)\")\n"
           "        signer.update(chunk)",
           "            raise SnapshotInvalid(f\"{where} is over the snapshot limit (it grew while it was read)\")\n"
           "        if len(chunk) == CHUNK:\n            signer.update(chunk)",
           ("tests/runtime/test_snapshot_file_exact.py",)),
    Mutant("workspace file modes not written back", "codeact/runtime/_workspace.py",
           "tree.write(item.path, item.content(), mode=item.mode, owner=owner)",
           "tree.write(item.path, item.content(), mode=0o644, owner=owner)", _BOUNDS),
    Mutant("BM25 length normalization removed", "codeact/tool_stubs/search.py",
           "norm = weight / (1 - b + b * sum(counter.values()) / avg[field])", "norm = weight",
           ("tests/tool_stubs/test_search_exact.py",)),
    Mutant("accounting: provider errors not subtracted from not-run", "codeact/evals/_accounting.py",
           "acc.not_run = max(0, acc.planned - acc.finished - acc.provider_errors - acc.harness_failures)",
           "acc.not_run = max(0, acc.planned - acc.finished - acc.harness_failures)",
           ("tests/evals/test_accounting_exact.py",)),
]


def _copy_tree(into: Path) -> None:
    ignore = shutil.ignore_patterns(".venv", "__pycache__", ".git", ".mypy_cache", ".ruff_cache", ".pytest_cache",
                                    "mutants", "*.egg-info")
    for name in ("codeact", "tests", "scripts", "benchmarks", "examples", "docs"):
        if (ROOT / name).exists():
            shutil.copytree(ROOT / name, into / name, ignore=ignore, symlinks=True)
    for name in ("pyproject.toml", "README.md"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, into / name)


def run(mutant: Mutant, timeout: float) -> tuple[str, float]:
    """``killed``, ``survived``, ``timeout`` (killed) or ``not applicable`` (its text is not in the file)."""
    source = (ROOT / mutant.path).read_text()
    if source.count(mutant.old) != 1:
        return "not applicable", 0.0
    with tempfile.TemporaryDirectory(prefix="codeact-mutant-") as tmp:
        tree = Path(tmp)
        _copy_tree(tree)
        (tree / mutant.path).write_text(source.replace(mutant.old, mutant.new))
        env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
        command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *mutant.tests]
        start = time.monotonic()
        try:
            done = subprocess.run(command, cwd=tree, env=env, capture_output=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return "timeout", time.monotonic() - start
        took = time.monotonic() - start
        return ("survived" if done.returncode == 0 else "killed"), took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="mutants to run (substrings of their names; default: all)")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    chosen = [m for m in MUTANTS if not args.names or any(n in m.name for n in args.names)]
    if args.list:
        for m in chosen:
            print(f"{m.name}: {m.path} ({' '.join(m.tests)})")
        return 0
    outcomes: dict[str, int] = {}
    for mutant in chosen:
        outcome, took = run(mutant, args.timeout)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        print(f"{outcome:>14}  {mutant.name}  ({took:.1f} s)", flush=True)
    killed = outcomes.get("killed", 0) + outcomes.get("timeout", 0)
    total = killed + outcomes.get("survived", 0)
    print(f"{killed}/{total} killed" + (f", {outcomes['not applicable']} not applicable"
                                       if outcomes.get("not applicable") else ""))
    return 0 if killed == total and not outcomes.get("not applicable") else 1


if __name__ == "__main__":
    sys.exit(main())
