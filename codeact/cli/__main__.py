"""``python -m codeact.cli``."""

from . import main

main()
