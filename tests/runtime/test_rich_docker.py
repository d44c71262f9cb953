"""Rich outputs on Docker, in an image built with ``--pip matplotlib pandas pillow``: a figure
left open, a DataFrame as the cell's value and a ``display()``ed PIL image come back as bundles;
numpy values as numbers; a cell that uses none of them loads none of them."""

from __future__ import annotations

import base64
from pathlib import Path

from codeact import Runtime, SandboxConfig
from codeact.results import render_observation
from tests.conftest import Counter, make_tools

RICH_CODE = """
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from PIL import Image
plt.plot([1, 3, 2])
plt.title("rising")
plt.show()
display(Image.new("RGB", (30, 20), "red"))
frame = pd.DataFrame({"city": ["Paris", "Oslo"], "temp": [21.5, 12.0]})
print(np.int64(10) + 1)
frame
"""


def _config(image: str) -> SandboxConfig:
    return SandboxConfig(backend="docker", image=image, timeout_s=60, memory_mb=1024)


def _png_size(data: str) -> tuple[int, int]:
    head = base64.b64decode(data[:32])
    assert head.startswith(b"\x89PNG\r\n\x1a\n")
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def test_figure_dataframe_and_pil_image_come_back_as_bundles(rich_image: str) -> None:
    with Runtime(make_tools(Counter()), _config(rich_image)) as rt, rt.session() as session:
        result = session.run(RICH_CODE)
        assert result.ok, result.error
        assert result.stdout == "11\n" and result.stderr == ""  # plt.show() under Agg: no warning
        image, table, figure = result.outputs  # display() first, then the value, then the open figure
        assert _png_size(image["image/png"]) == (30, 20)
        assert "<table" in table["text/html"] and "Oslo" in table["text/html"] and "12.0" in table["text/plain"]
        width, height = _png_size(figure["image/png"])
        assert width > 100 and height > 100
        assert "Oslo" in str(result.value)  # the value's repr stays, bounded
        observation = render_observation(result)
        assert "2 images produced" in observation and "image/png 30×20" in observation and "Paris" in observation

        again = session.run("import numpy as np\nimport matplotlib.pyplot as plt\n"
                            "(np.float32(0.5), np.arange(3), len(plt.get_fignums()))")
        assert again.value == [0.5, [0, 1, 2], 0]  # numbers, a list; the figure was closed after its cell
        assert again.outputs == []


def test_a_plain_cell_imports_none_of_them(rich_image: str) -> None:
    with Runtime(make_tools(Counter()), _config(rich_image)) as rt, rt.session() as session:
        result = session.run("import sys\nx = {1, 2}\ndisplay(x)\n"
                             "sorted(m for m in ('matplotlib', 'PIL', 'pandas', 'numpy') if m in sys.modules)")
        assert result.value == [] and result.outputs == [{"text/plain": "{1, 2}"}]


def test_the_rich_outputs_example_writes_its_chart_and_table(rich_image: str, tmp_path: Path) -> None:
    from examples.rich_outputs import run

    written = run(rich_image, tmp_path)
    assert [p.name for p in written] == ["table-1.html", "chart-2.png"]
    assert "<table" in written[0].read_text() and "Apr" in written[0].read_text()
    assert written[1].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
