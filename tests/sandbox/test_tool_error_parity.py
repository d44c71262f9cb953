"""One ``ToolError`` on both sides of the channel: the class the model's code catches in the
sandbox (``kernel/client.py``, standard library only) is the one implementation, and the host's
(``codeact.errors``) extends it: the same arguments, ``retryable`` defaulted from the one set of
codes, the same attributes, and both survive a pickle (a call's error crossing processes)."""

from __future__ import annotations

import inspect
import pickle
from typing import Any, get_args

import pytest

from codeact import Runtime, SandboxConfig, tool
from codeact import errors as host
from codeact.kernel import client as inside
from codeact.kernel import frames

CODES = [*get_args(host.ErrorCode), "some_future_code"]


def test_the_retryable_codes_are_one_set() -> None:
    assert frames.RETRYABLE_CODES is host.RETRYABLE_CODES
    assert host.RETRYABLE_CODES <= set(get_args(host.ErrorCode))


def test_the_constructors_have_one_signature() -> None:
    assert inspect.signature(inside.ToolError.__init__) == inspect.signature(host.ToolError.__init__)


@pytest.mark.parametrize("code", CODES)
@pytest.mark.parametrize("retryable", [None, True, False])
def test_both_classes_agree_for_every_code(code: str, retryable: bool | None) -> None:
    args: tuple[Any, ...] = (code, "the message") if retryable is None else (code, "the message", retryable)
    ours, theirs = inside.ToolError(*args), host.ToolError(*args)
    assert vars(ours) == vars(theirs)
    assert ours.retryable is (code in host.RETRYABLE_CODES if retryable is None else retryable)
    assert (str(ours), ours.args) == (str(theirs), theirs.args)


def test_the_hosts_class_is_the_sandboxs_and_a_codeact_error() -> None:
    error = host.ToolError("timeout", "late")
    assert isinstance(error, inside.ToolError) and isinstance(error, host.CodeActError)


@pytest.mark.parametrize("cls", [inside.ToolError, host.ToolError])
def test_a_tool_error_survives_a_pickle(cls: type[inside.ToolError]) -> None:
    error = cls("rate_limited", "slow down", False, retry_after=1.5, data={"status": 429})
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is cls
    assert vars(again) == vars(error) and again.args == error.args and str(again) == str(error)


def test_both_classes_carry_retry_after_and_data() -> None:
    kwargs: dict[str, Any] = {"retry_after": 1.5, "data": {"status": 429}}
    ours = inside.ToolError("rate_limited", "slow down", **kwargs)
    theirs = host.ToolError("rate_limited", "slow down", **kwargs)
    assert vars(ours) == vars(theirs) == {"code": "rate_limited", "message": "slow down", "retryable": True,
                                          "retry_after": 1.5, "data": {"status": 429}}


@pytest.mark.parametrize("code", CODES)
def test_a_result_frame_without_retryable_derives_it_from_the_code(code: str) -> None:
    with pytest.raises(inside.ToolError) as caught:
        inside._unpack({"ok": False, "error": {"code": code, "message": "m"}})
    assert caught.value.retryable is (code in host.RETRYABLE_CODES)


def test_a_result_frame_says_retryable_and_retry_after() -> None:
    with pytest.raises(inside.ToolError) as caught:
        inside._unpack({"ok": False, "error": {"code": "timeout", "message": "m", "retryable": False,
                                               "retry_after": 2, "data": [1]}})
    assert vars(caught.value) == {"code": "timeout", "message": "m", "retryable": False, "retry_after": 2.0,
                                  "data": [1]}


def test_the_code_in_the_sandbox_gets_the_same_defaults(runtime: Runtime) -> None:
    with runtime.session() as s:
        result = s.run("e = ToolError('timeout', 'x', retry_after=3)\n"
                       "(e.retryable, e.retry_after, e.data, ToolError('not_found', 'y').retryable)")
    assert result.termination == "completed", result
    assert result.value == [True, 3, None, False]  # a tuple comes back as a JSON list


@tool
def throttled(kind: str) -> None:
    """Fails with a hint, as an upstream that asks to wait does.

    Args:
        kind: which failure.
    """
    if kind == "hint":
        raise host.ToolError("rate_limited", "slow down", retry_after=2.5, data={"status": 429, "left": [0]})
    raise host.ToolError("upstream_error", "odd", retry_after=float("nan"), data={1, 2})


def test_retry_after_and_data_reach_the_code_through_a_real_host_tool(backend: str) -> None:
    config = SandboxConfig(backend=backend, policy="none")  # type: ignore[arg-type]
    code = ("out = []\nfor kind in ('hint', 'odd'):\n    try:\n        throttled(kind)\n"
            "    except ToolError as e:\n        out.append([e.code, e.retryable, e.retry_after, e.data])\nout")
    with Runtime([throttled], config) as rt, rt.session() as s:
        result = s.run(code)
    assert result.ok, result
    # an unusable hint is left out; data that is not JSON is kept as JSON (a set becomes a list)
    assert result.value == [["rate_limited", True, 2.5, {"status": 429, "left": [0]}],
                            ["upstream_error", True, None, [1, 2]]]
    first = result.calls[0].error
    assert first is not None and (first.retry_after, first.data) == (2.5, {"status": 429, "left": [0]})
    assert "retry_after" not in result.calls[1].error.model_dump()  # type: ignore[union-attr]
