"""The nsqd HTTP API's endpoints (nsqd/http.go; the H-* items of conformance/spec/http.toml), one function per route.

The transport, the router and the response styles live in http_router.py; each function here takes a
`Request` and returns what nsqd's handler returns, or raises `HTTPError` with nsqd's status and code.
"""
from __future__ import annotations

import argparse
import gc
import json
import logging
import socket

from . import pprof, stats, wire
from .http_router import (
    PLAIN,
    V1,
    HTTPError,
    JSONValue,
    Request,
    RequestBody,
    parse_query,
)
from .nsqd import VERSION
from .options import CONFIG_NAMES, PYTHON_LOG_LEVELS, parse_log_level
from .topic import PutError

log = logging.getLogger("nsqd")

_MS = 1_000_000
_INT64 = 1 << 63
_BOOL_PARAMS = {"true": True, "1": True, "false": False, "0": False}


def _valid_name(name: str) -> bool:
    return wire.is_valid_name(name.encode("utf-8", "surrogateescape"))


def _go_atoi(text: str) -> int:
    """strconv.Atoi (ParseInt base 10, 64 bits), raising ValueError with Go's message."""
    quoted = wire.go_quote(text.encode("utf-8", "surrogateescape"))
    digits = text[1:] if text[:1] in "+-" else text
    if not digits or not (digits.isascii() and digits.isdigit()):
        raise ValueError(f"strconv.Atoi: parsing {quoted}: invalid syntax")
    value = int(text)
    if not -_INT64 <= value < _INT64:
        raise ValueError(f"strconv.Atoi: parsing {quoted}: value out of range")
    return value


def _wrap_int64(value: int) -> int:
    """Go's int64 arithmetic wraps (time.Duration(ms) * time.Millisecond)."""
    return (value + _INT64) % (2 * _INT64) - _INT64


# -- endpoints ----------------------------------------------------------------------------------------------

def _ping(request: Request) -> str:
    if request.nsqd.health_error is not None:
        raise HTTPError(500, request.nsqd.health)  # H-03: a failed disk-queue write
    return request.nsqd.health


def _info(request: Request) -> dict:
    nsqd, options = request.nsqd, request.nsqd.options
    return {
        "version": VERSION,
        "broadcast_address": options.broadcast_address,
        "hostname": socket.gethostname(),
        "http_port": nsqd.http_port,
        "tcp_port": nsqd.tcp_port,
        "start_time": int(nsqd.start_time),
        "max_heartbeat_interval": options.max_heartbeat_interval,  # nanoseconds, as nsqd
        "max_output_buffer_size": options.max_output_buffer_size,
        "max_output_buffer_timeout": options.max_output_buffer_timeout,
        "max_deflate_level": options.max_deflate_level,
        "topology_zone": options.topology_zone,
        "topology_region": options.topology_region,
    }


def _topic_from_query(request: Request):
    """nsqd's getTopicFromQuery: the topic is created here (H-PUB-04, H-MPUB-02)."""
    values = request.query()
    if "topic" not in values:
        raise HTTPError(400, "MISSING_ARG_TOPIC")
    name = values["topic"][0]  # H-07: the first value wins
    if not _valid_name(name):
        raise HTTPError(400, "INVALID_TOPIC")
    return values, request.nsqd.get_topic(name)


def _publish(request: Request, topic, bodies: list[bytes], deferred: int = 0) -> str:
    try:
        topic.put_messages(topic.new_messages(bodies, deferred))
    except PutError:
        raise HTTPError(503, "EXITING") from None  # H-PUB-06, H-MPUB-07
    topic.hand_over()  # before the OK: a client that saw it finds the message in the channels (rec-0211)
    return "OK"


def _pub(request: Request) -> str:
    options = request.nsqd.options
    if request.body.length is not None and request.body.length > options.max_msg_size:
        raise HTTPError(413, "MSG_TOO_BIG")  # H-PUB-01: before reading
    body = request.body.read(options.max_msg_size + 1)
    if len(body) > options.max_msg_size:
        raise HTTPError(413, "MSG_TOO_BIG")
    if not body:
        raise HTTPError(400, "MSG_EMPTY")  # H-PUB-02: before the topic
    values, topic = _topic_from_query(request)  # H-PUB-03, H-PUB-04
    deferred = 0
    if "defer" in values:  # H-PUB-05
        try:
            deferred = _wrap_int64(_go_atoi(values["defer"][0]) * _MS)
        except ValueError:
            raise HTTPError(400, "INVALID_DEFER") from None
        if not 0 <= deferred <= options.max_req_timeout:
            raise HTTPError(400, "INVALID_DEFER")
    return _publish(request, topic, [body], deferred)


def _mpub(request: Request) -> str:
    options = request.nsqd.options
    if request.body.length is not None and request.body.length > options.max_body_size:
        raise HTTPError(413, "BODY_TOO_BIG")  # H-MPUB-01
    values, topic = _topic_from_query(request)  # H-MPUB-02: created before the body is validated
    binary = _BOOL_PARAMS.get(values["binary"][0], True) if "binary" in values else False  # H-MPUB-03
    bodies = _binary_bodies(request.body, options) if binary else _text_bodies(request.body, options)
    return _publish(request, topic, bodies)  # H-MPUB-06: no defer at this commit


def _text_bodies(body: RequestBody, options) -> list[bytes]:
    """H-MPUB-04: one message per line; only the \\n goes; empty lines are skipped."""
    read_max = options.max_body_size + 1
    data = body.read(read_max)
    bodies, total = [], 0
    lines = data.split(b"\n")
    for index, line in enumerate(lines):
        total += len(line) + (index < len(lines) - 1)  # the \n counts towards the body size
        if total == read_max:
            raise HTTPError(413, "BODY_TOO_BIG")
        if not line:
            continue
        if len(line) > options.max_msg_size:
            raise HTTPError(413, "MSG_TOO_BIG")
        bodies.append(line)
    return bodies


def _binary_bodies(body: RequestBody, options) -> list[bytes]:
    """H-MPUB-05: [count][size body]…, TCP MPUB's checks, every failure a 413 named by its code."""
    def read_size() -> int | None:
        four = body.read(4)
        return wire.read_size(four) if len(four) == 4 else None

    count = read_size()
    if count is None or count <= 0 or count > (options.max_body_size - 4) // 5:
        raise HTTPError(413, "BAD_BODY")
    bodies = []
    for _ in range(count):
        size = read_size()
        if size is None or size <= 0 or size > options.max_msg_size:
            raise HTTPError(413, "BAD_MESSAGE")
        message = body.read(size)
        if len(message) != size:
            raise HTTPError(413, "BAD_MESSAGE")
        bodies.append(message)
    return bodies


def _topic_name_arg(request: Request) -> str:
    values = request.query()
    if "topic" not in values:
        raise HTTPError(400, "MISSING_ARG_TOPIC")
    return values["topic"][0]


def _existing_topic(request: Request, name: str):
    topic = request.nsqd.existing_topic(name)
    if topic is None:
        raise HTTPError(404, "TOPIC_NOT_FOUND")
    return topic


def _topic_create(request: Request) -> None:
    _topic_from_query(request)


def _topic_delete(request: Request) -> None:
    name = _topic_name_arg(request)  # not validated: a bad name is simply not found
    if not request.nsqd.delete_topic(name):
        raise HTTPError(404, "TOPIC_NOT_FOUND")  # D-62 when found


def _topic_empty(request: Request) -> None:
    name = _topic_name_arg(request)
    if not _valid_name(name):
        raise HTTPError(400, "INVALID_TOPIC")
    _existing_topic(request, name).empty()  # D-64


def _topic_pause(request: Request) -> None:
    topic = _existing_topic(request, _topic_name_arg(request))  # H-TOPIC-04: the name is not validated
    topic.set_paused(not request.path.endswith("unpause"))  # D-61
    request.nsqd.persist_metadata()  # D-65: at once, so a crash does not forget it


def _topic_and_channel(request: Request):
    """nsqd's getExistingTopicFromQuery: every argument check runs before the topic is looked up."""
    values = request.query()
    if "topic" not in values:
        raise HTTPError(400, "MISSING_ARG_TOPIC")
    if not _valid_name(values["topic"][0]):
        raise HTTPError(400, "INVALID_ARG_TOPIC")
    if "channel" not in values:
        raise HTTPError(400, "MISSING_ARG_CHANNEL")
    channel_name = values["channel"][0]
    if not _valid_name(channel_name):
        raise HTTPError(400, "INVALID_ARG_CHANNEL")
    return _existing_topic(request, values["topic"][0]), channel_name


def _existing_channel(request: Request):
    topic, name = _topic_and_channel(request)
    with topic.lock:
        channel = topic.channels.get(name)
    if channel is None:
        raise HTTPError(404, "CHANNEL_NOT_FOUND")  # H-CHANNEL-04
    return channel


def _channel_create(request: Request) -> None:
    topic, name = _topic_and_channel(request)
    topic.get_channel(name)


def _channel_delete(request: Request) -> None:
    topic, name = _topic_and_channel(request)
    if not topic.delete_channel(name):  # D-62
        raise HTTPError(404, "CHANNEL_NOT_FOUND")


def _channel_empty(request: Request) -> None:
    _existing_channel(request).empty()  # D-63


def _channel_pause(request: Request) -> None:
    _existing_channel(request).set_paused(not request.path.endswith("unpause"))  # D-60
    request.nsqd.persist_metadata()  # D-65


def _stats(request: Request):
    values = request.query()

    def first(key: str) -> str:
        return values.get(key, [""])[0]

    include_clients = _BOOL_PARAMS.get(first("include_clients"), True)  # H-STATS-03
    include_memory = _BOOL_PARAMS.get(first("include_mem"), True)
    nsqd = request.nsqd
    topics, producers = stats.gather(nsqd, first("topic"), first("channel"), include_clients)
    memory = stats.memory_stats() if include_memory else None
    if first("format") != "json":  # H-STATS-01
        return stats.render_text(topics, producers, memory, nsqd.start_time, nsqd.health)
    document = {"version": VERSION, "health": nsqd.health, "start_time": int(nsqd.start_time),
                "topics": topics}
    if memory is not None:
        document["memory"] = memory  # H-STATS-02: omitted with include_mem=false
    document["producers"] = producers
    return document


def _config(request: Request):
    name = request.params["opt"]
    options = request.nsqd.options
    if request.method == "PUT":  # H-CFG-02
        read_max = options.max_msg_size + 1
        body = request.body.read(read_max)
        if not body or len(body) == read_max:
            raise HTTPError(413, "INVALID_VALUE")
        if name == "nsqlookupd_tcp_addresses":
            options.nsqlookupd_tcp_addresses = _string_list(body)
        elif name == "log_level":
            try:
                options.log_level = parse_log_level(body.decode("utf-8", "surrogateescape"))
            except argparse.ArgumentTypeError:
                raise HTTPError(400, "INVALID_VALUE") from None
            log.setLevel(PYTHON_LOG_LEVELS[options.log_level])
        else:
            raise HTTPError(400, "INVALID_OPTION")
        request.nsqd.lookup.options_changed()  # nsqd's triggerOptsNotification, after either option
    field = CONFIG_NAMES.get(name)
    if field is None:
        raise HTTPError(400, "INVALID_OPTION")  # H-CFG-01: `node_id` too; its config name is `id`
    value = getattr(options, field)
    return JSONValue(b"null") if value is None else value  # a nil list is JSON null, not an empty body


def _string_list(body: bytes) -> list | None:
    """Go's json.Unmarshal into a []string: null gives nil, a null element stays ""."""
    try:
        value = json.loads(body.decode("utf-8", "replace"))
    except ValueError:
        raise HTTPError(400, "INVALID_VALUE") from None
    if value is None:
        return None
    if not isinstance(value, list) or not all(item is None or isinstance(item, str) for item in value):
        raise HTTPError(400, "INVALID_VALUE")
    return [item or "" for item in value]


def _set_block_rate(request: Request) -> None:
    values, _ = parse_query(request.raw_query)  # Go's FormValue ignores a parse error
    try:
        _go_atoi(values.get("rate", [""])[0])
    except ValueError as error:
        raise HTTPError(400, f"invalid block rate : {error}") from None  # H-DEBUG-01
    # A Go runtime setting with no CPython counterpart; the answer is nsqd's (see _call).


def _free_memory(request: Request) -> None:
    gc.collect()


ROUTES = [
    ("GET", "/ping", _ping, PLAIN),
    ("GET", "/info", _info, V1),
    ("POST", "/pub", _pub, V1),
    ("POST", "/mpub", _mpub, V1),
    ("GET", "/stats", _stats, V1),
    ("POST", "/topic/create", _topic_create, V1),
    ("POST", "/topic/delete", _topic_delete, V1),
    ("POST", "/topic/empty", _topic_empty, V1),
    ("POST", "/topic/pause", _topic_pause, V1),
    ("POST", "/topic/unpause", _topic_pause, V1),
    ("POST", "/channel/create", _channel_create, V1),
    ("POST", "/channel/delete", _channel_delete, V1),
    ("POST", "/channel/empty", _channel_empty, V1),
    ("POST", "/channel/pause", _channel_pause, V1),
    ("POST", "/channel/unpause", _channel_pause, V1),
    ("GET", "/config/:opt", _config, V1),
    ("PUT", "/config/:opt", _config, V1),
    ("PUT", "/debug/setblockrate", _set_block_rate, PLAIN),
    ("POST", "/debug/freememory", _free_memory, PLAIN),
    *pprof.routes("/debug/pprof/"),
]
