"""``Session.lifecycle``: new until the sandbox starts, live while it is up, suspended while the
state waits to be rebuilt (a suspension, a lazy restore, a sandbox lost under ``recover``), closed
for good; and new again when the sandbox died with its state (``recover`` off)."""

from __future__ import annotations

from codeact import Runtime, SandboxConfig
from codeact.runtime import Lifecycle


def _config(**extra: object) -> SandboxConfig:
    return SandboxConfig(backend="local", policy="none", timeout_s=10, grace_s=1, **extra)  # type: ignore[arg-type]


def test_a_session_goes_new_live_suspended_live_closed() -> None:
    with Runtime([], _config()) as rt:
        session = rt.session()
        assert session.lifecycle is Lifecycle.NEW and not session.started
        assert session.run("x = 1").ok
        assert session.lifecycle is Lifecycle.LIVE and session.started
        assert session.suspend()
        assert session.lifecycle is Lifecycle.SUSPENDED and session.suspended
        assert not session.suspend(), "a suspended session is not suspended again"
        again = session.run("x + 1")
        assert again.value == 2 and again.restored
        assert session.lifecycle is Lifecycle.LIVE
        session.close()
        assert session.lifecycle is Lifecycle.CLOSED and session.state == "closed"
        assert not session.suspend()


def test_a_lazy_restore_is_suspended_until_its_first_run() -> None:
    with Runtime([], _config()) as rt:
        with rt.session() as first:
            first.run("y = 3")
            snap = first.snapshot()
        with rt.restore(snap, lazy=True) as lazy:
            assert lazy.lifecycle is Lifecycle.SUSPENDED
            assert lazy.run("y").value == 3
            assert lazy.lifecycle is Lifecycle.LIVE


def test_a_sandbox_that_died_leaves_the_session_new_or_suspended_under_recover() -> None:
    for recover, after in ((False, Lifecycle.NEW), (True, Lifecycle.SUSPENDED)):
        with Runtime([], _config(recover=recover)) as rt, rt.session() as session:
            session.run("z = 1")
            lost = session.run("import os\nos._exit(3)")
            assert lost.state_lost
            assert session.lifecycle is after, recover
            assert session.run("1").ok
            assert session.lifecycle is Lifecycle.LIVE
