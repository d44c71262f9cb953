"""The code agent under ``Runtime(check="block")``: a rejected action is fed back with its
diagnostics, costs a turn but no call, and is counted in the episode's ``check`` error layer."""

from __future__ import annotations

import pytest

from codeact import Runtime, SandboxConfig
from codeact.agent import CodeActAgent, ScriptedModel
from tests.conftest import Counter, make_tools

pytestmark = pytest.mark.docker
SLIP = "```python\nr = get_weather(citty='Beijing')\nprint(r)\n```"
FIX = "```python\nfinal_answer(get_weather(city='Beijing')['unit'])\n```"


@pytest.mark.parametrize(("check", "layer"), [("block", "check"), ("off", "runtime")])
def test_a_rejected_action_costs_a_turn_and_no_call(docker_image: str, check: str, layer: str) -> None:
    counter = Counter()
    model = ScriptedModel([SLIP, FIX])
    with Runtime(make_tools(counter), SandboxConfig(timeout_s=20), check=check) as runtime:  # type: ignore[arg-type]
        episode = CodeActAgent(model, runtime.toolset, runtime=runtime).run("Which unit does Beijing report?")
    assert episode.answer == "fahrenheit" and episode.turns == 2
    assert episode.errors[layer] == 1 and sum(episode.errors.values()) == 1
    feedback = model.requests[1].messages[-1].text
    if check == "block":
        assert "rejected before running (2 errors; nothing ran, no tool was called)" in feedback
        assert "line 1, col 17: error [unknown-argument] get_weather() got an unexpected keyword argument " \
               "'citty'; did you mean 'city'?" in feedback
    else:
        assert "TypeError" in feedback and "rejected" not in feedback
    assert counter.count("get_weather") == 1
