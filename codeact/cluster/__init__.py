"""Sessions on a Ray cluster (optional extra ``ray``; ``import codeact`` never imports Ray).

    from codeact import Runtime
    from codeact.cluster import RayCluster

    with Runtime(tools, sandbox, cluster=RayCluster()) as rt:   # or RayCluster("ray://head:10001")
        s = rt.session()            # placed on a node; s.node_id says which
        s.run("x = lookup('a')")    # the tool calls are answered on that node

A node agent per node and runtime owns the node's sandboxes, tool host and ledgers, so the per-call
path never crosses Ray; the caller keeps each session's replay log, so a node's death loses no
state and runs no tool twice (``_session``). Floor 4 of the layers (docs/architecture.md): above
``runtime``, which reaches it only through the object passed as ``cluster=``.
"""

from __future__ import annotations

from ._cluster import SLOTS_RESOURCE, ClusterFull, RayCluster
from ._ray import init_ray, ray_module
from ._session import ClusterSession

__all__ = ["SLOTS_RESOURCE", "ClusterFull", "ClusterSession", "RayCluster", "init_ray", "ray_module"]
