"""Sessions on a Ray cluster (``codeact.cluster``) beside a local session, in the same run.

A ``ray.cluster_utils.Cluster`` on 127.0.0.1 (a head and three worker nodes, one machine): the tool
call round trip in a cluster session against a local session (chunks alternating; the call must not
cross Ray), the warm ``x = 1`` from the caller against the local warm run and a no-op Ray actor call
(each ratio reported), placement latency, the first run after a node loss (rebuilt elsewhere)
against a local restore of the same cells, and sessions started per second over the three nodes.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from codeact import Runtime

from ._common import Baseline, Context, Row, echo, interleave, med_p90, na, ratio
from .toolcall import _chunk

TARGET = 1.2
ROWS = [("cluster_tool_call", "tool call round trip, cluster session vs local", "µs", f"≤ {TARGET:g}× local"),
        ("cluster_warm", "warm `x = 1` from the caller, cluster session vs the local warm run", "µs", "report"),
        ("cluster_warm_ray", "warm `x = 1` from the caller, cluster session vs a no-op Ray actor call", "µs",
         "report"),
        ("cluster_place", "placing a cluster session (acquire → node)", "ms", "report"),
        ("cluster_recover", "first run after a node loss (rebuilt elsewhere)", "ms", "report"),
        ("cluster_starts", "sessions started per second, three nodes", "sessions/s", "report")]


class _Noop:
    def ping(self) -> None:
        return None


def _cluster() -> tuple[Any, list[Any]]:
    from ray.cluster_utils import Cluster

    from codeact.cluster._ray import loopback_node

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    with loopback_node():
        cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 1, "include_dashboard": False, "node_ip_address": "127.0.0.1"})
        workers = [cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1", resources={"sandboxes": 1})
                   for _ in range(3)]
        ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
    return cluster, workers


def _wait_dead(ray: Any, agent: Any, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            ray.get(agent.count.remote(), timeout=5)
        except Exception:
            return
        time.sleep(0.1)
    raise RuntimeError("the removed node's agent still answers")


def measure(ctx: Context) -> list[Row]:
    try:
        import ray
    except ImportError:
        return [na(key, label, unit, "needs Ray (the ray extra)", target) for key, label, unit, target in ROWS]
    if ray.is_initialized():
        return [na(key, label, unit, "Ray is already initialised in this process", target)
                for key, label, unit, target in ROWS]
    from codeact.cluster import RayCluster

    cluster, workers = _cluster()
    calls: dict[str, list[float]] = {"cluster": [], "local": []}
    warm: dict[str, list[float]] = {"cluster": [], "local": [], "noop": []}
    chunks, per_chunk, warm_n = ctx.n(12, 1), ctx.n(250, 50), ctx.n(50, 10)
    try:
        noop = ray.remote(num_cpus=0)(_Noop).remote()
        ray.get(noop.ping.remote())
        rayc = RayCluster(cluster.address, node_resource="sandboxes")
        with Runtime([echo], ctx.subject, cluster=rayc) as rt_c, Runtime([echo], ctx.subject) as rt_l:
            place = []
            for _ in range(ctx.n(6, 2)):
                start = time.perf_counter()
                s = rt_c.session()
                place.append((time.perf_counter() - start) * 1e3)
                s.close()
            remote, local = rt_c.session(), rt_l.session()
            sessions = {"cluster": remote, "local": local}
            for session in sessions.values():
                _chunk(session, 100)

            def step(name: str) -> Any:
                def run(_round: int) -> None:
                    calls[name] += _chunk(sessions[name], per_chunk)["lat_us"]
                    for _ in range(warm_n):
                        start = time.perf_counter()
                        sessions[name].run("x = 1")
                        warm[name].append((time.perf_counter() - start) * 1e6)
                return run

            def noop_step(_round: int) -> None:
                for _ in range(warm_n):
                    start = time.perf_counter()
                    ray.get(noop.ping.remote())
                    warm["noop"].append((time.perf_counter() - start) * 1e6)

            interleave(chunks, step("cluster"), step("local"), noop_step)
            # recovery: the same cells rebuilt after a node loss, and by a local restore
            for i in range(3):
                remote.run(f"v{i} = echo(x={i})")
            snapshot = remote.snapshot()
            start = time.perf_counter()
            restored = rt_l.restore(snapshot, lazy=True)
            assert restored.run("v2").value == 2
            local_restore_ms = (time.perf_counter() - start) * 1e3
            restored.close()
            (node,) = [w for w in workers if w.node_id == remote.node_id]
            agent = remote._agent
            cluster.remove_node(node, allow_graceful=False)
            _wait_dead(ray, agent)  # its worker outlives the raylet a moment
            start = time.perf_counter()
            after = remote.run("v2")
            recover_ms = (time.perf_counter() - start) * 1e3
            if not (after.ok and after.restored):
                raise RuntimeError(f"recovery failed: {after.termination} {after.reason}")
            remote.close()
            local.close()
            n = ctx.n(30, 6)
            start = time.perf_counter()

            def one(_i: int) -> None:
                with rt_c.session() as s:
                    s.run("1")

            with ThreadPoolExecutor(8) as pool:
                list(pool.map(one, range(n)))
            starts = n / (time.perf_counter() - start)
    finally:
        ray.shutdown()
        cluster.shutdown()
    c, lo = med_p90(calls["cluster"]), med_p90(calls["local"])
    wc, wl, wn = med_p90(warm["cluster"]), med_p90(warm["local"]), med_p90(warm["noop"])
    pm = med_p90(place)
    against_sum = ratio(wc[0], wl[0] + wn[0])
    both = f"{against_sum:.2f}× (local warm run + no-op Ray call)" if against_sum is not None else "n/a"
    call_ratio = ratio(c[0], lo[0])
    note = "ray.cluster_utils.Cluster on 127.0.0.1: a head and three worker nodes on this machine"
    return [
        Row(key="cluster_tool_call", measure=f"tool call round trip, cluster session ({ctx.subject_label})",
            unit="µs", median=c[0], p90=c[1], samples=len(calls["cluster"]),
            baselines=[Baseline("a local session, same config", lo[0], lo[1])], ratio=call_ratio,
            ratio_label="× local", target=f"≤ {TARGET:g}× local", met=call_ratio is not None and call_ratio <= TARGET,
            note=note),
        Row(key="cluster_warm", measure=f"warm `x = 1` from the caller, cluster session ({ctx.subject_label})",
            unit="µs", median=wc[0], p90=wc[1], samples=len(warm["cluster"]),
            baselines=[Baseline("the local warm run", wl[0], wl[1])], ratio=ratio(wc[0], wl[0]),
            ratio_label="× local", target="report", note=f"{note}; {both}"),
        Row(key="cluster_warm_ray", measure=f"warm `x = 1` from the caller, cluster session ({ctx.subject_label}) "
            "against Ray's own floor",
            unit="µs", median=wc[0], p90=wc[1], samples=len(warm["cluster"]),
            baselines=[Baseline("a no-op Ray actor call", wn[0], wn[1])], ratio=ratio(wc[0], wn[0]),
            ratio_label="× a no-op Ray call", target="report",
            note=f"{note}; a run is two actor calls (the node holds the session, then the run itself); {both}"),
        Row(key="cluster_place", measure="placing a cluster session (acquire → node)", unit="ms",
            median=pm[0], p90=pm[1], samples=len(place), target="report", note=note),
        Row(key="cluster_recover", measure="first run after a node loss (3 cells rebuilt elsewhere)", unit="ms",
            median=recover_ms, samples=1,
            baselines=[Baseline("a local lazy restore + its first run", local_restore_ms)],
            ratio=ratio(recover_ms, local_restore_ms), ratio_label="× local restore", target="report", note=note),
        Row(key="cluster_starts", measure="sessions started per second, three nodes (8 at once)",
            unit="sessions/s", median=starts, samples=1, target="report", note=note + "; each a first run of `1`"),
    ]
