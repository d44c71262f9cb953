"""Rich outputs in the viewer, end to end: a code agent on Docker (image built with ``--pip
matplotlib pandas pillow``) makes a matplotlib figure, a DataFrame and a ``display()``ed PIL
image; the trace holds the bundles; headless Chromium shows the page, the images loaded (their
pixels in the screenshot), the HTML table in a sandboxed iframe whose script never runs."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from codeact import Runtime, SandboxConfig
from codeact.agent import CodeActAgent, ScriptedModel
from codeact.viewer import write_view
from tests.browser import Chromium, find_chromium
from tests.conftest import Counter, make_tools
from tests.runtime.test_rich_docker import RICH_CODE

_HOSTILE = '''
class Table:
    def _repr_html_(self):
        return "<table><tr><td>42</td></tr></table><script>parent.__pwned = 1</script>"
display(Table())
'''


@pytest.fixture(scope="module")
def browser() -> Iterator[Chromium]:
    binary = find_chromium()
    if binary is None:
        pytest.skip("no chromium on PATH (scripts/ensure-chromium.sh installs it)")
    with Chromium(binary, width=1280, height=900) as chromium:
        yield chromium


def test_rich_outputs_render_in_the_viewer(browser: Chromium, rich_image: str, tmp_path: Path) -> None:
    PIL_Image = pytest.importorskip("PIL.Image")
    trace = tmp_path / "rich.jsonl"
    script = [f"```python\n{_HOSTILE + RICH_CODE}\n```", "```python\nfinal_answer(1)\n```"]
    config = SandboxConfig(backend="docker", image=rich_image, timeout_s=60, memory_mb=1024)
    with Runtime(make_tools(Counter()), config) as rt:
        episode = CodeActAgent(ScriptedModel(script), rt.toolset, runtime=rt, trace_path=trace).run("plot")
    assert episode.status == "answered"
    executions = [e for e in map(json.loads, trace.read_text().splitlines()) if e["event"] == "execution"]
    kinds = [sorted(b) for b in executions[0]["result"]["outputs"]]
    assert kinds == [["text/html", "text/plain"], ["image/png", "text/plain"], ["text/html", "text/plain"],
                     ["image/png", "text/plain"]]  # hostile table, PIL image, DataFrame value, open figure

    browser.open(write_view(trace, tmp_path / "rich.html"))
    facts = browser.evaluate("""(() => ({
      images: [...document.querySelectorAll("img.output")].map(i => [i.complete, i.naturalWidth, i.naturalHeight]),
      frames: [...document.querySelectorAll("iframe.output")].map(f => [f.getAttribute("sandbox"),
                                                                        f.getAttribute("srcdoc")]),
      observation: [...document.querySelectorAll("pre.observation")].map(p => p.textContent).join(" "),
      pwned: window.__pwned === 1,
    }))()""")
    assert facts["images"][0] == [True, 30, 20]  # the PIL image, decoded by the browser
    assert facts["images"][1][0] and facts["images"][1][1] > 100  # the figure
    assert [f[0] for f in facts["frames"]] == ["", ""] and not facts["pwned"]
    assert "Oslo" in facts["frames"][1][1] and "<table" in facts["frames"][1][1]
    assert "2 images produced" in facts["observation"]

    _an_eval_run_shows_them_too(trace, tmp_path / "run")

    browser.evaluate('document.querySelector("img.output").scrollIntoView()')
    shot = browser.screenshot(tmp_path / "rich.png")
    pixels = PIL_Image.open(io.BytesIO(shot.read_bytes())).convert("RGB")
    red = {color: n for n, color in pixels.getcolors(maxcolors=1 << 24)}.get((255, 0, 0), 0)
    assert red >= 30 * 20  # the displayed image is on screen, all of its pixels


def _an_eval_run_shows_them_too(trace: Path, run: Path) -> None:
    """The page of an eval run directory (``codeact view RUN``) renders the episode's outputs alike."""
    from codeact.evals.results_store import EpisodeResult, ResultsStore, RunMeta

    (run / "traces").mkdir(parents=True)
    (run / "traces" / trace.name).write_bytes(trace.read_bytes())
    RunMeta(suite="rich", suite_ref="rich", model="scripted", modes=["code"], repeats=1).write(run)
    with ResultsStore(run / "results.jsonl") as store:
        store.append(EpisodeResult(task_id="plot", mode="code", repeat=0, correct=True, status="answered",
                                   stop_reason="answer", trace_path=str(trace)))
    page = write_view(run).read_text()
    assert page.count('<img class="output"') == 2 and page.count('<iframe class="output" sandbox=""') == 2
