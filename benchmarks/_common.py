"""What every measure shares: the row it reports, the run context, statistics, host probes."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from rich.console import Console

from codeact import SandboxConfig, tool

Status = Literal["ok", "n/a", "error"]


@dataclass
class Baseline:
    """One baseline measured in the same run (``median``/``p90`` in the row's unit)."""

    name: str
    median: float | None
    p90: float | None = None
    note: str = ""


@dataclass
class Row:
    """One line of the table. ``ratio`` is codeact ÷ ``ratio_of`` unless ``ratio_label`` says otherwise."""

    key: str
    measure: str
    unit: str
    median: float | None = None
    p90: float | None = None
    baselines: list[Baseline] = field(default_factory=list)
    ratio: float | None = None
    ratio_label: str = ""
    target: str = "—"
    met: bool | None = None
    status: Status = "ok"
    note: str = ""
    samples: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def na(key: str, measure: str, unit: str, reason: str, target: str = "—", status: Status = "n/a") -> Row:
    """A row that could not be measured, with the reason (never a made-up number)."""
    return Row(key=key, measure=measure, unit=unit, target=target, status=status, note=reason)


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile, ``q`` in [0, 100]."""
    if not values:
        raise ValueError("no samples")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def med_p90(values: Sequence[float]) -> tuple[float, float]:
    return percentile(values, 50), percentile(values, 90)


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def timed(fn: Callable[[], Any]) -> float:
    """Seconds ``fn()`` took."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def interleave(rounds: int, *steps: Callable[[int], None]) -> None:
    """Run every step once per round, alternating, so drift on a noisy machine hits each alike;
    every other round in reverse order, so no step always follows the same one (a step that
    leaves work behind, e.g. Ray's background threads after its calls, would slow the next)."""
    for r in range(rounds):
        for step in steps if r % 2 == 0 else steps[::-1]:
            step(r)


def mem_available_mib() -> float:
    """The host's MemAvailable (what the kernel thinks can still be allocated without swapping)."""
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def rss_mib(pid: int | str = "self") -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


@tool
def echo(x: int) -> int:
    """Return ``x`` (the cheapest possible host function).

    Args:
        x: Any integer.
    """
    return x


@tool(timeout_s=60)
def slow(seconds: float) -> float:
    """Sleep ``seconds`` on the host and return it.

    Args:
        seconds: How long to sleep.
    """
    time.sleep(seconds)
    return seconds


@dataclass
class Context:
    """Settings of one benchmark run, shared by the measures."""

    quick: bool
    subject: SandboxConfig  # what "codeact" means in this run (docker, or local with --backend local)
    floor: SandboxConfig  # the same kernel as a local subprocess
    deadline: float  # time.monotonic() by which the whole run must end
    console: Console
    docker_error: str | None = None  # why Docker measures cannot run, if they cannot

    @property
    def docker(self) -> bool:
        return self.subject.backend == "docker" and self.docker_error is None

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def n(self, full: int, quick: int) -> int:
        return quick if self.quick else full

    def log(self, message: str) -> None:
        self.console.log(message)

    @property
    def subject_label(self) -> str:
        return "Docker" if self.subject.backend == "docker" else "local"


def make_configs(backend: str) -> tuple[SandboxConfig, SandboxConfig]:
    """(subject, floor): the floor is the same kernel as a local subprocess, policy none."""
    floor = SandboxConfig(backend="local", policy="none", isolation="none", timeout_s=600)
    subject = SandboxConfig(backend=backend, policy="none", timeout_s=600)
    return subject, floor

