"""A restricted unpickler: it runs no code a checkpoint names, only the globals the allowlist hands it.

The idea is PyTorch's weights-only unpickler (torch/_weights_only_unpickler.py); the code is our own. The opcodes
are interpreted here rather than by `pickle.Unpickler`, so every risky step is ours to check:
- GLOBAL/STACK_GLOBAL resolve through `find_global` (the allowlist), which refuses anything else by name;
- REDUCE/NEWOBJ call only `SafeCall` objects that the allowlist returned; BUILD only sets the `__dict__` of an
  OrderedDict (a state_dict's `_metadata`), once; APPEND only extends lists, SETITEM only fills dicts;
- INST, OBJ, EXT*, PERSID and out-of-band buffers are refused outright;
- every length is checked against the bytes left before anything is read or allocated, objects made by calls
  (bytes, sets) are charged to a budget proportional to the pickle's size (no "billion laughs" through the
  memo), and limits.py bounds the result's nesting depth and the types of dict keys (no hash flooding).
Any malformed input ends in a CheckpointError that names the opcode and the byte offset. The frequent opcodes
are inlined in the loop below; the rest are in opcodes.py.
"""

from __future__ import annotations

import _compat_pickle
import struct
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from serve.errors import CheckpointError
from serve.serialization.limits import check_depth
from serve.serialization.opcodes import COLD, U32, PickleTruncated, need, refused_opcode

_NAME_LIMIT = 256  # longest module or attribute name a GLOBAL may carry
_SIZED = (bytes, bytearray, str, set, frozenset, list, tuple, dict)


class _Propagate(Exception):
    """Carries an error of a callback (a user's map_location) past the conversion to CheckpointError."""

    def __init__(self, error: Exception) -> None:
        self.error = error


class SafeCall:
    """A callable the allowlist permits: `name` for messages, `fn` our own implementation."""

    __slots__ = ("fn", "name")

    def __init__(self, name: str, fn: Callable[..., Any]) -> None:
        self.name, self.fn = name, fn

    def __repr__(self) -> str:
        return f"<allowed global {self.name}>"


class Unpickler:
    """Loads one pickle from `data[pos:]`. `load()` returns `(object, end position)`."""

    def __init__(self, data: bytes, find_global: Callable[[str, str], Any],
                 persistent_load: Callable[[Any], Any] | None = None) -> None:  # fmt: skip
        self.data = data
        self.find_global = find_global
        self.persistent_load = persistent_load
        self.budget = 4 * len(data) + 65536
        self.proto = 0
        self._stack: list[Any] = []
        self._marks: list[int] = []
        self._memo: dict[int, Any] = {}
        self._built: set[int] = set()

    # -- the loop ------------------------------------------------------------------------------------
    def load(self, pos: int = 0) -> tuple[Any, int]:
        start = pos
        try:
            obj, pos = self._run(pos)
        except CheckpointError:
            raise
        except _Propagate as p:
            raise p.error from None
        except (IndexError, struct.error) as e:
            raise PickleTruncated(f"the pickle starting at byte {start} is truncated or corrupt ({e})") from None
        except (KeyError, ValueError, TypeError, AttributeError, OverflowError, UnicodeDecodeError) as e:
            raise CheckpointError(f"malformed pickle data near byte {pos}: {type(e).__name__}: {e}") from None
        check_depth(obj)
        return obj, pos

    def _run(self, pos: int) -> tuple[Any, int]:
        data, stack, marks, memo = self.data, self._stack, self._marks, self._memo
        end = len(data)
        while True:
            op = data[pos]
            pos += 1
            # the opcodes torch.save emits, most frequent first; the rest are in opcodes.py
            if op == 0x71:  # BINPUT
                memo[data[pos]] = stack[-1]
                pos += 1
            elif op == 0x68:  # BINGET
                stack.append(memo[data[pos]])
                pos += 1
            elif op == 0x28:  # MARK
                marks.append(len(stack))
            elif op == 0x72:  # LONG_BINPUT (past 256 memo entries, every put)
                memo[U32.unpack_from(data, pos)[0]] = stack[-1]
                pos += 4
            elif op == 0x6A:  # LONG_BINGET
                stack.append(memo[U32.unpack_from(data, pos)[0]])
                pos += 4
            elif op == 0x58:  # BINUNICODE
                n = U32.unpack_from(data, pos)[0]
                pos = need(pos + 4, n, end)
                stack.append(str(data[pos - n : pos], "utf-8", "surrogatepass"))
            elif op == 0x4B:  # BININT1
                stack.append(data[pos])
                pos += 1
            elif op == 0x74:  # TUPLE
                k = marks.pop()
                items = tuple(stack[k:])
                del stack[k:]
                stack.append(items)
            elif op == 0x52:  # REDUCE
                args = stack.pop()
                stack[-1] = self._call(stack[-1], args, "REDUCE")
            elif op == 0x86:  # TUPLE2
                stack[-2:] = [(stack[-2], stack[-1])]
            elif op == 0x85:  # TUPLE1
                stack[-1] = (stack[-1],)
            elif op == 0x89:  # NEWFALSE
                stack.append(False)
            elif op == 0x29:  # EMPTY_TUPLE
                stack.append(())
            elif op == 0x51:  # BINPERSID
                stack[-1] = self._persistent(stack[-1])
            elif op == 0x2E:  # STOP
                if len(stack) != 1 or marks:
                    raise CheckpointError(f"malformed pickle: STOP at byte {pos - 1} with an unbalanced stack")
                return stack.pop(), pos
            else:
                handler = COLD.get(op)
                if handler is None:
                    raise CheckpointError(refused_opcode(op, pos - 1))
                pos = handler(self, pos)

    # -- risky steps ---------------------------------------------------------------------------------
    def _call(self, func: Any, args: Any, opname: str) -> Any:
        if type(func) is not SafeCall:
            raise CheckpointError(f"malformed pickle: {opname} on {type(func).__name__}, which is not an allowed call")
        if type(args) is not tuple:
            raise CheckpointError(f"malformed pickle: {opname} of {func.name} with non-tuple arguments")
        try:
            out = func.fn(*args)
        except CheckpointError:
            raise
        except Exception as e:  # a bad argument list from the file, not a bug of ours
            raise CheckpointError(f"invalid call to {func.name} in the checkpoint: {type(e).__name__}: {e}") from None
        self.charge(out)
        return out

    def charge(self, obj: Any) -> None:
        """Count objects made by calls against the budget, so memo references cannot multiply memory."""
        if isinstance(obj, _SIZED):
            self.budget -= len(obj) + 1
            if self.budget < 0:
                raise CheckpointError(
                    "the pickle builds far more data than it contains (an amplification attack?); refusing it"
                )

    def _persistent(self, pid: Any) -> Any:
        if self.persistent_load is None:
            raise CheckpointError("unexpected persistent id in a pickle that should have none")
        try:
            return self.persistent_load(pid)
        except CheckpointError:
            raise
        except Exception as e:  # map_location's errors (CUDA unavailable, a bad callable) reach the caller as is
            raise _Propagate(e) from e

    def _build(self, pos: int) -> int:
        state = self._stack.pop()
        inst = self._stack[-1]
        if type(inst) is not OrderedDict or id(inst) in self._built:
            raise CheckpointError(
                f"refused BUILD of {type(inst).__name__} at byte {pos - 1}: only a state_dict's OrderedDict "
                "metadata may be set"
            )
        if isinstance(state, tuple) and len(state) == 2 and state[1] is None:
            state = state[0]
        if type(state) is not dict or not all(type(k) is str for k in state):
            raise CheckpointError(f"refused BUILD at byte {pos - 1}: state must be a dict with string keys")
        self._built.add(id(inst))
        self.charge(state)  # the update copies it: many OrderedDicts built from one memoized state would add up
        inst.__dict__.update(state)
        return pos

    def _global(self, module: Any, name: Any) -> Any:
        if type(module) is not str or type(name) is not str:
            raise CheckpointError("malformed pickle: a global's module and name must be strings")
        if self.proto < 3:  # Python 2 names, as pickle's fix_imports maps them
            if (module, name) in _compat_pickle.NAME_MAPPING:
                module, name = _compat_pickle.NAME_MAPPING[(module, name)]
            elif module in _compat_pickle.IMPORT_MAPPING:
                module = _compat_pickle.IMPORT_MAPPING[module]
        return self.find_global(module, name)

    # -- helpers for the cold opcodes ----------------------------------------------------------------
    def _pop_mark(self) -> list[Any]:
        k = self._marks.pop()
        items = self._stack[k:]
        del self._stack[k:]
        return items

    def _line(self, pos: int) -> tuple[str, int]:
        nl = self.data.find(b"\n", pos, pos + _NAME_LIMIT + 1)
        if nl < 0:
            raise CheckpointError(f"malformed pickle: unterminated or overlong text field at byte {pos}")
        return str(self.data[pos:nl], "utf-8"), nl + 1
