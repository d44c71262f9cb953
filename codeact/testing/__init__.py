"""Test helpers for code that uses codeact: a fake model server speaking the real wire formats.

    from codeact.testing import FakeModelServer

Floor 4 of the layers (docs/architecture.md): beside ``agent``; imports ``runtime`` and below.
The server module is imported at the first use of its name, so that ``python -m
codeact.testing.fake_server`` runs it once, as ``__main__`` (runpy warns about a module that its
package's ``__init__`` has already imported).
"""

from typing import TYPE_CHECKING, Any

__all__ = ["FakeModelServer"]

if TYPE_CHECKING:
    from codeact.testing.fake_server import FakeModelServer as FakeModelServer
else:
    def __getattr__(name: str) -> Any:
        if name == "FakeModelServer":
            from codeact.testing.fake_server import FakeModelServer

            return FakeModelServer
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
