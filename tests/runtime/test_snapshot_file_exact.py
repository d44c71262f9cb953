"""The snapshot file's signature covers every byte: a change of any single byte of the header line
or of the body is refused, each refusal with its own reason; and the write's exact shape."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import stat
import threading
import zlib
from pathlib import Path

import pytest

from codeact.errors import SnapshotInvalid
from codeact.runtime import _snapshot_file as sf

KEY = b"s" * 32
BODY = zlib.compress(json.dumps({"cells": list(range(50)), "text": "é" * 40}).encode())


def _written(tmp_path: Path) -> tuple[Path, bytes]:
    path = sf.write_signed(tmp_path / "s.snap", BODY, KEY)
    return path, path.read_bytes()


def test_write_signed_has_the_documented_layout(tmp_path: Path) -> None:
    path, raw = _written(tmp_path)
    line, _, body = raw.partition(b"\n")
    header = json.loads(line)
    assert body == BODY and list(header) == ["format", "version", "key_id", "mac"]
    assert header["format"] == "codeact-snapshot" and header["version"] == 2
    assert header["key_id"] == hashlib.sha256(b"codeact-snapshot-key\0" + KEY).hexdigest()[:16]
    signed = json.dumps({k: header[k] for k in ("format", "key_id", "version")}, separators=(",", ":")).encode()
    assert header["mac"] == hmac.new(KEY, signed + b"\n" + BODY, hashlib.sha256).hexdigest()
    assert b" " not in line and stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["s.snap"]  # no temporary left
    assert sf.read_signed(path, KEY, 1 << 20) == zlib.decompress(BODY)


def test_every_single_byte_change_is_refused(tmp_path: Path) -> None:
    path, raw = _written(tmp_path)
    newline = raw.index(b"\n")
    for i in range(len(raw)):
        if i == newline:
            continue
        changed = bytearray(raw)
        changed[i] ^= 0x01
        path.write_bytes(bytes(changed))
        with pytest.raises(SnapshotInvalid):
            sf.read_signed(path, KEY, 1 << 20)
    path.write_bytes(raw)
    assert sf.read_signed(path, KEY, 1 << 20) == zlib.decompress(BODY)


def test_each_refusal_names_its_reason(tmp_path: Path) -> None:
    path, raw = _written(tmp_path)
    line, _, body = raw.partition(b"\n")
    header = json.loads(line)

    def refused(data: bytes, key: bytes = KEY, limit: int = 1 << 20) -> str:
        path.write_bytes(data)
        with pytest.raises(SnapshotInvalid) as caught:
            sf.read_signed(path, key, limit)
        return str(caught.value)

    assert "modified after it was saved" in refused(line + b"\n" + body[:-1] + bytes([body[-1] ^ 1]))
    assert "modified after it was saved" in refused(raw + b"x")
    foreign = refused(raw, key=b"t" * 32)
    assert "signed with another key" in foreign and header["key_id"] in foreign and sf.key_id(b"t" * 32) in foreign
    relabelled = json.dumps({**header, "key_id": "0" * 16}, separators=(",", ":")).encode()
    assert "signed with another key" in refused(relabelled + b"\n" + body)
    assert "not a codeact snapshot" in refused(b"no newline here")
    assert "no header line" in refused(b"{not json\n" + body)
    assert "not a codeact snapshot" in refused(b"[1]\n" + body)
    assert "not a codeact snapshot" in refused(json.dumps({**header, "format": "other"}).encode() + b"\n")
    assert "format version 3" in refused(json.dumps({**header, "version": 3}).encode() + b"\n" + body)
    assert "format version True" in refused(json.dumps({**header, "version": True}).encode() + b"\n" + body)
    assert "format version 2.0" in refused(json.dumps({**header, "version": 2.0}).encode() + b"\n" + body)
    assert "no mac" in refused(json.dumps({**header, "mac": 5}).encode() + b"\n" + body)
    old = b'{"format": "codeact-snapshot", "version": 1, "payload": "' + b"A" * 600 + b'"}'
    assert "format version 1;" in refused(old)
    assert "over the snapshot limit of 10" in refused(raw, limit=10)


def test_file_size_bound_is_exact(tmp_path: Path) -> None:
    text = os.urandom(3000)  # does not compress: the file is the larger of the two
    path = _signed_file(tmp_path, zlib.compress(text))
    size = path.stat().st_size
    assert size > len(text)
    assert sf.read_signed(path, KEY, size) == text  # a file of exactly the limit
    with pytest.raises(SnapshotInvalid, match=f"{size} bytes is over the snapshot limit of {size - 1}"):
        sf.read_signed(path, KEY, size - 1)


def test_a_header_line_at_the_length_bound(tmp_path: Path) -> None:
    """The header is looked for in the first 512 bytes: a longer line is no header."""
    path = tmp_path / "h.snap"
    mac = sf._signer(KEY, {"format": sf.FORMAT, "version": sf.VERSION, "key_id": sf.key_id(KEY)})
    mac.update(BODY)
    header = {"format": sf.FORMAT, "version": sf.VERSION, "key_id": sf.key_id(KEY), "mac": mac.hexdigest()}
    line = json.dumps(header, separators=(",", ":")).encode()
    padded = line[:-1] + b"," + b'"x":"' + b"y" * (511 - len(line) - 7) + b'"}'
    assert len(padded) == 511
    path.write_bytes(padded + b"\n" + BODY)
    assert sf.read_signed(path, KEY, 1 << 20) == zlib.decompress(BODY)  # newline is byte 512: found
    longer = padded[:-2] + b'y"}'
    path.write_bytes(longer + b"\n" + BODY)
    with pytest.raises(SnapshotInvalid, match="not a codeact snapshot"):
        sf.read_signed(path, KEY, 1 << 20)


def _signed_file(tmp_path: Path, body: bytes) -> Path:
    return sf.write_signed(tmp_path / "b.snap", body, KEY)


def test_authentic_but_unreadable_bodies(tmp_path: Path) -> None:
    for body, reason in ((b"not zlib", "unreadable snapshot: "), (BODY[:-3], "cut or followed"),
                         (BODY + b"tail", "cut or followed")):
        path = _signed_file(tmp_path, body)
        with pytest.raises(SnapshotInvalid, match=reason):
            sf.read_signed(path, KEY, 1 << 20)


def test_inflated_size_bound_is_exact(tmp_path: Path) -> None:
    text = b"a" * 5000
    path = _signed_file(tmp_path, zlib.compress(text))
    assert sf.read_signed(path, KEY, 5000) == text
    with pytest.raises(SnapshotInvalid, match="inflates past the snapshot limit of 4999"):
        sf.read_signed(path, KEY, 4999)


def test_bodies_of_several_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sf, "CHUNK", 7)
    text = os.urandom(300)
    path = _signed_file(tmp_path, zlib.compress(text))
    assert sf.read_signed(path, KEY, 1 << 20) == text
    raw = path.read_bytes()
    changed = bytearray(raw)
    changed[-1] ^= 0x80
    path.write_bytes(bytes(changed))
    with pytest.raises(SnapshotInvalid, match="modified"):
        sf.read_signed(path, KEY, 1 << 20)


def test_write_over_a_symlink_replaces_the_link_not_its_target(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_bytes(b"keep")
    link = tmp_path / "s.snap"
    link.symlink_to(target)
    sf.write_signed(link, BODY, KEY)
    assert target.read_bytes() == b"keep" and not link.is_symlink()
    assert sf.read_signed(link, KEY, 1 << 20) == zlib.decompress(BODY)


def test_a_failed_write_leaves_no_temporary(tmp_path: Path) -> None:
    (tmp_path / "dir.snap").mkdir()
    with pytest.raises(OSError):
        sf.write_signed(tmp_path / "dir.snap", BODY, KEY)  # the rename onto a directory fails
    assert [p.name for p in tmp_path.iterdir()] == ["dir.snap"]


def test_missing_file_is_refused_clearly(tmp_path: Path) -> None:
    with pytest.raises(SnapshotInvalid, match="cannot read snapshot"):
        sf.read_signed(tmp_path / "none", KEY, 100)
    with pytest.raises(SnapshotInvalid, match="is not a regular file"):
        sf.read_signed(tmp_path, KEY, 100)


def test_refusal_messages_are_exact(tmp_path: Path) -> None:
    path, raw = _written(tmp_path)
    _, _, body = raw.partition(b"\n")
    with pytest.raises(SnapshotInvalid, match=r"^cannot read snapshot .*none: No such file or directory$"):
        sf.read_signed(tmp_path / "none", KEY, 100)
    path.write_bytes(b"\n" + body)
    with pytest.raises(SnapshotInvalid, match="no header line"):  # an empty first line is a line
        sf.read_signed(path, KEY, 1 << 20)
    long_id = json.dumps({"format": sf.FORMAT, "version": 2, "key_id": "0123456789abcdefXYZ", "mac": "0"}).encode()
    path.write_bytes(long_id + b"\n" + body)
    with pytest.raises(SnapshotInvalid, match=r"key id '0123456789abcdef'\)?,"):
        sf.read_signed(path, KEY, 1 << 20)


def test_a_fifo_without_a_writer_is_refused_without_waiting_for_one(tmp_path: Path) -> None:
    fifo = tmp_path / "f.snap"
    os.mkfifo(fifo)
    wrote: list[bool] = []

    def writer() -> None:  # ends a reader that wrongly waits for a writer, so the suite never hangs
        wrote.append(True)
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

    timer = threading.Timer(5, writer)
    timer.start()
    try:
        with pytest.raises(SnapshotInvalid, match="is not a regular file"):
            sf.read_signed(fifo, KEY, 100)
    finally:
        timer.cancel()
    assert wrote == []  # refused before any writer came


def _grow_after(monkeypatch: pytest.MonkeyPatch, step: str, path: Path) -> None:
    """Append bytes to ``path`` right after read_signed's ``step`` (the file grows while it is read)."""
    real = getattr(sf, step)

    def grown(*args: object) -> object:
        out = real(*args)
        with open(path, "ab") as f:
            f.write(b"\0" * 10)
        return out

    monkeypatch.setattr(sf, step, grown)


@pytest.mark.parametrize("step", ["_header", "_hash_body"])
def test_a_file_growing_past_the_limit_between_passes_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str) -> None:
    path, raw = _written(tmp_path)
    _grow_after(monkeypatch, step, path)
    with pytest.raises(SnapshotInvalid, match=r"over the snapshot limit \(it grew while it was read\)"):
        sf.read_signed(path, KEY, len(raw))
