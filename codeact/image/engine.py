"""The Docker engine: a client that never hangs, starting an engine when allowed.

Besides the Docker backend (``sandbox/docker.py``, ``sandbox/cleanup.py``) this is the one module
that imports the Docker SDK; the image builder and the Docker backend get their client here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import docker
from docker.errors import APIError, BuildError, DockerException, ImageNotFound

from codeact.errors import SandboxUnavailable

__all__ = [
    "APIError",
    "BuildError",
    "DockerException",
    "ImageNotFound",
    "connected",
    "docker_client",
    "engine_host",
    "ensure_engine",
    "has_image",
    "runtimes",
]

DEFAULT_HOST = "unix:///var/run/docker.sock"
DOCKERD_LOG = Path("/var/log/dockerd.log")


def engine_host() -> str:
    """Where the client looks for the engine: ``$DOCKER_HOST`` or the default unix socket."""
    return os.environ.get("DOCKER_HOST") or DEFAULT_HOST


def docker_client(timeout: float = 10.0) -> docker.DockerClient:
    """A connected docker-py client (``docker.from_env``), checked with a ping.

    ``timeout`` bounds every ordinary API call; long operations (build, import) pass their own.
    Raises :class:`SandboxUnavailable` (one line) when no engine answers.
    """
    host = engine_host()
    client = None
    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except (DockerException, OSError) as exc:  # requests' errors are OSErrors
        if client is not None:
            client.close()
        raise SandboxUnavailable(
            f"no Docker engine answers at {host}; run scripts/ensure-docker.sh or start dockerd"
        ) from exc
    return client


def ensure_engine(
    *,
    install: bool = True,
    start: bool = True,
    wait_s: float = 60.0,
    progress: Callable[[str], None] | None = None,
) -> docker.DockerClient:
    """A client for a running engine; as root, installs docker.io and starts dockerd if none answers.

    Mirrors ``scripts/ensure-docker.sh``. Only acts for the default local socket (a remote
    ``DOCKER_HOST`` is never second-guessed); otherwise raises :class:`SandboxUnavailable`.
    """
    say = progress or (lambda _: None)
    try:
        return docker_client()
    except SandboxUnavailable:
        if not start or os.geteuid() != 0 or engine_host() != DEFAULT_HOST:
            raise
    dockerd = shutil.which("dockerd")
    if dockerd is None:
        if not install:
            raise SandboxUnavailable("no Docker engine and dockerd is not installed; apt-get install docker.io")
        say("installing docker.io from Debian's packages ...")
        _apt_install("docker.io", "iptables", "ca-certificates")
        dockerd = shutil.which("dockerd")
        if dockerd is None:
            raise SandboxUnavailable("dockerd is still missing after apt-get install docker.io")
    if not _dockerd_running():
        say("starting dockerd ...")
        DOCKERD_LOG.parent.mkdir(parents=True, exist_ok=True)
        with DOCKERD_LOG.open("ab") as log:
            subprocess.Popen(
                [dockerd],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            return docker_client(timeout=5)
        except SandboxUnavailable:
            time.sleep(1)
    raise SandboxUnavailable(f"dockerd did not answer within {wait_s:.0f} s (see {DOCKERD_LOG})")


def _apt_install(*packages: str) -> None:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True)
    cmd = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["?"])[-1]
        raise SandboxUnavailable(f"apt-get install {' '.join(packages)} failed: {tail}")


def _dockerd_running() -> bool:
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            if comm.read_text().strip() == "dockerd":
                return True
        except OSError:
            continue
    return False


def runtimes(client: Any = None) -> dict[str, Any]:
    """The OCI runtimes the engine knows (``runc``, and ``runsc`` once registered), with their args."""
    client = client or docker_client(timeout=5)
    return dict(client.info().get("Runtimes") or {})


@contextmanager
def connected(client: Any = None) -> Iterator[Any]:
    """``client``, or a fresh one that is closed afterwards."""
    if client is not None:
        yield client
        return
    own = docker_client()
    try:
        yield own
    finally:
        own.close()


def has_image(client: Any, ref: str) -> bool:
    """Whether the engine holds an image by that tag or id."""
    try:
        client.images.get(ref)
    except ImageNotFound:
        return False
    return True
