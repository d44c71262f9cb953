"""Built-in suites, by name: ``weather`` (the seeds' weather tasks), ``data`` (tables, loops and
aggregation) and ``multitool`` (decoding, DNA, trade, travel, a stateful browser); ``bfcl-multi-turn[:CATEGORY]``
(BFCL v4 multi-turn, from the installed ``bfcl-eval`` package); ``flow-injection[:off|deny|audit|ask]``
(prompt injection under a data-flow policy)."""

from __future__ import annotations

__all__ = ["BUILTIN"]

BUILTIN: dict[str, str] = {
    "weather": "codeact.evals.suites.weather",
    "data": "codeact.evals.suites.data",
    "multitool": "codeact.evals.suites.multitool",
    "bfcl-multi-turn": "codeact.evals.suites.bfcl_multi_turn",
    "flow-injection": "codeact.evals.suites.flow_injection",
}
