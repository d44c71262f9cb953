"""The pooled HTTP client behind HTTP tools, and how an HTTP exchange becomes a result or a ToolError."""

from __future__ import annotations

import functools
import json
import re
import threading
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # httpx (and the rich/click/pygments its CLI pulls in) loads with the first client
    import httpx

from .._text import parse_retry_after
from ..errors import ToolError

__all__ = ["HttpClient", "default_client", "redact"]

_DETAIL_CHARS = 300
#: HTTP status → error code; unlisted 4xx are tool_exception, every 5xx upstream_error.
_STATUS_CODES = {
    400: "invalid_arguments", 422: "invalid_arguments",
    401: "permission_denied", 403: "permission_denied",
    404: "not_found", 410: "not_found",
    408: "timeout", 429: "rate_limited",
}


class HttpClient:
    """One pooled, thread-safe ``httpx.Client`` shared by HTTP tools, made on first use.

    Redirects are not followed: a header credential must not travel to another origin. A response
    body over ``max_response_bytes`` fails the call instead of filling the host's memory.
    """

    def __init__(self, *, max_connections: int = 100, max_response_bytes: int = 50 * 1024 * 1024,
                 **client_options: Any) -> None:
        import httpx

        self.max_response_bytes = max_response_bytes
        self._options = {"limits": httpx.Limits(max_connections=max_connections), **client_options,
                         "follow_redirects": False}
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()

    @property
    def client(self) -> httpx.Client:
        with self._lock:
            if self._client is None:
                import httpx

                self._client = httpx.Client(**self._options)
            return self._client

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def request(self, method: str, url: str, *, timeout_s: float, secrets: Sequence[str] = (),
                **kwargs: Any) -> Any:
        """Send one request; the decoded JSON (or text, or None) of a 2xx answer, else a ToolError."""
        import httpx

        where = f"{method} {url.split('?', 1)[0]}"
        deadline = time.monotonic() + timeout_s  # httpx's timeout bounds each read, not the whole body
        try:
            with self.client.stream(method, url, timeout=timeout_s, **kwargs) as response:
                body = self._read(response, where, deadline, timeout_s)
        except httpx.TimeoutException as exc:
            raise ToolError("timeout", f"{where} timed out after {timeout_s:g} s ({type(exc).__name__})") from None
        except (httpx.InvalidURL, httpx.UnsupportedProtocol) as exc:
            raise ToolError("invalid_arguments", redact(f"{where}: bad URL: {exc}", secrets)) from None
        except httpx.ConnectError as exc:
            raise ToolError("upstream_error", redact(f"{where}: cannot connect: {exc}", secrets)) from None
        except httpx.HTTPError as exc:
            raise ToolError("upstream_error", redact(f"{where} failed: {type(exc).__name__}: {exc}", secrets)) from None
        text = body.decode(response.encoding or "utf-8", "replace")  # redacted by what makes the answer
        if response.is_success:
            return _decode(response, text, secrets)
        raise status_error(response.status_code, response.headers, text, where, secrets=secrets)

    def _read(self, response: httpx.Response, where: str, deadline: float, timeout_s: float) -> bytes:
        """The body, bounded in size and in time: a server that sends it a byte at a time is given
        up at the deadline (leaving the ``with`` closes the response: the connection goes back)."""
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_response_bytes:
            raise _too_large(where, self.max_response_bytes)
        chunks: list[bytes] = []
        size = 0
        for chunk in response.iter_bytes():
            size += len(chunk)
            if size > self.max_response_bytes:
                raise _too_large(where, self.max_response_bytes)
            if time.monotonic() > deadline:
                raise ToolError("timeout", f"{where} timed out after {timeout_s:g} s (the body was still arriving)")
            chunks.append(chunk)
        return b"".join(chunks)


_default: HttpClient | None = None
_default_lock = threading.Lock()


def default_client() -> HttpClient:
    """The process-wide client HTTP tools share unless given their own."""
    global _default
    with _default_lock:
        if _default is None:
            _default = HttpClient()
        return _default


def redact(text: str, secrets: Sequence[str]) -> str:
    """``text`` with every credential value replaced, so an echoing server cannot leak one: as it
    is, and spelt with JSON escapes (``\\/``, ``\\u0074``) or percent-encoding, in any mix."""
    for secret in secrets:
        if len(secret) >= 4:  # shorter values would redact ordinary text
            text = text.replace(secret, _REDACTED)
            if "\\" in text or "%" in text or "+" in text:  # only these can spell it another way
                text = _spellings(secret).sub(_REDACTED, text)
    return text


_REDACTED = "[redacted]"


@functools.lru_cache(maxsize=64)
def _spellings(secret: str) -> re.Pattern[str]:
    """Every spelling of ``secret`` in which each character is itself, a JSON escape or its
    percent-encoded UTF-8 bytes (hex digits of either case)."""
    parts = []
    for char in secret:
        ways = [re.escape(char)]
        if ord(char) < 0x10000:  # beyond it JSON writes a surrogate pair, no secret's spelling
            ways.append(rf"\\u(?i:{ord(char):04x})")
        if char in '"\\/':
            ways.append(re.escape("\\" + char))
        ways.append("".join(f"%(?i:{byte:02x})" for byte in char.encode()))
        if char == " ":
            ways.append(r"\+")
        parts.append("(?:" + "|".join(ways) + ")")
    return re.compile("".join(parts))


def _redact_json(value: Any, secrets: Sequence[str]) -> Any:
    """A decoded JSON value with the credentials gone from every string, key and number (walked
    without recursion: the document may nest as deep as the decoder allows)."""
    if not any(len(s) >= 4 for s in secrets):
        return value
    root = [value]
    stack: list[Any] = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            for i, item in enumerate(node):
                if isinstance(item, dict | list):
                    stack.append(item)
                else:
                    node[i] = _redact_scalar(item, secrets)
        else:
            items = [(redact(key, secrets), item) for key, item in node.items()]
            node.clear()
            for key, item in items:
                if isinstance(item, dict | list):
                    stack.append(item)
                node[key] = item if isinstance(item, dict | list) else _redact_scalar(item, secrets)
    return root[0]


def _redact_scalar(value: Any, secrets: Sequence[str]) -> Any:
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, int | float) and not isinstance(value, bool):  # a numeric key echoed as a number
        text = str(value)
        return _REDACTED if redact(text, secrets) != text else value
    return value


def _too_large(where: str, limit: int) -> ToolError:
    return ToolError("tool_exception", f"{where}: the response is larger than {limit} bytes", retryable=False)


def _decode(response: httpx.Response, text: str, secrets: Sequence[str]) -> Any:
    """The answer the code gets, redacted after decoding: JSON escapes spell a credential many ways."""
    if response.status_code == 204 or not text:
        return None
    if "json" in response.headers.get("content-type", ""):
        try:
            return _redact_json(json.loads(text), secrets)
        except ValueError:
            pass
    return redact(text, secrets)


def status_error(status: int, headers: Mapping[str, str], text: str, where: str, *,
                 secrets: Sequence[str] = ()) -> ToolError:
    """The ToolError for a non-2xx answer (``Retry-After`` kept as ``retry_after``); the whole
    message redacted, the body's decoded JSON and a redirect's ``Location`` included."""
    detail = _detail(text, secrets)
    message = f"HTTP {status} from {where}" + (f": {detail}" if detail else "")
    if 300 <= status < 400:
        location = headers.get("location", "?")
        message = redact(f"{message} (redirect to {location} not followed)", secrets)
        return ToolError("tool_exception", message, retryable=False)
    code = _STATUS_CODES.get(status, "upstream_error" if status >= 500 else "tool_exception")
    retry_after = parse_retry_after(headers.get("retry-after"))
    if retry_after is not None:  # the model sees it too, should it retry by itself later
        message += f" (Retry-After: {retry_after:g} s)"
    return ToolError(code, redact(message, secrets), retry_after=retry_after)


def _detail(text: str, secrets: Sequence[str]) -> str:
    """What the server said: an error body's message field when it has one, else its start (a
    JSON body re-encoded from its redacted decoding, never its raw text)."""
    try:
        data = _redact_json(json.loads(text), secrets)
    except ValueError:
        data = None
    else:
        if secrets:
            text = json.dumps(data, ensure_ascii=False)
    if isinstance(data, dict):
        for key in ("detail", "message", "error", "title"):
            if isinstance(data.get(key), str | dict | list):
                value = data[key]
                text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
                break
    text = " ".join(text.split())
    return text if len(text) <= _DETAIL_CHARS else text[: _DETAIL_CHARS - 1] + "…"
