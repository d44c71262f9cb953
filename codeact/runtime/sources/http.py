"""HTTP tools: a method, a URL template and where each argument goes, run on the host with httpx.

    weather = http_tool("get_weather", "GET", "https://api.example.com/weather/{city}",
                        params=[HttpParam("units", "query", {"enum": ["C", "F"]})],
                        auth=HttpAuth.bearer("WEATHER_TOKEN"))

Credentials are read on the host at each call (a str names an environment variable; a callable
returns the value) and added to the request after the arguments, so they are in no schema,
argument, stub or result the sandbox sees; a response that echoes one has it redacted (in its
headers, its raw text and its decoded JSON alike). A path argument fills exactly one path segment:
``/`` is percent-encoded, and null, empty, ``.`` and ``..`` are refused as ``invalid_arguments``.

Answers: a 2xx JSON body is the result (other bodies: their text; empty: None). HTTP status →
error code: 400/422 invalid_arguments, 401/403 permission_denied, 404/410 not_found (not
retryable); 408 timeout, 429 rate_limited, 5xx upstream_error (retryable, ``Retry-After`` honoured
by the host's retries); other statuses tool_exception. Connection failures are upstream_error,
timeouts timeout. GET/HEAD/OPTIONS tools are idempotent (retried) unless told otherwise.
"""

from __future__ import annotations

import base64
import json
import os
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, TypeAlias
from urllib.parse import quote

if TYPE_CHECKING:  # annotations only: httpx loads with the first HttpClient, not with codeact
    import httpx

from ...errors import ToolDefinitionError, ToolError
from ...tool_stubs import ToolSpec
from .._http_client import HttpClient, default_client
from .._tool import Tool, ToolPolicy

__all__ = ["HttpAuth", "HttpClient", "HttpEndpoint", "HttpParam", "Location", "Secret", "http_tool"]

#: A credential: the NAME of an environment variable read on the host at call time, or a callable
#: returning the value.
Secret: TypeAlias = "str | Callable[[], str]"
#: Where an argument goes: a path ``{placeholder}``, the query string, a header, a field of the
#: JSON body object, or the whole JSON body.
Location = Literal["path", "query", "header", "body", "json"]
_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE"})
_IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS"})
_PLACEHOLDER = re.compile(r"\{([^{}/]+)\}")
#: Path arguments that would not stay one segment of the template (see ``_path_segment``).
_DOT_SEGMENTS = frozenset({"", ".", ".."})


@dataclass(frozen=True)
class HttpAuth:
    """Credentials the host adds to each request. Build with the classmethods."""

    kind: Literal["bearer", "header", "basic", "query"]
    name: str  # the header or query parameter that carries it
    value: Secret
    password: Secret | None = None

    @classmethod
    def bearer(cls, token: Secret) -> HttpAuth:
        """``Authorization: Bearer <token>``."""
        return cls("bearer", "Authorization", token)

    @classmethod
    def header(cls, name: str, value: Secret) -> HttpAuth:
        """A header of its own, e.g. ``X-API-Key``."""
        return cls("header", name, value)

    @classmethod
    def basic(cls, username: Secret, password: Secret) -> HttpAuth:
        """HTTP Basic authentication."""
        return cls("basic", "Authorization", username, password)

    @classmethod
    def query(cls, name: str, value: Secret) -> HttpAuth:
        """A query parameter, e.g. ``appid`` (kept out of error messages like the others)."""
        return cls("query", name, value)

    def resolve(self) -> tuple[dict[str, str], dict[str, str], list[str]]:
        """(headers, query parameters, secret values) for one request, read now."""
        value = _secret(self.value)
        if self.kind == "bearer":
            return {self.name: f"Bearer {value}"}, {}, [value]
        if self.kind == "header":
            return {self.name: value}, {}, [value]
        if self.kind == "query":
            return {}, {self.name: value}, [value]
        password = _secret(self.password or "")
        encoded = base64.b64encode(f"{value}:{password}".encode()).decode("ascii")
        return {self.name: f"Basic {encoded}"}, {}, [value, password, encoded]


def _secret(source: Secret) -> str:
    if callable(source):
        return str(source())
    value = os.environ.get(source)
    if not value:
        raise ToolError("permission_denied",
                        f"the host has no credential for this tool: environment variable {source} is not set")
    return value


@dataclass(frozen=True)
class HttpParam:
    """One argument of an HTTP tool: its name in the tool's schema and where it goes."""

    name: str
    location: Location = "query"
    schema: Mapping[str, Any] = field(default_factory=lambda: {"type": "string"})
    required: bool = False
    description: str = ""
    wire_name: str | None = None  # the name on the wire, when it differs from ``name``

    @property
    def key(self) -> str:
        return self.wire_name or self.name


@dataclass(frozen=True)
class HttpEndpoint:
    """The definition of one HTTP tool. ``url`` may be relative to a base URL; its ``{name}``
    placeholders are path parameters (added as required strings unless listed in ``params``)."""

    name: str
    method: str
    url: str
    params: Sequence[HttpParam] = ()
    description: str = ""
    auth: HttpAuth | httpx.Auth | None = None
    timeout_s: float = 30.0
    headers: Mapping[str, str] = field(default_factory=dict)
    idempotent: bool | None = None  # None: True for GET, HEAD, OPTIONS
    output_schema: dict[str, Any] | None = None
    policy: ToolPolicy | None = None  # replaces the default policy (timeout and idempotence included)
    schema_defs: Mapping[str, Any] = field(default_factory=dict)  # ``$defs`` the parameter schemas refer to
    group: str | None = None  # listed under this group when the toolset is too large to show whole
    lazy_schema: bool = False  # check the schema at the first call, not now (large OpenAPI documents)

    def all_params(self) -> list[HttpParam]:
        """``params`` plus the URL's placeholders not among them; checked for clashes."""
        listed = list(self.params)
        listed_paths = {p.key for p in listed if p.location == "path"}
        extra = [HttpParam(n, "path", required=True) for n in _PLACEHOLDER.findall(self.url) if n not in listed_paths]
        params = [replace(p, required=True) if p.location == "path" else p for p in [*extra, *listed]]
        names = [p.name for p in params]
        if len(set(names)) != len(names):
            raise ToolDefinitionError(f"HTTP tool {self.name!r}: two parameters share a name in {names}")
        if any(p.location == "json" for p in params) and sum(p.location in ("json", "body") for p in params) > 1:
            raise ToolDefinitionError(f"HTTP tool {self.name!r}: a 'json' parameter is the whole body; "
                                      "it cannot be combined with other body parameters")
        return params

    def spec(self) -> ToolSpec:
        params = self.all_params()
        properties: dict[str, Any] = {}
        for p in params:
            prop = dict(p.schema)
            if p.description and "description" not in prop:
                prop["description"] = p.description
            properties[p.name] = prop
        required = [p.name for p in params if p.required]
        schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
        if required:
            schema["required"] = required
        if self.schema_defs:
            schema["$defs"] = dict(self.schema_defs)
        return ToolSpec(name=self.name, description=self.description, input_schema=schema,
                        output_schema=self.output_schema, _lazy=self.lazy_schema)

    def to_tool(self, *, base_url: str | None = None, auth: HttpAuth | httpx.Auth | None = None,
                client: HttpClient | None = None) -> Tool:
        """The Tool; ``auth`` is used when the endpoint has none of its own."""
        method = self.method.upper()
        if method not in _METHODS:
            raise ToolDefinitionError(f"HTTP tool {self.name!r}: unsupported method {self.method!r}")
        url = _join(base_url, self.url)
        if not url.startswith(("http://", "https://")):
            raise ToolDefinitionError(f"HTTP tool {self.name!r}: {url!r} is not an absolute http(s) URL; "
                                      "give a full URL or a base_url")
        idempotent = method in _IDEMPOTENT if self.idempotent is None else self.idempotent
        # The host's timeout is a backstop just past httpx's, so the call ends as httpx's timeout.
        policy = self.policy or ToolPolicy(timeout_s=self.timeout_s + 1.0, idempotent=idempotent)
        call = _HttpCall(replace(self, method=method, url=url, auth=self.auth or auth), client or default_client())
        return Tool(spec=self.spec(), fn=call, policy=policy, group=self.group)


def http_tool(name: str, method: str, url: str, params: Iterable[HttpParam] = (), **options: Any) -> Tool:
    """One HTTP tool; ``options`` are the other fields of :class:`HttpEndpoint` plus ``base_url``
    and ``client`` (of :meth:`HttpEndpoint.to_tool`)."""
    base_url = options.pop("base_url", None)
    client = options.pop("client", None)
    return HttpEndpoint(name, method, url, tuple(params), **options).to_tool(base_url=base_url, client=client)


def http_tools(endpoints: Iterable[HttpEndpoint], *, base_url: str | None = None,
               auth: HttpAuth | httpx.Auth | None = None, client: HttpClient | None = None) -> list[Tool]:
    """Tools for several endpoints sharing a base URL, a default auth and a client."""
    return [e.to_tool(base_url=base_url, auth=auth, client=client) for e in endpoints]


def _join(base_url: str | None, url: str) -> str:
    if base_url is None or url.startswith(("http://", "https://")):
        return url
    return base_url.rstrip("/") + "/" + url.lstrip("/")


class _HttpCall:
    """The tool's implementation: arguments → one request (sync; the host runs it on a worker thread)."""

    def __init__(self, endpoint: HttpEndpoint, client: HttpClient) -> None:
        self.endpoint = endpoint
        self.client = client
        self.params = {p.name: p for p in endpoint.all_params()}

    def __repr__(self) -> str:
        return f"<HTTP {self.endpoint.method} {self.endpoint.url}>"

    def __call__(self, **arguments: Any) -> Any:
        ep = self.endpoint
        url = ep.url
        query: dict[str, Any] = {}
        headers = dict(ep.headers)
        body: dict[str, Any] = {}
        whole: list[Any] = []
        for name, value in arguments.items():
            param = self.params[name]
            if value is None and param.location in ("query", "header"):
                continue  # no way to say null there: leave it out (a body field gets JSON null)
            if param.location == "path":
                url = url.replace("{" + param.key + "}", _path_segment(param.key, value))
            elif param.location == "query":
                query[param.key] = [_text(v) for v in value] if isinstance(value, list) else _text(value)
            elif param.location == "header":
                headers[param.key] = _header_value(param.key, value)
            elif param.location == "body":
                body[param.key] = value
            else:
                whole.append(value)
        secrets: list[str] = []
        auth = ep.auth
        if isinstance(auth, HttpAuth):  # last, so no argument can replace the credential
            auth_headers, auth_query, secrets = auth.resolve()
            headers.update(auth_headers)
            query.update(auth_query)
            auth = None
        kwargs: dict[str, Any] = {"params": query, "headers": headers}
        if auth is not None:
            kwargs["auth"] = auth
        if whole or body:
            kwargs["json"] = whole[0] if whole else body
        return self.client.request(ep.method, url, timeout_s=ep.timeout_s, secrets=secrets, **kwargs)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return str(value)


def _path_segment(name: str, value: Any) -> str:
    """A path argument as exactly one segment of the template's path: every reserved character
    (``/`` and ``%`` included) percent-encoded, and null, empty, ``.`` and ``..`` refused. httpx
    removes dot segments before sending (``/tenants/acme/items/..`` reached ``/tenants/acme/``) and an
    empty segment changes which route matches. Refused rather than sent as ``%2E``: RFC 3986 makes
    ``%2E`` equivalent to ``.``, and many servers and proxies decode it before resolving the path."""
    if value is None:
        raise ToolError("invalid_arguments", f"path parameter {name!r} cannot be null")
    text = _text(value)
    if unicodedata.normalize("NFKC", text) in _DOT_SEGMENTS:  # "．．" is ".." to a server that normalizes
        raise ToolError("invalid_arguments",
                        f"path parameter {name!r} cannot be {text!r}: it would leave the endpoint's URL template")
    return quote(text, safe="")


def _header_value(name: str, value: Any) -> str:
    text = _text(value)
    if "\r" in text or "\n" in text:
        raise ToolError("invalid_arguments", f"header {name!r} cannot contain a line break")
    return text
