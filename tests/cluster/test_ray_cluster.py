"""Sessions on a 3-node Ray cluster (``ray.cluster_utils.Cluster`` on loopback) driving real Docker
sandboxes: spread placement, state and records as on a local runtime, a node's death between and
during runs (nothing lost, no tool run twice), fork across nodes, a tool pinned to the caller,
100 concurrent sessions, and a close that leaves no container and no actor."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from codeact import UNTRUSTED, FlowPolicy, Runtime, SandboxConfig, tool
from codeact.cluster import RayCluster
from codeact.cluster._ray import loopback_node
from tests._mail import mail_tools

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

CONFIG = SandboxConfig(timeout_s=60)
WORKERS = 3


class Nodes:
    """The test's cluster: a head that takes no sessions and three workers (``sandboxes`` resource)."""

    def __init__(self) -> None:
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        with loopback_node():
            self.cluster = Cluster(initialize_head=True, head_node_args={
                "num_cpus": 1, "include_dashboard": False, "node_ip_address": "127.0.0.1"})
            self.workers = [self.add() for _ in range(WORKERS)]
            ray.init(address=self.cluster.address, log_to_driver=False, configure_logging=False)

    def add(self) -> Any:
        with loopback_node():
            return self.cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1", resources={"sandboxes": 1})

    def ray_cluster(self, **options: Any) -> RayCluster:
        return RayCluster(self.cluster.address, node_resource="sandboxes", **options)

    def kill(self, node_id: str) -> None:
        """Remove the worker node ``node_id`` (its raylet and workers die) and add a fresh one."""
        found = [n for n in self.workers if n.node_id == node_id]
        assert len(found) == 1, (node_id, [n.node_id for n in self.workers])
        (node,) = found
        self.cluster.remove_node(node, allow_graceful=False)
        self.workers.remove(node)
        self.workers.append(self.add())

    def close(self) -> None:
        ray.shutdown()
        self.cluster.shutdown()


@pytest.fixture(scope="module")
def nodes(docker_image: str) -> Iterator[Nodes]:
    made = Nodes()
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    """Where the tools note each time they really run (a host file: every node is on this machine)."""
    path = tmp_path / "ran.log"
    path.touch()
    return path


def tools(ledger: Path) -> list[Any]:
    @tool
    def bump(key: str) -> int:
        """Note a run of this tool and say how many so far.

        Args:
            key: what to count.
        """
        with ledger.open("a") as f:
            f.write(key + "\n")
        return ledger.read_text().splitlines().count(key)

    @tool(where="caller")
    def caller_pid() -> int:
        """The pid of the process that answers (pinned to the caller)."""
        return os.getpid()

    return [bump, caller_pid]


def runs(ledger: Path) -> list[str]:
    return ledger.read_text().splitlines()


def test_sessions_spread_over_the_nodes_and_keep_their_state(nodes: Nodes, ledger: Path) -> None:
    with Runtime(tools(ledger), CONFIG, cluster=nodes.ray_cluster()) as rt:
        sessions = [rt.session() for _ in range(WORKERS)]
        head = ray.get_runtime_context().get_node_id()
        assert len({s.node_id for s in sessions}) == WORKERS and head not in {s.node_id for s in sessions}
        first = sessions[0].run("x = bump('a')\nopen('out.txt', 'w').write('hi')\nx")
        assert first.ok and first.value == 1 and [c.name for c in first.calls] == ["bump"]
        assert first.calls[0].ok and first.calls[0].result == 1 and not first.restored
        assert sessions[0].run("x + 1").value == 2  # the namespace stays on its node
        assert sessions[0].files.read("out.txt") == b"hi"
        sessions[1].files.write("in.txt", "from the caller")
        assert sessions[1].run("open('in.txt').read()").value == "from the caller"
        assert sessions[2].run("x").error.type == "NameError"  # sessions are isolated
        assert [c.index for c in sessions[0].cells] == [1, 2]


def test_a_tool_pinned_to_the_caller_runs_in_the_callers_process(nodes: Nodes, ledger: Path) -> None:
    with Runtime(tools(ledger), CONFIG, cluster=nodes.ray_cluster()) as rt, rt.session() as s:
        result = s.run("caller_pid()")
        assert result.ok and result.value == os.getpid(), result


def test_a_node_lost_between_runs_rebuilds_the_session_elsewhere_running_no_tool_twice(
        nodes: Nodes, ledger: Path) -> None:
    from codeact.image.engine import docker_client
    from codeact.sandbox._owner import LABEL, owner_alive

    with Runtime(tools(ledger), CONFIG, cluster=nodes.ray_cluster()) as rt, rt.session() as s:
        assert s.run("n = bump('k')").ok and s.run("m = bump('k') + n").ok
        assert runs(ledger) == ["k", "k"]
        lost = s.node_id
        nodes.kill(lost)
        after = s.run("n, m")
        assert after.ok and after.value == [1, 3] and after.restored, after
        assert s.node_id != lost
        assert runs(ledger) == ["k", "k"]  # the rebuild answered both calls from the log
        assert s.run("bump('k')").value == 3 and runs(ledger) == ["k", "k", "k"]
        client = docker_client()
        try:
            owners = [(c.get("Labels") or {}).get(LABEL, "") for c in client.api.containers(
                all=True, filters={"label": LABEL})]
        finally:
            client.close()
        assert owners and all(owner_alive(o) for o in owners), owners  # the dead agent's were removed


def test_a_node_lost_during_a_run_ends_it_killed_with_its_calls(nodes: Nodes, ledger: Path) -> None:
    with Runtime(tools(ledger), CONFIG, cluster=nodes.ray_cluster()) as rt, rt.session() as s:
        assert s.run("before = bump('b')").ok
        out: list[Any] = []
        worker = threading.Thread(target=lambda: out.append(s.run("got = bump('d')\nimport time\ntime.sleep(50)")))
        worker.start()
        deadline = time.monotonic() + 30
        while "d" not in runs(ledger) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # the call's finished event is on its way to the caller
        nodes.kill(s.node_id)
        worker.join(60)
        (killed,) = out
        assert not killed.ok and killed.termination == "killed" and "died" in (killed.reason or "")
        assert [(c.name, c.ok, c.result) for c in killed.calls] == [("bump", True, 1)]
        nxt = s.run("before")
        assert nxt.ok and nxt.value == 1 and nxt.restored
        assert s.run("got").error.type == "NameError"  # the killed run's effects are gone
        assert runs(ledger) == ["b", "d"]


def test_fork_places_independent_branches_across_nodes(nodes: Nodes, ledger: Path) -> None:
    with Runtime(tools(ledger), CONFIG, cluster=nodes.ray_cluster()) as rt, rt.session() as s:
        assert s.run("items = [bump('f')]").ok
        branches = s.fork(3)
        try:
            assert len({b.node_id for b in branches}) >= 2
            for i, branch in enumerate(branches):
                assert branch.run(f"items.append({i})").ok
            assert [b.run("items").value for b in branches] == [[1, 0], [1, 1], [1, 2]]
            assert s.run("items").value == [1]
            assert runs(ledger) == ["f"]  # the forks were rebuilt from the record
        finally:
            for branch in branches:
                branch.close()


def test_a_hundred_concurrent_sessions_over_three_nodes(nodes: Nodes, ledger: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    with Runtime(tools(ledger), CONFIG, cluster=nodes.ray_cluster()) as rt:
        def one(i: int) -> tuple[str, Any]:
            with rt.session() as s:
                return s.node_id, s.run(f"bump('c{i}') + {i}").value

        with ThreadPoolExecutor(16) as pool:
            done = list(pool.map(one, range(100)))
    assert [v for _, v in done] == [i + 1 for i in range(100)]
    assert len({n for n, _ in done}) == WORKERS
    assert sorted(runs(ledger)) == sorted(f"c{i}" for i in range(100))


def test_runtimes_share_one_agent_per_node_close_detaches_shutdown_ends_them(nodes: Nodes, ledger: Path) -> None:
    from codeact.image.engine import docker_client
    from codeact.sandbox._owner import LABEL

    def containers(owners: set[str]) -> set[str]:
        client = docker_client()
        try:
            return {c["Id"] for c in client.api.containers(all=True, filters={"label": LABEL})
                    if (c.get("Labels") or {}).get(LABEL) in owners}
        finally:
            client.close()

    cluster = nodes.ray_cluster()
    rt = Runtime(tools(ledger), CONFIG, cluster=cluster)
    other = Runtime(tools(ledger), CONFIG, cluster=cluster)  # a second runtime: the same agents
    sessions = [rt.session() for _ in range(WORKERS)] + [other.session() for _ in range(WORKERS)]
    for s in sessions:
        assert s.run("1").ok
    mine, theirs = rt._deployment, other._deployment
    assert mine is not None and theirs is not None
    agents, relay = list(mine.attached.values()), mine.relay
    assert sorted(a._actor_id.hex() for a in agents) == sorted(a._actor_id.hex() for a in theirs.attached.values())
    assert sorted(a._actor_id.hex() for a in cluster.agents.all()) == sorted(a._actor_id.hex() for a in agents)
    owners = set(ray.get([a.owner.remote() for a in agents]))
    assert len(owners) == WORKERS and len(containers(owners)) >= 2 * WORKERS
    rt.close()  # detached: its containers are gone, the other runtime's stay and run
    assert len(containers(owners)) == WORKERS
    assert all(ray.get(a.attached.remote()) == [theirs.key] for a in agents)
    assert all(s.run("2").value == 2 for s in sessions[WORKERS:])
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(relay.take.remote(0), timeout=30)
    other.close()
    assert containers(owners) == set()
    cluster.shutdown()  # the agents go with the cluster
    for actor in agents:
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(actor.count.remote(), timeout=30)


def test_placement_packs_or_spreads_within_each_nodes_slots(nodes: Nodes, ledger: Path) -> None:
    from codeact.cluster import ClusterFull

    with loopback_node():
        small = [nodes.cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1",
                                        resources={"small": 1, "codeact_slots": 2}) for _ in range(2)]
    nodes.cluster.wait_for_nodes()
    try:
        for placement in ("pack", "spread"):
            cluster = RayCluster(nodes.cluster.address, node_resource="small", placement=placement)
            with Runtime(tools(ledger), CONFIG, cluster=cluster) as rt:
                sessions = [rt.session() for _ in range(4)]
                where = [s.node_id for s in sessions]
                assert set(where) <= {n.node_id for n in small} and len(set(where)) == 2
                if placement == "pack":
                    assert where[0] == where[1] != where[2] == where[3], where
                else:
                    assert where[0] != where[1] and where[2] != where[3], where
                with pytest.raises(ClusterFull):
                    rt.session()  # two slots on each node, all taken
                sessions[0].close()
                again = rt.session()  # a slot given back is taken again
                assert again.node_id == where[0] and again.run("1 + 1").value == 2
    finally:
        for node in small:
            nodes.cluster.remove_node(node)


def test_a_draining_node_gets_no_new_session_and_keeps_its_own(nodes: Nodes, ledger: Path) -> None:
    cluster = nodes.ray_cluster()
    with Runtime(tools(ledger), CONFIG, cluster=cluster) as rt, rt.session() as kept:
        assert kept.run("x = 41").ok
        cluster.drain(kept.node_id)
        fresh = [rt.session() for _ in range(4)]
        assert kept.node_id not in {s.node_id for s in fresh} and len({s.node_id for s in fresh}) == WORKERS - 1
        after = kept.run("x + 1")
        assert after.ok and after.value == 42 and not after.restored  # still running on its node
        cluster.undrain(kept.node_id)
        assert rt.session().node_id == kept.node_id  # the fewest sessions again


def test_a_cluster_session_refuses_this_machines_paths(nodes: Nodes, ledger: Path, tmp_path: Path) -> None:
    with Runtime(tools(ledger), CONFIG, cluster=nodes.ray_cluster()) as rt:
        with pytest.raises(ValueError, match=r"session\.files"):
            rt.session(workspace=tmp_path)


def _mail_tools(ledger: Path) -> list[Any]:
    def note(to: str, body: str) -> None:  # on the node: the ledger is a file of this machine
        with ledger.open("a") as f:
            f.write(to + "\n")

    return mail_tools(note)


def _send(to: str) -> str:
    return f"try:\n    out = send_email(to={to}, body=mail['body'])\nexcept ToolError as e:\n    out = e.code\nout"


def test_a_flow_policy_judges_calls_on_the_node_and_survives_its_death(nodes: Nodes, ledger: Path) -> None:
    with Runtime(_mail_tools(ledger), CONFIG, flow=FlowPolicy(), cluster=nodes.ray_cluster()) as rt, \
            rt.session() as s:
        assert s.run("mail = read_email()").ok
        assert s.run(_send("'boss@example.com'")).value == "sent"  # the body may come from the email
        refused = s.run(_send("mail['reply_to']"))
        assert refused.value == "policy_denied", refused
        call = refused.calls[-1]
        assert call.labels is not None and UNTRUSTED in call.labels["to"]
        assert call.flow is not None and call.flow.decision == "deny"
        shown = s.run("print(mail['body'])")
        assert shown.labels == {"stdout": [UNTRUSTED]} and s.flow_context == {UNTRUSTED}
        lost = s.node_id
        nodes.kill(lost)
        after = s.run(_send("'boss@example.com'"))  # the model saw the email: its literal is untrusted now
        assert after.restored and s.node_id != lost and after.value == "policy_denied", after
        s.trust()
        assert s.flow_context == frozenset() and s.run(_send("'boss@example.com'")).value == "sent"
    assert runs(ledger) == ["boss@example.com", "boss@example.com"]


def test_a_node_gone_but_still_listed_alive_is_skipped_when_placing(nodes: Nodes, ledger: Path) -> None:
    # Ray lists a removed node as alive until its health checks fail, and a runtime that looks then
    # may pick it; by the time the agent pinned there is created, Ray may know the node is gone and
    # refuse the agent (ActorUnschedulableError). Placement must count the node lost, go elsewhere.
    lost = nodes.workers[0].node_id
    nodes.kill(lost)  # three live workers again, and the lost one
    cluster = nodes.ray_cluster()
    stale = cluster.alive_nodes()  # Ray's view right after the death, taken as it is
    deadline = time.monotonic() + 120
    while any(str(n["NodeID"]) == lost for n in cluster.alive_nodes()):  # until Ray knows
        assert time.monotonic() < deadline, "Ray never saw the removed node's death"
        time.sleep(0.5)
    if not any(str(n["NodeID"]) == lost for n in stale):
        stale.append({"NodeID": lost, "Alive": True, "Resources": {"sandboxes": 1.0}})  # Ray was quicker
    cluster.alive_nodes = lambda: stale  # type: ignore[method-assign]  # the placement sees the lagging view
    with Runtime(tools(ledger), CONFIG, cluster=cluster) as rt:
        sessions = [rt.session() for _ in range(WORKERS + 1)]  # spread: one of them picks the lost node
        try:
            assert all(s.run("1 + 1").value == 2 for s in sessions)
            assert lost not in {s.node_id for s in sessions}
            assert lost in cluster.agents.dead  # it was tried, and found lost
        finally:
            for s in sessions:
                s.close()


def test_map_and_idle_suspension_work_on_the_cluster(nodes: Nodes, ledger: Path) -> None:
    with Runtime(tools(ledger), CONFIG, cluster=nodes.ray_cluster(), suspend_idle_s=1) as rt:
        results = rt.map("bump(item) + len(item)", ["a", "bb", "ccc", "dddd", "e", "ff"], concurrency=3)
        assert [r.value for r in results] == [2, 3, 4, 5, 2, 3], results
        with rt.session() as s:
            assert s.run("kept = bump('s')").ok
            time.sleep(3)  # the node's suspender stops the idle sandbox
            after = s.run("kept")
            assert after.ok and after.value == 1 and after.restored, after
    assert sorted(runs(ledger)) == ["a", "bb", "ccc", "dddd", "e", "ff", "s"]  # the rebuild ran no tool


def test_serve_mcp_serves_each_session_from_the_cluster(nodes: Nodes, tmp_path: Path) -> None:
    import asyncio
    import shutil
    import sys

    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    tools_file = tmp_path / "node_tools.py"
    tools_file.write_text("from pathlib import Path\nfrom codeact import tool\n\n@tool\ndef where() -> str:\n"
                          '    """The command line of the process that runs this tool."""\n'
                          '    return Path("/proc/self/cmdline").read_bytes().replace(b"\\0", b" ").decode()\n')
    codeact = shutil.which("codeact", path=str(Path(sys.executable).parent)) or "codeact"
    params = StdioServerParameters(command=codeact, args=["serve-mcp", "--tools", str(tools_file),
                                                          "--cluster", nodes.cluster.address],
                                   env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"})

    async def drive() -> str:
        with (tmp_path / "stderr.log").open("w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                result = await session.call_tool("execute_python", {"code": "print(where())"})
                assert not result.is_error, result
                return "".join(getattr(c, "text", "") for c in result.content)

    text = asyncio.run(drive())
    assert "NodeAgent" in text, text  # answered on a node, by its agent (Ray titles its workers)


def _trace_on_node(endpoint: str) -> None:
    """A node's tracing (RayCluster(node_setup=...)): the SDK exporting OTLP/HTTP at once."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from codeact import tracing

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    tracing.enable(provider)


def test_a_runs_spans_on_the_node_continue_the_callers_trace(nodes: Nodes, ledger: Path) -> None:
    import functools
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.sdk.trace import TracerProvider

    from codeact import tracing

    spans: list[Any] = []

    class Collector(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            request = ExportTraceServiceRequest()
            request.ParseFromString(self.rfile.read(int(self.headers["Content-Length"])))
            spans.extend(s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    setup = functools.partial(_trace_on_node, f"http://127.0.0.1:{server.server_address[1]}/v1/traces")
    caller = TracerProvider()
    tracing.enable(caller)
    try:
        with Runtime(tools(ledger), CONFIG, cluster=nodes.ray_cluster(node_setup=setup)) as rt, rt.session() as s, \
                caller.get_tracer("test").start_as_current_span("caller") as parent:
            assert s.run("bump('t')").ok
        context = parent.get_span_context()
        deadline = time.monotonic() + 20
        while not any(x.name == "execute_tool bump" for x in spans) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        tracing.disable()
        server.shutdown()
        server.server_close()
    (run,) = [x for x in spans if x.name == "codeact.run"]
    (call,) = [x for x in spans if x.name == "execute_tool bump"]
    assert run.trace_id == context.trace_id.to_bytes(16, "big")
    assert run.parent_span_id == context.span_id.to_bytes(8, "big")  # the caller's span, across Ray
    assert call.parent_span_id == run.span_id


def test_stream_and_arun_from_a_cluster_session(nodes: Nodes, ledger: Path) -> None:
    import asyncio

    async def drive(s: Any) -> tuple[list[str], Any]:
        kinds = [e.type async for e in s.stream("print('hi')\nbump('s1')\nbump('s2')")]
        return kinds, await s.arun("bump('s3')")

    with Runtime(tools(ledger), CONFIG, cluster=nodes.ray_cluster()) as rt, rt.session() as s:
        kinds, later = asyncio.run(drive(s))
    assert kinds.count("call_started") == 2 and kinds.count("call_finished") == 2 and "stdout" in kinds
    assert kinds[-1] == "done" and later.ok and later.value == 1
    assert runs(ledger) == ["s1", "s2", "s3"]


def test_the_code_agent_runs_its_actions_on_the_cluster(nodes: Nodes, ledger: Path) -> None:
    from codeact.agent import CodeActAgent
    from codeact.testing.fake_server import FakeModelServer
    from tests.agent.test_code_agent import client_for, fenced

    with FakeModelServer([fenced("print(bump('agent'))"), "Done."]) as fake, \
            Runtime(tools(ledger), CONFIG, cluster=nodes.ray_cluster()) as rt:
        episode = CodeActAgent(client_for(fake, "openai"), rt.toolset, runtime=rt).run("Count once")
    assert episode.status == "answered" and [r.name for r in episode.records] == ["bump"]
    assert runs(ledger) == ["agent"]


def test_session_files_writes_survive_a_nodes_death(nodes: Nodes, ledger: Path) -> None:
    with Runtime(tools(ledger), CONFIG, cluster=nodes.ray_cluster()) as rt, rt.session() as s:
        s.files.write("a.txt", "one")  # read by the next cell: its replay needs it laid first
        made = s.run("a = open('a.txt').read()\nopen('b.txt', 'w').write(a)\nopen('k.txt', 'w').write(a + '!')")
        assert made.ok, made
        s.files.write("/workspace/d/e.txt", b"four")  # after the last cell: done again after the replay
        s.files.remove("b.txt")
        lost = s.node_id
        nodes.kill(lost)
        after = s.run("import os\n[a, open('k.txt').read(), open('d/e.txt').read(), os.path.exists('b.txt')]")
        assert after.ok and after.restored and s.node_id != lost, after
        assert after.value == ["one", "one!", "four", False]
        assert s.files.read("a.txt") == b"one" and [len(c.files) for c in s.cells] == [1, 2]  # each run's own
        (branch,) = s.fork(1)  # a snapshot of the node's session: its cells keep their writes
        try:
            assert branch.run("open('d/e.txt').read() + a").value == "fourone"
        finally:
            branch.close()


def test_ctrl_c_in_the_caller_interrupts_the_run_and_keeps_the_cluster_session(nodes: Nodes, ledger: Path) -> None:
    import signal

    assert threading.current_thread() is threading.main_thread()
    with Runtime(tools(ledger), CONFIG, cluster=nodes.ray_cluster()) as rt, rt.session() as s:
        assert s.run("kept = 41").ok

        def fire() -> None:
            deadline = time.monotonic() + 60
            while "go" not in runs(ledger) and time.monotonic() < deadline:
                time.sleep(0.05)
            os.kill(os.getpid(), signal.SIGINT)

        firing = threading.Thread(target=fire, daemon=True)
        firing.start()
        with pytest.raises(KeyboardInterrupt):
            s.run("bump('go')\nimport time\nfor _ in range(3000):\n    time.sleep(0.1)\n", timeout_s=300)
        firing.join(10)
        last = s.history[-1]
        assert last.termination == "interrupted" and [c.name for c in last.calls] == ["bump"], last
        nxt = s.run("kept + 1")
        assert nxt.ok and nxt.value == 42 and not nxt.restored
        assert [c.status for c in s.cells] == ["completed", "inexact", "completed"]
