"""Where code runs: the ``Sandbox`` seam, its backends (docker, local) and the kernel protocol.

Floor 2 of the layers (docs/architecture.md): imports ``errors``, ``results``, ``tool_stubs``, never a higher floor.
Image building and the Docker engine client live beside it in ``codeact.image`` (also floor 2), which the Docker
backend imports; ``sandbox.engine``, ``sandbox.image`` and ``sandbox.prune`` re-export their old names from there.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from .base import ExitStatus, Sandbox, SandboxConfig

__all__ = ["ExitStatus", "Sandbox", "SandboxConfig", "create_sandbox"]


def create_sandbox(config: SandboxConfig, session_dir: Path, workspace: Path,
                   inputs: Mapping[str, Path] | None = None) -> Sandbox:
    """A not-yet-started sandbox of the configured backend."""
    if config.backend == "local":
        from .local import LocalSandbox

        if inputs:
            workspace.mkdir(parents=True, exist_ok=True)
            _link_inputs(workspace, inputs)
        return LocalSandbox(config, session_dir, workspace, inputs)
    from .docker import DockerSandbox

    return DockerSandbox(config, session_dir, workspace, dict(inputs or {}))


def _link_inputs(workspace: Path, inputs: Mapping[str, Path]) -> None:
    """``inputs/NAME`` → each input; a link left by an earlier sandbox on this workspace is
    replaced (a restarted kernel, a new session on the same directory)."""
    from ..errors import SandboxUnavailable

    target = workspace / "inputs"
    target.mkdir(exist_ok=True)
    for name, src in inputs.items():
        link = target / name
        if link.is_symlink():
            link.unlink()
        elif link.exists():
            raise SandboxUnavailable(f"{link} exists and is not the link to the input {name!r}: "
                                     "move it away, or give the input another name")
        link.symlink_to(src)
