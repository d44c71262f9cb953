"""Sandbox images, built offline (no registry is ever contacted), and the Docker engine they live in.

Floor 2 of the layers (docs/architecture.md), beside ``sandbox``: imports ``errors``, ``_paths`` and
the list of in-sandbox files (``codeact.kernel.files``); the Docker backend
(``sandbox/docker.py``) imports the engine client and ``ensure_image`` from here. No module of one
imports a module of the other that imports it back.

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

Modules, one job each: ``engine`` (a client that never hangs, starting an engine), ``spec`` (what
goes in, the tag), ``build`` (base import, final build, the build lock), ``prune`` (old images go),
``doctor`` (what this machine has, as data); ``_rootfs`` (debootstrap) and ``_context`` (the base's
Python, wheels, Dockerfile, tar context) are internals. ``python -m codeact.image`` builds.
"""

from __future__ import annotations

from ._rootfs import RootfsParams
from .build import build_image, ensure_base, ensure_image, resolve_python
from .doctor import doctor
from .prune import DEFAULT_KEEP, PruneReport, prune_images
from .spec import BASE_IMAGE_REPO, DEFAULT_IMAGE_REPO, IMAGE_FORMAT, ImageSpec, default_base_tag, image_tag

__all__ = [
    "BASE_IMAGE_REPO",
    "DEFAULT_IMAGE_REPO",
    "DEFAULT_KEEP",
    "IMAGE_FORMAT",
    "ImageSpec",
    "PruneReport",
    "RootfsParams",
    "build_image",
    "default_base_tag",
    "doctor",
    "ensure_base",
    "ensure_image",
    "image_tag",
    "prune_images",
    "resolve_python",
]
