"""Memory per idle Docker session, seen from the host.

N sessions, one ``x = 1`` run each, then per container: its memory cgroup's ``rss + mapped_file``
(anonymous memory of docker-init and the kernel, plus file pages they map; page cache of the image
files that is merely cached is left out, and reported separately as ``usage_in_bytes``), the
``containerd-shim`` that docker keeps per container (outside the cgroup; PSS, so shared pages are
split among the shims), and the host process's own RSS growth per session.
"""

from __future__ import annotations

import glob
import time
from pathlib import Path
from typing import Any

from codeact import Runtime, Session

from ._common import Baseline, Context, Row, med_p90, mem_available_mib, rss_mib

TARGET_MIB = 6.0
ROWS = [("memory_idle", "memory per idle Docker session (container + kernel, host view)", "MiB",
         f"≤ {TARGET_MIB:g} MiB")]
_MIB = 1024 * 1024


def cgroup_dir(container_id: str) -> Path | None:
    """The container's memory cgroup: v1 cgroupfs or systemd driver, or v2."""
    patterns = [f"/sys/fs/cgroup/memory/docker/{container_id}",
                f"/sys/fs/cgroup/memory/system.slice/docker-{container_id}.scope",
                f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope",
                f"/sys/fs/cgroup/docker/{container_id}"]
    for pattern in patterns:
        for found in glob.glob(pattern):
            if Path(found, "memory.stat").exists():
                return Path(found)
    return None


def cgroup_memory(directory: Path) -> dict[str, float]:
    """MiB: ``rss`` (+``mapped_file``) and ``usage`` (includes page cache) of one container."""
    stat = dict(line.split() for line in (directory / "memory.stat").read_text().splitlines() if " " in line)
    if "total_rss" in stat:  # cgroup v1
        rss = int(stat["total_rss"]) + int(stat.get("total_mapped_file", 0))
        usage = int((directory / "memory.usage_in_bytes").read_text())
    else:  # cgroup v2
        rss = int(stat["anon"]) + int(stat.get("file_mapped", 0))
        usage = int((directory / "memory.current").read_text())
    return {"rss": rss / _MIB, "usage": usage / _MIB}


def _pss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) / 1024
    return 0.0


def shim_pss(directory: Path) -> float | None:
    """PSS of the process that parents the container's init (the containerd shim), in MiB."""
    try:
        procs = [int(p) for p in (directory / "cgroup.procs").read_text().split()]
        stat = Path(f"/proc/{min(procs)}/stat").read_text()
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if "shim" not in Path(f"/proc/{ppid}/cmdline").read_text():
            return None
        return _pss_mib(ppid)
    except (OSError, ValueError):
        return None


def container_id(session: Session) -> str:
    sandbox: Any = session.sandbox_state.driver.sandbox if session.sandbox_state.driver else None  # benchmarks may peek
    cid = getattr(sandbox, "container_id", None)
    if not cid:
        raise RuntimeError("the session has no container")
    return str(cid)


def measure(ctx: Context) -> list[Row]:
    n = ctx.n(20, 3)
    with Runtime([], ctx.subject) as rt:
        with rt.session() as warm:  # load the engine client and the image lookup before the baseline
            warm.run("x = 1")
        time.sleep(0.5)
        host_before, avail_before = rss_mib(), mem_available_mib()
        sessions = [rt.session() for _ in range(n)]
        try:
            for s in sessions:
                s.run("x = 1")
            time.sleep(1.0)  # let the kernels settle to idle
            host_after, avail_after = rss_mib(), mem_available_mib()
            dirs = [cgroup_dir(container_id(s)) for s in sessions]
            if any(d is None for d in dirs):
                raise RuntimeError("cannot find the containers' memory cgroups under /sys/fs/cgroup")
            mems = [cgroup_memory(d) for d in dirs if d is not None]
            shims = [v for v in (shim_pss(d) for d in dirs if d is not None) if v is not None]
        finally:
            for s in sessions:
                s.close()
    rss = [m["rss"] for m in mems]
    usage = [m["usage"] for m in mems]
    med, p90 = med_p90(rss)
    u_med, u_p90 = med_p90(usage)
    shim_med = med_p90(shims)[0] if shims else None
    host_per = (host_after - host_before) / n
    system_per = (avail_before - avail_after) / n
    total = med + (shim_med or 0.0) + max(host_per, 0.0)
    bases = [Baseline("cgroup usage_in_bytes (incl. page cache)", u_med, u_p90),
             Baseline("containerd-shim per container (PSS, outside the cgroup)", shim_med, None),
             Baseline("host process RSS growth per session", host_per, None)]
    note = (f"cgroup rss+mapped_file of {n} idle containers (docker-init + kernel); "
            f"with the shim and the host side: {total:.1f} MiB")
    return [Row(key="memory_idle", measure="memory per idle Docker session (container + kernel, host view)",
                unit="MiB", median=med, p90=p90, samples=n, baselines=bases, target=f"≤ {TARGET_MIB:g} MiB",
                met=med <= TARGET_MIB, note=note,
                extra={"total_with_shim_and_host_mib": total, "shim_pss_mib": shim_med,
                       "host_rss_per_session_mib": host_per, "memavailable_drop_per_session_mib": system_per})]
