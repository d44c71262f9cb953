"""Test helpers for code that uses codeact: a fake model server speaking the real wire formats.

    from codeact.testing import FakeModelServer

Floor 4 of the layers (docs/architecture.md): beside ``agent``; imports ``runtime`` and below.
"""

from codeact.testing.fake_server import FakeModelServer

__all__ = ["FakeModelServer"]
