"""Joining Ray or starting it on loopback: the one place codeact calls ``ray.init``."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

__all__ = ["init_ray", "loopback_node", "ray_module"]


def ray_module() -> Any:
    """``ray``, or a one-line error naming the extra."""
    try:
        import ray
    except ImportError:
        raise RuntimeError("codeact on Ray needs Ray: pip install 'codeact[ray]'") from None
    return ray


@contextlib.contextmanager
def loopback_node() -> Iterator[None]:
    """Keep ``_node_ip_address="127.0.0.1"`` as given (Ray would resolve it to a public address)."""
    from ray._private import services

    original = services.resolve_ip_for_localhost
    services.resolve_ip_for_localhost = lambda host: host
    try:
        yield
    finally:
        services.resolve_ip_for_localhost = original


def init_ray(address: str | None = None, num_cpus: int = 2) -> bool:
    """Connect to ``address`` or start a loopback-only local cluster (no dashboard, no usage
    stats); True if this call did it, False if Ray was already initialised."""
    ray = ray_module()
    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    quiet = {"log_to_driver": False, "configure_logging": False}
    with loopback_node():  # joining too: a loopback address stays loopback
        if address:
            ray.init(address=address, **quiet)
        else:
            # "local": a new cluster of its own (without it Ray joins any Ray it finds running here)
            ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, _node_ip_address="127.0.0.1",
                     **quiet)
    return True
