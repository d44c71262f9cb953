"""Who owns a sandbox: this process, named by pid and start time so a reused pid is not confused.

Containers carry these as labels and session directories live under a per-owner directory, so a
later process can remove what a dead owner left behind.
"""

from __future__ import annotations

import functools
import os
import tempfile
from pathlib import Path

LABEL = "codeact.owner"
LABEL_PID = "codeact.owner.pid"
LABEL_START = "codeact.owner.start"


def process_start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (clock ticks since boot), or None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


@functools.cache
def _owner(pid: int) -> str:
    return f"{pid}-{process_start_time(pid) or '0'}"


def owner_id() -> str:
    """This process's owner id (recomputed after a fork)."""
    return _owner(os.getpid())


def owner_alive(owner: str) -> bool:
    pid_text, _, start = owner.partition("-")
    if not pid_text.isdigit():
        return False
    return process_start_time(int(pid_text)) == start


def sessions_root() -> Path:
    """Where per-session directories live: short, because AF_UNIX paths are limited to 108 bytes."""
    root = Path(os.environ.get("CODEACT_RUN_DIR") or Path(tempfile.gettempdir()) / f"codeact-{os.geteuid()}")
    root.mkdir(mode=0o711, parents=True, exist_ok=True)
    return root


def owner_dir() -> Path:
    path = sessions_root() / owner_id()
    path.mkdir(mode=0o711, exist_ok=True)
    return path


def new_session_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="s", dir=owner_dir()))
