"""Moved to :mod:`codeact.image`; this path (and ``python -m codeact.sandbox.image``) stays."""

from __future__ import annotations

import sys

from codeact.image import (
    BASE_IMAGE_REPO,
    DEFAULT_IMAGE_REPO,
    IMAGE_FORMAT,
    ImageSpec,
    build_image,
    default_base_tag,
    ensure_base,
    ensure_image,
    image_tag,
    resolve_python,
)
from codeact.image.__main__ import main

from ..kernel.files import KERNEL_FILES

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

if __name__ == "__main__":
    sys.exit(main())
