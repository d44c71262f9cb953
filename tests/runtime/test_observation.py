"""render_observation: what the model is shown of a result."""

from __future__ import annotations

from codeact import ExecutionResult, Runtime, render_observation


def test_observation_of_a_partial_failure(runtime: Runtime) -> None:
    with runtime.session() as session:
        result = session.run("print('start')\nfor i in range(1, 6):\n    print(fetch_item(i))\n")
    text = render_observation(result)
    assert "stdout:\nstart\nitem-1\nitem-2" in text
    assert "tool calls (3):" in text
    assert '- fetch_item({"i": 1}) -> ok: "item-1"' in text
    assert '- fetch_item({"i": 3}) -> upstream_error, retryable: "item 3 is unavailable"' in text
    assert "error at line 3: ToolError:" in text


def test_observation_shows_value_and_timeout(runtime: Runtime) -> None:
    with runtime.session() as session:
        value = render_observation(session.run("{'a': 1}"))
        assert value == 'value: {"a": 1}'
        timed_out = render_observation(session.run("import time\ntime.sleep(30)", timeout_s=0.5))
    assert "run ended: timeout: the run passed its time limit of 0.5 s" in timed_out


def test_long_output_is_cut_from_the_middle_and_kept_in_the_result() -> None:
    stdout = "HEAD\n" + "x" * 50_000 + "\nTAIL"
    result = ExecutionResult(ok=True, termination="completed", stdout=stdout)
    text = render_observation(result, max_chars=2000)
    assert len(text) <= 2000
    assert text.startswith("stdout:\nHEAD") and text.endswith("TAIL")
    assert "characters cut from the middle" in text
    assert result.stdout == stdout  # the full output stays in the result


def test_empty_result_says_so() -> None:
    assert render_observation(ExecutionResult(ok=True, termination="completed")) == "(no output)"


def test_state_loss_is_told() -> None:
    result = ExecutionResult(ok=False, termination="killed", state_lost=True, reason="the sandbox process ended")
    text = render_observation(result)
    assert "run ended: killed: the sandbox process ended" in text and "variables from earlier runs are gone" in text


def test_a_result_equals_its_json_round_trip() -> None:
    from codeact.results import ExecutionResult

    result = ExecutionResult(ok=True, termination="completed", stdout="hi")
    assert ExecutionResult.model_validate_json(result.to_json()) == result
    assert result != ExecutionResult(ok=True, termination="completed", stdout="other")
