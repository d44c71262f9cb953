"""Where every planned episode went, counted exactly: finished, provider errors, harness failures,
not run, the paired comparison set and the warnings; and where token numbers come from."""

from __future__ import annotations

from typing import Any

from codeact.evals._accounting import SCRIPTED_TOKENS, account, token_source
from codeact.evals.results_store import EpisodeResult, RunMeta
from codeact.evals.suite import EpisodeKey


def _r(task: str, mode: str, repeat: int = 0, **more: Any) -> EpisodeResult:
    return EpisodeResult(task_id=task, mode=mode, repeat=repeat, correct=True, status=more.pop("status", "answered"),
                         **more)


def _meta(tasks: list[str], modes: list[str], repeats: int = 1, model: str = "openai:m") -> RunMeta:
    return RunMeta(suite="s", suite_ref="s", model=model, modes=modes, repeats=repeats, tasks=tasks)


def test_every_planned_episode_is_counted_once() -> None:
    results = [_r("a", "code"), _r("a", "json"), _r("b", "code", status="incomplete"), _r("b", "json", retryable=True),
               _r("c", "code", status="error", usage_unknown=2), _r("c", "json")]
    failures = {EpisodeKey("b", "json", 0): "boom", EpisodeKey("d", "json", 0): "boom", EpisodeKey("a", "code", 0): "x"}
    out, compared, warnings = account(results, _meta(["a", "b", "c", "d", "e"], ["code", "json"]), failures,
                                      ["code", "json"])
    code, json_ = out["code"], out["json"]
    assert (code.planned, code.finished, code.in_comparison, code.provider_errors, code.harness_failures) == (5, 3, 2, 0, 0)
    assert (code.incomplete, code.error_episodes, code.not_run, code.usage_unknown_calls) == (1, 1, 2, 2)
    assert code.excluded == ["b|code|0"]
    # b|json is a provider error whose retry failed in the harness: one episode, counted as the error
    assert (json_.planned, json_.finished, json_.in_comparison, json_.provider_errors, json_.harness_failures) == (
        5, 2, 2, 1, 1)
    assert json_.not_run == 1 and json_.excluded == []
    assert sorted(str(r.key) for r in compared) == ["a|code|0", "a|json|0", "c|code|0", "c|json|0"]
    assert warnings == [
        "code: 1 finished episode(s) have no counterpart in the other mode and are left out of the comparison (b|code|0)",
        "code: 2 planned episode(s) not run yet",
        "json: 1 harness failure(s) (see failures.jsonl; re-run to retry)",
        "json: 1 retryable provider error(s) (re-run to retry)",
        "json: 1 planned episode(s) not run yet"]


def test_without_a_plan_the_planned_count_is_what_was_seen() -> None:
    results = [_r("a", "code"), _r("b", "code", retryable=True)]
    out, compared, warnings = account(results, None, {EpisodeKey("c", "code", 0): "x"}, ["code"])
    acc = out["code"]
    assert (acc.planned, acc.finished, acc.provider_errors, acc.harness_failures, acc.not_run) == (3, 1, 1, 1, 0)
    assert [str(r.key) for r in compared] == ["a|code|0"] and acc.in_comparison == 1
    assert len(warnings) == 2
    other_mode = account(results, _meta(["a"], ["json"]), {}, ["code"])[0]["code"]
    assert other_mode.planned == 2  # the plan is for another mode: what was seen
    no_tasks = account(results, _meta([], ["code"]), {}, ["code"])[0]["code"]
    assert no_tasks.planned == 2


def test_repeats_multiply_the_plan_and_single_mode_compares_everything() -> None:
    results = [_r("a", "code", 0), _r("a", "code", 1), _r("a", "other")]
    out, compared, warnings = account(results, _meta(["a", "b"], ["code"], repeats=3), {}, ["code"])
    assert out["code"].planned == 6 and out["code"].not_run == 4 and out["code"].in_comparison == 2
    assert len(compared) == 3 and warnings == ["code: 4 planned episode(s) not run yet"]
    both = account([_r("a", "code"), _r("a", "other")], None, {}, ["code", "json", "other"])
    assert [str(r.key) for r in both[1]] == ["a|other|0"]  # other modes are not paired; code has no json pair
    assert both[0]["code"].excluded == ["a|code|0"] and both[0]["json"].finished == 0


def test_more_than_five_excluded_are_elided() -> None:
    results = [_r(f"t{i}", "code") for i in range(7)]
    _, _, warnings = account(results, None, {}, ["code", "json"])
    assert warnings[0].endswith("(t0|code|0, t1|code|0, t2|code|0, t3|code|0, t4|code|0, …)")
    assert warnings[0].startswith("code: 7 finished")
    _, _, six = account(results[:6], None, {}, ["code", "json"])
    assert six[0].endswith("t4|code|0, …)")
    _, _, five = account(results[:5], None, {}, ["code", "json"])
    assert five[0].endswith("t4|code|0)")


def test_token_source() -> None:
    assert token_source(_meta([], ["code"], model="scripted"), []) == SCRIPTED_TOKENS
    assert token_source(_meta([], ["code"], model="scripted:x"), [_r("a", "code", usage_unknown=3)]) == SCRIPTED_TOKENS
    assert token_source(None, [_r("a", "code")]) == "provider usage"
    assert token_source(_meta([], ["code"]), [_r("a", "code", usage_unknown=2), _r("b", "code", usage_unknown=1)]) == (
        "provider usage (3 model call(s) reported none: tokens of those episodes unknown)")
