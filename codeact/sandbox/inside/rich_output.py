"""Rich outputs in the sandbox: ``display(obj)``, open matplotlib figures, and cell values as JSON.
Standard library only (it ships flat beside the kernel); matplotlib, PIL, pandas and numpy are
looked up in ``sys.modules`` and never imported here, so a cell that did not use them pays nothing.

A bundle is ``{mime: data}`` like Jupyter's ``display_data``: text as text, PNG as base64.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import io
import json
import os
import sys
from typing import Any

__all__ = ["Outputs", "json_value"]

# The inline backend's choice: figures render off-screen, none opens a window.
os.environ.setdefault("MPLBACKEND", "Agg")

_REPRS = (("image/png", "_repr_png_"), ("image/svg+xml", "_repr_svg_"), ("text/html", "_repr_html_"),
          ("text/markdown", "_repr_markdown_"), ("application/json", "_repr_json_"))
#: The most bundles one cell reports (more are dropped, and a note says so).
MAX_BUNDLES = 50


def json_value(value: Any) -> Any:
    """A cell value as JSON where it has an obvious JSON form: numpy scalars become numbers,
    arrays lists; sets, frozensets and tuples lists; dates ISO strings; a Decimal a number when
    it is finite and exact as a float, else its string. Anything else is returned unchanged."""
    if isinstance(value, (set, frozenset)):
        items = [json_value(v) for v in value]
        try:
            return sorted(items)
        except TypeError:
            return items
    if isinstance(value, tuple):
        return [json_value(v) for v in value]
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value) if value.is_finite() and decimal.Decimal(float(value)) == value else str(value)
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        if isinstance(value, numpy.generic):
            return json_value(value.item())
        if isinstance(value, numpy.ndarray) and value.size <= 100_000:
            return value.tolist()
    return value


def _bundle(obj: Any) -> dict[str, str]:
    """``obj``'s MIME bundle; ``text/plain`` always."""
    bundle: dict[str, str] = {}
    pil = sys.modules.get("PIL.Image")
    if pil is not None and isinstance(obj, pil.Image):
        buf = io.BytesIO()
        obj.save(buf, format="PNG")
        bundle["image/png"] = base64.b64encode(buf.getvalue()).decode()
    pyplot = sys.modules.get("matplotlib.figure")
    if pyplot is not None and isinstance(obj, pyplot.Figure):
        buf = io.BytesIO()
        obj.savefig(buf, format="png", bbox_inches="tight")
        bundle["image/png"] = base64.b64encode(buf.getvalue()).decode()
    for mime, name in _REPRS:
        method = getattr(type(obj), name, None)
        if mime in bundle or method is None:
            continue
        data = method(obj)
        if data is None:
            continue
        if mime == "image/png":
            data = base64.b64encode(data).decode() if isinstance(data, bytes) else str(data)
        elif mime == "application/json":
            data = json.dumps(data, default=repr)
        bundle[mime] = data if isinstance(data, str) else str(data)
    bundle["text/plain"] = repr(obj)[:10_000]
    return bundle


class Outputs:
    """The bundles of the running cell: ``display`` adds one; ``collect`` adds the figures left
    open (and closes them, like Jupyter's inline backend) and hands over the list."""

    def __init__(self) -> None:
        self.bundles: list[dict[str, str]] = []
        self.dropped = 0

    def display(self, *objs: Any) -> None:
        """Show each object as a rich output of this cell (an image, a table, HTML ...)."""
        for obj in objs:
            self._add(_bundle(obj))

    def _add(self, bundle: dict[str, str]) -> None:
        if len(self.bundles) >= MAX_BUNDLES:
            self.dropped += 1
        else:
            self.bundles.append(bundle)

    def collect(self, cap: int) -> list[dict[str, str]]:
        """This cell's bundles, each entry over ``cap`` characters replaced by a note."""
        pyplot = sys.modules.get("matplotlib.pyplot")
        if pyplot is not None:
            try:
                for number in pyplot.get_fignums():
                    self._add(_bundle(pyplot.figure(number)))
                pyplot.close("all")
            except Exception as exc:
                self._add({"text/plain": f"<the open figures could not be rendered: {type(exc).__name__}>"})
        bundles, self.bundles = self.bundles, []
        if self.dropped:
            bundles.append({"text/plain": f"<{self.dropped} more outputs dropped (at most {MAX_BUNDLES} a cell)>"})
            self.dropped = 0
        for bundle in bundles:
            for mime, data in list(bundle.items()):
                if len(data) > cap:
                    del bundle[mime]
                    bundle["text/plain"] = f"<{mime} of {len(data)} characters over the output cap of {cap}>"
        return bundles
