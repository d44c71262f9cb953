"""Rich outputs in the viewer: a displayed PIL image, an open matplotlib figure and an HTML table
from a real agent run, shown in headless Chromium (the image loaded, the HTML sandboxed)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from codeact import Runtime, SandboxConfig
from codeact.agent import CodeActAgent, ScriptedModel
from codeact.viewer import write_view
from tests.browser import Chromium, find_chromium
from tests.conftest import Counter, make_tools

_CODE = '''
import matplotlib.pyplot as plt
from PIL import Image
class Table:
    def _repr_html_(self):
        return "<table><tr><td>42</td></tr></table><script>parent.__pwned = 1</script>"
plt.plot([1, 3, 2])
display(Image.new("RGB", (20, 10), "red"), Table())
'''


@pytest.fixture(scope="module")
def browser() -> Iterator[Chromium]:
    binary = find_chromium()
    if binary is None:
        pytest.skip("no chromium on PATH (scripts/ensure-chromium.sh installs it)")
    with Chromium(binary, width=1280, height=900) as chromium:
        yield chromium


def test_rich_outputs_render_in_the_viewer(browser: Chromium, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    pytest.importorskip("PIL")
    trace = tmp_path / "rich.jsonl"
    script = [f"```python\n{_CODE}\n```", "```python\nfinal_answer(1)\n```"]
    with Runtime(make_tools(Counter()), SandboxConfig(backend="local", policy="none", timeout_s=30)) as rt:
        CodeActAgent(ScriptedModel(script), rt.toolset, runtime=rt, trace_path=trace).run("plot")
    browser.open(write_view(trace, tmp_path / "rich.html"))
    facts = browser.evaluate("""(() => ({
      loaded: [...document.querySelectorAll("img.output")].map(i => i.complete && i.naturalWidth > 0),
      frames: [...document.querySelectorAll("iframe.output")].map(f => f.getAttribute("sandbox")),
      observation: [...document.querySelectorAll("pre.observation")].map(p => p.textContent).join(" "),
      pwned: window.__pwned === 1,
    }))()""")
    assert facts["loaded"] == [True, True]  # the PIL image, then the figure left open
    assert facts["frames"] == [""] and not facts["pwned"]
    assert "2 images produced" in facts["observation"]
    shot = browser.screenshot(tmp_path / "rich.png", full_page=True)
    assert shot.read_bytes()[:4] == b"\x89PNG"
