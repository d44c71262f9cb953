"""Deprecated path: moved to :mod:`codeact.image.engine` (and ``doctor`` to :mod:`codeact.image.doctor`).

Importing it still works and warns once (``DeprecationWarning`` naming the new path).
"""

from __future__ import annotations

from codeact._deprecated import moved_module
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

moved_module("codeact.sandbox.engine", "codeact.image.engine (doctor: codeact.image.doctor)")
