"""IDENTIFY in the tables: the body a client sent (nsqd's V2 fields, ID-*, or nsqlookupd's V1 ones, L-TCP-*) and
nsqd's JSON answer, as Arrow structs whose fields are typed; what a field holds when the JSON gave it another type
is null, and the body as sent keeps it."""

from __future__ import annotations

import json

import pyarrow as pa

_ARROW_TYPE = {str: pa.string(), bool: pa.bool_(), int: pa.int64()}
# The fields of an IDENTIFY body: nsqd's, then nsqlookupd's; hostname is both's.
IDENTIFY_FIELDS = {
    "client_id": str, "hostname": str, "user_agent": str, "feature_negotiation": bool, "heartbeat_interval": int,
    "output_buffer_size": int, "output_buffer_timeout": int, "tls_v1": bool, "snappy": bool, "deflate": bool,
    "deflate_level": int, "sample_rate": int, "msg_timeout": int,
    "broadcast_address": str, "tcp_port": int, "http_port": int, "version": str,
}
# nsqd's JSON answer to an IDENTIFY with feature_negotiation (ID-04)
IDENTIFY_RESPONSE_FIELDS = {
    "max_rdy_count": int, "version": str, "max_msg_timeout": int, "msg_timeout": int, "tls_v1": bool,
    "deflate": bool, "deflate_level": int, "max_deflate_level": int, "snappy": bool, "sample_rate": int,
    "auth_required": bool, "output_buffer_size": int, "output_buffer_timeout": int,
}


def _typed_struct(fields: dict[str, type]) -> pa.StructType:
    return pa.struct([(name, _ARROW_TYPE[kind]) for name, kind in fields.items()])


# ``body``: the IDENTIFY's JSON as sent, unknown fields and all
IDENTIFY_TYPE = pa.struct([("body", pa.string()), *_typed_struct(IDENTIFY_FIELDS)])
IDENTIFY_RESPONSE_TYPE = _typed_struct(IDENTIFY_RESPONSE_FIELDS)


def json_object(body: bytes | None) -> dict:
    """A JSON object's fields; {} for anything else."""
    try:
        value = json.loads(body or b"")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def typed_fields(fields: dict, types: dict[str, type]) -> dict:
    """The ``types`` fields of a JSON object, each of its type or None (a JSON number is not a bool, and the other
    way round; a number past int64 is None)."""
    typed = {}
    for name, kind in types.items():
        value = fields.get(name)
        if kind is int:
            fits = type(value) is int and -(1 << 63) <= value < (1 << 63)
        else:
            fits = type(value) is kind
        typed[name] = value if fits else None
    return typed


def stated(struct: dict) -> dict:
    """The fields of an IDENTIFY struct the JSON gave, each of its type: what a check may take as negotiated (a
    broken peer's ``"msg_timeout": "x"`` states nothing)."""
    return {name: value for name, value in struct.items() if value is not None and name != "body"}


def identify_struct(body: bytes | None) -> dict:
    """An IDENTIFY command's body as ``IDENTIFY_TYPE``."""
    return {"body": (body or b"").decode("utf-8", "replace"), **typed_fields(json_object(body), IDENTIFY_FIELDS)}


def response_struct(response: dict) -> dict:
    """nsqd's answer to IDENTIFY, its JSON fields, as ``IDENTIFY_RESPONSE_TYPE``."""
    return typed_fields(response, IDENTIFY_RESPONSE_FIELDS)
