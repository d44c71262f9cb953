"""The in-sandbox files as a public list: the image builder (``codeact.image``) ships them."""

from __future__ import annotations

from ._kernel_files import KERNEL_FILES

__all__ = ["KERNEL_FILES"]
