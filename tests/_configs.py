"""The sandbox configuration most tests run on, defined once.

``LOCAL`` is the local backend without the restricted policy: these tests drive the host's pipeline
(the tool host, the ledger, the agents, the runner), not the policy, which has tests of its own. Its
run timeout is a safety net for a test that hangs, never what a test measures: a test that needs a
timeout to fire, or more room, derives its own (``LOCAL.model_copy(update={"timeout_s": 2.0})``;
``SandboxConfig`` is frozen, so the shared one cannot be changed by a test).
"""

from __future__ import annotations

from codeact import SandboxConfig

__all__ = ["LOCAL"]

LOCAL = SandboxConfig(backend="local", policy="none", timeout_s=30)
