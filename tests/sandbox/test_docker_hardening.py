"""Each hardening measure of the Docker backend, checked from inside the sandbox."""

from __future__ import annotations

import json
import os
import socket
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest

from codeact import ExecutionResult, Runtime, SandboxConfig, Session
from tests.sandbox.syscall_probe import CODE

pytestmark = pytest.mark.docker

CONFIG = SandboxConfig(backend="docker", timeout_s=10, memory_mb=256, cpus=0.5, pids_limit=64, tmpfs_mb=16,
                       nofile=200, fsize_mb=32)


def runsc_or_skip() -> None:
    """gVisor variants run wherever runsc is registered; under CI=true its absence is a failure."""
    from codeact.image.engine import runtimes

    if "runsc" not in runtimes():
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true and runsc is not registered with dockerd (scripts/ensure-docker.sh)")
        pytest.skip("gVisor (runsc) is not registered with dockerd; scripts/ensure-docker.sh does it")


@pytest.fixture(scope="module", params=["runc", "runsc"])
def session(request: pytest.FixtureRequest, docker_image: str) -> Iterator[Session]:
    if request.param == "runsc":
        runsc_or_skip()
    os.environ["CODEACT_TEST_HOST_SECRET"] = "hunter2"
    try:
        with Runtime([], CONFIG.model_copy(update={"runtime": request.param})) as rt, rt.session() as s:
            s.start()
            yield s
    finally:
        os.environ.pop("CODEACT_TEST_HOST_SECRET", None)


def inside(session: Session, code: str) -> Any:
    result: ExecutionResult = session.run(textwrap.dedent(code))
    assert result.ok, (result.error, result.stderr)
    return result.value


def _status(session: Session) -> dict[str, str]:
    text = inside(session, "open('/proc/self/status').read()")
    return dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)


def test_network_none_only_loopback(session: Session) -> None:
    assert inside(session, "import os\nsorted(os.listdir('/sys/class/net'))") == ["lo"]
    assert inside(session, "open('/proc/net/route').read().splitlines()[1:]") == []


def test_host_loopback_listener_unreachable(session: Session) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    try:
        outcome = inside(session, f"""
            import socket
            s = socket.socket()
            s.settimeout(2)
            try:
                s.connect(("127.0.0.1", {port}))
                r = "connected"
            except OSError as e:
                r = type(e).__name__
            r
        """)
        assert outcome == "ConnectionRefusedError"  # the sandbox's lo is its own; the host's is not there
    finally:
        listener.close()


def test_read_only_root(session: Session) -> None:
    for path in ("/etc/evil", "/opt/codeact/kernel.py", "/usr/bin/evil"):
        errno = inside(session, f"""
            try:
                open({path!r}, 'a').write('x')
                r = 0
            except OSError as e:
                r = e.errno
            r
        """)
        assert errno in (13, 30), path  # EACCES or EROFS


def test_tmp_is_small_tmpfs(session: Session) -> None:
    total = inside(session, "import os\ns = os.statvfs('/tmp')\ns.f_blocks * s.f_frsize")
    assert total == CONFIG.tmpfs_mb * 1024 * 1024
    assert inside(session, "open('/proc/mounts').read()").count(" /tmp tmpfs ") == 1


def test_workspace_is_writable_and_listed(session: Session) -> None:
    result = session.run("import os\nos.getcwd(), open('out.txt', 'w').write('hello')")
    assert result.ok and result.value == ["/workspace", 5]
    assert [(f.path, f.size) for f in result.files] == [("out.txt", 5)]
    assert (session.workspace / "out.txt").read_text() == "hello"


def test_non_root_and_no_capabilities(session: Session) -> None:
    status = _status(session)
    assert inside(session, "import os\n[os.getuid(), os.getgid()]") == [CONFIG.uid, CONFIG.uid]
    assert int(status["CapEff"], 16) == 0 and int(status["CapPrm"], 16) == 0
    assert int(status["CapBnd"], 16) == 0


def test_no_new_privileges_and_seccomp(session: Session) -> None:
    status = _status(session)
    if _runtime(session) == "runsc" and "NoNewPrivs" not in status:
        pytest.skip("gVisor's /proc/self/status has no NoNewPrivs/Seccomp; the syscall tests below apply")
    assert status["NoNewPrivs"].strip() == "1"
    assert status["Seccomp"].strip() == "2"  # filter mode: Docker's default profile


def test_rlimits(session: Session) -> None:
    limits = inside(session, "import resource\n[resource.getrlimit(resource.RLIMIT_NOFILE), "
                             "resource.getrlimit(resource.RLIMIT_FSIZE)]")
    assert limits == [[200, 200], [32 * 1024 * 1024] * 2]


def _cgroup(session: Session, controller: str, name: str) -> str | None:
    return inside(session, f"""
        import glob
        hits = glob.glob('/sys/fs/cgroup/{controller}/{name}') + glob.glob('/sys/fs/cgroup/{name}')
        open(hits[0]).read().strip() if hits else None
    """)


def _runtime(session: Session) -> str:
    return session.config.runtime


def test_cgroup_limits_seen_from_inside(session: Session) -> None:
    if _runtime(session) == "runsc":
        pytest.skip("gVisor shows its own cgroupfs; the host-side limits are checked on the engine side")
    mem = _cgroup(session, "memory", "memory.limit_in_bytes") or _cgroup(session, "memory", "memory.max")
    assert mem is not None and int(mem) == CONFIG.memory_mb * 1024 * 1024
    swap = _cgroup(session, "memory", "memory.memsw.limit_in_bytes")
    if swap is not None:  # swap accounting on: memory+swap equals memory, i.e. no swap
        assert int(swap) == CONFIG.memory_mb * 1024 * 1024
    pids = _cgroup(session, "pids", "pids.max")
    assert pids is not None and int(pids) == CONFIG.pids_limit
    quota = _cgroup(session, "cpu", "cpu.cfs_quota_us")
    period = _cgroup(session, "cpu", "cpu.cfs_period_us")
    if quota is not None and period is not None:
        assert int(quota) / int(period) == pytest.approx(CONFIG.cpus)
    else:
        cpu_max = _cgroup(session, "", "cpu.max")
        assert cpu_max is not None and cpu_max != "max"


def test_init_is_pid_one_and_reaps_zombies(session: Session) -> None:
    assert "init" in inside(session, "open('/proc/1/cmdline').read()")
    zombies = inside(session, """
        import os, subprocess, time
        subprocess.run(["sh", "-c", "sleep 0.2 & exit 0"], check=True)   # orphan the sleeper
        time.sleep(1.0)
        states = []
        for pid in os.listdir('/proc'):
            if pid.isdigit():
                try:
                    states.append(open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[0])
                except OSError:
                    pass
        states.count('Z')
    """)
    assert zombies == 0


def test_only_the_channel_is_inherited(session: Session) -> None:
    fds = inside(session, """
        import os
        out = {}
        for fd in os.listdir('/proc/self/fd'):
            try:
                out[fd] = os.readlink(f'/proc/self/fd/{fd}')
            except OSError:
                pass
        out
    """)
    kinds = sorted(v.split(":")[0] if ":" in v else v for v in fds.values() if not v.startswith("/proc/"))
    assert kinds.count("socket") == 1, fds  # the channel, and nothing else from outside
    assert set(kinds) <= {"socket", "pipe", "/dev/null"}, fds


def test_empty_environment(session: Session) -> None:
    env = inside(session, "import os\ndict(os.environ)")
    assert "CODEACT_TEST_HOST_SECRET" not in env
    assert set(env) <= {"PATH", "HOSTNAME", "LANG", "PYTHONDONTWRITEBYTECODE", "HOME", "PYTHONPATH", "TERM",
                        "PYTHONHASHSEED",  # sandbox.base.KERNEL_ENV, for replay
                        "MPLBACKEND", "MPLCONFIGDIR"}, env  # the kernel's, for figures (kernel/rich_output.py)
    assert env.get("MPLBACKEND") == "Agg"


def test_no_docker_socket_and_no_host_paths(session: Session) -> None:
    seen = inside(session, """
        import os
        [os.path.exists(p) for p in ('/var/run/docker.sock', '/run/docker.sock', '/work', '/root/.cache')]
    """)
    assert seen == [False, False, False, False]
    mounts = inside(session, "[l.split()[4] for l in open('/proc/self/mountinfo')]")
    standard = {"/", "/tmp", "/etc/hosts", "/etc/hostname", "/etc/resolv.conf", "/dev/shm", "/usr/sbin/docker-init"}
    extra = {m for m in mounts if m not in standard and not m.startswith(("/proc", "/dev", "/sys"))}
    assert extra == {"/run/codeact", "/workspace"}, extra


def test_code_arrives_over_the_channel_not_a_mount(session: Session) -> None:
    seen = inside(session, """
        import os
        try:
            os.listdir('/run/codeact')
            listable = True
        except PermissionError:
            listable = False
        [listable, os.path.exists('/run/codeact/channel.sock')]
    """)
    # The host unlinks the socket once the kernel has connected: nothing is left to open, and the
    # directory is not listable by the sandbox user.
    assert seen == [False, False]


def test_log_driver_off_and_owner_labels(session: Session) -> None:
    from codeact.sandbox.docker import _client

    driver = session.sandbox_state.driver
    assert driver is not None
    info = _client().api.inspect_container(driver.sandbox.container_id)  # type: ignore[attr-defined]
    assert info["HostConfig"]["LogConfig"]["Type"] == "none"
    labels = info["Config"]["Labels"]
    assert labels["codeact.owner"].startswith(f"{os.getpid()}-")
    assert info["HostConfig"]["NetworkMode"] == "none"
    assert info["HostConfig"]["Runtime"] == session.config.runtime
    assert info["HostConfig"]["ReadonlyRootfs"] is True
    opts = info["HostConfig"]["SecurityOpt"]
    assert opts[0] == "no-new-privileges" and opts[1].startswith("seccomp=") and len(opts) == 2
    assert json.dumps(info["Config"]["Env"] or []).find("HOST_SECRET") == -1


def test_seccomp_denies_each_listed_syscall(session: Session) -> None:
    import platform

    from codeact.sandbox._bpf import SYSCALLS
    from codeact.sandbox._seccomp import ALREADY_DENIED, DENIED, REMOVED, profile
    from tests.sandbox.syscall_probe import ARGS, probe_code


    if platform.machine() not in SYSCALLS:
        pytest.skip(f"no syscall numbers for {platform.machine()}")
    allowed = {n for rule in profile()["syscalls"] if rule["action"] == "SCMP_ACT_ALLOW" for n in rule["names"]}
    assert not allowed & set(REMOVED) and not allowed & set(ALREADY_DENIED)
    assert set(ARGS) == set(DENIED) == set(REMOVED) | set(ALREADY_DENIED)
    got = inside(session, probe_code())
    assert got == dict.fromkeys(ARGS, 1), got  # EPERM, from the filter, for every one


def test_ptrace_of_pid_one_and_of_any_non_descendant_fails(session: Session) -> None:
    got = inside(session, CODE + textwrap.dedent("""
        import os, subprocess, sys
        child = subprocess.Popen(["sleep", "30"])
        try:
            # PTRACE_ATTACH = 16, PTRACE_SEIZE = 0x4206, PTRACE_TRACEME = 0
            r = [sys_(101, 16, 1, 0, 0), sys_(101, 0x4206, 1, 0, 0), sys_(101, 16, os.getppid(), 0, 0),
                 sys_(101, 16, child.pid, 0, 0), sys_(101, 0, 0, 0, 0)]
        finally:
            child.kill()
            child.wait()
        r
    """))
    assert got == [1, 1, 1, 1, 1]


def test_seccomp_profile_is_the_default_minus_the_list() -> None:
    from codeact.sandbox._seccomp import REMOVED, profile

    prof = profile()
    assert prof["defaultAction"] == "SCMP_ACT_ERRNO"
    names = {n for rule in prof["syscalls"] for n in rule["names"]}
    assert {"read", "write", "clone", "execve", "mmap", "socket", "wait4"} <= names  # the ordinary set
    assert not names & set(REMOVED)
    assert all(not (rule.get("includes") or {}).get("caps") for rule in prof["syscalls"])


def test_a_subprocess_writing_a_lot_to_the_inherited_stdout_finishes(session: Session) -> None:
    # The kernel's output drainer must live under either runtime (gVisor refuses select(): the
    # thread used to die, and a child writing past the 64 KiB pipe buffer blocked until the timeout).
    result = session.run("import subprocess\nsubprocess.run(['head', '-c', '300000', '/dev/zero']).returncode")
    assert result.ok and result.value == 0, result
    assert len(result.stdout) == 300_000 and "PermissionError" not in result.stderr
