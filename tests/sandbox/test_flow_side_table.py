"""The kernel's side table of labels (issue 31) stays bounded across cells and never loses a label:
the real kernel on the local backend, driven over the raw channel as in ``test_flow_labels``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from codeact import SandboxConfig
from codeact.sandbox.driver import KernelDriver
from codeact.sandbox.pool import open_kernel
from codeact.tool_stubs.render import render_stubs
from tests.sandbox.test_flow_labels import SPECS, Host, U

#: The kernel's own flow module, seen from a cell (the module the running ``Flow`` came from).
FLOW = "import sys as _s\n_fm = _s.modules[type(__flow__).__module__]\n"
SIZE = FLOW + "len(_fm._side)"
#: A plain list from a C function, labelled through the side table (``sorted`` cannot return a box).
LIVE = ("m = read_inbox()[0]\nkeep = sorted(m['body'])\nchain = {'k': [sorted(m['body'])]}\n"
        "cyc = sorted(m['body'])\ncyc.append(cyc)")


@pytest.fixture
def host() -> Iterator[Host]:
    driver: KernelDriver = open_kernel(SandboxConfig(backend="local", policy="none"), render_stubs(SPECS))
    try:
        yield Host(driver)
    finally:
        driver.sandbox.close()


def _body_labels(host: Host, expression: str) -> list[str]:
    done = host.run(f"send_email(to='boss@corp', body=str({expression}))")
    assert done["termination"] == "completed", done
    return host.last("body")


def test_many_cells_of_labelled_opaque_objects_keep_the_table_bounded(host: Host) -> None:
    assert host.run(LIVE)["termination"] == "completed"
    for _ in range(30):  # 3,000 labelled lists, each dropped by the next
        assert host.run("for _ in range(100):\n    tmp = sorted(m['body'])")["termination"] == "completed"
    size = host.run(SIZE)
    assert size["termination"] == "completed" and size["value"] < 50, size
    # what the namespace still holds keeps its labels: directly, through a container, in a cycle
    for expression in ("len(keep)", "len(chain['k'][0])", "len(cyc)", "len(tmp)"):
        assert _body_labels(host, expression) == [U], expression
    assert _body_labels(host, "len(sorted('plain'))") == []  # nothing labels what never was


def test_past_the_cap_the_oldest_entries_fold_into_labels_every_object_carries(host: Host) -> None:
    # Cyclic garbage: only the cycle and the table refer to it, so the count cannot drop it.
    assert host.run(FLOW + "_fm._SIDE_CAP = 20")["termination"] == "completed"
    assert host.run(LIVE)["termination"] == "completed"  # the oldest entries: folded first
    for _ in range(5):
        assert host.run("for _ in range(20):\n    g = sorted(m['body'])\n    g.append(g)")["termination"] == "completed"
    size = host.run(SIZE)
    assert size["termination"] == "completed" and size["value"] <= 20, size
    assert host.run(FLOW + "_fm._side.get(id(keep)) is None")["value"] is True  # folded, not in the table
    assert _body_labels(host, "len(keep)") == [U]  # yet it keeps its labels
    assert _body_labels(host, "len(cyc)") == [U]
