"""Who owns a sandbox: this process, named by pid and start time so a reused pid is not confused.

Containers carry these as labels and each session directory holds an ``owner`` file (its own name
is random), so a later process can remove what a dead owner left behind.
"""

from __future__ import annotations

import functools
import os
import stat
import tempfile
from pathlib import Path

LABEL = "codeact.owner"
LABEL_PID = "codeact.owner.pid"
LABEL_START = "codeact.owner.start"
OWNER_FILE = "owner"


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
    """Where session directories live: a fixed root, short (AF_UNIX paths are limited to 108 bytes).

    ``$CODEACT_RUN_DIR``, else ``<tmp>/codeact`` for root and ``<tmp>/codeact-<uid>`` for others (the
    one place a uid still shows). Session directories below it have random names: what the sandbox
    sees of a bind source (``/proc/self/mountinfo``) names no uid, pid or session.
    """
    env = os.environ.get("CODEACT_RUN_DIR")
    euid = os.geteuid()
    root = Path(env) if env else Path(tempfile.gettempdir()) / ("codeact" if euid == 0 else f"codeact-{euid}")
    root.mkdir(mode=0o711, parents=True, exist_ok=True)
    st = root.lstat()
    if not env and (st.st_uid != euid or not stat.S_ISDIR(st.st_mode)):
        raise PermissionError(f"{root} belongs to uid {st.st_uid}, not to us; remove it or set CODEACT_RUN_DIR")
    return root


def new_session_dir() -> Path:
    """A fresh ``<root>/<random>`` directory; its ``owner`` file names this process for cleanup."""
    path = Path(tempfile.mkdtemp(prefix="", dir=sessions_root()))
    os.chmod(path, 0o711)
    (path / OWNER_FILE).write_text(owner_id())
    return path


def dir_owner(path: Path) -> str:
    """The owner id recorded in a session directory ('' if none)."""
    try:
        return (path / OWNER_FILE).read_text()[:64]
    except OSError:
        return ""
