"""``RayCluster``: where a Runtime's sessions live when it is given ``cluster=``.

Each node gets one :class:`~codeact.cluster._agent.NodeAgent` actor per ``RayCluster`` (its views
from :meth:`RayCluster.with_tools` included), pinned to the node; each Runtime on the cluster is
attached to the agents of the nodes its sessions go to and detached at its close. Sessions are
placed over the alive nodes (``spread``: the node with the fewest of this runtime's sessions;
``pack``: the first with room), never on a node known dead or full. A node declares its room as the
Ray resource ``codeact_slots`` (``ray start --resources '{"codeact_slots": 50}'``); without it a
node has no limit of ours. ``RayCluster(node_resource=R)`` places sessions only on the nodes that
declare resource ``R`` (so a head, or GPU nodes, get none).
"""

from __future__ import annotations

import threading
import uuid
import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Literal

from ..errors import CodeActError
from ..runtime.toolset import Toolset
from ._agent import NodeAgent
from ._ray import init_ray, ray_module
from ._relay import CallerPump, RelayActor
from ._session import ClusterSession

if TYPE_CHECKING:
    from ..runtime.session import Runtime
    from ..runtime.snapshot import Snapshot

__all__ = ["ClusterFull", "Deployment", "RayCluster"]

Placement = Literal["spread", "pack"]
#: The Ray resource a node declares its sandbox slots with.
SLOTS_RESOURCE = "codeact_slots"


class ClusterFull(CodeActError):
    """No alive node has room for another session."""


class RayCluster:
    """Sessions of a Runtime on a Ray cluster: ``Runtime(tools, sandbox, cluster=RayCluster())``.

    Without ``address`` a loopback-only local Ray is started (as ``--engine ray`` does); with one,
    the cluster at that address is joined. ``tools``: a factory that builds the toolset on each node
    (for HTTP, OpenAPI and MCP sources, rebuilt there from their definitions, their credentials
    resolved there); without it the Runtime's own tools travel by value (cloudpickle). ``node_setup``
    runs once in each node agent (e.g. ``codeact.tracing.enable`` with the node's exporter: each run's
    spans then continue the caller's trace)."""

    def __init__(self, address: str | None = None, *, placement: Placement = "spread",
                 tools: Callable[[], Toolset | Iterable[Any]] | None = None, num_cpus: int = 2,
                 agent_concurrency: int = 256, call_timeout_s: float = 600.0,
                 node_resource: str | None = None, node_setup: Callable[[], None] | None = None) -> None:
        if placement not in ("spread", "pack"):
            raise ValueError(f"placement must be 'spread' or 'pack', got {placement!r}")
        self.address = address
        self.placement: Placement = placement
        self.tools = tools
        self.num_cpus = num_cpus
        #: Only nodes declaring this Ray resource take sessions (None: every alive node).
        self.node_resource = node_resource
        #: Called once in each node agent before its Runtime is made (say, to set up tracing
        #: there: a run then continues the caller's trace on the node).
        self.node_setup = node_setup
        self.agent_concurrency = agent_concurrency
        #: The longest the caller waits for one answer of an agent (a run has its own timeout).
        self.call_timeout_s = call_timeout_s
        #: Nodes that take no new session (``drain``); their sessions keep running there.
        self.draining: set[str] = set()
        #: The node agents, shared with this cluster's views (``with_tools``).
        self.agents = _Agents(self)
        self._root = True  # a view (with_tools) leaves Ray and the agents to the cluster it came from
        self._started = False
        self._connected = False
        self._deployments: list[Deployment] = []
        self._lock = threading.Lock()

    def connect(self) -> Any:
        """``ray``, connected (started on loopback if this cluster has no address and none runs)."""
        ray = ray_module()
        with self._lock:
            if not self._connected:
                self._started = init_ray(self.address, self.num_cpus)
                self._connected = True
        return ray

    def with_tools(self, tools: Callable[[], Toolset | Iterable[Any]]) -> RayCluster:
        """This cluster (its Ray, placement and options) for a runtime whose nodes build their
        toolset with ``tools``: per-runtime tools, say each eval episode's fresh ones, whose state
        (a lock, a counter) cannot travel by value. Ray stays this object's to stop."""
        self.connect()
        view = RayCluster(self.address, placement=self.placement, tools=tools, num_cpus=self.num_cpus,
                          agent_concurrency=self.agent_concurrency, call_timeout_s=self.call_timeout_s,
                          node_resource=self.node_resource, node_setup=self.node_setup)
        view.draining = self.draining  # one set: draining a node drains it for every runtime
        view.agents, view._root, view._connected = self.agents, False, True  # one agent per node for all
        return view

    def drain(self, node_id: str) -> None:
        """Place no new session on ``node_id`` (as if it were full); its sessions keep running there
        until closed, suspended or lost. ``undrain`` takes it back."""
        with self._lock:
            self.draining.add(node_id)

    def undrain(self, node_id: str) -> None:
        with self._lock:
            self.draining.discard(node_id)

    def alive_nodes(self) -> list[dict[str, Any]]:
        """Ray's view of the alive nodes (``NodeID``, ``Resources``, ...)."""
        return [n for n in self.connect().nodes() if n.get("Alive")]

    def deploy(self, runtime: Runtime, options: dict[str, Any]) -> Deployment:
        deployment = Deployment(self, runtime, options)
        with self._lock:
            self._deployments.append(deployment)
        return deployment

    def _closed(self, deployment: Deployment) -> None:
        with self._lock:
            if deployment in self._deployments:
                self._deployments.remove(deployment)

    def shutdown(self) -> None:
        """Close every deployment and (not on a view) stop the node agents, and Ray if this object
        started it."""
        with self._lock:
            deployments, self._deployments = self._deployments, []
        for deployment in deployments:
            deployment.close()
        if not self._root:
            return
        self.agents.stop()
        if self._started:
            self.connect().shutdown()
            self._started = self._connected = False


class _Agents:
    """The node agents of one RayCluster (and its views): one per node, started at first use."""

    def __init__(self, cluster: RayCluster) -> None:
        self._cluster = cluster
        self._agents: dict[str, Any] = {}
        #: Nodes whose agent was lost: no session goes there again.
        self.dead: set[str] = set()
        self._lock = threading.Lock()

    def get(self, node: str) -> Any:
        with self._lock:
            found = self._agents.get(node)
            if found is None:
                from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

                cluster = self._cluster
                found = self._agents[node] = cluster.connect().remote(NodeAgent).options(
                    num_cpus=0, max_concurrency=cluster.agent_concurrency, max_restarts=0,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
                ).remote(cluster.node_setup)
            return found

    def died(self, node: str) -> bool:
        """Forget ``node``'s agent (killed, if it still runs); True the first time."""
        with self._lock:
            first = node not in self.dead
            self.dead.add(node)
            agent = self._agents.pop(node, None)
        if agent is not None:
            try:
                self._cluster.connect().kill(agent)
            except Exception:  # already gone with its node
                pass
        return first

    def stop(self) -> None:
        """Kill every agent (RayCluster.shutdown): their runtimes are detached by then."""
        with self._lock:
            agents, self._agents = list(self._agents.values()), {}
        if not agents:
            return
        ray = self._cluster.connect()
        for agent in agents:
            try:
                ray.get(agent.shutdown.remote(), timeout=self._cluster.call_timeout_s)
            except Exception:  # a dead agent has nothing left to close
                pass
            ray.kill(agent)

    def all(self) -> list[Any]:
        with self._lock:
            return list(self._agents.values())


class Deployment:
    """One Runtime on the cluster: its agents by node, its sessions, its relay to the caller."""

    def __init__(self, cluster: RayCluster, runtime: Runtime, options: dict[str, Any]) -> None:
        ray = cluster.connect()
        self.cluster, self.runtime, self.options = cluster, runtime, options
        self.ray = ray
        # ActorUnschedulableError: an agent pinned to a node that is gone but that Ray still lists
        # as alive (its death not yet detected) cannot be created there: the node is lost too.
        self.lost_errors: tuple[type[BaseException], ...] = (ray.exceptions.RayActorError,
                                                             ray.exceptions.ActorUnavailableError,
                                                             ray.exceptions.ActorUnschedulableError)
        caller = {t.name: t for t in runtime.toolset if t.policy.where == "caller"}
        self.relay: Any = None
        self._pump: CallerPump | None = None
        if caller:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            here = ray.get_runtime_context().get_node_id()
            self.relay = ray.remote(RelayActor).options(
                num_cpus=0, max_concurrency=cluster.agent_concurrency,
                scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False)).remote()
            self._pump = CallerPump(self.relay, caller)
        self.tools: Any = cluster.tools if cluster.tools is not None else list(runtime.toolset)
        #: This runtime's name on the agents it is attached to.
        self.key = uuid.uuid4().hex
        self.attached: dict[str, Any] = {}  # node -> its agent, this runtime attached there
        self.where: dict[str, str] = {}  # session id -> node id
        self.sessions: weakref.WeakValueDictionary[str, ClusterSession] = weakref.WeakValueDictionary()
        self._lock = threading.Lock()

    def get(self, ref: Any) -> Any:
        return self.ray.get(ref, timeout=self.cluster.call_timeout_s)

    # -- placement -------------------------------------------------------------------------------
    def pick(self, exclude: frozenset[str] = frozenset()) -> str:
        with self._lock:
            counts: dict[str, int] = {}
            for node in self.where.values():
                counts[node] = counts.get(node, 0) + 1
            room = []
            for info in self.cluster.alive_nodes():
                node = str(info["NodeID"])
                resources = info.get("Resources") or {}
                slots = resources.get(SLOTS_RESOURCE)
                wanted = self.cluster.node_resource
                if node in self.cluster.agents.dead or node in exclude or node in self.cluster.draining:
                    continue
                if wanted is not None and wanted not in resources:
                    continue
                if slots is not None and counts.get(node, 0) >= slots:
                    continue
                room.append(node)
            if not room:
                raise ClusterFull("no alive node of the cluster has room for another session")
            if self.cluster.placement == "pack":
                return room[0]
            return min(room, key=lambda n: counts.get(n, 0))

    def agent(self, node: str) -> Any:
        """``node``'s agent, this runtime attached to it (once per node)."""
        with self._lock:
            found = self.attached.get(node)
            if found is None:
                found = self.cluster.agents.get(node)
                self.get(found.attach.remote(self.key, self.tools, self.runtime.config, self.options, self.relay))
                self.attached[node] = found
            return found

    def placed(self, session: ClusterSession, node: str) -> None:
        with self._lock:
            self.where[session.id] = node
            self.sessions[session.id] = session

    def unplaced(self, session: ClusterSession) -> None:
        with self._lock:
            self.where.pop(session.id, None)

    def node_died(self, node: str) -> None:
        """``node``'s agent is gone: no new session goes there; its sessions rebuild elsewhere."""
        with self._lock:
            self.attached.pop(node, None)
        self.cluster.agents.died(node)

    def sweep(self, agent: Any) -> None:
        try:
            self.get(agent.sweep.remote())
        except Exception:  # a sweep is best effort; the next agent start sweeps too
            pass

    def session(self, snapshot: Snapshot | None = None, *, lazy: bool = True) -> ClusterSession:
        return ClusterSession(self, snapshot, lazy=lazy)

    def interrupt(self) -> None:
        """Interrupt the running code of every session of this runtime (``Runtime.interrupt``)."""
        with self._lock:
            sessions = list(self.sessions.values())
        for session in sessions:
            session.interrupt()

    def close(self) -> None:
        """Detach this runtime from its agents (its sessions and containers there closed)."""
        self.cluster._closed(self)  # a long-lived cluster keeps no closed runtime
        with self._lock:
            agents, self.attached = list(self.attached.values()), {}
            self.where.clear()
            sessions = list(self.sessions.values())
        for session in sessions:
            session.closed = True  # their agents close them below
        for agent in agents:
            try:
                self.get(agent.detach.remote(self.key))
            except Exception:  # a dead agent has nothing left to close
                pass
        if self._pump is not None:
            self._pump.close()
            self._pump = None
        if self.relay is not None:
            self.ray.kill(self.relay)
            self.relay = None
