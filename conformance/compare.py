"""Differential mode (``--compare``): a case's transcript on the target against the same case's on a second
broker, both normalised so that only what a broker decides remains.

Masked: the cases' unique topic-name prefixes, message IDs, timestamps, ports and addresses, host names, the
build and version (``version`` in JSON, ``nsqd v1.3.0 (built w/go1.19.8)``), and in JSON answers the fields that
name a moment or a process (``start_time``, ``connect_ts``, ...). JSON answers, of IDENTIFY and of the HTTP API, are
compared key by key, whole: one line per key path (``.max_rdy_count = 2500``), so a diff names the key. Dropped:
notes about waits, heartbeats and the NOPs that answer them (their number depends on timing), partial-frame
markers (they depend on how the kernel split the bytes), and in ``/stats`` every topic that is not this case's
and every client that did not publish to the case's topics (the target is shared with other cases). Each
connection is compared as three sequences (commands sent, frames received, what happened to it), so neither the
interleaving of connections, nor when a frame arrived between two commands, nor the recv chunking counts;
HTTP exchanges in order, a request polled back to back counted once with its last answer.
"""

from __future__ import annotations

import difflib
import json
import re

from conformance.case import NAME_PREFIX, Case
from conformance.transcript import CLIENT_TO_SERVER, NOTE, SERVER_TO_CLIENT, Transcript
from nsq_protocol import wire

_MESSAGE_ID = re.compile(r"(?<=\bid=)\S{16}|(?<=^FIN )\S{16}|(?<=^REQ )\S{16}|(?<=^TOUCH )\S{16}|\b[0-9a-f]{16}\b")
_TIMESTAMP = re.compile(r"\bts=\d+")
_LONG_NUMBER = re.compile(r"(?<![\w.])\d{10,}(?![\w.])")  # epoch seconds, ms and ns
_ADDRESS = re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?|\blocalhost:\d+")
_CONNECTED = re.compile(r"^connected \d+ -> \d+$")
_BUILD = re.compile(r"\(built w/[^)]*\)")  # the build line of /stats?format=text: go1.19.8, or a Python
_VERSION_LINE = re.compile(r"^(nsqd|nsqlookupd) v\S+", re.MULTILINE)
_MASKED_KEYS = frozenset({"version"})  # kept, but its value masked: which build a broker is, not what it does
_VOLATILE_KEYS = frozenset({
    "start_time", "uptime", "uptime_seconds", "connect_ts", "last_update", "remote_address", "hostname",
    "broadcast_address", "tcp_port", "http_port", "https_port", "client_id", "pid", "user_agent", "last_pong",
    "tombstoned_at", "memory", "e2e_processing_latency",
})
_STATS_TEXT_VOLATILE = re.compile(r"^(?:start_time|uptime) .*$", re.MULTILINE)
_HEARTBEAT_LINES = frozenset({f"RESPONSE {wire.HEARTBEAT.decode()}", "NOP"})


def normalised(transcript: Transcript, own_prefix: str) -> list[str]:
    """Per TCP connection (in order of first use): what the client sent, what it received, what happened to the
    connection, each as its own sequence, because when a frame arrives relative to the client's next command
    is timing. Then the HTTP exchanges in order, a request repeated back to back (a bounded wait polling
    /stats) counted once with its last answer. ``own_prefix`` starts the names of the case's topics."""
    streams: dict[str, dict[str, list[str]]] = {}
    exchanges: list[list] = []  # [scheme, request line, [response lines]]
    for event in transcript.events:
        if event.connection == "-":
            continue  # the case's own notes: waits and deadlines
        if event.connection in ("HTTP", "HTTPS"):
            if event.direction == SERVER_TO_CLIENT and exchanges:
                exchanges[-1][2] = [event.lines[0].split(" ", 1)[0], *_json_or_text(event.wire, own_prefix)]
            elif event.direction != SERVER_TO_CLIENT:
                exchanges.append([event.connection, _mask(event.lines[0]), ["(no answer)"]])
            continue
        connection = streams.setdefault(event.connection, {NOTE: [], CLIENT_TO_SERVER: [], SERVER_TO_CLIENT: []})
        for index, line in enumerate(event.lines):
            if index in event.json_data:
                connection[event.direction] += [f"RESPONSE {key_line}"
                                                for key_line in _json_or_text(event.json_data[index], own_prefix)]
            elif not (_CONNECTED.match(line) or line in _HEARTBEAT_LINES or line.endswith("bytes of a partial frame)")):
                connection[event.direction].append(_mask(line))
    lines = [f"{name} {direction} {line}" for name, connection in streams.items()
             for direction in (CLIENT_TO_SERVER, SERVER_TO_CLIENT, NOTE) for line in connection[direction]]
    polled: list[list] = []
    for exchange in exchanges:
        if polled and polled[-1][:2] == exchange[:2]:
            polled[-1] = exchange
        else:
            polled.append(exchange)
    return lines + [f"{scheme} {arrow} {line}" for scheme, request, response in polled
                    for arrow, line in [(">", request)] + [("<", answer) for answer in response]]


def differences(target: Case, other: Case, other_name: str) -> list[str]:
    """A unified diff of the two cases' normalised transcripts; empty when they agree."""
    return list(difflib.unified_diff(normalised(target.transcript, target.name_prefix),
                                     normalised(other.transcript, other.name_prefix), "target", other_name, n=2,
                                     lineterm=""))


def _mask(text: str) -> str:
    text = NAME_PREFIX.sub("<case>-", text)
    text = _MESSAGE_ID.sub("<id>", text)
    text = _TIMESTAMP.sub("ts=<ts>", text)
    text = _ADDRESS.sub("<address>", text)
    text = _BUILD.sub("(built w/<build>)", text)
    return _LONG_NUMBER.sub("<n>", text)


def _json_or_text(body: bytes, own_prefix: str) -> list[str]:
    """A JSON body as one line per key path, whole and masked; any other body as its masked text."""
    try:
        document = json.loads(body)
    except ValueError:
        text = body.decode("utf-8", "replace")
        if text.startswith("nsqd v"):  # /stats?format=text: the moment, and every client of the shared target
            text = _STATS_TEXT_VOLATILE.sub("", text.split("\nProducers:", 1)[0])
        return [_mask(_VERSION_LINE.sub(r"\1 v<version>", text))]
    return [_mask(line) for line in _key_lines(_only_this_case(document, own_prefix))]


def _key_lines(value, path: str = "") -> list[str]:
    """``{"a": {"b": [1]}}`` -> ``[".a.b[0] = 1"]``: a diff of two answers then names the key that differs."""
    if isinstance(value, dict) and value:
        return [line for key in sorted(value) for line in _key_lines(value[key], f"{path}.{key}")]
    if isinstance(value, list) and value:
        return [line for index, item in enumerate(value) for line in _key_lines(item, f"{path}[{index}]")]
    return [f"{path or '.'} = {json.dumps(value, sort_keys=True)}"]


def _only_this_case(value, own_prefix: str):
    """The JSON answer without volatile fields, other cases' topics and other clients (/stats lists every topic
    and every client of the shared target: a client is this case's if it published to the case's topics)."""
    if isinstance(value, dict):
        return {key: "<masked>" if key in _MASKED_KEYS else
                _only_this_case(_own_producers(item, own_prefix) if key == "producers" else item, own_prefix)
                for key, item in value.items() if key not in _VOLATILE_KEYS}
    if isinstance(value, list):
        return [_only_this_case(item, own_prefix) for item in value if not _foreign(item, own_prefix)]
    return value


def _own_producers(producers, own_prefix: str):
    if producers is None:
        return []  # nsqd's null for a broker without clients: none of them is this case's either
    if not isinstance(producers, list):
        return producers
    return [producer for producer in producers if isinstance(producer, dict) and any(
        _own(count.get("topic"), own_prefix) for count in producer.get("pub_counts") or [])]


def _foreign(item, own_prefix: str) -> bool:
    name = item.get("topic_name") if isinstance(item, dict) else item
    return isinstance(name, str) and bool(NAME_PREFIX.match(name)) and not _own(name, own_prefix)


def _own(name, own_prefix: str) -> bool:
    return isinstance(name, str) and name.startswith(own_prefix)
