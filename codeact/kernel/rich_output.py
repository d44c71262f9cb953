"""Rich outputs in the sandbox: ``display(obj)``, open matplotlib figures, and cell values as JSON.
Standard library only (it ships flat beside the kernel); matplotlib, PIL, pandas and numpy are
looked up in ``sys.modules`` and never imported here, so a cell that did not use them pays nothing.

A bundle is ``{mime: data}`` like Jupyter's ``display_data``: text as text, PNG/JPEG as base64,
JSON as its text. Caps are the host's (``SandboxConfig.display_*``), applied here and again there.
"""

from __future__ import annotations

import json
import os
import sys
import warnings

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs every idle kernel memory; annotations are never evaluated
    from typing import Any

__all__ = ["Outputs", "json_value"]

# The inline backend's choice: figures render off-screen, none opens a window. ``plt.show()`` then
# has nothing to do (the figures left open are captured at the end of the cell): no warning for it.
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("MPLCONFIGDIR", os.path.join(os.environ.get("TMPDIR") or "/tmp", "codeact-matplotlib"))
warnings.filterwarnings("ignore", message=r".*(non-interactive|non-GUI backend).*", category=UserWarning)

#: ``_repr_*_`` methods, in the order Jupyter prefers them.
_REPRS = (("image/png", "_repr_png_"), ("image/jpeg", "_repr_jpeg_"), ("image/svg+xml", "_repr_svg_"),
          ("text/html", "_repr_html_"), ("text/markdown", "_repr_markdown_"), ("application/json", "_repr_json_"))
_BINARY = frozenset({"image/png", "image/jpeg"})
#: Values that are never rich: the common case costs one ``type()`` lookup.
_PLAIN = frozenset({int, float, str, bool, list, dict, tuple, set, frozenset, bytes, type(None)})
_MAX_PLAIN = 10_000
_MAX_DEPTH = 100
_MAX_ARRAY = 100_000


def json_value(value: Any, depth: int = 0) -> Any:
    """A cell value as JSON where it has an obvious JSON form, at any depth: numpy scalars become
    numbers, arrays lists; sets, frozensets and tuples lists; dates ISO strings; a Decimal a
    number when it is finite and exact as a float, else its string. Anything else is unchanged."""
    if depth > _MAX_DEPTH:
        return value
    kind = type(value)
    if kind is list or kind is tuple:
        return [json_value(v, depth + 1) for v in value]
    if kind is dict:
        return {k: json_value(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        items = [json_value(v, depth + 1) for v in value]
        try:
            return sorted(items)
        except TypeError:
            return items
    # Looked up, never imported (as numpy below): a date or a Decimal exists only once its module does.
    dates = sys.modules.get("datetime") or sys.modules.get("_datetime")
    if dates is not None and isinstance(value, (dates.date, dates.time)):
        return value.isoformat()
    decimals = sys.modules.get("decimal") or sys.modules.get("_decimal")
    if decimals is not None and isinstance(value, decimals.Decimal):
        exact = value.is_finite() and decimals.Decimal(float(value)) == value
        return float(value) if exact else str(value)
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        if isinstance(value, numpy.generic):
            return json_value(value.item(), depth + 1)
        if isinstance(value, numpy.ndarray) and value.size <= _MAX_ARRAY:
            return json_value(value.tolist(), depth + 1)
    return value


def _png(save: Any) -> str:
    import base64
    import io

    buf = io.BytesIO()
    save(buf)
    return base64.b64encode(buf.getvalue()).decode()


def _known(obj: Any) -> dict[str, str]:
    """The bundle of a figure, a PIL image, a DataFrame or a Series (only if their modules are loaded)."""
    figure = sys.modules.get("matplotlib.figure")
    if figure is not None and isinstance(obj, figure.Figure):
        return {"image/png": _png(lambda buf: obj.savefig(buf, format="png", bbox_inches="tight"))}
    pil = sys.modules.get("PIL.Image")
    if pil is not None and isinstance(obj, pil.Image):
        return {"image/png": _png(lambda buf: obj.save(buf, format="PNG"))}
    pandas = sys.modules.get("pandas")
    if pandas is not None and isinstance(obj, (pandas.DataFrame, pandas.Series)):
        frame = obj.to_frame() if isinstance(obj, pandas.Series) else obj
        return {"text/html": frame.to_html(max_rows=60, max_cols=20),
                "text/plain": obj.to_string(max_rows=60)}
    return {}


def _reprs(obj: Any, bundle: dict[str, str]) -> None:
    """Add what ``obj``'s ``_repr_*_`` methods give (a ``(data, metadata)`` pair counts as its data)."""
    for mime, name in _REPRS:
        method = getattr(type(obj), name, None)
        if mime in bundle or not callable(method):
            continue
        data = method(obj)
        if isinstance(data, tuple) and len(data) == 2:
            data = data[0]
        if data is None:
            continue
        if mime in _BINARY:
            import base64

            data = base64.b64encode(data).decode() if isinstance(data, bytes) else str(data)
        elif mime == "application/json":
            data = json.dumps(json_value(data), default=repr)
        bundle[mime] = data if isinstance(data, str) else str(data)


def bundle_of(obj: Any) -> dict[str, str]:
    """``obj``'s MIME bundle, ``text/plain`` always; what fails to render says so in its place."""
    try:
        bundle = _known(obj)
        if not bundle:  # a known kind has its one form (PIL's own _repr_jpeg_ would double the data)
            _reprs(obj, bundle)
    except Exception as exc:
        bundle = {"text/plain": f"<{type(obj).__name__} could not be displayed: {type(exc).__name__}: {exc}"[:500]
                  + ">"}
    if "text/plain" not in bundle:
        try:
            bundle["text/plain"] = repr(obj)[:_MAX_PLAIN]
        except Exception as exc:
            bundle["text/plain"] = f"<{type(obj).__name__}: its repr raised {type(exc).__name__}>"
    return bundle


def is_rich(value: Any) -> bool:
    """Whether a cell's value has a rich form (a table, an image ...): shown like ``display`` does."""
    if type(value) in _PLAIN:
        return False
    if any(callable(getattr(type(value), name, None)) for _, name in _REPRS):
        return True
    for module, names in (("matplotlib.figure", ("Figure",)), ("PIL.Image", ("Image",)),
                          ("pandas", ("DataFrame", "Series"))):
        loaded = sys.modules.get(module)
        if loaded is not None and isinstance(value, tuple(getattr(loaded, n) for n in names)):
            return True
    return False


class Outputs:
    """The bundles of the running cell: ``display`` adds one; ``collect`` adds the figures left
    open (and closes them, like Jupyter's inline backend) and hands over the list, capped."""

    def __init__(self) -> None:
        self.bundles: list[dict[str, str]] = []
        self.shown: set[int] = set()  # ids of figures displayed this cell (not captured twice)

    def display(self, *objs: Any) -> None:
        """Show each object as a rich output of this cell (an image, a table, HTML ...)."""
        for obj in objs:
            self.shown.add(id(obj))
            self.bundles.append(bundle_of(obj))

    def collect(self, entry_cap: int, total_cap: int, count_cap: int) -> list[dict[str, str]]:
        """This cell's bundles: an entry over ``entry_cap`` characters is replaced by a note; past
        ``count_cap`` bundles or ``total_cap`` characters in all, the rest are dropped with a note."""
        pyplot = sys.modules.get("matplotlib.pyplot")
        if pyplot is None and not self.bundles:
            return []  # the common cell: nothing shown, no matplotlib
        if pyplot is not None:
            try:
                for number in pyplot.get_fignums():
                    figure = pyplot.figure(number)
                    if id(figure) not in self.shown:
                        self.bundles.append(bundle_of(figure))
                pyplot.close("all")
            except Exception as exc:
                self.bundles.append({"text/plain": f"<the open figures could not be rendered: {type(exc).__name__}>"})
        bundles, self.bundles = self.bundles, []
        self.shown.clear()
        return capped(bundles, entry_cap, total_cap, count_cap)


def capped(bundles: list[dict[str, str]], entry_cap: int, total_cap: int, count_cap: int) -> list[dict[str, str]]:
    """``bundles`` within the caps (see :meth:`Outputs.collect`); the note of what went is a last
    ``text/plain`` bundle."""
    kept: list[dict[str, str]] = []
    total, dropped = 0, 0
    for bundle in bundles:
        if len(kept) >= count_cap:
            dropped += 1
            continue
        for mime, data in list(bundle.items()):
            if len(data) > entry_cap:
                del bundle[mime]
                bundle["text/plain"] = f"<{mime} of {len(data)} characters over display_cap={entry_cap}>"
        size = sum(len(d) for d in bundle.values())
        if total + size > total_cap:
            dropped += 1
            continue
        total += size
        kept.append(bundle)
    if dropped:
        kept.append({"text/plain": f"<{dropped} more output(s) dropped: over display_count={count_cap} "
                                   f"or display_limit={total_cap} characters>"})
    return kept
