"""The sandbox seam: ``SandboxConfig`` and the ``Sandbox`` protocol every backend implements."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..kernel.protocol import MAX_SPIN_US, FrameSocket
from ._egress_policy import Egress

__all__ = ["KERNEL_ENV", "ExitStatus", "Sandbox", "SandboxConfig"]

#: Every kernel's environment: a fixed hash seed, so that the iteration order of sets of strings
#: (and with it the order of the calls and the output that follow it) is the same in a replay as
#: when recorded. Randomized hashing guards a process against input chosen to collide; in the
#: sandbox the code is that party, and it could only slow itself down.
KERNEL_ENV = {"PYTHONHASHSEED": "0"}


class SandboxConfig(BaseModel):
    """Where and under which limits code runs. Docker is the isolation; ``local`` is bubblewrap's
    namespaces where bwrap works (``isolation``), else a plain subprocess (not a boundary)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    backend: Literal["docker", "local"] = "docker"
    timeout_s: float = Field(30.0, gt=0, description="wall clock per run, tool waits included")
    grace_s: float = Field(1.0, ge=0, description="after the interrupt, time before the kill")
    memory_mb: int = Field(512, ge=32)
    cpus: float = Field(1.0, gt=0)
    pids_limit: int = Field(128, ge=8)
    tmpfs_mb: int = Field(64, ge=1)
    fsize_mb: int = Field(1024, ge=1, description="largest file the code may write")
    nofile: int = Field(256, ge=32)
    output_cap: int = Field(1_000_000, ge=1000, description="characters kept per stream")
    output_limit: int = Field(128_000_000, ge=1000, description="characters written before output_limit")
    display_cap: int = Field(2_000_000, ge=100, description="characters kept per rich output entry (a PNG's "
                             "base64, a table's HTML); a longer one is replaced by a note")
    display_limit: int = Field(8_000_000, ge=100, description="characters of rich outputs kept per run")
    display_count: int = Field(50, ge=1, description="rich outputs (display(), open figures) kept per run")
    max_frame_bytes: int = Field(16 * 1024 * 1024, ge=64 * 1024)
    spin_us: int = Field(200, ge=0, le=MAX_SPIN_US, description="µs a channel read (host and kernel) polls "
                         "before it sleeps, while the other side answers quickly; 0: reads always sleep "
                         "(hosts packed with busy sessions)")
    policy: Literal["auto", "none", "restricted"] = Field(
        "auto", description="restricted = RestrictedPython; auto = restricted on local, none on docker"
    )
    isolation: Literal["auto", "bwrap", "none"] = Field(
        "auto", description="local backend: bwrap = bubblewrap namespaces; auto = bwrap when installed"
    )
    image: str | None = Field(None, description="a prepared sandbox image tag; built when None")
    base_image: str | None = Field(None, description="build the sandbox image FROM this local image")
    pip: tuple[str, ...] = Field((), description="packages baked into the built image")
    pool_size: int = Field(0, ge=0, description="warm, never-used sandboxes kept ready (docker)")
    uid: int = Field(1000, description="uid (and gid) the code runs as in the container")
    disk_mb: int = Field(1024, ge=8, description="docker: size of the workspace filesystem (the host disk it may use)")
    runtime: Literal["runc", "runsc"] = Field("runc", description="docker: OCI runtime; runsc = gVisor")
    recover: bool = Field(False, description="after a run that lost the state, rebuild it (by replay) for the next")
    rebuild_timeout_s: float = Field(300.0, gt=0, description="the longest a rebuild by replay (resume after a "
                                     "suspension, recover, lazy restore) may take; a tighter budget comes from the "
                                     "run that starts it and the recorded durations (docs/design-notes.md)")
    preload: tuple[str, ...] = Field((), description="modules every new kernel imports before its first run")
    seed: int | None = Field(None, description="seed `random` in every new kernel, so a session that uses it "
                             "can be replayed (snapshot/restore/fork/recover)")
    egress: Egress | None = Field(None, description="requests out through the host's broker, by allowlist "
                                  "(sandbox/egress.py); None: no network at all")

    @model_validator(mode="after")
    def _check(self) -> SandboxConfig:
        if self.backend == "docker" and self.policy == "restricted":
            raise ValueError("policy='restricted' is for the local backend; in Docker the container is the boundary")
        if self.backend == "docker" and self.isolation == "bwrap":
            raise ValueError("isolation='bwrap' is for the local backend; in Docker the container is the boundary")
        bad = [m for m in self.preload if not all(part.isidentifier() for part in m.split("."))]
        if bad:
            raise ValueError(f"preload takes module names like 'pandas' or 'os.path', not {bad[0]!r}")
        return self

    def effective_policy(self) -> Literal["none", "restricted"]:
        if self.policy != "auto":
            return self.policy
        return "restricted" if self.backend == "local" else "none"


@dataclass
class ExitStatus:
    """How a dead sandbox died."""

    exit_code: int | None = None
    signal: int | None = None
    oom_killed: bool = False
    detail: str = ""


@runtime_checkable
class Sandbox(Protocol):
    """One isolated kernel process and the channel to it."""

    config: SandboxConfig
    workspace: Path

    @property
    def channel(self) -> FrameSocket: ...

    def start(self) -> None:
        """Start the kernel and accept its channel connection (not its hello)."""

    def interrupt(self) -> None:
        """Ask the running cell to stop (KeyboardInterrupt in the code)."""

    def kill(self) -> None:
        """Kill the kernel at once; its state is lost."""

    def exit_status(self) -> ExitStatus:
        """After the kernel died: why."""

    def close(self) -> None:
        """Kill and remove everything the sandbox holds. Idempotent."""
