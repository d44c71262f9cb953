"""Building sandbox images, offline: the debootstrapped base, then the final ``FROM <base>`` image.

One build per machine at a time (a lock file in the cache dir); a tag that exists is reused, and
every build ends with the automatic prune (:mod:`codeact.image.prune`).
"""

from __future__ import annotations

import fcntl
import json
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from codeact._paths import cache_dir
from codeact.errors import SandboxUnavailable

from ._context import KERNEL_DIR, dockerfile, kernel_bytecode, pip_install, probe_python, write_context
from ._rootfs import Progress, RootfsParams, build_rootfs_tar
from .engine import BuildError, DockerException, ImageNotFound, connected, has_image
from .prune import auto_prune
from .spec import DEFAULT_IMAGE_REPO, IMAGE_FORMAT, SANDBOX_USER, ImageSpec, Plan, default_base_tag, make_plan

__all__ = ["base_tarball", "build_image", "ensure_base", "ensure_image", "resolve_python"]

_BASE_CHANGES = [
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
]


def _quiet(_: str) -> None:
    return None


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
    with connected(client) as c:
        plan = make_plan(spec, c)
        if has_image(c, plan.tag):
            return plan.tag
        say = progress or _quiet
        with _build_lock(say):
            if has_image(c, plan.tag):  # another process built it while we waited
                return plan.tag
            return _build(spec, plan, c, say)


def build_image(spec: ImageSpec | None = None, *, progress: Progress | None = None, client: Any = None) -> str:
    """Build ``spec``'s image now, even if its tag exists (the base is still reused); returns the tag."""
    spec = spec or ImageSpec()
    say = progress or _quiet
    with connected(client) as c, _build_lock(say):
        return _build(spec, make_plan(spec, c), c, say)


def resolve_python(tag: str, *, client: Any = None) -> str:
    """The interpreter path recorded in the image's ``codeact.python`` label."""
    with connected(client) as c:
        try:
            labels = c.images.get(tag).labels or {}
        except ImageNotFound as exc:
            raise SandboxUnavailable(f"sandbox image {tag} is not present: build one with `codeact image build` "
                                     "(--pip PKG to bake packages in; it prints the tag to pass as --image)") from exc
    python = labels.get("codeact.python")
    if not python:
        raise SandboxUnavailable(f"image {tag} has no codeact.python label, so it is not a codeact sandbox image: "
                                 "build one with `codeact image build`")
    return str(python)


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
    with connected(client) as c:
        if has_image(c, tag):
            return tag
        say = progress or _quiet
        with _build_lock(say):
            if not has_image(c, tag):
                _import_base(c, params, tag, say)
    return tag


def base_tarball(tag: str) -> Path:
    """Where the base image's root filesystem tarball is cached (kept after the import, so a pruned
    base comes back in seconds)."""
    repo, _, version = tag.partition(":")
    return cache_dir() / "base" / f"{repo}-{version}.tar"


def _import_base(client: Any, params: RootfsParams, tag: str, say: Progress) -> None:
    """Import the cached rootfs tarball (debootstrapping it first if absent); hold the build lock."""
    repo, _, version = tag.partition(":")
    tarball = base_tarball(tag)
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


def _build(spec: ImageSpec, plan: Plan, client: Any, say: Progress) -> str:
    if spec.base is None and not has_image(client, plan.base_ref):
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
        bytecode = kernel_bytecode(plan.files, info)
        text = dockerfile(plan.base_ref, sorted(plan.files), info.executable, site=site is not None,
                          user=SANDBOX_USER, bytecode=bool(bytecode))  # fmt: skip
        write_context(context, text, {**plan.files, **bytecode}, site)
        say(f"building {plan.tag} from {plan.base_ref} ...")
        try:
            client.images.build(
                fileobj=context, custom_context=True, tag=plan.tag, labels=labels,
                network_mode="none", rm=True, forcerm=True, pull=False, timeout=None,
            )  # fmt: skip
        except (BuildError, DockerException) as exc:
            raise SandboxUnavailable(f"building {plan.tag} failed: {exc}") from exc
    say(f"built {plan.tag}")
    pruned = auto_prune(client, spec.repo)
    if pruned is not None and pruned.removed:
        say(f"pruned {len(pruned.removed)} old {spec.repo} image(s); kept the newest")
    return plan.tag
