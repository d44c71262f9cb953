"""What several commands share: sandbox flags checked into one-line usage errors, input files read
strictly, and stdout kept for the command's own output."""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, TextIO

import typer
from pydantic import ValidationError

from ..sandbox import SandboxConfig

__all__ = ["Image", "Pip", "check_sandbox", "machine_stdout", "read_text", "sandbox_config", "say_unavailable"]

Image = Annotated[str | None, typer.Option("--image", help="a prepared sandbox image tag (codeact image build)")]
Pip = Annotated[list[str] | None, typer.Option("--pip", help="a package baked into the image (repeatable; the "
                                                              "image is built once, as codeact image build --pip)")]

_FLAGS = {"timeout_s": "--timeout", "memory_mb": "--memory", "backend": "--backend", "policy": "--policy",
          "image": "--image", "pip": "--pip", "egress": "--allow-host"}


def sandbox_config(backend: str, timeout: float, memory: int | None = None, *, policy: str = "auto",
                   image: str | None = None, pip: list[str] | None = None,
                   allow_host: list[str] | None = None) -> SandboxConfig:
    """A SandboxConfig from the flags; a bad value is a one-line usage error naming the flag."""
    if backend not in ("docker", "local"):
        raise typer.BadParameter(f"--backend must be docker or local, not {backend!r}")
    if policy not in ("auto", "none", "restricted"):
        raise typer.BadParameter(f"--policy must be auto, none or restricted, not {policy!r}")
    fields: dict[str, Any] = {"backend": backend, "timeout_s": timeout, "policy": policy, "image": image,
                              "pip": tuple(pip or ())}
    if memory is not None:
        fields["memory_mb"] = memory
    if allow_host:  # egress through the host's broker, to these hosts only (sandbox/egress.py)
        fields["egress"] = {"allow": tuple(allow_host)}
    try:
        return SandboxConfig(**fields)
    except ValidationError as exc:
        err = exc.errors()[0]
        name = str(err["loc"][0]) if err["loc"] else ""
        flag = _FLAGS.get(name, name)
        got = f" (got {err['input']!r})" if name and "input" in err else ""
        raise typer.BadParameter(f"{flag}: {err['msg']}{got}" if flag else str(err["msg"])) from None


def check_sandbox(config: SandboxConfig) -> None:
    """Raise ``SandboxUnavailable`` now if no sandbox can start (Docker: the engine answers and
    the image exists or is built), rather than after work that costs something."""
    if config.backend == "docker":
        from ..sandbox.docker import sandbox_image

        sandbox_image(config)


def say_unavailable(exc: BaseException) -> None:
    """The one line for exit status 3 (the reason said once, however often it was wrapped)."""
    reason = str(exc)
    while reason.startswith("sandbox unavailable: "):
        reason = reason.removeprefix("sandbox unavailable: ")
    print(f"codeact: sandbox unavailable: {reason}", file=sys.stderr)


def read_text(path: Path, what: str = "file") -> str:
    """A UTF-8 text file; a missing file, a directory or bytes that are not UTF-8 are usage errors."""
    if path.is_dir():
        raise typer.BadParameter(f"{path} is a directory, not a {what}")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise typer.BadParameter(f"no such {what}: {path}") from None
    except OSError as exc:
        raise typer.BadParameter(f"cannot read {path}: {exc.strerror or exc}") from None
    return decode(data, str(path))


def decode(data: bytes, name: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise typer.BadParameter(f"{name} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
                                 f"{exc.start})") from None


@contextlib.contextmanager
def machine_stdout() -> Iterator[TextIO]:
    """Keep stdout for this command's output: while the block runs, whatever else writes to fd 1
    (a tool that prints on the host, a subprocess it starts) goes to stderr instead. Yields a text
    stream on the original stdout. (When stdout is not fd 1, e.g. under a test runner, it is that.)"""
    try:
        real = sys.stdout.fileno() == 1
    except (AttributeError, OSError, ValueError):
        real = False
    if not real:
        yield sys.stdout
        return
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    out = io.TextIOWrapper(io.FileIO(saved, "w", closefd=True), encoding="utf-8", errors="replace",
                           line_buffering=True)
    try:
        yield out
    finally:
        with contextlib.suppress(OSError, ValueError):
            out.flush()
        sys.stdout.flush()
        os.dup2(saved, 1)
        out.close()
