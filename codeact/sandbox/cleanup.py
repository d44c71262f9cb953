"""Remove what dead owners left behind: containers (by owner label) and session directories.

Owners are named ``<pid>-<start time>`` (a label on containers, the ``owner`` file in a session
directory); an owner is dead when no process with that pid and start time exists, so a host process
killed with SIGKILL leaks nothing past the next start.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from typing import Any

from docker.errors import DockerException

from ._owner import LABEL, dir_owner, owner_alive, owner_id, sessions_root
from ._workspace import unmount_under

__all__ = ["CleanupReport", "cleanup_stale", "owner_id", "remove_own"]


@dataclass
class CleanupReport:
    containers: list[str] = field(default_factory=list)
    directories: list[str] = field(default_factory=list)


def cleanup_stale(client: Any | None = None, *, everything: bool = False) -> CleanupReport:
    """Remove containers and session dirs of dead owners (all of them with ``everything``)."""
    report = CleanupReport()
    if client is not None:
        try:
            listed = client.api.containers(all=True, filters={"label": LABEL})
        except DockerException:
            listed = []
        for info in listed:
            owner = (info.get("Labels") or {}).get(LABEL, "")
            if everything or not owner_alive(owner):
                try:
                    client.api.remove_container(info["Id"], force=True)
                    report.containers.append(info["Id"][:12])
                except DockerException:
                    pass
    root = sessions_root()
    for path in root.iterdir():
        if path.is_dir() and not path.is_symlink() and (everything or not owner_alive(dir_owner(path))):
            try:
                age = time.time() - path.lstat().st_mtime
            except FileNotFoundError:
                continue  # another process removed it since the listing (its owner closed, or a sweep)
            if not dir_owner(path) and age < 60:
                continue  # being created right now: its owner file is not written yet
            unmount_under(path)  # a dead owner's workspace is still mounted: unmount before deleting
            shutil.rmtree(path, ignore_errors=True)
            report.directories.append(str(path))
    return report


def remove_own(client: Any | None = None) -> CleanupReport:
    """Remove this process's own containers and session directories at once (an abandoned run:
    the second Ctrl-C). Pass ``client`` only when the process has talked to Docker."""
    report = CleanupReport()
    me = owner_id()
    if client is not None:
        try:
            listed = client.api.containers(all=True, filters={"label": f"{LABEL}={me}"})
        except DockerException:
            listed = []
        for info in listed:
            try:
                client.api.remove_container(info["Id"], force=True)
                report.containers.append(info["Id"][:12])
            except DockerException:
                pass
    for path in sessions_root().iterdir():
        if path.is_dir() and not path.is_symlink() and dir_owner(path) == me:
            unmount_under(path)
            shutil.rmtree(path, ignore_errors=True)
            report.directories.append(str(path))
    return report
