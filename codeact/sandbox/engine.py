"""The Docker engine: a client that never hangs, starting an engine when allowed, a doctor report.

Besides ``sandbox/docker.py`` this is the one module that imports the Docker SDK; the image
builder gets its client and exception types from here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
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
    "docker_client",
    "doctor",
    "engine_host",
    "ensure_engine",
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


def doctor(client: Any = None) -> dict[str, Any]:
    """What this machine has for the Docker backend, as data: engine, cgroups, limits, images, tools.

    ``missing`` lists, one line each, what stops or weakens the sandbox and how to fix it.
    """
    from codeact._paths import cache_dir
    from codeact.sandbox.image import ImageSpec, default_base_tag, image_tag

    missing: list[str] = []
    report: dict[str, Any] = {
        "engine": {"ok": False, "host": engine_host()},
        "root": os.geteuid() == 0,
        "debootstrap": shutil.which("debootstrap")
        or next((p for p in ("/usr/sbin/debootstrap", "/sbin/debootstrap") if os.access(p, os.X_OK)), None),
    }
    try:
        client = client or docker_client(timeout=5)
        info, version = client.info(), client.version()
    except (SandboxUnavailable, DockerException, OSError) as exc:
        report["engine"]["error"] = str(exc)
        missing.append(f"engine: {exc}")
        info = None
    if info is not None:
        report.update(_engine_facts(info, version, missing))
    images: dict[str, Any] = {"base": default_base_tag()}
    try:
        images["default"] = image_tag(ImageSpec())
    except (SandboxUnavailable, ValueError) as exc:
        images["default"], images["error"] = None, str(exc)
        missing.append(f"kernel files: {exc}")
    if info is not None:
        for key in ("base", "default"):
            images[f"{key}_present"] = bool(images[key]) and _has_image(client, images[key])
        if not images["default_present"]:
            missing.append("default sandbox image not built yet (built on first use, or run scripts/build-image.sh)")
    tarball = cache_dir() / "base" / f"{images['base'].replace(':', '-')}.tar"
    images["base_tarball"] = str(tarball) if tarball.exists() else None
    report["images"] = images
    if not report["debootstrap"] and not images.get("base_present"):
        how = "installed automatically on first build" if report["root"] else "needs root: apt-get install debootstrap"
        missing.append(f"debootstrap: not installed ({how})")
    report["missing"] = missing
    return report


def _engine_facts(info: dict[str, Any], version: dict[str, Any], missing: list[str]) -> dict[str, Any]:
    limits = {
        "memory": bool(info.get("MemoryLimit")),
        "swap": bool(info.get("SwapLimit")),
        "pids": bool(info.get("PidsLimit")),
        "cpu_quota": bool(info.get("CpuCfsQuota")),
        "cpu_shares": bool(info.get("CPUShares")),
        "cpuset": bool(info.get("CPUSet")),
    }
    for name, ok in limits.items():
        if not ok and name in ("memory", "swap", "pids", "cpu_quota"):
            missing.append(f"limits: the engine cannot enforce {name} limits (enable that cgroup controller)")
    init = info.get("InitBinary") or ""
    init_ok = bool(init) and (shutil.which(init) is not None or engine_host() != DEFAULT_HOST)
    if not init_ok:
        missing.append("init: the engine has no init binary (docker-init/tini); zombies will not be reaped")
    known = info.get("Runtimes") or {}
    runsc = known.get("runsc")
    gvisor: dict[str, Any] = {"available": runsc is not None, "args": (runsc or {}).get("runtimeArgs") or []}
    if runsc is None:  # optional: not a "missing" item
        gvisor["how"] = "scripts/ensure-docker.sh (as root) installs runsc and registers it with dockerd"
    return {
        "gvisor": gvisor,
        "engine": {
            "ok": True,
            "host": engine_host(),
            "version": info.get("ServerVersion"),
            "api_version": version.get("ApiVersion"),
            "os": info.get("OperatingSystem"),
            "kernel": info.get("KernelVersion"),
            "runtime": info.get("DefaultRuntime"),
        },
        "cgroup": {"version": info.get("CgroupVersion"), "driver": info.get("CgroupDriver")},
        "limits": limits,
        "init": {"binary": init or None, "ok": init_ok},
        "warnings": list(info.get("Warnings") or []),
    }


def _has_image(client: Any, ref: str) -> bool:
    try:
        client.images.get(ref)
    except ImageNotFound:
        return False
    return True
