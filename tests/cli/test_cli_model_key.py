"""A missing API key is said at once, naming the variable (issue 28, item 6): not four retries and
a ConnectError. Requests that would go out are sent to a closed loopback port (``HTTPS_PROXY``),
so that the test never reaches a public address even when the check is missing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from codeact.agent.models import make_model
from codeact.errors import ModelError

CODEACT = str(Path(sys.executable).with_name("codeact"))


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OPENAI_", "ANTHROPIC_")) and "proxy" not in k.lower()}
    env["HTTPS_PROXY"] = env["HTTP_PROXY"] = env["ALL_PROXY"] = "http://127.0.0.1:9"  # discard port: refused
    env["COLUMNS"] = "160"
    return env


@pytest.mark.parametrize(("provider", "variable"), [("openai:gpt-4o-mini", "OPENAI_API_KEY"),
                                                    ("anthropic:claude-sonnet-4-5", "ANTHROPIC_API_KEY")])
def test_agent_without_key_fails_at_once_naming_the_variable(provider: str, variable: str) -> None:
    run = subprocess.run([CODEACT, "agent", "what is 2 + 2?", "--model", provider, "--backend", "local",
                          "--max-wall", "20"], capture_output=True, text=True, timeout=120, env=_env())
    assert run.returncode == 2, (run.stdout, run.stderr)
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and variable in lines[0], run.stderr
    assert "ConnectError" not in run.stderr + run.stdout


@pytest.mark.parametrize("provider", ["openai:gpt-4o-mini", "anthropic:claude-sonnet-4-5"])
def test_client_without_key_for_the_vendor_api_is_refused(provider: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ModelError, match="_API_KEY is not set"):
        make_model(provider)
    # a server of one's own needs no key; an explicit key needs no variable
    assert make_model(provider, base_url="http://127.0.0.1:9/v1") is not None
    assert make_model(provider, api_key="k") is not None
