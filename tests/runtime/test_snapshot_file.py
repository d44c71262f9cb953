"""The snapshot file (issue 25, finding 8): the MAC is checked in one streaming pass before a byte
of the body is inflated or parsed, so an unsigned or forged file of any size costs about one read
chunk; files are written 0600 whatever the umask; version 1 files and FIFOs are refused clearly."""

from __future__ import annotations

import io
import json
import os
import threading
import tracemalloc
import zlib
from pathlib import Path

import pytest

from codeact import SandboxConfig, Snapshot, SnapshotInvalid
from codeact.runtime._snapshot_file import CHUNK, _hash_body, _inflate, _signer, key_id
from codeact.runtime.snapshot import CellRecord, SnapshotFile

KEY = b"k" * 32
BIG = 64 << 20


def _snapshot() -> Snapshot:
    return Snapshot(cells=[CellRecord(index=1, code="x = 1", status="completed")], files=[SnapshotFile(path="a.txt", data="aGk=")],
                    config=SandboxConfig(backend="local"), toolset_fingerprint="f" * 32)


def _header(**fields: object) -> bytes:
    header = {"format": "codeact-snapshot", "version": 2, "key_id": key_id(KEY), "mac": "0" * 64, **fields}
    return json.dumps(header).encode() + b"\n"


def _peak_of_refusal(path: Path) -> tuple[int, str]:
    """The peak of traced memory while ``path`` is refused, and why it was."""
    tracemalloc.start()
    try:
        with pytest.raises(SnapshotInvalid) as refused:
            Snapshot.load(path, key=KEY)
        return tracemalloc.get_traced_memory()[1], str(refused.value)
    finally:
        tracemalloc.stop()


def test_a_forged_large_file_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    forged = tmp_path / "forged.snap"
    with forged.open("wb") as out:  # a header line that looks right, then 64 MiB no key signed
        out.write(_header())
        for _ in range(BIG // CHUNK):
            out.write(os.urandom(1024) * (CHUNK // 1024))
    peak, why = _peak_of_refusal(forged)
    assert peak < 3 * CHUNK and "modified after it was saved" in why, (peak, why)
    bomb = tmp_path / "bomb.snap"  # a small file that would inflate to 512 MiB: never inflated
    inflater = zlib.compressobj(9)
    with bomb.open("wb") as out:
        out.write(_header(key_id="someone else"))
        zeros = bytes(CHUNK)
        for _ in range(512):
            out.write(inflater.compress(zeros))
        out.write(inflater.flush())
    assert bomb.stat().st_size < 1 << 20
    peak, why = _peak_of_refusal(bomb)
    assert peak < 3 * CHUNK and "signed with another key" in why, (peak, why)
    old = tmp_path / "old.snap"  # version 1: one JSON document, the payload in base64
    with old.open("wb") as out:
        out.write(b'{"format": "codeact-snapshot", "version": 1, "key_id": "x", "mac": "y", "payload": "')
        out.write(b"A" * BIG)
        out.write(b'"}')
    peak, why = _peak_of_refusal(old)
    assert peak < 3 * CHUNK and "format version 1; this codeact reads version 2" in why, (peak, why)


def test_snapshot_files_are_private_whatever_the_umask(tmp_path: Path) -> None:
    before = os.umask(0)
    try:
        path = _snapshot().save(tmp_path / "s.snap", key=KEY)
        path.chmod(0o666)
        _snapshot().save(path, key=KEY)  # replaced by a new file, not rewritten in place
    finally:
        os.umask(before)
    assert path.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.snap"]  # no temporary left behind
    assert Snapshot.load(path, key=KEY).cells[0].code == "x = 1"


def test_a_modified_cut_or_foreign_file_is_refused(tmp_path: Path) -> None:
    path = _snapshot().save(tmp_path / "s.snap", key=KEY)
    data = path.read_bytes()
    line, body = data.split(b"\n", 1)
    cases = {
        "flipped": (line + b"\n" + body[:5] + bytes([body[5] ^ 1]) + body[6:], "modified after it was saved"),
        "cut": (line + b"\n" + body[:-3], "modified after it was saved"),
        "newer": (line.replace(b'"version":2', b'"version":99') + b"\n" + body, "format version 99"),
        "alien": (b"{not json", "not a codeact snapshot"),
        "no header": (b"[1, 2]\n" + body, "not a codeact snapshot"),
    }
    for name, (content, match) in cases.items():
        where = tmp_path / name
        where.write_bytes(content)
        with pytest.raises(SnapshotInvalid, match=match):
            Snapshot.load(where, key=KEY)
    with pytest.raises(SnapshotInvalid, match="signed with another key"):
        Snapshot.load(path, key=b"another host's key, 32 bytes...")
    assert Snapshot.load(path, key=KEY).files[0].content() == b"hi"


def test_a_fifo_where_the_file_was_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "s.snap"
    os.mkfifo(fifo)
    # Without O_NONBLOCK the open itself would wait for a writer: one comes after a while, so a
    # reader that blocks ends (with another error) instead of hanging the suite.
    writer = threading.Timer(10, lambda: os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)))
    writer.start()
    try:
        with pytest.raises(SnapshotInvalid, match="is not a regular file"):
            Snapshot.load(fifo, key=KEY)
    finally:
        writer.cancel()


def test_a_file_that_grows_while_it_is_read_is_refused() -> None:
    """Both passes stop at the size the file had when it was opened (its bytes past it were
    appended meanwhile): neither reads on without end."""
    body = zlib.compress(b"{}")
    signer = _signer(KEY, {"format": "codeact-snapshot"})
    with pytest.raises(SnapshotInvalid, match="grew while it was read"):
        _hash_body(io.BytesIO(body + bytes(CHUNK)), signer, len(body), "f")
    with pytest.raises(SnapshotInvalid, match="grew while it was read"):
        _inflate(io.BytesIO(body + bytes(CHUNK)), signer, len(body), 1 << 20, "f")
    assert _inflate(io.BytesIO(body), signer, len(body), 1 << 20, "f") == b"{}"
