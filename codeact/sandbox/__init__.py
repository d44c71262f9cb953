"""Where code runs: the ``Sandbox`` seam, its backends (docker, local) and the kernel protocol.

Floor 2 of the layers (docs/architecture.md): imports ``errors``, ``results``, ``tool_stubs``, never a higher floor.
Image building and the Docker engine client live beside it in ``codeact.image`` (also floor 2), which the Docker
backend imports; ``sandbox.engine``, ``sandbox.image`` and ``sandbox.prune`` are deprecated paths that re-export
their old names from there and warn.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ._egress_policy import Egress
from .base import ExitStatus, Sandbox, SandboxConfig

__all__ = ["Egress", "ExitStatus", "Sandbox", "SandboxConfig", "create_sandbox"]


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
    replaced (a restarted kernel, a new session on the same directory). The workspace is the
    sandbox's: the links are made fd-relative (``hostfs``), never through a link planted there."""
    from ..errors import SandboxUnavailable
    from .hostfs import Tree

    with Tree(workspace) as tree:
        for name, src in inputs.items():
            try:
                tree.symlink(f"inputs/{name}", str(src))
            except FileExistsError:
                raise SandboxUnavailable(f"{workspace / 'inputs' / name} exists and is not the link to the input "
                                         f"{name!r}: move it away, or give the input another name") from None
            except NotADirectoryError:
                raise SandboxUnavailable(f"{workspace / 'inputs'} is not a directory: move it away") from None
