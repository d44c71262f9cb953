"""Moved to :mod:`codeact.image.engine` (and ``doctor`` to :mod:`codeact.image.doctor`); this path stays."""

from __future__ import annotations

from codeact.image.doctor import doctor
from codeact.image.engine import (
    APIError,
    BuildError,
    DockerException,
    ImageNotFound,
    docker_client,
    engine_host,
    ensure_engine,
    runtimes,
)

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
