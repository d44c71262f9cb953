"""Deprecated location: the fake model server moved to :mod:`codeact.testing.fake_server`."""

from codeact.testing.fake_server import FakeModelServer, RecordedRequest, main

__all__ = ["FakeModelServer", "RecordedRequest", "main"]

if __name__ == "__main__":
    main()
