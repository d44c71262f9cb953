"""What goes into a sandbox image (:class:`ImageSpec`) and the tag it builds to: a hash of the recipe."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codeact.errors import SandboxUnavailable
from codeact.kernel.files import KERNEL_FILES  # the in-sandbox files, one list

from ._rootfs import SANDBOX_UID, RootfsParams
from .engine import ImageNotFound, connected

__all__ = [
    "BASE_IMAGE_REPO",
    "DEFAULT_IMAGE_REPO",
    "IMAGE_FORMAT",
    "SANDBOX_USER",
    "ImageSpec",
    "Plan",
    "default_base_tag",
    "image_tag",
    "make_plan",
]

#: Bump when the final image's recipe (Dockerfile, labels, layout) changes.
IMAGE_FORMAT = 2
DEFAULT_IMAGE_REPO = "codeact-sandbox"
BASE_IMAGE_REPO = "codeact-base"
SANDBOX_USER = f"{SANDBOX_UID}:{SANDBOX_UID}"
_PACKAGE_DIR = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class ImageSpec:
    """What goes into a sandbox image.

    ``base`` None means the debootstrapped ``codeact-base``; otherwise a local image with python3.
    ``files`` None means :data:`KERNEL_FILES` of this package (override in tests).
    """

    base: str | None = None
    pip: tuple[str, ...] = ()
    files: tuple[Path, ...] | None = None
    repo: str = DEFAULT_IMAGE_REPO
    rootfs: RootfsParams = field(default_factory=RootfsParams)

    def kernel_paths(self) -> tuple[Path, ...]:
        if self.files is not None:
            return self.files
        return tuple(_PACKAGE_DIR / rel for rel in KERNEL_FILES)

    def read_files(self) -> dict[str, bytes]:
        """Basename → bytes of every kernel file; basenames must be unique (they are copied flat)."""
        out: dict[str, bytes] = {}
        for path in self.kernel_paths():
            if path.name in out:
                raise ValueError(f"two kernel files are named {path.name!r}; they are copied flat")
            try:
                out[path.name] = path.read_bytes()
            except OSError as exc:
                raise SandboxUnavailable(f"kernel file {path} cannot be read: {exc.strerror}") from exc
        if "kernel.py" not in out:
            raise ValueError("the kernel files must include a kernel.py")
        return out


@dataclass(frozen=True)
class Plan:
    """A spec resolved against the engine: the tag to build, the base to build it FROM, the files."""

    tag: str
    base_ref: str
    kernel_hash: str
    files: dict[str, bytes]


def default_base_tag(params: RootfsParams | None = None) -> str:
    """``codeact-base:<suite>-<hash>`` for these debootstrap params (no engine needed)."""
    params = params or RootfsParams()
    return f"{BASE_IMAGE_REPO}:{params.suite}-{params.digest()}"


def image_tag(spec: ImageSpec | None = None, *, client: Any = None) -> str:
    """The tag ``spec`` builds to. Needs the engine only for a custom base (its image id)."""
    spec = spec or ImageSpec()
    if spec.base is None:
        return make_plan(spec, None).tag
    with connected(client) as c:
        return make_plan(spec, c).tag


def make_plan(spec: ImageSpec, client: Any) -> Plan:
    """Read the kernel files and hash the recipe; ``client`` is used only for a custom base."""
    files = spec.read_files()
    kernel = hashlib.sha256()
    for name in sorted(files):
        kernel.update(f"{name}\0{hashlib.sha256(files[name]).hexdigest()}\n".encode())
    kernel_hash = kernel.hexdigest()[:16]
    if spec.base is None:
        base_ref = base_key = default_base_tag(spec.rootfs)
    else:
        base_ref = spec.base
        base_key = _local_image_id(client, spec.base)
    key = {"format": IMAGE_FORMAT, "base": base_key, "kernel": kernel_hash, "pip": sorted(set(spec.pip))}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return Plan(f"{spec.repo}:{digest}", base_ref, kernel_hash, files)


def _local_image_id(client: Any, ref: str) -> str:
    try:
        return str(client.images.get(ref).id)
    except ImageNotFound as exc:
        raise SandboxUnavailable(
            f"base image {ref!r} is not present locally and codeact never pulls; "
            "load it first (docker load / docker pull) or omit base for the debootstrapped default"
        ) from exc
