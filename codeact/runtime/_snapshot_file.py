"""The snapshot file: a signed header line, then the zlib-compressed snapshot JSON.

    {"format": "codeact-snapshot", "version": 2, "key_id": "<16 hex>", "mac": "<64 hex>"}\\n
    <zlib stream of the snapshot's JSON>

``mac`` is HMAC-SHA256, under the host key, over the header without ``mac`` (its canonical JSON:
sorted keys, no spaces) and a newline, then the body's bytes. So a reader checks it in one pass
over the file in fixed-size chunks, before it inflates or parses a byte of the body; an unsigned
or modified file costs one chunk of memory whatever its size. The body is then read again,
hashed again as it is inflated (the second digest must match too: the file may have changed
between the passes), and parsed only after that. A file is written 0600 (``O_CREAT | O_EXCL |
O_NOFOLLOW`` on a temporary name in the same directory, then an atomic rename): it holds every
tool result and workspace file of the session.

Version 1 files (one JSON object with the payload in base64) are refused with a clear error rather
than read: their MAC could be checked only once the whole file was in memory.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import re
import secrets
import stat
import zlib
from pathlib import Path
from typing import Any

from ..errors import SnapshotInvalid

FORMAT = "codeact-snapshot"
VERSION = 2
#: How much of the file one read takes (and about all an unsigned file costs to refuse).
CHUNK = 1 << 20
#: The header line is at most this long.
_MAX_HEADER = 512
_OLD_VERSION = re.compile(rb'^\{"format": "codeact-snapshot", "version": (-?\d{1,9})\b')


def key_id(secret: bytes) -> str:
    """A short public name of a key (not the key): tells a foreign snapshot from a modified one."""
    return hashlib.sha256(b"codeact-snapshot-key\0" + secret).hexdigest()[:16]


def _signer(secret: bytes, header: dict[str, Any]) -> hmac.HMAC:
    canonical = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    return hmac.new(secret, canonical + b"\n", hashlib.sha256)


def write_signed(path: str | os.PathLike[str], body: bytes, secret: bytes) -> Path:
    """Write ``body`` (the compressed snapshot JSON) signed with ``secret``, mode 0600, atomically."""
    header: dict[str, Any] = {"format": FORMAT, "version": VERSION, "key_id": key_id(secret)}
    signer = _signer(secret, header)
    signer.update(body)
    line = json.dumps({**header, "mac": signer.hexdigest()}, separators=(",", ":")).encode() + b"\n"
    target = Path(path)
    temp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(line)
            out.write(body)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, target)  # a reader never sees half a file
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    return target


def read_signed(path: str | os.PathLike[str], secret: bytes, max_bytes: int) -> bytearray:
    """The snapshot JSON of a file :func:`write_signed` wrote with ``secret``, inflated (at most
    ``max_bytes`` of it, from a file of at most ``max_bytes``). Raises SnapshotInvalid."""
    where = str(path)
    try:
        # O_NONBLOCK: a FIFO put where the file was must not hold the reader (fstat refuses it).
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise SnapshotInvalid(f"cannot read snapshot {where}: {exc.strerror or exc}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):  # before fdopen, which raises IsADirectoryError on a directory
        os.close(fd)
        raise SnapshotInvalid(f"{where} is not a regular file")
    with os.fdopen(fd, "rb", buffering=0) as stream:
        if info.st_size > max_bytes:
            raise SnapshotInvalid(f"{where}: {info.st_size} bytes is over the snapshot limit of {max_bytes}")
        os.set_blocking(fd, True)
        header, mac, start = _header(stream, where)
        signer = _signer(secret, header)
        stream.seek(start)
        _hash_body(stream, signer, max_bytes - start, where)
        if not hmac.compare_digest(mac, signer.hexdigest()):
            if header["key_id"] != key_id(secret):
                raise SnapshotInvalid(
                    f"{where} was signed with another key (key id {str(header['key_id'])[:16]!r}, this host's "
                    f"is {key_id(secret)!r}); load it with the key that saved it")
            raise SnapshotInvalid(f"{where} was modified after it was saved (authentication failed)")
        stream.seek(start)
        signer = _signer(secret, header)
        text = _inflate(stream, signer, max_bytes - start, max_bytes, where)
        if not hmac.compare_digest(mac, signer.hexdigest()):
            raise SnapshotInvalid(f"{where} changed while it was read (authentication failed)")
    return text


def _header(stream: Any, where: str) -> tuple[dict[str, Any], str, int]:
    """The header line: (the signed header, its mac, where the body starts)."""
    head = stream.read(_MAX_HEADER)
    end = head.find(b"\n")
    if end < 0:
        old = _OLD_VERSION.match(head)
        if old is not None:
            raise SnapshotInvalid(f"{where} is a snapshot of format version {int(old.group(1))}; this codeact "
                                  f"reads version {VERSION} (take the snapshot again, or remove the file)")
        raise SnapshotInvalid(f"{where} is not a codeact snapshot")
    try:
        document = json.loads(head[:end])
    except ValueError:
        raise SnapshotInvalid(f"{where} is not a codeact snapshot (no header line)") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise SnapshotInvalid(f"{where} is not a codeact snapshot")
    version = document.get("version")
    if version != VERSION or type(version) is not int:
        raise SnapshotInvalid(f"{where} is a snapshot of format version {version!r}; this codeact reads "
                              f"version {VERSION}")
    mac = document.get("mac")
    if not isinstance(mac, str):
        raise SnapshotInvalid(f"{where} is a damaged snapshot (no mac)")
    return {"format": FORMAT, "version": VERSION, "key_id": document.get("key_id")}, mac, end + 1


def _hash_body(stream: Any, signer: hmac.HMAC, limit: int, where: str) -> None:
    """Hash the body from where it starts, a chunk at a time, reading at most ``limit`` bytes of it."""
    seen = 0
    while chunk := stream.read(CHUNK):
        seen += len(chunk)
        if seen > limit:  # the file grew while it was read
            raise SnapshotInvalid(f"{where} is over the snapshot limit (it grew while it was read)")
        signer.update(chunk)


def _inflate(stream: Any, signer: hmac.HMAC, limit: int, max_bytes: int, where: str) -> bytearray:
    """Read the body again (at most ``limit`` bytes of it), hashing and inflating it (at most
    ``max_bytes`` of text)."""
    inflater = zlib.decompressobj()
    text = bytearray()
    seen = 0
    try:
        while chunk := stream.read(CHUNK):
            seen += len(chunk)
            if seen > limit:
                raise SnapshotInvalid(f"{where} is over the snapshot limit (it grew while it was read)")
            signer.update(chunk)
            text += inflater.decompress(chunk, max_bytes - len(text) + 1)
            if len(text) > max_bytes:
                raise SnapshotInvalid(f"{where}: the payload inflates past the snapshot limit of {max_bytes} bytes")
        text += inflater.flush()
    except zlib.error as exc:
        raise SnapshotInvalid(f"{where}: authentic but unreadable snapshot: {exc}") from None
    if not inflater.eof or inflater.unused_data or len(text) > max_bytes:
        raise SnapshotInvalid(f"{where}: authentic but unreadable snapshot (the compressed body is cut or "
                              "followed by other bytes)")
    return text
