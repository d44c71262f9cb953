"""What one agent run produced (``Episode``) and what it may spend (``Budget``).

Counting rules, the same in both modes so episodes compare like with like:

- ``model_calls``: requests sent to the model (a request that failed counts too).
- ``turns``: model replies that did not end the episode — each asked for an action (code, tool
  calls) or was cut off and answered with a note. The final answer is not a turn, so a task
  solved by one code action and a text answer has ``turns == 1`` and ``model_calls == 2``.
- ``tool_calls`` / ``tool_errors``: records of the host's ledger(s) — every call that reached
  the tool host, from the code or from JSON; ``tool_errors`` those that failed.
- ``errors``: counts by layer — ``syntax`` (code that does not compile, tool-call arguments that
  are not JSON, in code mode a direct call of a tool other than ``execute_python``), ``runtime``
  (code that raised, timed out or was killed), ``tool`` (failed tool calls), ``budget`` (1 when
  a budget ended the run), ``model`` (provider errors, replies cut off by the output limit or a
  broken stream), ``check`` (code actions the check rejected before they ran, ``check="block"``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..results import ToolCallRecord

__all__ = ["ERROR_LAYERS", "Budget", "Episode", "EpisodeStatus"]

EpisodeStatus = Literal["answered", "incomplete", "error"]
ERROR_LAYERS: tuple[str, ...] = ("syntax", "runtime", "tool", "budget", "model", "check")


class Budget(BaseModel):
    """Limits of one episode; the first one reached ends it as ``incomplete``.

    ``max_turns`` bounds the replies that ask for an action (a final answer is always accepted);
    ``max_tool_calls`` is checked before each action, so one code action may overshoot it;
    ``max_tokens`` counts input + output tokens of every model call; ``max_wall_s`` is wall time,
    which also caps each model call and each code run.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_turns: int = Field(10, ge=1)
    max_wall_s: float = Field(300.0, gt=0)
    max_tokens: int = Field(200_000, ge=1)
    max_tool_calls: int = Field(100, ge=0)


class Episode(BaseModel):
    """The outcome of ``agent.run(task)``: the answer, why the run stopped, and what it cost.

    ``stop_reason`` is ``"answer"`` when answered; a budget name (``"max_turns"``,
    ``"max_tokens"``, ``"max_wall_s"``, ``"max_tool_calls"``) when a budget ran out;
    ``"max_tokens_stop"`` / ``"truncated"`` when the model's replies kept being cut off;
    ``"refusal"`` / ``"content_filter"`` / ``"empty_reply"`` for replies that are no answer;
    ``"model_error"`` when the provider failed. ``detail`` says more in one line.
    """

    task: str
    mode: Literal["code", "json"]
    model: str
    answer: Any = None
    status: EpisodeStatus
    stop_reason: str
    turns: int = 0
    model_calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    errors: dict[str, int] = Field(default_factory=lambda: dict.fromkeys(ERROR_LAYERS, 0))
    wall_s: float = 0.0
    records: list[ToolCallRecord] = Field(default_factory=list)
    trace_path: str | None = None
    detail: str | None = None
    #: The episode ended on a provider error that may pass if tried later (connection, 5xx, 429).
    retryable: bool = False
    #: Model calls whose reply reported no token usage: their tokens are unknown (counted as 0).
    usage_unknown: int = 0
    #: Of ``wall_s``, the time spent starting the sandbox (the first code action's cold start).
    sandbox_start_s: float = 0.0

    @property
    def tokens(self) -> int:
        """Input plus output tokens."""
        return self.tokens_in + self.tokens_out
