"""What the README and the docs it links claim, checked against the code (issue 28): examples that do
what they say, facts where they now live (the README is the newcomer's page; the detail is in docs/)."""

from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path
from typing import Any

import pytest

from codeact import HttpAuth, Runtime, Toolset, render_observation
from codeact.evals.answers import to_value
from codeact.evals.suites import data, multitool
from codeact.testing import FakeModelServer
from codeact.tool_stubs.catalog import ToolCatalog
from tests._configs import LOCAL
from tests.servers.github_tasks import github_document

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
TOOLS = (ROOT / "docs" / "tools.md").read_text(encoding="utf-8")
EXPERIMENTS = (ROOT / "docs" / "experiments.md").read_text(encoding="utf-8")
CHECK = (ROOT / "docs" / "check.md").read_text(encoding="utf-8")
BENCHMARKS = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")

#: The README is what a newcomer reads first: what it is, set-up, a first example, the CLI, links.
README_MAX_LINES = 250
#: Pages linked before they are written, each with who writes it; a link to anything else must resolve.
PENDING: dict[str, str] = {}


def test_the_readme_stays_a_newcomer_s_page() -> None:
    assert README.count("\n") <= README_MAX_LINES
    for heading in ("## Set-up", "## A first example", "## The CLI", "## On a cluster",
                    "## Data-flow policies (labels)"):
        assert f"\n{heading}" in README, heading
    for page in ("backends", "sessions", "tools", "agents", "experiments", "benchmarks", "check", "trust-boundary",
                 "tracing", "viewer", "cluster", "egress", "architecture", "flow"):
        assert f"](docs/{page}.md)" in README, page


def test_every_relative_link_in_the_readme_and_docs_resolves() -> None:
    broken = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path = (page.parent / target.split("#")[0]).resolve()
            if not path.exists() and path.relative_to(ROOT).as_posix() not in PENDING:
                broken.append(f"{page.relative_to(ROOT)} → {target}")
    assert broken == []


def test_the_bench_table_lives_where_make_bench_writes_it() -> None:
    from benchmarks import _report, run

    assert run.parse([]).table == ROOT / "docs" / "benchmarks.md"
    assert BENCHMARKS.count(_report.START) == 1 and BENCHMARKS.count(_report.END) == 1
    table = BENCHMARKS.split(_report.START)[1].split(_report.END)[0]
    assert "| measure | codeact median |" in table and "Targets met:" in table
    assert _report.START not in README and _report.END not in README  # one table, not two to keep in step


def test_the_first_example_runs_as_written(docker_ready: str) -> None:
    match = re.search(r"## A first example\n\n```python\n(.*?)```", README, re.S)
    assert match, "the README's first example"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(match.group(1), {"__name__": "readme_example"})
    stubs, _, result = out.getvalue().rstrip("\n").rpartition("\n")
    assert "def get_weather(city: str) -> dict[str, Any]:" in stubs  # the prompt view
    assert result == "True 12.0 get_weather {'city': 'Pittsburgh'}"


def test_the_search_example_finds_the_tool_it_then_describes() -> None:
    match = re.search(r'search_tools\("([^"]+)", (\d+)\).*\n.*describe_tool\("(\w+)"\)', TOOLS)
    assert match, "docs/tools.md's search_tools example"
    query, limit, described = match.group(1), int(match.group(2)), match.group(3)
    path = github_document()
    if not path.is_file():
        if os.environ.get("CI") == "true":
            pytest.fail(f"GitHub's OpenAPI description is not cached at {path}: scripts/fetch-github-openapi.sh")
        pytest.skip(f"GitHub's OpenAPI description is not cached at {path} (scripts/fetch-github-openapi.sh)")
    github = Toolset.from_openapi(path, base_url="http://127.0.0.1:9")  # never contacted
    hits = [h["python_name"] for h in ToolCatalog(github.specs, github.groups).search(query, limit)]
    assert described in hits, (query, hits)


@pytest.mark.parametrize("page", ["README.md", "docs/tools.md"])
def test_http_auth_from_an_environment_variable_as_written(page: str, monkeypatch: pytest.MonkeyPatch) -> None:
    match = re.search(r'`HttpAuth\.bearer\("(\w+)"\)`', (ROOT / page).read_text(encoding="utf-8"))
    assert match, f"{page} shows how auth comes from an environment variable"
    monkeypatch.setenv(match.group(1), "s3cret")
    headers, query, secrets = HttpAuth.bearer(match.group(1)).resolve()
    assert headers == {"Authorization": "Bearer s3cret"} and query == {} and secrets == ["s3cret"]


def test_the_fake_server_is_documented_as_it_runs() -> None:
    assert "python -m codeact.testing.fake_server --script FILE.json" in EXPERIMENTS
    assert "`codeact.testing.FakeModelServer(script)`" in EXPERIMENTS
    assert "`codeact.testing.FakeModelServer`" in README
    with FakeModelServer(["hi"]) as server:
        assert server.openai_base_url.startswith("http://127.0.0.1:")
        assert server.anthropic_base_url.startswith("http://127.0.0.1:")


def test_the_docs_name_the_deliberate_slips_of_every_suite() -> None:
    assert "the other suites' references are correct" not in EXPERIMENTS
    tasks = {t.id: t for t in [*multitool.SUITE.tasks, *data.SUITE.tasks]}
    for task_id in ("m3.trade", "m3.travel", "data.monthly_completed"):
        assert f"`{task_id}`" in EXPERIMENTS
    for task_id in ("m3.travel", "data.monthly_completed"):  # the JSON reference's answer is not the expected one
        task = tasks[task_id]
        assert not task.grade(to_value(task.scripts["json"][-1])), task_id
    assert "get_tariff" not in tasks["m3.trade"].scripts["code"][0]["text"]  # the code forgets the tariff


def test_the_check_example_prints_what_the_page_shows(monkeypatch: pytest.MonkeyPatch) -> None:
    match = re.search(r"```python\n(.*?)```\n```\n(.*?)```", CHECK, re.S)
    assert match, "docs/check.md's example and its output"
    code, shown = match.group(1), match.group(2)
    opened: list[Runtime] = []

    def local_runtime(*args: Any, **kwargs: Any) -> Runtime:  # the example's default backend, made local
        runtime = Runtime(*args, sandbox=LOCAL, **kwargs)
        opened.append(runtime)
        return runtime

    monkeypatch.chdir(ROOT)  # the example names examples/weather_tools.py
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(code, {"Runtime": local_runtime, "Toolset": Toolset, "render_observation": render_observation})
    finally:
        for runtime in opened:
            runtime.close()
    assert out.getvalue() == shown
