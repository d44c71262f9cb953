"""Rich outputs: ``display(obj)``, ``_repr_*_`` bundles, their cap, and cell values as JSON."""

from __future__ import annotations

import textwrap

from codeact import Runtime, SandboxConfig
from codeact.results import render_observation
from tests.conftest import Counter, make_tools


def _run(code: str, **config: object) -> object:
    cfg = SandboxConfig(backend="local", timeout_s=10, grace_s=1, policy="none", **config)  # type: ignore[arg-type]
    with Runtime(make_tools(Counter()), cfg) as rt, rt.session() as session:
        return session.run(textwrap.dedent(code))


_REPRS = """
    import base64
    class Pic:
        def _repr_png_(self): return b"\\x89PNG fake"
    class Table:
        def _repr_html_(self): return "<table><tr><td>1</td></tr></table>"
        def _repr_markdown_(self): return "| a |"
    display(Pic(), Table())
    print("after")
"""


def test_display_gives_mime_bundles_and_the_observation_says_an_image() -> None:
    result = _run(_REPRS)
    assert result.ok, result.error  # type: ignore[attr-defined]
    outputs = result.outputs  # type: ignore[attr-defined]
    assert [sorted(b) for b in outputs] == [["image/png", "text/plain"], ["text/html", "text/markdown", "text/plain"]]
    assert outputs[0]["image/png"] == "iVBORyBmYWtl"  # base64 of the PNG bytes
    assert outputs[1]["text/html"].startswith("<table>")
    observation = render_observation(result)  # type: ignore[arg-type]
    assert "1 image produced" in observation and "iVBOR" not in observation


def test_output_cap_replaces_a_large_bundle_entry() -> None:
    result = _run("class Big:\n    def _repr_html_(self): return 'x' * 5000\ndisplay(Big())", output_cap=1000)
    bundle = result.outputs[0]  # type: ignore[attr-defined]
    assert "text/html" not in bundle
    assert "over the output cap of 1000" in bundle["text/plain"]


def test_values_become_json_not_reprs() -> None:
    code = """
        import datetime, decimal
        ({1, 3, 2}, (1, 2), datetime.date(2024, 5, 1), decimal.Decimal("1.5"), decimal.Decimal("0.1"))
    """
    result = _run(code)
    assert result.value == [[1, 2, 3], [1, 2], "2024-05-01", 1.5, "0.1"]  # type: ignore[attr-defined]


def test_matplotlib_figures_and_pil_images_are_captured_and_numpy_values_are_numbers() -> None:
    import pytest

    pytest.importorskip("matplotlib")
    pytest.importorskip("PIL")
    pytest.importorskip("numpy")
    code = """
        import matplotlib.pyplot as plt, numpy as np
        from PIL import Image
        plt.plot([1, 2, 3])
        display(Image.new("RGB", (4, 4), "red"))
        np.int64(10), np.arange(3)
    """
    result = _run(code)
    assert result.ok, result.error  # type: ignore[attr-defined]
    assert result.value == [10, [0, 1, 2]]  # type: ignore[attr-defined]
    pngs = [b["image/png"] for b in result.outputs]  # type: ignore[attr-defined]
    assert len(pngs) == 2 and all(p.startswith("iVBOR") for p in pngs)  # the PIL image, then the open figure
