"""The stale sweep meets directories other processes create and remove while it lists them (two
runtimes on one host sweep at each start): a directory gone mid-sweep is skipped, never an error."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from codeact.sandbox.cleanup import cleanup_stale


def test_a_directory_removed_during_the_sweep_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CODEACT_RUN_DIR", str(tmp_path))
    stop = threading.Event()

    def churn() -> None:  # another owner's sessions starting and closing, as fast as they can
        i = 0
        while not stop.is_set():
            d = tmp_path / f"s{i % 50}"
            try:
                os.mkdir(d)
                os.rmdir(d)
            except OSError:
                pass
            i += 1

    churner = threading.Thread(target=churn, daemon=True)
    churner.start()
    try:
        for _ in range(3000):
            cleanup_stale(None)
    finally:
        stop.set()
        churner.join(5)
    young = tmp_path / "young"
    young.mkdir()
    assert cleanup_stale(None).directories == [] and young.is_dir()  # no owner file yet: being made
