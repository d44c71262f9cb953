"""Frames, property-based: any JSON message survives encode → socket → decode unchanged; the
bracket-count nesting check agrees with a walk of the value; well-formed frames of every declared
type pass :func:`problem` and each single wrong field is refused, naming it; and exact bounds."""

from __future__ import annotations

import socket
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from codeact.kernel.frames import CODE_ERROR, FRAMES, MAX_CHUNKS, Field, problem
from codeact.kernel.protocol import FrameSocket, _nests_deeper, decode_bounded, encode, too_deep

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20)


@settings(max_examples=50, deadline=None)
@given(st.dictionaries(st.text(max_size=5).filter(lambda k: k != "type"), _JSON, max_size=4), st.text(max_size=6))
def test_encode_then_read_gives_the_message_back(fields: dict[str, Any], kind: str) -> None:
    message = {"type": kind, **fields}
    frame = encode(message)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    a, b = socket.socketpair()
    with a, b:
        a.sendall(frame + frame)
        reader = FrameSocket(b)
        assert decode_bounded(reader.recv_body()) == message
        assert reader.last_size == len(frame) - 4
        assert decode_bounded(reader.recv_body()) == message  # the next frame starts where this one ended


def _nest(depth: int, leaf: Any) -> Any:
    for i in range(depth):
        leaf = [leaf] if i % 2 else {"k": leaf, "s": "]]{{"}
    return leaf


@settings(max_examples=50, deadline=None)
@given(_JSON, st.integers(0, 6))
def test_nesting_checks_agree(value: Any, limit: int) -> None:
    body = encode({"type": "x", "v": value})[4:]
    # the frame's own object is one level more than the value's
    assert _nests_deeper(body, limit + 1) == too_deep(value, limit)


def test_nesting_bound_is_exact() -> None:
    for depth in range(1, 6):
        body = encode({"type": "x", "v": _nest(depth, 1)})[4:]
        assert too_deep(_nest(depth, 1), depth - 1) and not too_deep(_nest(depth, 1), depth)
        assert _nests_deeper(body, depth) and not _nests_deeper(body, depth + 1)


def _valid(field: Field) -> st.SearchStrategy[Any]:
    if field.kind == "any":
        return _JSON
    if field.kind == "error":
        return st.fixed_dictionaries({"type": st.text(max_size=5), "message": st.text(max_size=5)},
                                     optional={"lineno": st.none() | st.integers(), "traceback": st.text(max_size=5)})
    if field.kind == "chunks":
        return st.lists(st.tuples(st.sampled_from(["stdout", "stderr"]), st.text(max_size=4)).map(list), max_size=3)
    if field.choices:
        return st.sampled_from(field.choices)
    base: st.SearchStrategy[Any] = {
        "str": st.text(max_size=min(field.max_len or 8, 8)), "int": st.integers(min_value=field.minimum),
        "bool": st.booleans(), "dict": st.dictionaries(st.text(max_size=3), _JSON, max_size=2)}[field.kind]
    return base | st.none() if field.nullable else base


def _frames() -> st.SearchStrategy[dict[str, Any]]:
    def one(kind: str) -> st.SearchStrategy[dict[str, Any]]:
        fields = {n: f for n, f in FRAMES[kind].items() if n != "type"}
        return st.fixed_dictionaries({n: _valid(f) for n, f in fields.items() if f.required},
                                     optional={n: _valid(f) for n, f in fields.items() if not f.required}).map(
            lambda d: {"type": kind, **d})
    return st.sampled_from(sorted(FRAMES)).flatmap(one)


def _wrong(field: Field) -> Any:
    """A value of another kind than ``field``'s (never null: null is its own rule)."""
    return {"str": 1, "int": True, "bool": 0, "dict": [], "error": "e", "chunks": {}}[field.kind]


@settings(max_examples=50, deadline=None)
@given(_frames(), st.data())
def test_declared_frames_pass_and_each_wrong_field_is_named(frame: dict[str, Any], data: st.DataObject) -> None:
    assert problem(frame) is None
    fields = FRAMES[frame["type"]]
    typed = [n for n, f in fields.items() if f.kind != "any" and n != "type"]
    if typed:
        name = data.draw(st.sampled_from(typed))
        issue = problem({**frame, name: _wrong(fields[name])})
        assert issue is not None and issue.startswith(f"{name}: must be")
    required = [n for n, f in fields.items() if f.required and n != "type"]
    if required:
        name = data.draw(st.sampled_from(required))
        assert problem({k: v for k, v in frame.items() if k != name}) == f"{name}: missing"
    assert problem({**frame, "zz": 1}) == "zz: unknown field"


def test_field_bounds_are_exact() -> None:
    call = {"type": "call", "seq": 1, "name": "n" * 512}
    assert problem(call) is None
    assert problem({**call, "name": "n" * 513}) == "name: longer than 512"
    assert problem({**call, "seq": 0}) == "seq: less than 1"
    assert problem({**call, "seq": None}) == "seq: must not be null"
    done = {"type": "done", "id": "r", "termination": "completed"}
    assert problem({**done, "termination": "other"}) == "termination: must be one of completed, error, output_limit"
    assert problem({**done, "error": None}) is None and problem({**done, "final": None}) is None
    assert problem({**done, "error": {"type": "E", "message": "m" * 20_001}}) == "error.message: longer than 20000"
    assert problem({**done, "error": {"type": "E"}}) == "error.message: missing"
    assert problem({**done, "error": []}) == "error: must be an object, not list"
    assert problem({**done, "stdout_truncated": 1}) == "stdout_truncated: must be bool, not int"
    out = {"type": "output", "id": "r", "chunks": [["stdout", "x"]] * MAX_CHUNKS}
    assert problem(out) is None
    assert problem({**out, "chunks": [["stdout", "x"]] * (MAX_CHUNKS + 1)}) == f"chunks: more than {MAX_CHUNKS} items"
    for bad in (["stdout"], ["other", "x"], ["stdout", 1], ("stdout", "x"), ["stdout", "x", "y"]):
        assert problem({**out, "chunks": [["stderr", "ok"], bad]}) == (
            "chunks.1: must be a [stream, text] pair with stream stdout or stderr")
    assert problem({**out, "chunks": "x"}) == "chunks: must be a list, not str"
    assert problem([]) == "frame: must be an object, not list"
    assert problem({"type": 3}) == "type: unknown frame type '3'"
    assert problem({"type": "nope" * 20}) == f"type: unknown frame type {('nope' * 20)[:40]!r}"
    assert problem({**call, "k" * 50: 1}) == f"{'k' * 40}: unknown field"
    assert problem({"type": "E"}, CODE_ERROR, "error") == "error.message: missing"
    assert problem("x", CODE_ERROR, "error") == "error: must be an object, not str"
    assert repr(FRAMES["call"]["seq"]) == "Field('seq', 'int')"
