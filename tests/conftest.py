"""Shared fixtures: one image build per run, one warm runtime per backend.

Docker tests are part of the main suite: with CI=true a missing engine fails them; elsewhere
they are skipped with the reason.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from codeact import Runtime, SandboxConfig, ToolError, Toolset, tool
from codeact.errors import SandboxUnavailable

BACKENDS = ["local", "docker"]

# A suite started in the background of a non-interactive shell inherits SIGINT ignored (POSIX),
# and Python then installs no KeyboardInterrupt for it; every child would inherit the ignore too.
# The Ctrl-C tests need a terminal's SIGINT as a foreground run gets it.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
# The same for a suite started under nohup (SIGHUP ignored): the hang-up tests need a terminal's
# SIGHUP; the one that checks an ignored SIGHUP stays ignored sets the ignore in its own child.
if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _engine_or_skip() -> None:
    try:
        from codeact.image.engine import docker_client

        docker_client().close()
    except SandboxUnavailable as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and no Docker engine: {exc}")
        pytest.skip(f"no Docker engine: {exc}")


@pytest.fixture(scope="session")
def docker_image() -> str:
    """The default sandbox image, built (or reused) once per test run."""
    _engine_or_skip()
    from codeact.sandbox.docker import sandbox_image

    tag, _python = sandbox_image(SandboxConfig())
    return tag


@pytest.fixture
def docker_ready(docker_image: str) -> str:
    return docker_image


#: What the tests' second image bakes in, one build for both uses: clients to drive through the
#: egress broker and pip itself; matplotlib, pandas and pillow for rich outputs.
EGRESS_PIP = ("requests", "httpx", "pip")
RICH_PIP = ("matplotlib", "pandas", "pillow")


@pytest.fixture(scope="session")
def extras_image(docker_image: str) -> str:
    """The sandbox image with ``--pip`` of :data:`EGRESS_PIP` and :data:`RICH_PIP`, built (or reused)
    once per run; skipped only when pip cannot fetch the wheels (no route to PyPI)."""
    from codeact.sandbox.docker import sandbox_image

    try:
        tag, _python = sandbox_image(SandboxConfig(pip=EGRESS_PIP + RICH_PIP))
    except SandboxUnavailable as exc:
        if "pip could not fetch" in str(exc):
            pytest.skip(f"pip is unreachable, no image with {' '.join(EGRESS_PIP + RICH_PIP)}: {exc}")
        raise
    return tag


@pytest.fixture(scope="session")
def egress_image(extras_image: str) -> str:
    """An image with requests, httpx and pip (``codeact image build --pip ...``)."""
    return extras_image


@pytest.fixture(scope="session")
def rich_image(extras_image: str) -> str:
    """An image with matplotlib, pandas and pillow."""
    return extras_image


class Counter:
    """Counts executions of the test tools (the tool's own view, not the ledger's)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: dict[str, int] = {}
        self.in_flight = 0
        self.max_in_flight = 0

    def hit(self, name: str) -> None:
        with self.lock:
            self.calls[name] = self.calls.get(name, 0) + 1

    def count(self, name: str) -> int:
        with self.lock:
            return self.calls.get(name, 0)


WEATHER = {
    "Pittsburgh": {"temperature": 12.0, "unit": "celsius"},
    "Beijing": {"temperature": 68.0, "unit": "fahrenheit"},
}


def make_tools(counter: Counter) -> Toolset:
    @tool
    def get_weather(city: str) -> dict[str, Any]:
        """Current weather for a city.

        Args:
            city: City name.
        """
        counter.hit("get_weather")
        if city not in WEATHER:
            raise ToolError("not_found", f"unknown city {city!r}")
        return {"city": city, **WEATHER[city]}

    @tool
    def fetch_item(i: int) -> str:
        """Fetch item i; item 3 is broken.

        Args:
            i: Item number.
        """
        counter.hit("fetch_item")
        if i == 3:
            raise ToolError("upstream_error", "item 3 is unavailable")
        return f"item-{i}"

    @tool
    def slow(seconds: float) -> float:
        """Sleep, then answer.

        Args:
            seconds: How long to sleep.
        """
        with counter.lock:
            counter.in_flight += 1
            counter.max_in_flight = max(counter.max_in_flight, counter.in_flight)
        try:
            time.sleep(seconds)
        finally:
            with counter.lock:
                counter.in_flight -= 1
        counter.hit("slow")
        return seconds

    @tool(timeout_s=0.3)
    def stuck() -> None:
        """Never answers in time."""
        time.sleep(2)

    @tool(name="math.factorial")
    def factorial(n: int) -> int:
        """n!

        Args:
            n: A small non-negative integer.
        """
        counter.hit("math.factorial")
        import math

        return math.factorial(n)

    return Toolset([get_weather, fetch_item, slow, stuck, factorial])


@pytest.fixture(scope="session")
def counter() -> Counter:
    return Counter()


@pytest.fixture(scope="session", params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "docker":
        request.getfixturevalue("docker_image")
    return str(request.param)


@pytest.fixture(scope="session")
def runtime(backend: str, counter: Counter) -> Iterator[Runtime]:
    """A warm runtime per backend, shared where isolation is not the point."""
    config = SandboxConfig(backend=backend, timeout_s=5, grace_s=1, policy="none")  # type: ignore[arg-type]
    with Runtime(make_tools(counter), config) as rt:
        yield rt


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test that reaches a Docker engine carries the ``docker`` marker, however it gets there
    (the marker written on it, the ``backend`` parameter, or a fixture that needs the image), so
    ``-m docker`` / ``-m 'not docker'`` select exactly the Docker tests."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        params = callspec.params.values() if callspec is not None else ()
        fixtures = getattr(item, "fixturenames", ())
        if "docker" in params or {"docker_image", "docker_ready", "rich_image"} & set(fixtures):
            item.add_marker(pytest.mark.docker)
