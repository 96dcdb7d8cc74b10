"""The pickle opcodes a checkpoint uses rarely, one small function each; the frequent ones are inlined in
unpickler.py's loop. Each takes the Unpickler and the position after its opcode byte, and returns the next position.
Container opcodes check their target's type (APPEND only to lists, SETITEM only to dicts) and every key.
"""

from __future__ import annotations

import pickletools
import struct
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from serve.errors import CheckpointError
from serve.serialization.limits import check_key

if TYPE_CHECKING:
    from serve.serialization.unpickler import Unpickler

U8, U16, U32, U64 = struct.Struct("<B"), struct.Struct("<H"), struct.Struct("<I"), struct.Struct("<Q")
_I32, _F64 = struct.Struct("<i"), struct.Struct(">d")
_OPNAMES = {op.code.encode("latin-1")[0]: op.name for op in pickletools.opcodes}


class PickleTruncated(CheckpointError):
    """The pickle ran past the end of the bytes given (the file is cut short, or more bytes are needed)."""


def need(pos: int, n: int, end: int) -> int:
    """The position after an n-byte field at pos, refusing fields longer than what is left."""
    if pos + n > end:
        raise PickleTruncated(f"the pickle is truncated: a {n}-byte field at byte {pos} runs past its end ({end})")
    return pos + n


def refused_opcode(op: int, at: int) -> str:
    name = _OPNAMES.get(op)
    if name is None:
        return f"invalid pickle opcode 0x{op:02x} at byte {at} (corrupt checkpoint?)"
    return (
        f"pickle opcode {name} at byte {at} is not supported by the safe loader: only the opcodes of a "
        "state_dict are allowed"
    )


def _counted(size: struct.Struct, kind: Callable[[bytes], Any]) -> Callable[[Unpickler, int], int]:
    def load(u: Unpickler, pos: int) -> int:
        n = size.unpack_from(u.data, pos)[0]
        pos = need(pos + size.size, n, len(u.data))
        u._stack.append(kind(u.data[pos - n : pos]))
        return pos

    return load


def _text(s: bytes) -> str:
    return str(s, "utf-8", "surrogatepass")


def _int_line(u: Unpickler, pos: int, long: bool) -> int:
    line, pos = u._line(pos)
    if not long and line in ("00", "01"):
        u._stack.append(line == "01")
    else:
        u._stack.append(int(line.rstrip("L")))
    return pos


def _proto(u: Unpickler, pos: int) -> int:
    u.proto = u.data[pos]
    if u.proto > 5:
        raise CheckpointError(f"unsupported pickle protocol {u.proto}")
    return pos + 1


def _frame(u: Unpickler, pos: int) -> int:
    need(pos + 8, U64.unpack_from(u.data, pos)[0], len(u.data))
    return pos + 8  # the whole pickle is in memory: a frame is only a length to check


def _push(value: Any) -> Callable[[Unpickler, int], int]:
    def load(u: Unpickler, pos: int) -> int:
        u._stack.append(value() if callable(value) else value)
        return pos

    return load


def _fixed(fmt: struct.Struct) -> Callable[[Unpickler, int], int]:
    def load(u: Unpickler, pos: int) -> int:
        u._stack.append(fmt.unpack_from(u.data, pos)[0])
        return pos + fmt.size

    return load


def _long(size: struct.Struct) -> Callable[[Unpickler, int], int]:
    def load(u: Unpickler, pos: int) -> int:
        n = size.unpack_from(u.data, pos)[0]
        if n > 4096:  # a 32 kbit integer; more is an attack on int parsing, not a checkpoint
            raise CheckpointError(f"refused a {n}-byte integer in the pickle at byte {pos - 1}")
        pos = need(pos + size.size, n, len(u.data))
        u._stack.append(int.from_bytes(u.data[pos - n : pos], "little", signed=True))
        return pos

    return load


def _text_memo(store: bool) -> Callable[[Unpickler, int], int]:
    def load(u: Unpickler, pos: int) -> int:
        line, pos = u._line(pos)
        if store:
            u._memo[int(line)] = u._stack[-1]
        else:
            u._stack.append(u._memo[int(line)])
        return pos

    return load


def _memoize(u: Unpickler, pos: int) -> int:
    u._memo[len(u._memo)] = u._stack[-1]
    return pos


def _tuple3(u: Unpickler, pos: int) -> int:
    s = u._stack
    s[-3:] = [(s[-3], s[-2], s[-1])]
    return pos


def _list_of_mark(u: Unpickler, pos: int) -> int:
    u._stack.append(u._pop_mark())
    return pos


def _dict_of_mark(u: Unpickler, pos: int) -> int:
    target: dict[Any, Any] = {}
    _set_pairs(pos, target, u._pop_mark())
    u._stack.append(target)
    return pos


def _append(u: Unpickler, pos: int) -> int:
    item = u._stack.pop()
    _list_target(u, pos).append(item)
    return pos


def _appends(u: Unpickler, pos: int) -> int:
    items = u._pop_mark()
    _list_target(u, pos).extend(items)
    return pos


def _list_target(u: Unpickler, pos: int) -> list[Any]:
    target = u._stack[-1]
    if type(target) is not list:
        raise CheckpointError(f"refused APPEND to {type(target).__name__} at byte {pos - 1}: only lists grow")
    return target


def _setitem(u: Unpickler, pos: int) -> int:
    value = u._stack.pop()
    key = u._stack.pop()
    _set_pairs(pos, u._stack[-1], [key, value])
    return pos


def _setitems(u: Unpickler, pos: int) -> int:
    items = u._pop_mark()
    _set_pairs(pos, u._stack[-1], items)
    return pos


def _set_pairs(pos: int, target: Any, items: list[Any]) -> None:
    if type(target) is not dict and type(target) is not OrderedDict:
        raise CheckpointError(f"refused SETITEM on {type(target).__name__} at byte {pos - 1}: only dicts take items")
    if len(items) % 2:
        raise CheckpointError(f"malformed pickle: odd number of dict items at byte {pos - 1}")
    for i in range(0, len(items), 2):
        target[check_key(items[i])] = items[i + 1]


def _empty_set(u: Unpickler, pos: int) -> int:
    u._stack.append(set())
    return pos


def _additems(u: Unpickler, pos: int) -> int:
    items = u._pop_mark()
    target = u._stack[-1]
    if type(target) is not set:
        raise CheckpointError(f"refused ADDITEMS on {type(target).__name__} at byte {pos - 1}")
    target.update(map(check_key, items))
    return pos


def _frozenset(u: Unpickler, pos: int) -> int:
    u._stack.append(frozenset(map(check_key, u._pop_mark())))
    return pos


def _pop(u: Unpickler, pos: int) -> int:
    if u._marks and u._marks[-1] == len(u._stack):
        u._marks.pop()
    else:
        u._stack.pop()
    return pos


def _pop_mark(u: Unpickler, pos: int) -> int:
    u._pop_mark()
    return pos


def _dup(u: Unpickler, pos: int) -> int:
    u._stack.append(u._stack[-1])
    return pos


def _global_op(u: Unpickler, pos: int) -> int:
    module, pos = u._line(pos)
    name, pos = u._line(pos)
    u._stack.append(u._global(module, name))
    return pos


def _stack_global(u: Unpickler, pos: int) -> int:
    name = u._stack.pop()
    module = u._stack.pop()
    u._stack.append(u._global(module, name))
    return pos


def _newobj(u: Unpickler, pos: int) -> int:
    args = u._stack.pop()
    cls = u._stack.pop()
    u._stack.append(u._call(cls, args, "NEWOBJ"))
    return pos


def _newobj_ex(u: Unpickler, pos: int) -> int:
    kwargs = u._stack.pop()
    args = u._stack.pop()
    cls = u._stack.pop()
    if type(kwargs) is not dict or len(kwargs):
        raise CheckpointError(f"refused NEWOBJ_EX with keyword arguments at byte {pos - 1}")
    u._stack.append(u._call(cls, args, "NEWOBJ_EX"))
    return pos


def _float_line(u: Unpickler, pos: int) -> int:
    line, pos = u._line(pos)
    u._stack.append(float(line))
    return pos


COLD: dict[int, Callable[[Unpickler, int], int]] = {
    0x80: _proto,
    0x95: _frame,
    0x4A: _fixed(_I32),  # BININT
    0x4D: _fixed(U16),  # BININT2
    0x47: _fixed(_F64),  # BINFLOAT
    0x8A: _long(U8),  # LONG1
    0x8B: _long(U32),  # LONG4
    0x49: lambda u, pos: _int_line(u, pos, long=False),  # INT (protocol 1 writes bools this way)
    0x4C: lambda u, pos: _int_line(u, pos, long=True),  # LONG
    0x46: _float_line,  # FLOAT
    0x4E: _push(None),  # NONE
    0x88: _push(True),  # NEWTRUE
    0x8C: _counted(U8, _text),  # SHORT_BINUNICODE
    0x8D: _counted(U64, _text),  # BINUNICODE8
    0x55: _counted(U8, _text),  # SHORT_BINSTRING (a Python 2 str, decoded as torch.load does: utf-8)
    0x54: _counted(U32, _text),  # BINSTRING
    0x43: _counted(U8, bytes),  # SHORT_BINBYTES
    0x42: _counted(U32, bytes),  # BINBYTES
    0x8E: _counted(U64, bytes),  # BINBYTES8
    0x96: _counted(U64, bytearray),  # BYTEARRAY8
    0x5D: _push(list),  # EMPTY_LIST
    0x7D: _push(dict),  # EMPTY_DICT
    0x8F: _empty_set,
    0x87: _tuple3,
    0x6C: _list_of_mark,  # LIST
    0x64: _dict_of_mark,  # DICT
    0x61: _append,
    0x65: _appends,
    0x73: _setitem,
    0x75: _setitems,
    0x90: _additems,
    0x91: _frozenset,
    0x30: _pop,
    0x31: _pop_mark,
    0x32: _dup,
    0x67: _text_memo(store=False),  # GET
    0x70: _text_memo(store=True),  # PUT
    0x94: _memoize,
    0x63: _global_op,
    0x93: _stack_global,
    0x62: lambda u, pos: u._build(pos),  # BUILD
    0x81: _newobj,
    0x92: _newobj_ex,
}
