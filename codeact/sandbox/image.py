"""Sandbox images, built offline: no registry is ever contacted.

The default base is a Debian root filesystem made with ``debootstrap --variant=minbase
--include=python3`` from the mirror apt already uses, stripped, and ``docker import``-ed as
``codeact-base:<suite>-<hash of the debootstrap params>`` (its tarball stays in the cache dir, so
a pruned base is re-imported in seconds). Alternatively any *local* image with ``python3``
(``base="python:3.12-slim"``) — never pulled.

The final image ``codeact-sandbox:<hash>`` is a ``FROM <base>`` build without ``RUN`` steps: the
kernel files flat in ``/opt/codeact/``, optional wheels in ``/opt/codeact/site`` (installed on the
host with ``pip --target --only-binary=:all:`` for the image's Python and platform). The hash
covers the base (tag for the default base, image id otherwise — which pins its Python), the bytes
of every kernel file, the pip list and :data:`IMAGE_FORMAT`; an existing tag is reused as is.
Labels record what the sandbox needs: ``codeact.python`` (the interpreter to exec) and more.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codeact._paths import cache_dir
from codeact.errors import SandboxUnavailable
from codeact.sandbox._build import KERNEL_DIR, dockerfile, pip_install, probe_python, write_context
from codeact.sandbox._kernel_files import KERNEL_FILES  # the in-sandbox files, one list
from codeact.sandbox._rootfs import SANDBOX_UID, RootfsParams, build_rootfs_tar
from codeact.sandbox.engine import BuildError, DockerException, ImageNotFound, docker_client

__all__ = [
    "BASE_IMAGE_REPO",
    "DEFAULT_IMAGE_REPO",
    "IMAGE_FORMAT",
    "KERNEL_FILES",
    "ImageSpec",
    "build_image",
    "default_base_tag",
    "ensure_base",
    "ensure_image",
    "image_tag",
    "resolve_python",
]

#: Bump when the final image's recipe (Dockerfile, labels, layout) changes.
IMAGE_FORMAT = 1
DEFAULT_IMAGE_REPO = "codeact-sandbox"
BASE_IMAGE_REPO = "codeact-base"
SANDBOX_USER = f"{SANDBOX_UID}:{SANDBOX_UID}"
_PACKAGE_DIR = Path(__file__).resolve().parents[1]
_BASE_CHANGES = [
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
]

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    return None


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
class _Plan:
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
        return _plan(spec, None).tag
    with _connected(client) as c:
        return _plan(spec, c).tag


def ensure_image(
    base: str | None = None,
    pip: Sequence[str] = (),
    progress: Progress | None = None,
    *,
    files: Sequence[Path | str] | None = None,
    repo: str = DEFAULT_IMAGE_REPO,
    client: Any = None,
) -> str:
    """The tag of a sandbox image for ``base`` + ``pip``; builds what is missing (once per machine)."""
    spec = ImageSpec(
        base=base,
        pip=tuple(pip),
        files=None if files is None else tuple(Path(f) for f in files),
        repo=repo,
    )
    with _connected(client) as c:
        plan = _plan(spec, c)
        if _exists(c, plan.tag):
            return plan.tag
        say = progress or _quiet
        with _build_lock(say):
            if _exists(c, plan.tag):  # another process built it while we waited
                return plan.tag
            return _build(spec, plan, c, say)


def build_image(spec: ImageSpec | None = None, *, progress: Progress | None = None, client: Any = None) -> str:
    """Build ``spec``'s image now, even if its tag exists (the base is still reused); returns the tag."""
    spec = spec or ImageSpec()
    say = progress or _quiet
    with _connected(client) as c, _build_lock(say):
        return _build(spec, _plan(spec, c), c, say)


def resolve_python(tag: str, *, client: Any = None) -> str:
    """The interpreter path recorded in the image's ``codeact.python`` label."""
    with _connected(client) as c:
        try:
            labels = c.images.get(tag).labels or {}
        except ImageNotFound as exc:
            raise SandboxUnavailable(f"sandbox image {tag} is not present; build it with ensure_image()") from exc
    python = labels.get("codeact.python")
    if not python:
        raise SandboxUnavailable(f"image {tag} has no codeact.python label; build it with ensure_image()")
    return str(python)


def _plan(spec: ImageSpec, client: Any) -> _Plan:
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
    return _Plan(f"{spec.repo}:{digest}", base_ref, kernel_hash, files)


def _local_image_id(client: Any, ref: str) -> str:
    try:
        return str(client.images.get(ref).id)
    except ImageNotFound as exc:
        raise SandboxUnavailable(
            f"base image {ref!r} is not present locally and codeact never pulls; "
            "load it first (docker load / docker pull) or omit base for the debootstrapped default"
        ) from exc


def _exists(client: Any, ref: str) -> bool:
    try:
        client.images.get(ref)
    except ImageNotFound:
        return False
    return True


@contextmanager
def _connected(client: Any) -> Iterator[Any]:
    """``client``, or a fresh one that is closed afterwards."""
    if client is not None:
        yield client
        return
    own = docker_client()
    try:
        yield own
    finally:
        own.close()


@contextmanager
def _build_lock(say: Progress) -> Iterator[None]:
    """One image build per machine at a time (flock on a file in the cache dir)."""
    path = cache_dir() / "build.lock"
    with path.open("a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"waiting for another codeact image build to finish ({path}) ...")
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def ensure_base(params: RootfsParams | None = None, *, client: Any = None, progress: Progress | None = None) -> str:
    """The debootstrapped base image's tag; imports the cached tarball or debootstraps one first."""
    params = params or RootfsParams()
    tag = default_base_tag(params)
    with _connected(client) as c:
        if _exists(c, tag):
            return tag
        say = progress or _quiet
        with _build_lock(say):
            if not _exists(c, tag):
                _import_base(c, params, tag, say)
    return tag


def _import_base(client: Any, params: RootfsParams, tag: str, say: Progress) -> None:
    """Import the cached rootfs tarball (debootstrapping it first if absent); hold the build lock."""
    repo, _, version = tag.partition(":")
    tarball = cache_dir() / "base" / f"{repo}-{version}.tar"
    tarball.parent.mkdir(parents=True, exist_ok=True)
    if not tarball.exists():
        build_rootfs_tar(params, tarball, say)
    say(f"importing {tarball.name} as {tag} ...")
    try:
        with tarball.open("rb") as fh:
            client.api.import_image_from_data(fh, repository=repo, tag=version, changes=_BASE_CHANGES)
    except DockerException as exc:
        tarball.unlink(missing_ok=True)  # most likely a damaged tarball: rebuild next time
        raise SandboxUnavailable(f"docker import of {tarball.name} failed: {exc}") from exc


def _build(spec: ImageSpec, plan: _Plan, client: Any, say: Progress) -> str:
    if spec.base is None and not _exists(client, plan.base_ref):
        _import_base(client, spec.rootfs, plan.base_ref, say)
    say(f"probing python3 in {plan.base_ref} ...")
    info = probe_python(client, plan.base_ref)
    labels = {
        "codeact.image": "1",
        "codeact.format": str(IMAGE_FORMAT),
        "codeact.kernel-hash": plan.kernel_hash,
        "codeact.kernel": f"{KERNEL_DIR}/kernel.py",
        "codeact.python": info.executable,
        "codeact.python-version": info.version_str,
        "codeact.base": plan.base_ref,
        "codeact.pip": json.dumps(sorted(set(spec.pip))),
        "codeact.user": SANDBOX_USER,
    }
    with tempfile.TemporaryDirectory(prefix="codeact-build-") as tmp, tempfile.TemporaryFile() as context:
        site: Path | None = None
        if spec.pip:
            say(f"pip: wheels for {' '.join(spec.pip)} (Python {info.version_str}) ...")
            site = Path(tmp) / "site"
            pip_install(spec.pip, site, info)
        text = dockerfile(plan.base_ref, sorted(plan.files), info.executable, site=site is not None,
                          user=SANDBOX_USER)  # fmt: skip
        write_context(context, text, plan.files, site)
        say(f"building {plan.tag} from {plan.base_ref} ...")
        try:
            client.images.build(
                fileobj=context, custom_context=True, tag=plan.tag, labels=labels,
                network_mode="none", rm=True, forcerm=True, pull=False, timeout=None,
            )  # fmt: skip
        except (BuildError, DockerException) as exc:
            raise SandboxUnavailable(f"building {plan.tag} failed: {exc}") from exc
    say(f"built {plan.tag}")
    from .prune import auto_prune

    pruned = auto_prune(client, spec.repo)
    if pruned is not None and pruned.removed:
        say(f"pruned {len(pruned.removed)} old {spec.repo} image(s); kept the newest")
    return plan.tag


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m codeact.sandbox.image [--base IMAGE] [--pip PKG]... [--force]``: print the tag."""
    parser = argparse.ArgumentParser(prog="python -m codeact.sandbox.image", description=main.__doc__)
    parser.add_argument("--base", help="a local image with python3 to build FROM (never pulled)")
    parser.add_argument("--pip", action="append", default=[], help="a package to bake in (repeatable)")
    parser.add_argument("--force", action="store_true", help="rebuild the final image even if it exists")
    args = parser.parse_args(argv)

    def say(message: str) -> None:
        print(f"codeact-image: {message}", file=sys.stderr, flush=True)

    try:
        if args.force:
            tag = build_image(ImageSpec(base=args.base, pip=tuple(args.pip)), progress=say)
        else:
            tag = ensure_image(args.base, args.pip, say)
    except SandboxUnavailable as exc:
        say(str(exc))
        return 3
    print(tag)
    return 0


if __name__ == "__main__":
    sys.exit(main())
