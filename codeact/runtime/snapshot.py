"""Session snapshots: what a session did, enough to rebuild its state in a fresh sandbox.

A :class:`Snapshot` holds the cells that built the session's namespace, in order, each with how it
ended (completed, or raised: type and line) and its tool-call records (full results); the
workspace files; the sandbox config and image; the tool set's fingerprint. Restoring replays the
cells with every tool call answered from those records (see ``_replay``), then lays the saved
files over the workspace. A cell also carries the ``session.files`` writes and removals made
before it (``CellRecord.files``), laid just before it is replayed; a snapshot whose ``files``
is None (a cluster caller's replay log) leaves the workspace as the replay made it.

On disk a snapshot is a header line ``{"format", "version", "key_id", "mac"}`` and then the
zlib-compressed snapshot JSON (see ``_snapshot_file``); ``mac`` is an HMAC-SHA256 over the header
and the body, keyed by a host key that the sandbox never sees (by default
the cache directory's ``snapshot.key``: ``$CODEACT_CACHE``, else
``$XDG_CACHE_HOME/codeact``, else ``~/.cache/codeact``; made on first use, mode 0600), and is checked
in one streaming pass before anything of the body is inflated or parsed. Files are written 0600. A
file that fails any check is refused whole with :class:`~codeact.errors.SnapshotInvalid`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import secrets
import time
import zlib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .._paths import cache_dir
from ..errors import SnapshotError, SnapshotInvalid
from ..results import EgressRecord, ExecutionResult, ToolCallRecord
from ..sandbox.base import SandboxConfig
from ..tool_stubs import ToolSpec
from ._snapshot_file import read_signed, write_signed

__all__ = ["CellRecord", "FileOp", "SkippedCell", "Snapshot", "SnapshotFile", "default_key_path", "host_key",
           "toolset_fingerprint"]

#: The version of the snapshot's own fields (the file's format has its own, ``_snapshot_file``).
VERSION = 1
#: The largest snapshot file ``load`` reads, and the largest payload it inflates.
MAX_FILE_BYTES = 1 << 30
_KEY_BYTES = 32


class KeptEgress(EgressRecord):
    """An egress record as a cell keeps it: with its response, serialized (replay answers from it)."""

    response: str | None = Field(None, repr=False)


class FileOp(BaseModel):
    """One write through ``session.files``: ``data`` (base64) put at ``path``, or None: removed."""

    model_config = ConfigDict(extra="forbid")

    path: str
    data: str | None = None

    @classmethod
    def write(cls, path: str, data: bytes) -> FileOp:
        return cls(path=path, data=base64.b64encode(data).decode())

    def content(self) -> bytes | None:
        return None if self.data is None else base64.b64decode(self.data)


class CellRecord(BaseModel):
    """One code action a session ran, as replay needs it."""

    model_config = ConfigDict(extra="forbid")

    index: int = Field(ge=1, description="1-based position among the session's runs")
    code: str
    #: completed; raised (replay must raise the same type at the same line); inexact (cannot be
    #: replayed exactly: interrupted by a timeout or output limit, or its sandbox died).
    status: Literal["completed", "raised", "inexact"]
    error_type: str | None = None
    error_lineno: int | None = None
    reason: str | None = None
    calls: list[ToolCallRecord] = Field(default_factory=list)
    duration_ms: float = 0.0
    #: The run's own time limit, when it was given one (replay uses the same).
    timeout_s: float | None = None
    #: False once the cell's effects are no longer in the namespace (recovery left it out).
    in_state: bool = True
    #: What replay compares beyond the calls (None: not known, not compared): a digest of the
    #: output, the lane of each call (``m`` the main thread's, in order; ``c`` concurrent), and the
    #: threads and processes the cell left running.
    output_digest: str | None = None
    lanes: str | None = None
    threads: int | None = None
    children: int | None = None
    #: The cell's requests through the egress broker, plain-HTTP responses kept: replay answers from them.
    egress: list[KeptEgress] = Field(default_factory=list)
    #: Under a data-flow policy: the ``flow.context`` its run frame carried (replay sends it again,
    #: so the kernel rebuilds the same labels); None: the run had no ``flow``.
    flow_context: list[str] | None = None
    #: Writes and removals made through ``session.files`` between the previous cell and this one:
    #: replay lays them just before this cell runs again.
    files: list[FileOp] = Field(default_factory=list)

    @classmethod
    def of(cls, index: int, code: str, result: ExecutionResult, records: list[ToolCallRecord],
           timeout_s: float | None = None, facts: dict[str, Any] | None = None, *,
           flow_context: list[str] | None = None, files: list[FileOp] | None = None) -> CellRecord:
        """The record of a run, from its result, the ledger's full (unbounded) call records and
        what its done frame reported (``facts``, as ``_replay.kernel_facts`` checked them), the
        run's flow context and the ``session.files`` operations laid before it."""
        status: Literal["completed", "raised", "inexact"] = "completed"
        reason = None
        if result.state_lost or result.termination in ("timeout", "output_limit", "killed", "interrupted", "rejected"):
            status, reason = "inexact", result.reason or f"the run ended with {result.termination}"
        elif result.error is not None:
            status = "raised"
        unkept = next((r for r in result.egress if r.allowed and (r.tunnel or r.response is None)), None)
        if status != "inexact" and unkept is not None:
            status = "inexact"
            reason = (f"its request to {unkept.host}:{unkept.port} went through a TLS tunnel, which cannot be "
                      "replayed" if unkept.tunnel else
                      f"the response of {unkept.host}:{unkept.port}{unkept.path[:100]} was not kept (over "
                      "Egress.max_kept_bytes, or cut)")
        facts = facts or {}
        return cls(index=index, code=code, status=status, reason=reason, calls=records,
                   error_type=result.error.type if result.error else None,
                   error_lineno=result.error.lineno if result.error else None, duration_ms=result.duration_ms,
                   timeout_s=timeout_s, output_digest=output_digest(result), lanes=facts.get("lanes"),
                   threads=facts.get("threads"), children=facts.get("children"),
                   egress=[KeptEgress(**r.model_dump(), response=r.response) for r in result.egress],
                   flow_context=flow_context, files=files or [])


#: A default repr's address (``<Box object at 0x7f…>``): another one in every process, not behaviour.
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+>")


def output_digest(result: ExecutionResult) -> str:
    """What a run wrote, in short: equal for equal output (the kept text and whether it was cut;
    object addresses in default reprs left out)."""
    if not (result.stdout or result.stderr or result.stdout_truncated or result.stderr_truncated):
        return _NO_OUTPUT  # most cells write nothing
    return _digest(result.stdout, result.stderr, result.stdout_truncated, result.stderr_truncated)


def _digest(stdout: str, stderr: str, stdout_truncated: bool, stderr_truncated: bool) -> str:
    text = _ADDRESS.sub(" at 0x?>", json.dumps([stdout, stderr, stdout_truncated, stderr_truncated]))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


_NO_OUTPUT = _digest("", "", False, False)


class SkippedCell(BaseModel):
    """A cell left out of a snapshot taken with ``allow_inexact=True``."""

    index: int
    reason: str
    code: str


class SnapshotFile(BaseModel):
    """A regular file of the workspace; ``data`` is base64."""

    path: str
    data: str
    mode: int = 0o644

    def content(self) -> bytes:
        return base64.b64decode(self.data)


class Snapshot(BaseModel):
    """A session's state as replayable cells plus workspace files. See the module docstring."""

    model_config = ConfigDict(extra="forbid")

    version: int = VERSION
    created_at: float = Field(default_factory=time.time)
    cells: list[CellRecord]
    skipped: list[SkippedCell] = Field(default_factory=list)
    #: The workspace's files, laid over it after the replay; None: not laid (the workspace is what
    #: the replay makes, each cell's ``files`` included: a cluster caller's replay log).
    files: list[SnapshotFile] | None = Field(default_factory=list)
    config: SandboxConfig
    image: str | None = None
    toolset_fingerprint: str
    #: Under a data-flow policy: the session's context (``Session.flow_context``) when it was taken.
    flow_context: list[str] | None = None

    @property
    def call_count(self) -> int:
        return sum(len(c.calls) for c in self.cells)

    def save(self, path: str | os.PathLike[str], *, key: bytes | None = None) -> Path:
        """Write the snapshot, authenticated with ``key`` (default: this host's key)."""
        secret = key if key is not None else host_key()
        payload = zlib.compress(self.model_dump_json().encode(), 6)
        return write_signed(path, payload, secret)  # mode 0600, atomically

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, key: bytes | None = None,
             max_bytes: int = MAX_FILE_BYTES) -> Snapshot:
        """Read and authenticate a snapshot; raises :class:`SnapshotInvalid` and loads nothing when
        the file is not a snapshot, of another version, signed with another key, or modified, or
        when the file or its inflated payload is over ``max_bytes``."""
        secret = key if key is not None else host_key()
        text = read_signed(path, secret, max_bytes)  # authenticated before a byte is inflated
        try:
            return cls.model_validate_json(text)
        except ValidationError as exc:  # authentic but unreadable: a version skew
            raise SnapshotInvalid(f"{path}: authentic but unreadable snapshot: {str(exc)[:300]}") from None


def default_key_path() -> Path:
    return cache_dir() / "snapshot.key"


def host_key(path: str | os.PathLike[str] | None = None) -> bytes:
    """This host's snapshot key, made (random, mode 0600) on first use."""
    where = Path(path) if path is not None else default_key_path()
    try:
        data = where.read_bytes()
    except FileNotFoundError:
        where.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            fd = os.open(where, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process made it first
            data = where.read_bytes()
        else:
            data = secrets.token_bytes(_KEY_BYTES)
            with os.fdopen(fd, "wb") as out:
                out.write(data)
    if len(data) < 16:
        raise SnapshotError(f"the snapshot key {where} is too short ({len(data)} bytes; at least 16)")
    return data


def toolset_fingerprint(specs: list[ToolSpec]) -> str:
    """A hash of the tools' names and input schemas: replay answers calls by name and arguments."""
    canonical = json.dumps([[s.name, s.input_schema] for s in specs], sort_keys=True, default=repr)
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]
