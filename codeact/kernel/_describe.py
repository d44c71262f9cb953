"""Describing what a cell left: its error (type, message, line, a traceback of the cell's own
frames), its value (JSON, or a bounded repr) and a ``done`` frame cut to fit the host's frame
limit. Everything here handles the code's own objects: bounded in time and size, never raising.
Standard library only.
"""

from __future__ import annotations

import json
import signal

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs every idle kernel memory; annotations are never evaluated
    from typing import Any

try:  # flat in the sandbox image; a package when imported on the host
    from . import lazy_stubs, protocol, rich_output
except ImportError:
    import lazy_stubs  # type: ignore[no-redef]
    import protocol  # type: ignore[no-redef]
    import rich_output  # type: ignore[no-redef]

MAX_MESSAGE = 8000
_MAX_TRACEBACK = 20000
MAX_VALUE = 256 * 1024


class _Timeout(BaseException):
    pass


def safe_text(fn: Any, obj: Any, limit: int) -> str:
    """str()/repr() of a hostile object: bounded in time and size, never raises."""

    def alarm(signum: int, frame: Any) -> None:
        raise _Timeout

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, 1.0)
    try:
        text = fn(obj)
        if not isinstance(text, str):
            text = f"<{fn.__name__}() returned {type(text).__name__}>"
    except _Timeout:
        text = f"<{fn.__name__}() did not return within 1 s>"
    except BaseException as exc:
        text = f"<{fn.__name__}() raised {type(exc).__name__}>"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    if len(text) > limit:
        text = f"{text[:limit]}… [{len(text) - limit} more characters]"
    return text


def encode_value(value: Any) -> Any:
    """JSON if it is JSON (and not huge), else a bounded repr."""
    if value is None:
        return None
    try:
        try:
            if len(json.dumps(value, allow_nan=False)) <= MAX_VALUE:
                return value
        except TypeError:  # not JSON as it is: a set, a numpy number, a date ... has a JSON form
            converted = rich_output.json_value(value)
            if len(json.dumps(converted, allow_nan=False)) <= MAX_VALUE:
                return converted
    except Exception:
        pass
    except BaseException:
        return safe_text(repr, value, MAX_VALUE)
    return safe_text(repr, value, MAX_VALUE)


def fitted(done: dict[str, Any], limit: int) -> dict[str, Any]:
    """A ``done`` frame cut to fit the host's frame limit (``max_frame_bytes`` set low): the output
    first (marked truncated), then the value, the traceback and the final answer, each kept to a
    size that fits whatever its characters encode to (at most 6 bytes each, as ``\\u`` escapes)."""
    done = dict(done)
    share = limit // 36  # characters of each of four fields: two thirds of the limit at worst
    for name in ("stdout", "stderr"):
        text = done.get(name) or ""
        if len(text) > share:
            done[name], done[f"{name}_truncated"] = text[:share], True
    if len(protocol.encode(done)) - 4 <= limit:
        return done
    if "value" in done:
        done["value"] = f"<the value did not fit the channel's frame limit of {limit} bytes>"
    if done.get("final") is not None:
        done["final"] = {"value": f"<the final answer did not fit the channel's frame limit of {limit} bytes>"}
    if done.get("outputs"):
        done["outputs"] = [{"text/plain": f"<the rich outputs did not fit the channel's frame limit of {limit} bytes>"}]
    if done.get("names"):
        done["names"] = None  # the host then treats the namespace as unknown
    if done.get("error"):
        error = dict(done["error"])
        error["message"] = str(error.get("message", ""))[:share]
        error["traceback"] = str(error.get("traceback", ""))[:share]
        done["error"] = error
    return done


def describe(exc: BaseException, filename: str, tool_names: list[str]) -> dict[str, Any]:
    """The ``done`` frame's ``error`` for ``exc`` raised in the cell ``filename``."""
    name = type(exc).__name__[:200]
    import traceback  # only once a cell failed: an idle kernel need not hold it

    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.startswith("<cell-")]
    here = [f for f in frames if f.filename == filename]
    lineno = here[-1].lineno if here else None
    if isinstance(exc, SyntaxError) and exc.filename == filename:
        lineno = exc.lineno
    lineno = getattr(exc, "lineno", None) if lineno is None and name == "PolicyViolation" else lineno
    if isinstance(exc, SystemExit):
        message = f"the code called exit({safe_text(repr, exc.code, 200)})"
    elif isinstance(exc, KeyboardInterrupt):
        message = "the run was interrupted"
    else:
        message = safe_text(str, exc, MAX_MESSAGE) + lazy_stubs.name_hint(exc, tool_names)
    lines = ["Traceback (most recent call last):\n", *traceback.format_list(frames)]
    if isinstance(exc, SyntaxError) and exc.lineno is not None:
        text = (exc.text or "").rstrip("\n")
        lines.append(f'  File "{filename}", line {exc.lineno}\n    {text.strip()}\n')
    lines.append(f"{name}: {message}" if message else name)
    tb = "".join(lines)
    if len(tb) > _MAX_TRACEBACK:
        tb = tb[: _MAX_TRACEBACK // 2] + "\n…\n" + tb[-_MAX_TRACEBACK // 2 :]
    return {"type": name, "message": message, "lineno": lineno, "traceback": tb}

