"""IDENTIFY's body decoded as nsqd decodes it: Go's encoding/json unmarshalling into identifyDataV2
(section 3.1 of the behaviour catalogue): keys folded as Go folds them, unknown keys and nulls ignored, a wrong
type fails the whole body, nesting up to Go's depth limit, invalid UTF-8 inside strings kept as U+FFFD,
no BOM, UTF-16 or NaN."""
from __future__ import annotations

import json
import re
import string
from json.decoder import scanstring

_IDENTIFY_FIELDS = {
    "client_id": str, "hostname": str, "user_agent": str, "topology_region": str, "topology_zone": str,
    "feature_negotiation": bool, "tls_v1": bool, "deflate": bool, "snappy": bool,
    "heartbeat_interval": int, "output_buffer_size": int, "output_buffer_timeout": int, "deflate_level": int,
    "msg_timeout": int, "sample_rate": "int32",
}
_ZERO = {str: "", bool: False, int: 0, "int32": 0}
_INT_BITS = {int: 64, "int32": 32}  # Go's int (64-bit builds) and int32
# encoding/json matches a key to a field by foldName (fold.go): ASCII case, plus Unicode simple folding, which
# takes exactly one non-ASCII rune to a letter of these names: LATIN SMALL LETTER LONG S to s.
_GO_KEY_FOLD = str.maketrans(string.ascii_uppercase + "\u017f", string.ascii_lowercase + "s")
_SURROGATE = re.compile("[\ud800-\udfff]")


def decode_identify(body: bytes) -> dict | None:
    """Go's json.Unmarshal of IDENTIFY's body into nsqd's identifyDataV2, or None where it fails (section 3.1)."""
    return go_unmarshal(body, _IDENTIFY_FIELDS)


def go_unmarshal(body: bytes, fields: dict) -> dict | None:
    """Go's json.Unmarshal of `body` into a struct of `fields` (name: str, bool, int or "int32"), every field
    starting at its zero value; None where Go returns an error (nsqd's IDENTIFY, nsqlookupd's IDENTIFY).

    Keys match case-insensitively and apply in document order (a repeated key overwrites); unknown keys and
    nulls are ignored; a wrong JSON type, a fraction or an out-of-range number for an int field fails the
    whole body. Go reads bytes, not text: a BOM or UTF-16 is a syntax error, and in a string each byte that is
    not UTF-8, like each lone surrogate escape, becomes U+FFFD (decode.go unquoteBytes)."""
    try:
        document = _go_json(body.decode("utf-8", "surrogateescape"))  # one lone surrogate per bad byte
    except ValueError:
        return None
    data = {name: _ZERO[kind] for name, kind in fields.items()}
    if document is None:
        return data
    if type(document) is not tuple:  # an array, string, number or bool: UnmarshalTypeError
        return None
    for key, value in document:
        name = key.translate(_GO_KEY_FOLD)
        kind = fields.get(name)
        if kind is None or value is None:
            continue
        if kind in _INT_BITS:
            value = _go_int(value, _INT_BITS[kind])
            if value is None:
                return None
        elif type(value) is not kind:
            return None
        elif kind is str:
            value = _SURROGATE.sub("\ufffd", value)
        data[name] = value
    return data


def _go_int(value, bits: int) -> int | None:
    """strconv.ParseInt as encoding/json applies it to an int field: an integer literal in range, else an
    UnmarshalTypeError (None). Integer literals arrive as their text, see _go_json."""
    if type(value) is not bytes or len(value) > len(b"-9223372036854775808"):
        return None
    number = int(value)
    bound = 1 << (bits - 1)
    return number if -bound <= number < bound else None


def _go_json(text: str):
    """A JSON document as encoding/json's scanner accepts it: no NaN or Infinity, at most 10000 levels deep.
    Objects become tuples of (key, value) pairs in document order; integer literals stay text (bytes), so a
    huge one costs nothing until a field takes it; other numbers become floats. ValueError where Go fails."""
    try:
        return json.loads(text, object_pairs_hook=tuple, parse_int=str.encode, parse_constant=_not_go_json)
    except RecursionError:  # deeper than Python's C scanner can go, maybe not deeper than Go allows
        return _go_json_without_recursion(text)


def _not_go_json(constant: str):
    raise ValueError(f"invalid character in {constant}")


_GO_JSON_MAX_DEPTH = 10000  # encoding/json scanner.go maxNestingDepth: "exceeded max depth"
_JSON_SPACE = re.compile(r"[ \t\n\r]*")
_JSON_SCALAR = re.compile(r"-?(?:0|[1-9][0-9]*)(?P<fraction>\.[0-9]+)?(?P<exponent>[eE][-+]?[0-9]+)?|true|false|null")
_JSON_LITERALS = {"true": True, "false": False, "null": None}
_VALUE, _VALUE_OR_CLOSE, _KEY, _KEY_OR_CLOSE, _COLON, _COMMA_OR_CLOSE = range(6)


def _go_json_without_recursion(text: str):
    """What _go_json's json.loads call returns, with an explicit stack instead of recursion."""
    open_containers: list[list] = []  # [closing bracket, items, pending key] for each level
    expect, pos = _VALUE, 0
    while True:
        pos = _JSON_SPACE.match(text, pos).end()
        char = text[pos:pos + 1]
        if expect in (_VALUE_OR_CLOSE, _KEY_OR_CLOSE, _COMMA_OR_CLOSE) and char == open_containers[-1][0]:
            closing, items, _ = open_containers.pop()
            value, pos = tuple(items) if closing == "}" else items, pos + 1
        elif expect == _COMMA_OR_CLOSE and char == ",":
            expect, pos = _KEY if open_containers[-1][0] == "}" else _VALUE, pos + 1
            continue
        elif expect in (_KEY, _KEY_OR_CLOSE) and char == '"':
            open_containers[-1][2], pos = scanstring(text, pos + 1)
            expect = _COLON
            continue
        elif expect == _COLON and char == ":":
            expect, pos = _VALUE, pos + 1
            continue
        elif expect in (_VALUE, _VALUE_OR_CLOSE) and char in ("[", "{"):
            if len(open_containers) == _GO_JSON_MAX_DEPTH:
                raise ValueError("exceeded max depth")
            open_containers.append(["]" if char == "[" else "}", [], None])
            expect, pos = _VALUE_OR_CLOSE if char == "[" else _KEY_OR_CLOSE, pos + 1
            continue
        elif expect in (_VALUE, _VALUE_OR_CLOSE) and char == '"':
            value, pos = scanstring(text, pos + 1)
        elif expect in (_VALUE, _VALUE_OR_CLOSE) and (scalar := _JSON_SCALAR.match(text, pos)):
            literal, pos = scalar.group(), scalar.end()
            if literal in _JSON_LITERALS:
                value = _JSON_LITERALS[literal]
            elif scalar["fraction"] or scalar["exponent"]:
                value = float(literal)
            else:
                value = literal.encode()
        else:
            raise ValueError(f"invalid character at offset {pos}")
        if not open_containers:
            if _JSON_SPACE.match(text, pos).end() != len(text):
                raise ValueError("invalid character after top-level value")
            return value
        closing, items, key = open_containers[-1]
        items.append((key, value) if closing == "}" else value)
        expect = _COMMA_OR_CLOSE
