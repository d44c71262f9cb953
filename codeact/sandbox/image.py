"""Deprecated path: moved to :mod:`codeact.image` (``KERNEL_FILES`` to :mod:`codeact.kernel.files`;
``python -m codeact.sandbox.image`` is ``python -m codeact.image``).

Importing it still works and warns once (``DeprecationWarning`` naming the new path).
"""

from __future__ import annotations

import sys

from codeact._deprecated import moved_module
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

moved_module("codeact.sandbox.image", "codeact.image (KERNEL_FILES: codeact.kernel.files)")

if __name__ == "__main__":
    sys.exit(main())
