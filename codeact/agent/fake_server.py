"""Deprecated location: the fake model server moved to :mod:`codeact.testing.fake_server`.

Its names still resolve here, each with a ``DeprecationWarning`` naming the new place.
"""

from typing import TYPE_CHECKING, Any

from codeact._deprecated import deprecated_alias
from codeact.testing import fake_server as _moved

__all__: list[str] = []

if TYPE_CHECKING:
    from codeact.testing.fake_server import FakeModelServer as FakeModelServer
    from codeact.testing.fake_server import RecordedRequest as RecordedRequest
    from codeact.testing.fake_server import main as main
else:
    def __getattr__(name: str) -> Any:
        return deprecated_alias(__name__, name, {
            moved: (f"codeact.testing.fake_server.{moved}", getattr(_moved, moved))
            for moved in ("FakeModelServer", "RecordedRequest", "main")})

if __name__ == "__main__":
    _moved.main()
