"""The restricted unpickler on plain data: it agrees with pickle.loads on every protocol torch can write (1-5),
refuses text-only protocol 0 opcodes it does not need, and bounds nesting depth."""

from __future__ import annotations

import pickle
from collections import OrderedDict

import pytest

from serve.errors import CheckpointError
from serve.serialization.allowlist import find_global
from serve.serialization.limits import MAX_DEPTH, check_depth
from serve.serialization.unpickler import Unpickler


def loads(data: bytes) -> object:
    return Unpickler(data, find_global).load()[0]


def _plain() -> dict:
    cyclic: list = [1]
    cyclic.append(cyclic)
    od = OrderedDict(b=2, a=[1.5, -0.0, float("inf")])
    od._metadata = OrderedDict([("", {"version": 1})])
    return {
        "ints": [0, 1, -1, 255, 256, 65535, 65536, -(2**31), 2**31, 2**63, -(2**200)], "float": 3.25,
        "str": "héllo \u2603", "empty": ["", (), [], {}], "bools": (True, False, None), "nested": {1: {2: (3,)}},
        "od": od, "set": {1, 2, 3}, "complex": 1 + 2j, "bytes": b"\x00\x01\xff" * 3, "bytearray": bytearray(b"ab"),
        "shared": [od, od], "cyclic": cyclic,
    }  # fmt: skip


@pytest.mark.parametrize("protocol", [1, 2, 3, 4, 5])
def test_agrees_with_pickle(protocol: int) -> None:
    data = pickle.dumps(_plain(), protocol=protocol)
    ours, ref = loads(data), pickle.loads(data)
    assert repr(ours) == repr(ref)
    assert ours["od"]._metadata == ref["od"]._metadata
    assert ours["shared"][0] is ours["shared"][1]
    assert ours["cyclic"][1] is ours["cyclic"]


def test_returns_the_end_position_for_pickle_streams() -> None:
    data = pickle.dumps(1, protocol=2) + pickle.dumps("two", protocol=2)
    first, pos = Unpickler(data, find_global).load()
    assert (first, Unpickler(data, find_global).load(pos)[0]) == (1, "two")


def test_protocol_0_text_opcodes_are_refused() -> None:
    with pytest.raises(CheckpointError, match="UNICODE"):
        loads(pickle.dumps(["text"], protocol=0))


def test_frozenset_needs_protocol_4() -> None:
    assert loads(pickle.dumps(frozenset({1}), protocol=4)) == frozenset({1})
    with pytest.raises(CheckpointError, match=r"builtins\.frozenset"):
        loads(pickle.dumps(frozenset({1}), protocol=2))


def test_depth_limit() -> None:
    ok: list = []
    for _ in range(MAX_DEPTH - 1):
        ok = [ok]
    check_depth(ok)
    with pytest.raises(CheckpointError, match="levels deep"):
        loads(pickle.dumps([ok], protocol=2))


def test_depth_counts_shared_subtrees_on_their_longest_path() -> None:
    chain: list = []
    links = [chain]
    for _ in range(MAX_DEPTH + 10):
        chain = [chain]
        links.append(chain)
    with pytest.raises(CheckpointError, match="levels deep"):
        check_depth([links[::-1]])  # every link at depth 2 too; the long path must still be seen


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x80\x02X\xff\xff\xff\x00ab.", "truncated"),
        (b"\x80\x02K\x01K\x02.", "unbalanced stack"),
        (b"\x80\x02h\x05.", "malformed pickle data"),
        (b"\x80\x06N.", "unsupported pickle protocol 6"),
        (b"\x80\x02\xff", "invalid pickle opcode 0xff"),
        (b"\x80\x02}N\x85b.", "refused BUILD"),
        (b"\x80\x02)(K\x01K\x02u.", "refused SETITEM on tuple"),
        (b"\x80\x02}K\x01a.", "refused APPEND to dict"),
        (b"\x80\x02K\x01)R.", "not an allowed call"),
        (b"\x80\x02\x8b\x00\x00\x01\x00" + b"\x00" * 65536 + b".", "65536-byte integer"),
        (b"\x80\x02ccollections\nOrderedDict\n)R}b}b.", "refused BUILD of OrderedDict"),
    ],
)
def test_malformed_pickles(data: bytes, message: str) -> None:
    with pytest.raises(CheckpointError, match=message):
        loads(data)


@pytest.mark.parametrize("key", [2**61, -(2**60), 1.5, (1, 2)])
def test_keys_with_forgeable_hashes_are_refused(key: object) -> None:
    # ints past 2**60, floats and tuples hash deterministically: a file could flood one dict with collisions
    with pytest.raises(CheckpointError, match="as a dict key or set item"):
        loads(pickle.dumps({key: 1}, protocol=2))
    with pytest.raises(CheckpointError, match="as a dict key or set item"):
        loads(pickle.dumps({key}, protocol=4))


def test_memoized_state_cannot_be_built_into_many_dicts() -> None:
    state = {f"k{i}": i for i in range(20_000)}
    data = pickle.dumps([OrderedDict() for _ in range(500)], protocol=2)
    one = pickle.dumps(state, protocol=2)[2:-1] + b"r\x9f\x86\x01\x00"  # the state, memoized as 99999
    body = data[2:-1].replace(b")R", b")Rj\x9f\x86\x01\x00b")  # every OrderedDict built from it
    with pytest.raises(CheckpointError, match="amplification"):
        loads(b"\x80\x02" + one + b"0" + body + b".")
