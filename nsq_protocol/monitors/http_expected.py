"""What nsqd answers to one HTTP request (nsqd/http.go, internal/http_api, httprouter v1.3.0; nsqd v1.3.0), as
expected.py is for V2 commands: from the request alone, the answers it may give, each with the catalogue item that
says so, or None where the answer hangs on what one request does not show (whether a topic exists) or on Go's own
reading of an odd path. The limits come from ``Limits``: a flag's default unless the traffic told its value."""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, replace

from nsq_protocol.http import Request
from nsq_protocol.monitors.expected import valid_name

# an answer's shape (internal/http_api/api_response.go)
ERROR = "error"  # {"message":"<CODE>"}, the JSON content type (RespondV1 of an Err)
EMPTY = "empty"  # an empty 200 without Content-Type (RespondV1 of nil)
TEXT = "text"  # a 200 whose body is ``code`` (RespondV1 of a string or bytes: sniffed text/plain)
DOCUMENT = "json"  # a 200 of compact JSON (RespondV1 of a struct)
PLAIN = "plain"  # /ping: PlainText, no X-NSQ-Content-Type
REDIRECT = "redirect"  # httprouter's 301 (GET) or 307 to the fixed path
ALLOWED = "allowed"  # httprouter's answer to OPTIONS: 200 and Allow
SERVED = "served"  # Go's own handlers (net/http/pprof): anything but the router's 404 and 405

TREES = ("GET", "POST", "PUT")  # the methods nsqd routes anything for
_POST = ("/pub", "/mpub", "/topic/create", "/topic/delete", "/topic/empty", "/topic/pause", "/topic/unpause",
         "/channel/create", "/channel/delete", "/channel/empty", "/channel/pause", "/channel/unpause",
         "/debug/pprof/symbol", "/debug/freememory")
_GET = ("/ping", "/info", "/stats", "/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/symbol",
        "/debug/pprof/profile", "/debug/pprof/heap", "/debug/pprof/goroutine", "/debug/pprof/block",
        "/debug/pprof/threadcreate")
ROUTES = {"GET": frozenset(_GET), "POST": frozenset(_POST), "PUT": frozenset({"/debug/setblockrate"})}
CONFIG = re.compile(r"/config/([^/]+)\Z")  # GET and PUT /config/:opt
# the pre-1.0 endpoints, gone since 1.0.0-compat (H-09)
OLD = frozenset({"/put", "/mput", "/create_topic", "/delete_topic", "/empty_topic", "/pause_topic", "/unpause_topic",
                 "/create_channel", "/delete_channel", "/empty_channel", "/pause_channel", "/unpause_channel"})
# nsqd.Options' config names (nsqd/options.go: a flag tag's name with '_' for '-', or its cfg tag)
OPTIONS = frozenset({
    "id", "log_level", "log_prefix", "tcp_address", "http_address", "https_address", "broadcast_address",
    "broadcast_tcp_port", "broadcast_http_port", "nsqlookupd_tcp_addresses", "auth_http_addresses",
    "http_client_connect_timeout", "http_client_request_timeout", "data_path", "mem_queue_size",
    "max_bytes_per_file", "sync_every", "sync_timeout", "queue_scan_selection_count", "queue_scan_worker_pool_max",
    "msg_timeout", "max_msg_timeout", "max_msg_size", "max_body_size", "max_req_timeout", "max_heartbeat_interval",
    "max_rdy_count", "max_output_buffer_size", "max_output_buffer_timeout", "min_output_buffer_timeout",
    "output_buffer_timeout", "max_channel_consumers", "statsd_address", "statsd_prefix", "statsd_interval",
    "statsd_mem_stats", "statsd_udp_packet_size", "statsd_exclude_ephemeral", "e2e_processing_latency_window_time",
    "e2e_processing_latency_percentiles", "tls_cert", "tls_key", "tls_client_auth_policy", "tls_root_ca_file",
    "tls_required", "tls_min_version", "deflate", "max_deflate_level", "snappy"})
_NAMING = ("/pub", "/mpub", "/topic/", "/channel/")  # the paths whose requests name a topic (and a channel)
NAME_REFUSALS = frozenset({"INVALID_TOPIC", "INVALID_ARG_TOPIC", "INVALID_ARG_CHANNEL"})
LOG_LEVELS = {"debug": 1, "info": 2, "warn": 3, "error": 4, "fatal": 5}  # internal/lg: ParseLogLevel
_BOOL = {"true": True, "1": True, "false": False, "0": False}  # nsqd/http.go: boolParams
_INT64 = re.compile(r"[+-]?[0-9]+\Z")  # strconv.ParseInt(s, 10, 64)
_MS_NS = 1_000_000


@dataclass(frozen=True)
class Limits:
    """The flags an answer hangs on, their defaults until the traffic tells their values (GET /config/<name>)."""

    max_msg_size: int = 1_048_576
    max_body_size: int = 5_242_880
    max_req_timeout_ms: int = 3_600_000

    FLAGS = {"max_msg_size": "--max-msg-size", "max_body_size": "--max-body-size",
             "max_req_timeout_ms": "--max-req-timeout"}


@dataclass(frozen=True)
class HttpAnswer:
    """One answer nsqd may give: its status and shape; ``code``: an error's message or a text answer's body;
    ``allow``: the Allow header of a 405 or an OPTIONS answer."""

    status: int
    shape: str
    code: str = ""
    item: str = ""
    allow: str | None = None

    def describe(self) -> str:
        extra = f" Allow: {self.allow}" if self.allow else ""
        return f"{self.status} {self.code or self.shape}{extra}"


def expect(request: Request, limits: Limits) -> tuple[HttpAnswer, ...] | None:
    """The answers nsqd may give to ``request`` (the first is the one the rule names), or None: not known from the
    request alone."""
    path = request.target.split("?", 1)[0]
    if not path.startswith("/") or "%" in path or "//" in path or "/." in path:
        return None  # Go unescapes and cleans such a path before routing: not modelled
    method = request.method
    if _routed(method, path):
        return _handler(method, path, request, limits)
    if method in TREES and path != "/":
        if _fixed(method, path):  # H-05: the trailing slash or the case fixed, by a redirect
            return (HttpAnswer(301 if method == "GET" else 307, REDIRECT, item="H-05"),)
    allow = _allowed(method, path)
    if method == "OPTIONS" and allow:
        return (HttpAnswer(200, ALLOWED, item="H-10", allow=allow),)
    if allow:
        item = "H-PUB-08" if path == "/pub" else "H-CFG-03" if path.startswith("/config/") else \
            "H-05" if method == "HEAD" else "H-04"
        return (HttpAnswer(405, ERROR, "METHOD_NOT_ALLOWED", item, allow),)
    return (HttpAnswer(404, ERROR, "NOT_FOUND", "H-09" if path in OLD else "H-04"),)


def names_allowed(request: Request) -> bool:
    """D-39: the topic and channel an administration or publishing request names are ones the rule allows (its
    refusal of either, INVALID_TOPIC, INVALID_ARG_TOPIC or INVALID_ARG_CHANNEL, breaks the rule)."""
    if not request.path.startswith(_NAMING):
        return False
    params = request.params()
    names = [params[name] for name in ("topic", "channel") if params and name in params]
    return bool(names) and all(valid_name(name) for name in names)


def _routed(method: str, path: str) -> bool:
    return path in ROUTES.get(method, ()) or (method in ("GET", "PUT") and CONFIG.match(path) is not None)


def _fixed(method: str, path: str) -> bool:
    """httprouter finds the route when the trailing slash is toggled or the case ignored: it redirects there."""
    for candidate in (path[:-1] if path.endswith("/") else path + "/", path):
        lowered = candidate.lower()
        if any(route.lower() == lowered for route in ROUTES.get(method, ())):
            return True
        if method in ("GET", "PUT") and lowered.startswith("/config/") and CONFIG.match("/config/" + candidate[8:]):
            return True
    return False


def _allowed(method: str, path: str) -> str:
    """httprouter's Allow: the other methods routed for ``path``, with OPTIONS, sorted."""
    methods = [other for other in TREES if other != method and _routed(other, path)]
    return ", ".join(sorted([*methods, "OPTIONS"])) if methods else ""


def _error(status: int, code: str, item: str) -> tuple[HttpAnswer, ...]:
    return (HttpAnswer(status, ERROR, code, item),)


def _handler(method: str, path: str, request: Request, limits: Limits) -> tuple[HttpAnswer, ...] | None:
    if path == "/ping":
        return (HttpAnswer(200, PLAIN, "OK", "H-03"), HttpAnswer(500, PLAIN, "NOK - ", "H-03"))
    if path == "/info":
        return (HttpAnswer(200, DOCUMENT, item="H-INFO-01"),)
    if path.startswith("/debug/"):
        return (HttpAnswer(200, SERVED, item="H-DEBUG-01"),)
    if path.startswith("/config/"):
        return _config(method, CONFIG.match(path).group(1), request, limits)
    params = request.params()
    if path == "/pub":
        return _pub(request, params, limits)
    if path == "/mpub":
        return _mpub(request, params, limits)
    if params is None:  # H-07: url.ParseQuery's error
        return _error(400, "INVALID_REQUEST", "H-07")
    if path == "/stats":
        return (HttpAnswer(200, DOCUMENT if params.get("format") == "json" else TEXT, item="H-STATS-01"),)
    if path.startswith("/topic/"):
        return _topic(path, params)
    return _channel(path, params)


def _topic_checked(params: dict, item: str) -> tuple[HttpAnswer, ...] | None:
    """getTopicFromQuery's checks (/pub, /mpub, /topic/create): the refusal, or None where the topic is fine."""
    if "topic" not in params:
        return _error(400, "MISSING_ARG_TOPIC", item)
    if not valid_name(params["topic"]):
        return _error(400, "INVALID_TOPIC", item)
    return None


def _pub(request: Request, params: dict | None, limits: Limits) -> tuple[HttpAnswer, ...]:
    size = request.body_size
    if size > limits.max_msg_size:
        return _error(413, "MSG_TOO_BIG", "H-PUB-01")
    if size == 0:
        return _error(400, "MSG_EMPTY", "H-PUB-02")
    if params is None:
        return _error(400, "INVALID_REQUEST", "H-PUB-03")
    refused = _topic_checked(params, "H-PUB-03")
    if refused:
        return refused
    defer = params.get("defer")
    if defer is not None:
        # H-PUB-05: a signed decimal of ms, from 0 to --max-req-timeout (a Duration: past int64's ns it wraps)
        value = int(defer) if _INT64.match(defer) and abs(int(defer)) < (1 << 63) // _MS_NS else None
        if value is None or not 0 <= value <= limits.max_req_timeout_ms:
            return _error(400, "INVALID_DEFER", "H-PUB-05")
    return (HttpAnswer(200, TEXT, "OK", "H-PUB-07"), HttpAnswer(503, ERROR, "EXITING", "H-PUB-06"))


def _mpub(request: Request, params: dict | None, limits: Limits) -> tuple[HttpAnswer, ...] | None:
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limits.max_body_size:
        return _error(413, "BODY_TOO_BIG", "H-MPUB-01")
    if params is None:
        return _error(400, "INVALID_REQUEST", "H-MPUB-02")
    refused = _topic_checked(params, "H-MPUB-02")
    if refused:
        return refused
    binary = params.get("binary")
    item = "H-MPUB-03" if binary is not None and binary not in _BOOL else "H-MPUB-07"
    ok = (HttpAnswer(200, TEXT, "OK", item), HttpAnswer(503, ERROR, "EXITING", "H-MPUB-07"))
    if request.size is not None:  # the body is not all in the traffic: any of its outcomes
        return (*ok, *(HttpAnswer(413, ERROR, code, item) for code in (
            "BAD_BODY", "BAD_MESSAGE", "MSG_TOO_BIG", "BODY_TOO_BIG")))
    if binary is not None and _BOOL.get(binary, True):
        code = _binary_refusal(request.body, limits)
        return _error(413, code, "H-MPUB-05" if item == "H-MPUB-07" else item) if code else ok
    lines = request.body.split(b"\n")
    too_long = _error(413, "MSG_TOO_BIG", "H-MPUB-04")
    if len(request.body) > limits.max_body_size:  # a chunked body, read to the limit: a line before may be too long
        return (*_error(413, "BODY_TOO_BIG", "H-MPUB-04"), *too_long)
    if any(len(line) > limits.max_msg_size for line in lines):
        return too_long
    return tuple(replace(answer, item="H-MPUB-04") for answer in ok) if not any(lines) else ok


def _binary_refusal(body: bytes, limits: Limits) -> str | None:
    """readMPUB's refusal of a binary /mpub body, the TCP code without E_ (H-MPUB-05), or None."""
    if len(body) < 4:
        return "BAD_BODY"
    (count,) = struct.unpack_from(">i", body)
    if count <= 0 or count > (limits.max_body_size - 4) // 5:
        return "BAD_BODY"
    position = 4
    for _ in range(count):
        if len(body) - position < 4:
            return "BAD_MESSAGE"
        (size,) = struct.unpack_from(">i", body, position)
        position += 4
        if size <= 0 or size > limits.max_msg_size or len(body) - position < size:
            return "BAD_MESSAGE"
        position += size
    return None


def _topic(path: str, params: dict) -> tuple[HttpAnswer, ...] | None:
    if path == "/topic/create":
        item = "H-TOPIC-01"
        return _topic_checked(params, item) or (HttpAnswer(200, EMPTY, item=item),)
    item = {"/topic/delete": "H-TOPIC-02", "/topic/empty": "H-TOPIC-03"}.get(path, "H-TOPIC-04")
    if "topic" not in params:
        return _error(400, "MISSING_ARG_TOPIC", item)
    if path == "/topic/empty" and not valid_name(params["topic"]):
        return _error(400, "INVALID_TOPIC", item)
    if not valid_name(params["topic"]):  # not validated: no topic has such a name
        return _error(404, "TOPIC_NOT_FOUND", item)
    return None  # the topic's existence decides


def _channel(path: str, params: dict) -> tuple[HttpAnswer, ...] | None:
    """GetTopicChannelArgs' checks, all before any lookup (H-CHANNEL-03)."""
    item = {"/channel/create": "H-CHANNEL-01", "/channel/delete": "H-CHANNEL-02",
            "/channel/empty": "H-CHANNEL-03"}.get(path, "H-CHANNEL-04")
    for name, missing, invalid in (("topic", "MISSING_ARG_TOPIC", "INVALID_ARG_TOPIC"),
                                   ("channel", "MISSING_ARG_CHANNEL", "INVALID_ARG_CHANNEL")):
        if name not in params:
            return _error(400, missing, item)
        if not valid_name(params[name]):
            return _error(400, invalid, item)
    return None  # the topic's and channel's existence decide


def _config(method: str, option: str, request: Request, limits: Limits) -> tuple[HttpAnswer, ...] | None:
    if method == "PUT":
        if request.size is not None:
            return None
        body = request.body
        if not body or len(body) > limits.max_msg_size:
            return _error(413, "INVALID_VALUE", "H-CFG-02")
        if option == "log_level":
            level = LOG_LEVELS.get(body.decode("utf-8", "replace").lower())
            if level is None:
                return _error(400, "INVALID_VALUE", "H-CFG-02")
            return (HttpAnswer(200, DOCUMENT, str(level), "H-CFG-04"),)
        if option != "nsqlookupd_tcp_addresses":
            return _error(400, "INVALID_OPTION", "H-CFG-02")
        return (HttpAnswer(200, DOCUMENT, item="H-CFG-02"), *_error(400, "INVALID_VALUE", "H-CFG-02"))
    if option not in OPTIONS:
        return _error(400, "INVALID_OPTION", "H-CFG-01")
    return (HttpAnswer(200, DOCUMENT, item="H-CFG-04" if option == "log_level" else "H-CFG-01"),)
