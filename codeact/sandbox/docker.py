"""The ``docker`` backend: one hardened container per session, the kernel kept alive in it.

Hardening (each checked from inside by tests/sandbox/test_docker_hardening.py): no network (only ``lo``),
read-only root, size-limited tmpfs /tmp, the session's workspace as the only other writable place,
a non-root uid, every capability dropped, no-new-privileges, pids/memory(+swap)/CPU limits,
nofile/fsize ulimits, an init that reaps zombies and forwards signals, Docker's default seccomp
profile minus ptrace & co. (``_seccomp``), no log driver, an empty environment, no Docker socket,
owner labels for cleanup, the workspace on its own size-limited filesystem (``_workspace``), and
optionally gVisor (``SandboxConfig(runtime="runsc")``). Code arrives over the channel (a Unix socket
in a per-session host directory), never through a mount.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import signal
import threading
import time
from pathlib import Path
from typing import Any

from docker.errors import APIError, DockerException, NotFound
from docker.types import LogConfig, Mount, Ulimit

from .._text import one_line
from ..errors import SandboxUnavailable
from ..image import ensure_image, resolve_python
from ..image.engine import docker_client
from ..kernel.files import kernel_args
from ._host_end import HostEnd
from ._owner import LABEL, LABEL_PID, LABEL_START, owner_id
from ._seccomp import profile_json
from ._workspace import Workspace
from .base import KERNEL_ENV, ExitStatus, SandboxConfig
from .cleanup import remove_own
from .reaper import drain, reap

__all__ = ["DockerSandbox", "sandbox_image"]

_MB = 1024 * 1024
#: Where the image has the kernel's files (``image/_context.py`` puts them there).
_KERNEL_DIR = "/opt/codeact"
CHANNEL_DIR = "/run/codeact"
_lock = threading.Lock()
# Under gVisor the container's pids cgroup also holds the sandbox kernel's own (Go) threads: without
# this allowance a low pids_limit kills gVisor itself (exit 2) instead of failing the code's fork.
_RUNSC_THREADS = 256
_REMOVE_ATTEMPTS = 4
_REMOVE_BACKOFF_S = 0.5
#: Whether this process created a container: then its exit removes those left open (see below).
_created = False


@functools.lru_cache(maxsize=1)
def _client() -> Any:
    client = docker_client(timeout=60)
    from .cleanup import cleanup_stale  # every start removes what dead owners left

    cleanup_stale(client)
    return client


@functools.lru_cache(maxsize=16)
def _image_and_python(image: str | None, base: str | None, pip: tuple[str, ...]) -> tuple[str, str]:
    def say(message: str) -> None:
        print(f"codeact: {message}", file=__import__("sys").stderr, flush=True)

    tag = image or ensure_image(base=base, pip=pip, progress=say, client=_client())
    return tag, resolve_python(tag, client=_client())


def sandbox_image(config: SandboxConfig) -> tuple[str, str]:
    """(image tag, python path) for ``config``; builds the image on first use, with progress."""
    with _lock:
        return _image_and_python(config.image, config.base_image, tuple(config.pip))


class DockerSandbox(HostEnd):
    """A container running the kernel; ``session_dir`` holds the channel socket."""

    def __init__(self, config: SandboxConfig, session_dir: Path, workspace: Path,
                 inputs: dict[str, Path] | None = None) -> None:
        super().__init__(config)
        self.session_dir = session_dir
        user_dir = None if workspace == session_dir / "workspace" else workspace
        self._workspace = Workspace(session_dir, config.disk_mb, config.uid, user_dir)
        self.workspace = self._workspace.path
        self.inputs = inputs or {}
        self.container_id: str | None = None
        self._status: ExitStatus | None = None

    def _prepare_dirs(self, open_workspace: bool = True) -> Path:
        """The channel directory, and the workspace directory; with ``open_workspace`` the workspace
        is opened too (else the caller opens it: it must be before the container starts)."""
        chan_dir = self.session_dir / "chan"
        chan_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.session_dir, 0o711)
        os.chmod(chan_dir, 0o711)
        if not self.workspace.exists() and not self._workspace.quota and os.geteuid() == 0:
            self.workspace.mkdir(parents=True)  # a fresh plain directory of ours: the sandbox user's
            os.chown(self.workspace, self.config.uid, self.config.uid)
        if open_workspace:
            self._workspace.open()  # never chowns or chmods a directory the user gave
        elif self._workspace.quota:
            self.workspace.mkdir(mode=0o700, parents=True, exist_ok=True)  # the bind mount's source, for create
        return chan_dir

    def _open_workspace(self, failed: list[BaseException]) -> None:
        try:
            self._workspace.open()
        except BaseException as exc:  # raised by start() once the container is created
            failed.append(exc)

    def sync_out(self, written: list[str], removed: list[str]) -> None:
        """Write a run's files back to a user-given workspace directory (see ``_workspace``)."""
        self._workspace.sync_out(written, removed)

    def _mounts(self, chan_dir: Path) -> list[Mount]:
        mounts = [
            Mount(CHANNEL_DIR, str(chan_dir), type="bind"),
            Mount("/workspace", str(self.workspace), type="bind"),
        ]
        for name, src in self.inputs.items():
            if "/" in name or name in ("", ".", ".."):
                raise ValueError(f"input name {name!r} must be a plain file name")
            mounts.append(Mount(f"/inputs/{name}", str(src), type="bind", read_only=True))
        return mounts

    def _host_config(self, client: Any, chan_dir: Path) -> Any:
        cfg = self.config
        return client.api.create_host_config(
            network_mode="none",
            read_only=True,
            tmpfs={"/tmp": f"rw,nosuid,nodev,size={cfg.tmpfs_mb}m,mode=1777"},
            mounts=self._mounts(chan_dir),
            cap_drop=["ALL"],
            security_opt=["no-new-privileges", f"seccomp={profile_json(cfg.runtime)}"],
            pids_limit=cfg.pids_limit + (_RUNSC_THREADS if cfg.runtime == "runsc" else 0),
            mem_limit=cfg.memory_mb * _MB,
            memswap_limit=cfg.memory_mb * _MB,
            nano_cpus=int(cfg.cpus * 1e9),
            ulimits=[Ulimit(name="nofile", soft=cfg.nofile, hard=cfg.nofile),
                     Ulimit(name="fsize", soft=cfg.fsize_mb * _MB, hard=cfg.fsize_mb * _MB),
                     Ulimit(name="core", soft=0, hard=0)],
            init=True,
            log_config=LogConfig(type="none"),
            ipc_mode="private",
            runtime=cfg.runtime,
        )

    def start(self) -> None:
        client = _client()
        image, python = sandbox_image(self.config)
        try:
            chan_dir = self._prepare_dirs(open_workspace=False)
        except BaseException:
            self.close()
            raise
        self._listen(chan_dir, owner_uid=self.config.uid)
        owner = owner_id()
        command = [python, *kernel_args(_KERNEL_DIR), "--connect",
                   f"{CHANNEL_DIR}/channel.sock", "--policy", self.config.effective_policy()]
        if self.config.egress is not None:
            command += ["--egress", str(self.config.egress.port)]
        # The workspace (a loop mount with a quota: a copy and a mount command) is made while the
        # engine creates the container, which needs only its directory; the bind happens at start.
        failed: list[BaseException] = []
        opening = threading.Thread(target=self._open_workspace, args=(failed,), name="codeact-workspace", daemon=True)
        opening.start()
        try:
            try:
                created = client.api.create_container(
                    image, command=command, user=f"{self.config.uid}:{self.config.uid}",
                    working_dir="/workspace", hostname="sandbox", environment=dict(KERNEL_ENV), network_disabled=True,
                    labels={LABEL: owner, LABEL_PID: owner.split("-")[0], LABEL_START: owner.split("-")[1],
                            "codeact.session": self.session_dir.name},
                    host_config=self._host_config(client, chan_dir),
                )
                self.container_id = created["Id"]
                global _created
                _created = True
            finally:
                opening.join()  # never a close (an unmount) while the workspace is being made
            if failed:
                raise _WorkspaceFailed(failed[0])
            client.api.start(self.container_id)
            self._accept()
        except (DockerException, OSError) as exc:
            self.close()
            raise SandboxUnavailable(f"cannot start the sandbox container: {one_line(str(exc), 300)}") from None
        except SandboxUnavailable:
            self.close()
            raise
        except _WorkspaceFailed as exc:  # as it came, as when the workspace was made first
            self.close()
            raise exc.error from None

    def interrupt(self) -> None:
        if self.container_id is not None:
            try:
                _client().api.kill(self.container_id, signal="SIGINT")
            except DockerException:
                pass

    def kill(self) -> None:
        if self.container_id is None:
            return
        try:
            _client().api.kill(self.container_id)
        except DockerException:
            pass

    def exit_status(self) -> ExitStatus:
        if self._status is not None:
            return self._status
        if self.container_id is None:
            return ExitStatus(detail="never started")
        api = _client().api
        try:
            api.wait(self.container_id, timeout=5)
        except (DockerException, OSError):
            self.kill()
        try:
            state = api.inspect_container(self.container_id)["State"]
        except NotFound:
            return ExitStatus(detail="the container is gone")
        code = state.get("ExitCode")
        sig = code - 128 if isinstance(code, int) and code > 128 else None
        detail = signal.Signals(sig).name if sig and sig in signal.Signals._value2member_map_ else ""
        self._status = ExitStatus(exit_code=code, signal=sig, oom_killed=bool(state.get("OOMKilled")),
                                  detail=detail)
        return self._status

    def close(self) -> None:
        """Drop the channel and queue the container's removal (see ``reaper``): returns at once."""
        self._close_host_end()  # the kernel exits on the channel's EOF; the container stops with it
        container_id, self.container_id = self.container_id, None
        if container_id is None:
            self._workspace.close()
            shutil.rmtree(self.session_dir, ignore_errors=True)
            return
        reap(functools.partial(_remove, container_id, self._workspace), self.session_dir)


def _remove_own_at_exit() -> None:
    """At exit, once the queued removals ran: this process's containers still there (sessions left
    open, with no close), which would otherwise wait for the next start's stale-owner sweep. Found
    by their owner label, which a forked child recomputes: its exit leaves its parent's alone."""
    if _created:
        drain(30.0)
        remove_own(_client())


atexit.register(_remove_own_at_exit)


class _WorkspaceFailed(Exception):
    """The workspace could not be made (``error``), found once the container was created."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


def _remove(container_id: str, workspace: Workspace) -> None:
    try:
        _remove_container(_client().api, container_id)
    finally:
        workspace.close()  # unmount before the reaper deletes the session directory


def _remove_container(api: Any, container_id: str, attempts: int = _REMOVE_ATTEMPTS) -> None:
    """Remove the container, or see it gone. A conflict (another removal in progress, or a kill
    the engine saw no exit for under load) or a lost engine reply is tried again: the stale-owner
    sweep finds only a dead owner's containers, so one left here lives as long as this process."""
    for attempt in range(1, attempts + 1):
        try:
            api.remove_container(container_id, force=True)
            return
        except NotFound:
            return
        except APIError as exc:
            if exc.status_code != 409 or attempt == attempts:
                raise
        except (DockerException, OSError):  # requests' errors (a read timeout) are OSErrors
            if attempt == attempts:
                raise
        time.sleep(_REMOVE_BACKOFF_S * attempt)
