"""A pickle from a bundle, checked opcode by opcode before anything unpickles it. Pure.

An unpickler does its damage while it loads, before any check on what it built can run:

- a global (``os.system``) runs code; so do REDUCE, BUILD, INST, OBJ, NEWOBJ, EXT and persistent ids;
- a memo index is an array index to the C unpickler: ``}`` then ``LONG_BINPUT 2**26`` (9 bytes)
  allocates a GiB;
- ints, floats and tuples hash predictably: a dict or set of 20,000 keys of one hash (``i * (2**61 -
  1)``) takes seconds to build, quadratically;
- every opcode of one or two bytes builds an object: 256 MiB of ``]`` and ``a`` is 128 million lists.

`check_plain_pickle` walks the opcodes once (no object is built) and refuses all of these: only the
opcodes of plain data are accepted (None, booleans, numbers, strings, bytes, lists, tuples, dicts:
what a PyTorch flight-recorder dump is made of), memo indexes must be handed out in order (as
every pickler does), dict keys must be strings, bytes, None, booleans or ints of under 61 bits
(whose hashes cannot collide), at most MAX_OBJECTS objects may be built and at most MAX_REFERENCES
opcodes that build nothing may run (which also bounds the walk's own time). Sets are refused (a
dump holds none). A pickle that passes is then loaded by the C unpickler, whose `find_class`
refuses every global all the same (the second wall).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable

from slime_hangdoctor.errors import ParseError

__all__ = ["MAX_OBJECTS", "MAX_REFERENCES", "check_plain_pickle"]

# Objects built (not references to ones built before). A real dump (PyTorch's default ring of
# 2000 entries, 341 KB) builds about 46,000: this allows dumps of over 40,000 entries (20 times
# the default) and bounds what a hostile one builds to about 100 MB.
MAX_OBJECTS = 1_000_000
# References pushed (memo GETs, DUP, marks), and memo writes, FRAME and PROTO: the opcodes that
# build nothing. A reference is a pointer in a container (256 MiB of `h\x00a` appends 85 million);
# a memo write grows the memo; each costs walking time. A real 2000-entry dump has ~92,000.
# With MAX_OBJECTS (and the pops, which cannot outnumber the pushes) this bounds the walk.
MAX_REFERENCES = 2_000_000
_SAFE_INT = 2**61 - 1  # CPython hashes an int modulo this: below it, distinct ints hash apart

# Tags of what the walk knows of each stack slot: a key may be a _STR or a _SCALAR.
_STR, _SCALAR, _NUMBER, _TUPLE, _LIST, _DICT, _OTHER = range(7)
_TAG_NAMES = ("str", "scalar", "large int or float", "tuple", "list", "dict", "bytearray")

_REFUSED = {
    0x63: "refused global",  # GLOBAL (the message names it)
    0x93: "refused global (STACK_GLOBAL)",
    0x52: "REDUCE",
    0x62: "BUILD",
    0x69: "INST",
    0x6F: "OBJ",
    0x81: "NEWOBJ",
    0x92: "NEWOBJ_EX",
    0x82: "EXT1",
    0x83: "EXT2",
    0x84: "EXT4",
    0x50: "PERSID",
    0x51: "BINPERSID",
    0x8F: "EMPTY_SET",
    0x90: "ADDITEMS",
    0x91: "FROZENSET",
    0x97: "NEXT_BUFFER",
    0x98: "READONLY_BUFFER",
}

_TOO_MANY = f"more than {MAX_REFERENCES} references, memo writes and frames"
# the little-endian lengths and memo indexes of pickle's opcodes
_UINT32_LE = struct.Struct("<I")
_UINT64_LE = struct.Struct("<Q")


class _Corrupt(Exception):
    """Internal: the walk ran off the data or the stack."""


def check_plain_pickle(data: bytes, what: str = "pickle") -> None:
    """ParseError (naming `what`) unless `data` is a pickle of plain data that is safe to load."""
    try:
        _walk(data, what)
    except ParseError:
        raise
    except (_Corrupt, IndexError, struct.error, ValueError) as exc:
        raise ParseError(f"{what}: corrupt pickle ({exc or 'truncated'})"[:300]) from None


def _refuse(what: str, why: str) -> ParseError:
    return ParseError(f"{what}: unsafe pickle ({why}): not read")


def _line(data: bytes, pos: int) -> tuple[bytes, int]:
    end = data.index(b"\n", pos)
    return data[pos:end], end + 1


def _int_tag(value: int) -> int:
    return _SCALAR if -_SAFE_INT < value < _SAFE_INT else _NUMBER


def _walk(data: bytes, what: str) -> None:
    """The one pass: the most frequent opcodes inline (their order is their frequency in a real
    dump: BINGET is half of them), the rarer ones through `_RARE` on the shared `_Walk` state."""
    w = _Walk(data, what)
    stack, marks, memo = w.stack, w.marks, w.memo
    n = len(data)
    built = references = pos = 0
    while pos < n:
        op = data[pos]
        pos += 1
        if op == 0x68 or op == 0x28 or op == 0x32:  # noqa: PLR1714 - BINGET, MARK, DUP: no object
            references += 1
            if references > MAX_REFERENCES:
                raise _refuse(what, _TOO_MANY)
            if op == 0x68:
                stack.append(memo[data[pos]])
                pos += 1
            elif op == 0x28:
                marks.append(len(stack))
            else:
                stack.append(stack[-1])
            continue
        if op == 0x5D:  # EMPTY_LIST
            tag = _LIST
        elif op == 0x65:  # APPENDS
            del stack[marks.pop() :]
            continue
        elif op == 0x75:  # SETITEMS
            mark = marks.pop()
            _check_keys(stack[mark::2], what)
            del stack[mark:]
            continue
        elif op == 0x4D:  # BININT2
            pos += 2
            tag = _SCALAR
        elif op == 0x4A:  # BININT
            pos += 4
            tag = _SCALAR
        elif op == 0x4B:  # BININT1
            pos += 1
            tag = _SCALAR
        elif op == 0x8A:  # LONG1
            size = data[pos]
            tag = _int_tag(int.from_bytes(data[pos + 1 : pos + 1 + size], "little", signed=True))
            pos += 1 + size
        elif op in (0x88, 0x89, 0x4E):  # NEWTRUE, NEWFALSE, NONE
            tag = _SCALAR
        elif op == 0x7D:  # EMPTY_DICT
            tag = _DICT
        elif op == 0x47:  # BINFLOAT
            pos += 8
            tag = _NUMBER
        elif op in (0x58, 0x42, 0x54):  # BINUNICODE, BINBYTES, BINSTRING: 4-byte length
            pos += 4 + _UINT32_LE.unpack_from(data, pos)[0]
            tag = _STR
        elif op in (0x8C, 0x43, 0x55):  # SHORT_BINUNICODE, SHORT_BINBYTES, SHORT_BINSTRING
            pos += 1 + data[pos]
            tag = _STR
        elif op == 0x61:  # APPEND
            stack.pop()
            continue
        else:  # the rarer opcodes, each group in a function of its own
            w.pos, w.references = pos, references
            tag = _RARE.get(op, _unexpected)(w, op)
            pos, references = w.pos, w.references
            if tag < 0:
                if tag == _STOPPED:
                    return
                continue
        built += 1
        if built > MAX_OBJECTS:
            raise _refuse(what, f"it builds more than {MAX_OBJECTS} objects")
        stack.append(tag)
    raise _Corrupt("no STOP")


class _Walk:
    """What the walk knows, shared with the functions of the rarer opcodes: the data and the
    position after the opcode, the stack of tags, the marks, the memo (a tag per index), and the
    references counted so far (the loop keeps its own copy of `pos` and `references`)."""

    __slots__ = ("data", "marks", "memo", "pos", "references", "stack", "what")

    def __init__(self, data: bytes, what: str) -> None:
        self.data, self.what = data, what
        self.stack: list[int] = []
        self.marks: list[int] = []
        self.memo: list[int] = []
        self.pos = self.references = 0

    def reference(self) -> None:
        """Count one opcode that builds nothing (against MAX_REFERENCES)."""
        self.references += 1
        if self.references > MAX_REFERENCES:
            raise _refuse(self.what, _TOO_MANY)


# What a rarer opcode's function returns when it built no object, and for STOP.
_NOTHING, _STOPPED = -1, -2


def _check_keys(keys: Iterable[int], what: str) -> None:
    for key in keys:
        if key > _SCALAR:
            raise _refuse(what, f"a dict key of type {_TAG_NAMES[key]}")


def _memo_write(w: _Walk, op: int) -> int:
    """BINPUT, LONG_BINPUT, PUT, MEMOIZE: only the next index, or one handed out before."""
    w.reference()
    data, memo = w.data, w.memo
    if op == 0x71:
        index = data[w.pos]
        w.pos += 1
    elif op == 0x72:
        index = _UINT32_LE.unpack_from(data, w.pos)[0]
        w.pos += 4
    elif op == 0x70:
        text, w.pos = _line(data, w.pos)
        index = int(text)
    else:
        index = len(memo)
    if index > len(memo) or index < 0:
        raise _refuse(w.what, f"memo index {index} out of order (after {len(memo)})")
    if index == len(memo):
        memo.append(w.stack[-1])
    else:
        memo[index] = w.stack[-1]
    return _NOTHING


def _memo_read(w: _Walk, op: int) -> int:
    """LONG_BINGET, GET (BINGET is inline)."""
    if op == 0x6A:
        index = _UINT32_LE.unpack_from(w.data, w.pos)[0]
        w.pos += 4
    else:
        text, w.pos = _line(w.data, w.pos)
        index = int(text)
    if not 0 <= index < len(w.memo):
        raise _Corrupt(f"memo index {index} was never set")
    w.reference()
    w.stack.append(w.memo[index])
    return _NOTHING


def _large(w: _Walk, op: int) -> int:
    """BINUNICODE8, BINBYTES8, BYTEARRAY8: an 8-byte length."""
    w.pos += 8 + _UINT64_LE.unpack_from(w.data, w.pos)[0]
    return _OTHER if op == 0x96 else _STR


def _text(w: _Walk, op: int) -> int:
    """Protocol 0's text opcodes, their argument to the end of the line: UNICODE, STRING, INT,
    LONG, FLOAT."""
    text, w.pos = _line(w.data, w.pos)
    if op in (0x49, 0x4C):  # INT, LONG
        digits = text.rstrip(b"L")
        return _int_tag(int(digits)) if len(digits) <= 20 else _NUMBER
    return _NUMBER if op == 0x46 else _STR


def _builder(w: _Walk, op: int) -> int:
    """EMPTY_TUPLE, TUPLE1-3, and TUPLE, LIST, DICT (the items above the mark); SETITEM."""
    stack = w.stack
    if op == 0x29:  # EMPTY_TUPLE
        return _TUPLE
    if op == 0x73:  # SETITEM
        stack.pop()
        _check_keys((stack.pop(),), w.what)
        return _NOTHING
    if op in (0x85, 0x86, 0x87):  # TUPLE1, TUPLE2, TUPLE3
        count = op - 0x84
        if len(stack) < count:
            raise _Corrupt("stack underflow")
        del stack[len(stack) - count :]
        return _TUPLE
    mark = w.marks.pop()
    if op == 0x64:
        _check_keys(stack[mark::2], w.what)
    del stack[mark:]
    return _TUPLE if op == 0x74 else _LIST if op == 0x6C else _DICT


def _control(w: _Walk, op: int) -> int:
    """PROTO, FRAME (counted as references), POP, POP_MARK, STOP."""
    if op == 0x80 or op == 0x95:  # noqa: PLR1714 - PROTO, FRAME
        w.reference()
        if op == 0x95:
            w.pos += 8
            return _NOTHING
        if w.data[w.pos] > 5:
            raise _Corrupt(f"unsupported protocol {w.data[w.pos]}")
        w.pos += 1
        return _NOTHING
    stack = w.stack
    if op == 0x2E:  # STOP
        if len(stack) != 1 or w.marks:
            raise _Corrupt("STOP with an unbalanced stack")
        return _STOPPED
    if op == 0x30 and stack:  # POP (of an object; with none, of the mark)
        stack.pop()
    else:  # POP_MARK
        del stack[w.marks.pop() :]
    return _NOTHING


def _unexpected(w: _Walk, op: int) -> int:
    """A code-running opcode (refused, named) or one that no pickle protocol has."""
    if op in _REFUSED:
        raise _refuse(w.what, _refused_global(w.data, w.pos) if op == 0x63 else _REFUSED[op])
    raise _Corrupt(f"unknown opcode 0x{op:02x} at byte {w.pos - 1}")


_RARE: dict[int, Callable[[_Walk, int], int]] = {
    **dict.fromkeys((0x71, 0x72, 0x70, 0x94), _memo_write),
    **dict.fromkeys((0x6A, 0x67), _memo_read),
    **dict.fromkeys((0x8D, 0x8E, 0x96), _large),
    **dict.fromkeys((0x56, 0x53, 0x49, 0x4C, 0x46), _text),
    **dict.fromkeys((0x29, 0x85, 0x86, 0x87, 0x74, 0x6C, 0x64, 0x73), _builder),
    **dict.fromkeys((0x80, 0x95, 0x30, 0x31, 0x2E), _control),
}


def _refused_global(data: bytes, pos: int) -> str:
    """`refused global module.name` for a GLOBAL opcode (its two argument lines)."""
    module, pos = _line(data, pos)
    name, _ = _line(data, pos)
    named = f"{module.decode('ascii', 'replace')}.{name.decode('ascii', 'replace')}"
    return f"refused global {named[:200]}"
