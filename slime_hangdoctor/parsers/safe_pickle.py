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


def _walk(data: bytes, what: str) -> None:  # noqa: C901, PLR0912, PLR0915 - one opcode table
    n = len(data)
    stack: list[int] = []
    marks: list[int] = []
    memo: list[int] = []
    built = references = 0
    pos = 0
    while pos < n:
        op = data[pos]
        pos += 1
        # The most frequent opcodes of a real dump first (BINGET is half of them).
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
            for key in stack[mark::2]:
                if key > _SCALAR:
                    raise _refuse(what, f"a dict key of type {_TAG_NAMES[key]}")
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
        elif op in (0x8D, 0x8E):  # BINUNICODE8, BINBYTES8
            pos += 8 + _UINT64_LE.unpack_from(data, pos)[0]
            tag = _STR
        elif op == 0x96:  # BYTEARRAY8
            pos += 8 + _UINT64_LE.unpack_from(data, pos)[0]
            tag = _OTHER
        elif op in (0x56, 0x53):  # UNICODE, STRING (protocol 0: text to the end of the line)
            _, pos = _line(data, pos)
            tag = _STR
        elif op in (0x49, 0x4C):  # INT, LONG (text)
            text, pos = _line(data, pos)
            digits = text.rstrip(b"L")
            tag = _int_tag(int(digits)) if len(digits) <= 20 else _NUMBER
        elif op == 0x46:  # FLOAT (text)
            _, pos = _line(data, pos)
            tag = _NUMBER
        elif op in (0x71, 0x72, 0x70, 0x94):  # BINPUT, LONG_BINPUT, PUT, MEMOIZE
            references += 1
            if references > MAX_REFERENCES:
                raise _refuse(what, _TOO_MANY)
            if op == 0x71:
                index = data[pos]
                pos += 1
            elif op == 0x72:
                index = _UINT32_LE.unpack_from(data, pos)[0]
                pos += 4
            elif op == 0x70:
                text, pos = _line(data, pos)
                index = int(text)
            else:
                index = len(memo)
            if index > len(memo) or index < 0:
                raise _refuse(what, f"memo index {index} out of order (after {len(memo)})")
            if index == len(memo):
                memo.append(stack[-1])
            else:
                memo[index] = stack[-1]
            continue
        elif op in (0x6A, 0x67):  # LONG_BINGET, GET
            if op == 0x6A:
                index = _UINT32_LE.unpack_from(data, pos)[0]
                pos += 4
            else:
                text, pos = _line(data, pos)
                index = int(text)
            if not 0 <= index < len(memo):
                raise _Corrupt(f"memo index {index} was never set")
            references += 1
            if references > MAX_REFERENCES:
                raise _refuse(what, _TOO_MANY)
            stack.append(memo[index])
            continue
        elif op == 0x61:  # APPEND
            stack.pop()
            continue
        elif op == 0x73:  # SETITEM
            stack.pop()
            key = stack.pop()
            if key > _SCALAR:
                raise _refuse(what, f"a dict key of type {_TAG_NAMES[key]}")
            continue
        elif op in (0x85, 0x86, 0x87):  # TUPLE1, TUPLE2, TUPLE3
            count = op - 0x84
            if len(stack) < count:
                raise _Corrupt("stack underflow")
            del stack[len(stack) - count :]
            tag = _TUPLE
        elif op in (0x74, 0x6C, 0x64):  # TUPLE, LIST, DICT: the items above the mark
            mark = marks.pop()
            if op == 0x64:
                for key in stack[mark::2]:
                    if key > _SCALAR:
                        raise _refuse(what, f"a dict key of type {_TAG_NAMES[key]}")
            del stack[mark:]
            tag = _TUPLE if op == 0x74 else _LIST if op == 0x6C else _DICT
        elif op == 0x29:  # EMPTY_TUPLE
            tag = _TUPLE
        elif op == 0x80 or op == 0x95:  # noqa: PLR1714 - PROTO, FRAME
            references += 1
            if references > MAX_REFERENCES:
                raise _refuse(what, _TOO_MANY)
            if op == 0x95:
                pos += 8
                continue
            if data[pos] > 5:
                raise _Corrupt(f"unsupported protocol {data[pos]}")
            pos += 1
            continue
        elif op == 0x30:  # POP
            if stack:
                stack.pop()
            else:
                del stack[marks.pop() :]
            continue
        elif op == 0x31:  # POP_MARK
            del stack[marks.pop() :]
            continue
        elif op == 0x2E:  # STOP
            if len(stack) != 1 or marks:
                raise _Corrupt("STOP with an unbalanced stack")
            return
        elif op in _REFUSED:
            raise _refuse(what, _refused_global(data, pos) if op == 0x63 else _REFUSED[op])
        else:
            raise _Corrupt(f"unknown opcode 0x{op:02x} at byte {pos - 1}")
        built += 1
        if built > MAX_OBJECTS:
            raise _refuse(what, f"it builds more than {MAX_OBJECTS} objects")
        stack.append(tag)
    raise _Corrupt("no STOP")


def _refused_global(data: bytes, pos: int) -> str:
    """`refused global module.name` for a GLOBAL opcode (its two argument lines)."""
    module, pos = _line(data, pos)
    name, _ = _line(data, pos)
    named = f"{module.decode('ascii', 'replace')}.{name.decode('ascii', 'replace')}"
    return f"refused global {named[:200]}"
