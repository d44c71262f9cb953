"""OpenAPI 3.x → HTTP tools, one per operation.

* name: the ``operationId`` (else ``method_path``); description: summary, then description;
* arguments: the operation's path, query and header parameters (path-level ones included), and its
  JSON request body: a plain object body's properties become arguments of their own, any other
  body is one ``body`` argument; cookie parameters are not supported and left out;
* ``$ref``s are resolved; component schemas go into the tool schema's ``$defs`` (so the stubs get
  named ``TypedDict``s, and recursive schemas work); OpenAPI 3.0's ``nullable`` (beside a ``type``,
  an ``enum``, ``oneOf``/``anyOf``/``allOf`` or a ``$ref``: see ``_with_null``) and boolean
  ``exclusiveMinimum``/``exclusiveMaximum`` become their JSON Schema forms;
* the first 2xx JSON response schema is the tool's output schema (its stub's return type);
* each tool's group (for the index a large toolset's prompt shows) is its first tag, else its
  operationId's prefix (``repos/get`` → ``repos``), else the path's first segment.

Speed at GitHub scale (1,200 operations): each component schema is converted once and shared by
the tools that use it, and a tool's schema is checked against the JSON Schema meta-schema (and its
validator compiled) at its first call rather than up front: a broken schema in the document fails
that tool's calls with a clear error instead of failing the whole toolset.

Operations without a JSON (or empty) request body are left out unless asked for by name, which
raises: they cannot be called with JSON arguments. Left out is not silent: each is listed as
``(name, reason)`` in the ``skipped`` list a caller passes (``Toolset.from_openapi`` keeps it as
``Toolset.skipped``), and one log line (logger ``codeact.runtime.sources.openapi``, WARNING) names them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, cast
from urllib.parse import urljoin

import httpx

from ...errors import ToolDefinitionError
from ...tool_stubs.refs import resolve_ref
from .._http_client import HttpClient
from .._tool import Tool
from .http import HttpAuth, HttpEndpoint, HttpParam, Location

__all__ = ["load_openapi", "openapi_endpoints", "openapi_tools"]

_METHODS = ("get", "put", "post", "delete", "patch", "head", "options")
_IGNORED_HEADERS = frozenset({"accept", "content-type", "authorization"})  # the OpenAPI spec says so
_MAX_REF_HOPS = 32
_log = logging.getLogger(__name__)


def load_openapi(source: Mapping[str, Any] | str | os.PathLike[str],
                 timeout_s: float = 30.0) -> tuple[dict[str, Any], str | None]:
    """The document (a dict, a JSON/YAML file, or an http(s) URL) and the URL it came from, if any."""
    if isinstance(source, Mapping):
        return dict(source), None  # only read: the converter builds new schema objects
    text_source = os.fspath(source)
    if text_source.startswith(("http://", "https://")):
        try:
            response = httpx.get(text_source, timeout=timeout_s, follow_redirects=True)
            response.raise_for_status()
        except httpx.HTTPError as exc:
            raise ToolDefinitionError(f"cannot fetch the OpenAPI document {text_source}: {exc}") from None
        return _parse(response.text, text_source), str(response.url)
    path = Path(text_source)
    if not path.is_file():
        raise ToolDefinitionError(f"no such OpenAPI document: {path}")
    return _parse(path.read_text(encoding="utf-8"), str(path)), None


def _parse(text: str, where: str) -> dict[str, Any]:
    try:
        doc = json.loads(text)
    except ValueError:
        try:
            import yaml
        except ImportError:
            raise ToolDefinitionError(f"{where} is not JSON (install PyYAML to read YAML)") from None
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ToolDefinitionError(f"{where} is neither JSON nor YAML: {exc}") from None
    if not isinstance(doc, dict):
        raise ToolDefinitionError(f"{where} is not an OpenAPI document (not an object)")
    return doc


def openapi_tools(spec: Mapping[str, Any] | str | os.PathLike[str], operations: Iterable[str] | None = None,
                  base_url: str | None = None, auth: HttpAuth | httpx.Auth | None = None, *,
                  client: HttpClient | None = None, timeout_s: float = 30.0,
                  skipped: list[tuple[str, str]] | None = None) -> list[Tool]:
    """HTTP tools for the document's operations (all, or those named: operationIds or ``"GET /path"``);
    the operations left out are appended to ``skipped`` as ``(name, reason)``."""
    endpoints = openapi_endpoints(spec, operations, base_url, timeout_s=timeout_s, skipped=skipped)
    tools = []
    for endpoint in endpoints:
        with _malformed(f"operation {endpoint.name!r}"):
            tools.append(endpoint.to_tool(auth=auth, client=client))
    return tools


def openapi_endpoints(spec: Mapping[str, Any] | str | os.PathLike[str], operations: Iterable[str] | None = None,
                      base_url: str | None = None, *, timeout_s: float = 30.0,
                      skipped: list[tuple[str, str]] | None = None) -> list[HttpEndpoint]:
    """The :class:`HttpEndpoint` of each chosen operation, with absolute URLs. The operations left
    out (no JSON request body) are appended to ``skipped`` as ``(name, reason)`` and logged."""
    doc, fetched_from = load_openapi(spec)
    version = str(doc.get("openapi", doc.get("swagger", "")))
    if not version.startswith("3."):
        raise ToolDefinitionError(f"only OpenAPI 3.x documents are supported (this one says {version or 'nothing'!r})")
    with _malformed("the document"):
        return _endpoints(doc, fetched_from, operations, base_url, timeout_s, skipped)


@contextlib.contextmanager
def _malformed(where: str) -> Iterator[None]:
    """A document not of the shape OpenAPI describes (a list where an object goes, a $ref cycle
    outside the components, nesting past the recursion limit): a ToolDefinitionError saying where."""
    try:
        yield
    except ToolDefinitionError:
        raise
    except RecursionError:
        raise ToolDefinitionError(f"the OpenAPI document nests too deep to read, in {where} "
                                  "(a $ref cycle, or schemas nested thousands of levels)") from None
    except (AttributeError, TypeError, ValueError, KeyError, IndexError) as exc:
        raise ToolDefinitionError(f"the OpenAPI document is malformed in {where}: {type(exc).__name__}: "
                                  f"{str(exc)[:200]}") from None


def _endpoints(doc: dict[str, Any], fetched_from: str | None, operations: Iterable[str] | None,
               base_url: str | None, timeout_s: float, skipped: list[tuple[str, str]] | None) -> list[HttpEndpoint]:
    if not isinstance(doc.get("paths", {}), Mapping):
        raise ToolDefinitionError("the OpenAPI document's 'paths' is not an object")
    root = _base_url(doc, base_url, fetched_from).rstrip("/")
    wanted = None if operations is None else set(operations)
    matched: set[str] = set()
    found: list[HttpEndpoint] = []
    left_out: list[tuple[str, str]] = []
    converter = _Converter(doc)  # one for the document: each component schema is converted once
    for path, method, op, item in _operations(doc):
        name = _name(op, method, path)
        keys = {name, f"{method.upper()} {path}"}
        if wanted is not None and not keys & wanted:
            continue
        matched |= keys
        with _malformed(f"operation {name!r} ({method.upper()} {path})"):
            endpoint = converter.endpoint(name, method, path, op, item, timeout_s, strict=wanted is not None)
        if isinstance(endpoint, str):
            left_out.append((name, endpoint))
        else:
            found.append(replace(endpoint, url=root + "/" + endpoint.url.lstrip("/")))
    missing = sorted(w for w in wanted or () if w not in matched)
    if missing:
        available = ", ".join(_name(op, m, p) for p, m, op, _ in _operations(doc))
        raise ToolDefinitionError(f"no operation(s) {missing} in the OpenAPI document (available: {available})")
    if left_out:
        _log.warning("left out %d of %d OpenAPI operations (see Toolset.skipped): %s",
                     len(left_out), len(found) + len(left_out), "; ".join(f"{n}: {why}" for n, why in left_out))
        if skipped is not None:
            skipped.extend(left_out)
    return found


def _operations(doc: dict[str, Any]) -> Iterable[tuple[str, str, dict[str, Any], dict[str, Any]]]:
    paths = doc.get("paths")
    for path, item in (paths.items() if isinstance(paths, dict) else []):
        if not isinstance(item, dict):
            continue
        for method in _METHODS:
            op = item.get(method)
            if isinstance(op, dict):
                yield path, method, op, item


def _name(op: dict[str, Any], method: str, path: str) -> str:
    op_id = op.get("operationId")
    if isinstance(op_id, str) and op_id.strip():
        return op_id
    words = [method, *(re.sub(r"\W+", "_", part).strip("_") for part in path.split("/"))]
    return "_".join(w for w in words if w)  # GET /pets/{petId} → get_pets_petId


def _base_url(doc: dict[str, Any], base_url: str | None, fetched_from: str | None) -> str:
    if base_url:
        return base_url
    servers = doc.get("servers")
    if isinstance(servers, list) and servers and isinstance(servers[0], dict) and servers[0].get("url"):
        server = servers[0]
        url = str(server["url"])
        for name, var in (server.get("variables") or {}).items():
            if isinstance(var, dict) and "default" in var:
                url = url.replace("{" + name + "}", str(var["default"]))
        if url.startswith(("http://", "https://")):
            return url
        if fetched_from:
            return urljoin(fetched_from, url)
    elif fetched_from:
        return urljoin(fetched_from, "/")
    raise ToolDefinitionError("the OpenAPI document gives no absolute server URL: pass base_url")


def _group(op: dict[str, Any], name: str, path: str) -> str | None:
    """The operation's first tag, else its operationId's prefix (``repos/get`` → ``repos``), else
    the path's first segment."""
    tags = op.get("tags")
    if isinstance(tags, list) and tags and isinstance(tags[0], str) and tags[0].strip():
        return tags[0].strip()
    for sep in ("/", "."):
        if sep in name.strip(sep):
            return name.strip(sep).split(sep, 1)[0]
    first = next((p for p in path.split("/") if p and not p.startswith("{")), "")
    return first or None


#: Keywords that constrain a value apart from ``type``: with them, "or null" needs a wrapper.
_COMBINED = ("$ref", "allOf", "anyOf", "oneOf", "not", "const")
#: Keywords that describe a schema and stay on the outside of that wrapper (the stub's docs).
_ANNOTATIONS = frozenset({"title", "description", "default", "example", "examples", "deprecated", "readOnly",
                          "writeOnly", "externalDocs"})


def _with_null(schema: dict[str, Any]) -> dict[str, Any]:
    """OpenAPI 3.0's ``nullable: true`` in JSON Schema: the schema accepts ``null`` too.

    A plain typed schema gets ``"null"`` in its ``type`` (and ``None`` in its ``enum``: GitHub, for
    one, documents enums such as ``state_reason`` as nullable without listing null); a schema with
    ``oneOf``/``anyOf``/``allOf``/``$ref``/``not``/``const`` becomes ``{"anyOf": [schema, {"type":
    "null"}]}``, its title, description and default kept outside."""
    if not any(k in schema for k in _COMBINED):
        kind = schema.get("type")
        if isinstance(kind, str) and kind != "null":
            schema["type"] = [kind, "null"]
        elif isinstance(kind, list) and "null" not in kind:
            schema["type"] = [*kind, "null"]
        enum = schema.get("enum")
        if isinstance(enum, list) and None not in enum:
            schema["enum"] = [*enum, None]
        return schema
    inner = {k: v for k, v in schema.items() if k not in _ANNOTATIONS}
    return {"anyOf": [inner, {"type": "null"}], **{k: v for k, v in schema.items() if k in _ANNOTATIONS}}


class _Converter:
    """A document's schemas as JSON Schema. Component schemas are converted once and shared: each
    tool's ``$defs`` holds (the same objects of) those it uses, directly or through others."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc
        self.components: dict[str, Any] = {}
        self._refs_of: dict[str, set[str]] = {}  # component → the components it refers to directly
        self._used: list[set[str]] = [set()]  # what the schema being converted refers to (a stack)

    def endpoint(self, name: str, method: str, path: str, op: dict[str, Any], item: dict[str, Any],
                 timeout_s: float, strict: bool) -> HttpEndpoint | str:
        """The operation's endpoint, or why it is left out."""
        params = self._parameters(item, op)
        body = self._body(op, {p.name for p in params}, name, strict)
        if isinstance(body, str):
            self._defs()
            return body
        input_defs = self._defs()
        output = self._output(op)
        summary, detail = str(op.get("summary") or "").strip(), str(op.get("description") or "").strip()
        parts = (detail,) if summary and detail.startswith(summary) else (summary, detail)
        description = "\n\n".join(t for t in parts if t)
        return HttpEndpoint(name=name, method=method.upper(), url=path, params=[*params, *body],
                            description=description, timeout_s=timeout_s, output_schema=output,
                            schema_defs=input_defs, group=_group(op, name, path), lazy_schema=True)

    def _defs(self) -> dict[str, Any]:
        """The components the schemas converted since the last call use, transitively."""
        todo, self._used[-1] = list(self._used[-1]), set()
        seen: set[str] = set()
        while todo:
            key = todo.pop()
            if key not in seen:
                seen.add(key)
                todo.extend(self._refs_of.get(key, ()))
        return {key: self.components[key] for key in sorted(seen)}

    def resolve(self, node: Any) -> Any:
        """Follow a (chain of) ``$ref`` to the object it names."""
        for _ in range(_MAX_REF_HOPS):
            if not (isinstance(node, dict) and isinstance(node.get("$ref"), str)):
                return node
            ref = node["$ref"]
            target = resolve_ref(self.doc, ref) if ref.startswith("#") else None
            if target is None:
                raise ToolDefinitionError(f"cannot resolve $ref {ref!r} (only local references are supported)")
            node = target
        raise ToolDefinitionError("a $ref chain in the OpenAPI document does not end")

    def schema(self, node: Any) -> Any:
        """A JSON Schema copy of an OpenAPI schema: component refs → ``#/$defs/…``, 3.0 quirks fixed."""
        if isinstance(node, list):
            return [self.schema(n) for n in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str):
            prefix = "#/components/schemas/"
            if ref.startswith(prefix) and "/" not in ref[len(prefix):]:
                key = ref[len(prefix):].replace("~1", "/").replace("~0", "~")
                self._used[-1].add(key)
                if key not in self.components:
                    self.components[key] = {}  # placeholder first: a recursive schema refers to itself
                    self._used.append(set())
                    self.components[key] = self.schema(self.resolve({"$ref": ref}))
                    self._refs_of[key] = self._used.pop()
                target: Any = {"$ref": "#/$defs/" + ref[len(prefix):]}
            else:
                target = self.schema(self.resolve(node))
            # 3.0 says a $ref's siblings are ignored; a nullable one still means "or null" to its author
            return _with_null(dict(target)) if node.get("nullable") is True and isinstance(target, dict) else target
        out = {k: self.schema(v) for k, v in node.items()}
        if out.pop("nullable", False) is True:
            out = _with_null(out)
        for bound, limit in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
            if isinstance(out.get(bound), bool):
                if out.pop(bound) and limit in out:
                    out[bound] = out.pop(limit)
        return out

    def _parameters(self, item: dict[str, Any], op: dict[str, Any]) -> list[HttpParam]:
        merged: dict[tuple[str, str], dict[str, Any]] = {}
        for raw in [*(item.get("parameters") or []), *(op.get("parameters") or [])]:
            param = self.resolve(raw)
            if isinstance(param, dict) and isinstance(param.get("name"), str):
                merged[(param["name"], str(param.get("in")))] = param
        out: list[HttpParam] = []
        taken: set[str] = set()
        for (wire, where), param in merged.items():
            if where not in ("path", "query", "header") or (where == "header" and wire.lower() in _IGNORED_HEADERS):
                continue
            schema = param.get("schema")
            if schema is None:  # the ``content`` form: one media type with a schema
                media: Any = next(iter((param.get("content") or {}).values()), {})
                schema = media.get("schema") if isinstance(media, dict) else None
            name = wire if wire not in taken else f"{wire}_{where}"
            taken.add(name)
            out.append(HttpParam(name=name, location=cast(Location, where),
                                 schema=self.schema(schema or {"type": "string"}),
                                 required=bool(param.get("required")) or where == "path",
                                 description=str(param.get("description") or ""), wire_name=wire))
        return out

    def _body(self, op: dict[str, Any], taken: set[str], name: str, strict: bool) -> list[HttpParam] | str:
        """The body's arguments ([] for none); for a non-JSON operation, why it is left out."""
        request = self.resolve(op.get("requestBody"))
        if not isinstance(request, dict):
            return []
        content = request.get("content") or {}
        media = next((v for k, v in content.items() if k.split(";")[0].strip().endswith(("/json", "+json"))), None)
        if media is None:
            why = f"takes no JSON request body ({', '.join(map(str, content)) or 'no content types'})"
            if strict:
                raise ToolDefinitionError(f"operation {name!r} {why}")
            return why
        raw = media.get("schema") if isinstance(media, dict) else None
        required = bool(request.get("required"))
        shape = self.resolve(raw) if isinstance(raw, dict) else {}
        props = shape.get("properties") if isinstance(shape, dict) else None
        flat = (isinstance(props, dict) and props and not set(props) & taken and not shape.get("additionalProperties")
                and not any(k in shape for k in ("allOf", "anyOf", "oneOf")))
        if not flat:
            return [HttpParam("body", "json", schema=self.schema(raw or {}), required=required)]
        needed = set(shape.get("required") or []) if required else set()
        return [HttpParam(key, "body", schema=self.schema(sub), required=key in needed)
                for key, sub in props.items()]  # type: ignore[union-attr]

    def _output(self, op: dict[str, Any]) -> dict[str, Any] | None:
        responses = op.get("responses") or {}
        for status in sorted(k for k in responses if str(k).startswith("2")):
            response = self.resolve(responses[status])
            content = response.get("content") if isinstance(response, dict) else None
            for media_type, media in (content or {}).items():
                if media_type.split(";")[0].strip().endswith(("/json", "+json")) and isinstance(media, dict):
                    if isinstance(media.get("schema"), dict):
                        out = self.schema(media["schema"])
                        defs = self._defs()
                        return {**out, "$defs": defs} if defs else out
        return None
