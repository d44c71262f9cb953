"""``doctor()``: what this machine has for the Docker backend, as data, and what is missing."""

from __future__ import annotations

import os
import shutil
from typing import Any

from codeact.errors import SandboxUnavailable

from .build import base_tarball
from .engine import DEFAULT_HOST, DockerException, docker_client, engine_host, has_image
from .spec import ImageSpec, default_base_tag, image_tag

__all__ = ["doctor"]


def doctor(client: Any = None) -> dict[str, Any]:
    """What this machine has for the Docker backend, as data: engine, cgroups, limits, images, tools.

    ``missing`` lists, one line each, what stops or weakens the sandbox and how to fix it.
    """
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
            images[f"{key}_present"] = bool(images[key]) and has_image(client, images[key])
        if not images["default_present"]:
            missing.append("default sandbox image not built yet (built on first use, or run scripts/build-image.sh)")
    tarball = base_tarball(images["base"])
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
