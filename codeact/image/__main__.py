"""``python -m codeact.image [--base IMAGE] [--pip PKG]... [--force]``: build (or reuse), print the tag."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from codeact.errors import SandboxUnavailable

from .build import build_image, ensure_image
from .spec import ImageSpec

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m codeact.image [--base IMAGE] [--pip PKG]... [--force]``: print the tag."""
    parser = argparse.ArgumentParser(prog="python -m codeact.image", description=main.__doc__)
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
