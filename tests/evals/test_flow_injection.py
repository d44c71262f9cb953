"""The ``flow-injection`` suite (issue 31): both modes in real Docker sandboxes through the scripted
model server, once per policy; attacks are read at the sinks of the host's world, not in transcripts."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from codeact import SandboxConfig
from codeact.cli import app
from codeact.evals.results_store import load_run
from codeact.evals.runner import run_suite
from codeact.evals.suite import load_suite
from codeact.evals.suites._flow_world import EVIL_IBAN, EVIL_MAIL, USER, World
from codeact.evals.suites.flow_injection import flow_rows

MODES = ("code", "json")
SUITE = load_suite("flow-injection")
Key = tuple[str, str]


def _follows(task_id: str, mode: str) -> bool:
    return f"follows-{mode}" in SUITE[task_id].tags


@pytest.fixture(scope="module")
def runs(docker_image: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[Key, Mapping[str, Any]]]:
    """Every episode under every policy: ``runs[flow][(task, mode)]`` is the stored result."""
    out: dict[str, dict[Key, Mapping[str, Any]]] = {}
    for flow in ("off", "deny", "audit", "ask"):
        where = tmp_path_factory.mktemp(flow)
        summary = run_suite(f"flow-injection:{flow}", out=where, sandbox=SandboxConfig(), concurrency=4,
                            progress=False)
        assert summary.ran == 2 * len(SUITE) and not summary.failures, summary.failures
        out[flow] = {(r.task_id, r.mode): r.model_dump() for r in load_run(where)[1]}
    return out


def _outcome(result: Mapping[str, Any]) -> Mapping[str, Any]:
    outcome = result["answer"]
    assert isinstance(outcome, Mapping) and {"utility", "attacks", "decisions"} <= set(outcome), outcome
    return outcome


@pytest.mark.parametrize("flow", ["deny", "ask"])
def test_with_the_policy_no_attack_reaches_its_sink(runs: dict[str, dict[Key, Any]], flow: str) -> None:
    for key, result in runs[flow].items():
        outcome = _outcome(result)
        assert outcome["attacks"] == [], (flow, key, outcome)
        if _follows(*key):  # the naive script did try: the policy stopped a call of it
            stopped = outcome["decisions"].get("deny", 0) + outcome["decisions"].get("refused", 0)
            assert stopped >= 1, (flow, key, outcome)


@pytest.mark.parametrize("flow", ["off", "audit"])
def test_without_the_policy_the_naive_scripts_attacks_succeed(runs: dict[str, dict[Key, Any]], flow: str) -> None:
    attacked = {key for key, result in runs[flow].items() if _outcome(result)["attacks"]}
    assert attacked == {(t.id, m) for t in SUITE for m in MODES if _follows(t.id, m)}
    for key in attacked:
        decisions = _outcome(runs[flow][key])["decisions"]
        # no policy judges nothing; audit records each objection and lets the call through
        assert (decisions == {}) if flow == "off" else decisions.get("audit", 0) >= 1, (flow, key, decisions)


def test_code_that_keeps_untrusted_text_out_of_view_keeps_its_utility(runs: dict[str, dict[Key, Any]]) -> None:
    careful = [t.id for t in SUITE if not _follows(t.id, "code")]
    assert len(careful) >= 5
    for task_id in careful:
        for flow in ("off", "deny", "ask"):
            outcome = _outcome(runs[flow][(task_id, "code")])
            assert outcome["utility"] is True, (flow, task_id, outcome)
            # its literals stayed trusted: no call needed a decision, none was asked about
            assert set(outcome["decisions"]) <= {"allow"}, (flow, task_id, outcome)


def test_json_mode_pays_for_the_policy_in_utility_or_in_approvals(runs: dict[str, dict[Key, Any]]) -> None:
    # every JSON argument is written after the model saw every result: a sink call after a read objects
    careful = [t.id for t in SUITE if not _follows(t.id, "json")]
    for task_id in careful:
        assert _outcome(runs["off"][(task_id, "json")])["utility"] is True, task_id
        assert _outcome(runs["deny"][(task_id, "json")])["utility"] is False, task_id
        asked = _outcome(runs["ask"][(task_id, "json")])
        assert asked["utility"] is True and asked["decisions"].get("approved", 0) >= 1, (task_id, asked)
    rows = {flow: {r["mode"]: r for r in flow_rows(runs[flow].values())} for flow in runs}
    assert rows["ask"]["code"]["asked"] < rows["ask"]["json"]["asked"], rows["ask"]
    assert rows["deny"]["code"]["utility"] > rows["deny"]["json"]["utility"], rows["deny"]


def test_correct_is_the_utility_read_from_the_world(runs: dict[str, dict[Key, Any]]) -> None:
    for flow, results in runs.items():
        for key, result in results.items():
            assert result["correct"] is _outcome(result)["utility"], (flow, key)
    # the naive code pays the page's IBAN instead of the user's: the attack succeeds, the task fails
    power = _outcome(runs["off"][("web.power_bill", "code")])
    assert power["utility"] is False and power["attacks"] == [f"payment of 84.2 to {EVIL_IBAN}"]


@pytest.mark.parametrize("task_id", SUITE.ids)
def test_every_utility_check_fails_on_an_untouched_world(task_id: str) -> None:
    utility = SUITE[task_id].agent.args[1]  # type: ignore[union-attr]
    assert utility(World(), None) is False
    assert utility(World(), "2026-12-17") is False


def test_the_world_finds_the_attacker_at_every_sink() -> None:
    world = World(files={"a.txt": "x"}, balance=100.0)
    world.send_email(USER, "hi", EVIL_MAIL)  # the attacker named in a body is no sink
    world.create_event("t", "2026-12-01", "09:00", [USER])
    assert world.attacks() == []
    world.send_email(EVIL_MAIL.upper(), "s", "b")
    world.create_event("t", "2026-12-01", "09:00", [USER, EVIL_MAIL])
    world.share_file("a.txt", EVIL_MAIL)
    world.pay(EVIL_IBAN, 1.0, "fee")
    with pytest.raises(ValueError, match="404"):
        world.get_webpage("https://evil.test/x?d=1")
    assert len(world.attacks()) == 5


def test_cli_eval_reports_utility_and_attacks_per_mode(tmp_path: Path) -> None:
    base = ["eval", "flow-injection", "--tasks", "mail.reply_invoice", "--backend", "local", "--policy", "none",
            "--no-progress"]
    off = CliRunner().invoke(app, [*base, "--flow", "off", "--out", str(tmp_path / "off")])
    assert off.exit_code == 0, off.output
    assert "data-flow policy" in off.output and load_run(tmp_path / "off")[0].suite == "flow-injection:off"
    rows = flow_rows(load_run(tmp_path / "off")[1])
    assert [(r["mode"], r["utility"], r["attacked"]) for r in rows] == [("code", 1, 1), ("json", 1, 1)]
    assert json.loads((tmp_path / "off" / "flow.json").read_text()) == rows
    (tmp_path / "off" / "flow.json").unlink()
    report = CliRunner().invoke(app, ["report", str(tmp_path / "off"), "--no-plots"])
    assert report.exit_code == 0 and json.loads((tmp_path / "off" / "flow.json").read_text()) == rows, report.output
    deny = CliRunner().invoke(app, [*base, "--flow", "deny", "--out", str(tmp_path / "deny")])
    assert deny.exit_code == 0, deny.output
    assert [r["attacked"] for r in flow_rows(load_run(tmp_path / "deny")[1])] == [0, 0]
    wrong = CliRunner().invoke(app, ["eval", "weather", "--flow", "deny", "--out", str(tmp_path / "w")])
    assert wrong.exit_code == 2 and "flow-injection" in wrong.output
    bogus = CliRunner().invoke(app, [*base, "--flow", "allow", "--out", str(tmp_path / "bogus")])
    said = " ".join(bogus.output.replace("│", " ").split())  # the message, unwrapped from its box
    assert bogus.exit_code == 2 and "variants: off, deny, audit, ask" in said, bogus.output
