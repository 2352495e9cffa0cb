"""The fault catalogue: realistic one-line broker bugs, each injected by ``proxy.FaultyProxy`` (or, for the restart
faults, by ``amnesiac.py``), against which ``mutation.py`` measures the suite.

A fault has a name, the catalogue section it breaks, the one-line bug it stands for, what it looks like on the wire,
the requirement IDs whose cases should catch it, and its rewrite: hooks the proxy calls per connection (``session``:
``state`` is the fault's memory of that connection, ``to_client`` answers in the broker's place) —
``command(Command, session)`` for what the client sends, ``frame(Frame, session)`` for what the broker sends (both
return the bytes to forward instead, ``b""`` to drop, or None to leave it), ``request(HttpRequest, session)`` (a new
request, or bytes: the proxy's own answer), ``response(head, body, session)``, and ``relay(V1Command)`` (False: the
command never reaches nsqlookupd). ``restart`` names the restart fault of ``amnesiac.py``; ``profile`` the profile the
fault needs (TLS).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from nsq_protocol import wire


@dataclass(frozen=True)
class HttpRequest:
    method: str
    target: str  # path and query
    head: bytes  # the header lines after the request line
    body: bytes | None  # None: no Content-Length, or a large body (it streams through unchanged)

    @property
    def path(self) -> str:
        return self.target.partition("?")[0]

    @classmethod
    def parse(cls, head: bytes, body: bytes | None) -> HttpRequest | None:
        request_line, _, headers = head.partition(b"\r\n")
        match = re.fullmatch(rb"([A-Z]+) (\S+) HTTP/1\.[01]", request_line)
        if not match:
            return None
        return cls(match.group(1).decode(), match.group(2).decode("latin-1"), headers, body)

    def with_body(self, body: bytes) -> HttpRequest:
        head = re.sub(rb"(?i)content-length: *\d+", b"Content-Length: %d" % len(body), self.head)
        return replace(self, head=head, body=body)

    def encode(self) -> bytes:
        line = f"{self.method} {self.target} HTTP/1.1".encode("latin-1")
        return line + b"\r\n" + self.head + b"\r\n\r\n" + (self.body or b"")


@dataclass(frozen=True)
class Fault:
    name: str
    section: str
    bug: str  # the one-line bug a broker author could write
    wire: str  # what it looks like on the wire
    requirements: tuple[str, ...]  # whose cases should catch it
    command: Callable | None = None
    frame: Callable | None = None
    request: Callable | None = None
    response: Callable | None = None
    relay: Callable | None = None
    restart: str | None = None
    profile: str = "nsqd-defaults"
    linger: float = 0.0  # the broker notices a client's departure this late
    keeps_client_open: bool = False  # the client side stays open after the broker closed
    dies_on: Callable | None = None  # a command that makes the broker exit ("exit") or stop answering ("hang")
    death: str = "exit"


VALID_NAME = re.compile(rb"(?=.{1,64}$)[.a-zA-Z0-9_-]+(#ephemeral)?")  # D-39


# ---- small rewrites the faults share ------------------------------------------------------------------------------

def _count(session, key: str) -> int:
    """1, 2, 3, ... per call on this connection."""
    session.state[key] = session.state.get(key, 0) + 1
    return session.state[key]


def _message(frame: wire.Frame, *, timestamp=None, attempts=None, message_id=None) -> bytes:
    return wire.encode_frame(wire.FRAME_MESSAGE, wire.encode_message(
        frame.timestamp if timestamp is None else timestamp, frame.attempts if attempts is None else attempts,
        frame.message_id if message_id is None else message_id, frame.body))


def _is_message(frame: wire.Frame) -> bool:
    return frame.frame_type == wire.FRAME_MESSAGE


def _error(frame: wire.Frame, old: str, new: str) -> bytes | None:
    if frame.error_code != old:
        return None
    return wire.encode_frame(wire.FRAME_ERROR, new.encode() + frame.data[len(old):])


def _identify_fields(command: wire.Command) -> dict | None:
    if command.name != b"IDENTIFY":
        return None
    try:
        fields = json.loads(command.body)
    except ValueError:
        return None
    return fields if isinstance(fields, dict) else None


def _without_max_msg_timeout(frame: wire.Frame, session) -> bytes | None:
    if frame.frame_type != wire.FRAME_RESPONSE or not frame.data.startswith(b"{"):
        return None
    answer = json.loads(frame.data)
    answer.pop("max_msg_timeout", None)
    return wire.encode_frame(wire.FRAME_RESPONSE, json.dumps(answer).encode())


def _negative_deflate_level(command: wire.Command) -> bool:
    fields = _identify_fields(command)
    level = {key.lower(): value for key, value in (fields or {}).items()}.get("deflate_level")
    return isinstance(level, int) and level < 0


def ignored_identify_field(field: str, valid: Callable[[int], bool]) -> tuple[Callable, Callable]:
    """An IDENTIFY field the broker validates and reports back, but never applies: the command hook drops a valid
    value before the broker sees it, the frame hook puts it back into the JSON answer."""
    def command(command: wire.Command, session):
        fields = _identify_fields(command)
        if fields is None or not isinstance(fields.get(field), int) or not valid(fields[field]):
            return None
        session.state[field] = fields.pop(field)
        return wire.encode_command("IDENTIFY", body=json.dumps(fields).encode())

    def frame(frame: wire.Frame, session):
        if field not in session.state or frame.frame_type != wire.FRAME_RESPONSE or frame.data[:1] != b"{":
            return None
        answer = json.loads(frame.data)
        if field in answer:
            answer[field] = session.state.pop(field)
        return wire.encode_frame(wire.FRAME_RESPONSE, json.dumps(answer, separators=(",", ":")).encode())
    return command, frame


def _query_without(key: str, path: str) -> Callable:
    def request(request: HttpRequest, session):
        if request.path != path:
            return None
        base, _, query = request.target.partition("?")
        kept = [pair for pair in query.split("&") if pair.partition("=")[0] != key]
        return replace(request, target=base + ("?" + "&".join(kept) if kept else ""))
    return request


def _routed(path: str, to: str) -> Callable:
    """A handler registered under the wrong path: ``path`` does what ``to`` does."""
    def request(request: HttpRequest, session):
        if request.method != "POST" or request.path != path:
            return None
        return replace(request, target=to + request.target[len(path):])
    return request


def _json_body(pattern: bytes, replacement: bytes) -> Callable:
    def response(head: bytes, body: bytes, session):
        return head, (re.sub(pattern, replacement, body) if body[:1] == b"{" else body)
    return response


def _status(head: bytes, body: bytes, session):
    return re.sub(rb"^HTTP/1\.1 4\d\d [^\r]*", b"HTTP/1.1 500 Internal Server Error", head), body


def _unsorted_stats(head: bytes, body: bytes, session):
    """/stats' topics and channels in reverse name order, as a map iterates them, not sorted (H-STATS-06)."""
    if session.request_path != "/stats" or body[:1] != b"{":
        return head, body
    document = json.loads(body)
    for topic in document.get("topics") or []:
        topic["channels"] = list(reversed(topic.get("channels") or []))
    document["topics"] = list(reversed(document.get("topics") or [])) or document.get("topics")
    return head, json.dumps(document, separators=(",", ":")).encode()


def _text_stats_unpaused(head: bytes, body: bytes, session):
    """The text report's paused marks (``*P``) left out (H-STATS-01)."""
    if session.request_path != "/stats" or body[:1] == b"{":
        return head, body
    return head, re.sub(rb"(?m)^( *)\*P ", lambda match: match.group(1) + b"   ", body)


def _missing_pause_target_ok(head: bytes, body: bytes, session):
    """The pause endpoints' 404 TOPIC_NOT_FOUND and CHANNEL_NOT_FOUND answered as an empty 200 (H-TOPIC-04)."""
    if session.request_path.rpartition("/")[2] not in ("pause", "unpause") or not head.startswith(b"HTTP/1.1 404"):
        return head, body
    return re.sub(rb"^HTTP/1\.1 404 [^\r]*", b"HTTP/1.1 200 OK", head), b""


def _bad_query_not_found(request: HttpRequest, session):
    """A query string that does not parse (``%zz``) makes the router miss: 404 NOT_FOUND, where nsqd answers 400
    INVALID_REQUEST (H-07)."""
    if not re.search(r"%(?![0-9A-Fa-f]{2})", request.target.partition("?")[2]):
        return None
    return (b'HTTP/1.1 404 Not Found\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: 23\r\n'
            b'X-Nsq-Content-Type: nsq; version=1.0\r\nConnection: close\r\n\r\n{"message":"NOT_FOUND"}')


def _fatal_unflushed(frame: wire.Frame, session):
    """A fatal error frame is written to the buffer, and the connection closed before the flush."""
    if frame.frame_type == wire.FRAME_ERROR and not frame.error_code.endswith("_FAILED"):
        return b""
    return None


def _close_after_failed(frame: wire.Frame, session):
    if frame.frame_type == wire.FRAME_ERROR and frame.error_code.endswith("_FAILED"):
        session.hang_up = True
    return None


def _errors_overtake(frame: wire.Frame, session):
    """The error path writes straight to the socket while the buffered writer still holds earlier responses."""
    if frame.frame_type == wire.FRAME_RESPONSE and frame.data == b"OK":
        session.pending += frame.encode()
        return b""
    if frame.frame_type == wire.FRAME_ERROR or not session.pending:
        return None
    held, session.pending = session.pending, b""
    return held + frame.encode()


def _late_flush(frame: wire.Frame, session):
    if _is_message(frame):
        time.sleep(0.25)  # waits for the output buffer's ticker even at RDY 1 (D-40)
    return None


def _lose(every: int) -> Callable:
    def frame(frame: wire.Frame, session):
        if _is_message(frame) and frame.attempts == 1 and _count(session, "first deliveries") % every == 0:
            return b""
        return None
    return frame


def _duplicate(every: int) -> Callable:
    def frame(frame: wire.Frame, session):
        if _is_message(frame) and _count(session, "messages") % every == 0:
            return frame.encode() * 2
        return None
    return frame


def _pub_acked_not_stored(command: wire.Command, session):
    """Every 50th PUB on a connection is acknowledged but parked for the longest defer, as if dropped."""
    if command.name == b"PUB" and len(command.params) == 1 and _count(session, "PUB") % 50 == 0:
        return wire.encode_command("DPUB", command.params[0], 3600000, body=command.body)
    return None


def _dropped_without_channels() -> tuple[Callable, Callable]:
    """A PUB to a topic that no SUB or /channel/create named through the proxy yet is answered OK but parked for
    the longest defer, as if a topic without channels dropped what it is sent (D-36). The proxy's own memory of
    the topics, shared by its connections (the suite's names are unique)."""
    named: set[str] = set()

    def command(command: wire.Command, session):
        if command.name == b"SUB" and command.params:
            named.add(command.params[0].decode("latin-1"))
        elif command.name == b"PUB" and len(command.params) == 1 and command.params[0].decode("latin-1") not in named:
            return wire.encode_command("DPUB", command.params[0], 3600000, body=command.body)
        return None

    def request(request: HttpRequest, session):
        if request.path == "/channel/create":
            named.update(value for key, _, value in (pair.partition("=") for pair in
                                                     request.target.partition("?")[2].split("&")) if key == "topic")
        return None
    return command, request


_DROPPED_WITHOUT_CHANNELS = _dropped_without_channels()


def _replayed_into_new_channel() -> tuple[Callable, Callable]:
    """A channel made after its topic delivered a message elsewhere gets that message too, once its first consumer
    is ready (D-37): the proxy's memory of each topic's first message and the channel it went to."""
    first: dict[bytes, tuple[bytes, bytes]] = {}  # topic -> (channel, its first message frame there)

    def command(command: wire.Command, session):
        if command.name == b"SUB" and len(command.params) == 2:
            session.state["subscription"] = tuple(command.params)
        elif command.name == b"RDY" and "subscription" in session.state and not session.state.get("replayed"):
            topic, channel = session.state["subscription"]
            if topic in first and first[topic][0] != channel:
                session.state["replayed"] = True
                session.to_client(first[topic][1])
        return None

    def frame(frame: wire.Frame, session):
        subscription = session.state.get("subscription")
        if subscription and _is_message(frame) and frame.attempts == 1:
            first.setdefault(subscription[0], (subscription[1], frame.encode()))
        return None
    return command, frame


_REPLAYED_INTO_NEW_CHANNEL = _replayed_into_new_channel()


def _mpub_drops_last(command: wire.Command, session):
    if command.name != b"MPUB" or len(command.params) != 1:
        return None
    try:
        messages = command.messages
    except wire.ProtocolViolation:
        return None
    if len(messages) < 2 or not all(messages):
        return None
    return wire.encode_command("MPUB", command.params[0], body=wire.mpub_body(messages[:-1]))


def _one_at_a_time(command: wire.Command, session):
    if command.name == b"RDY" and command.params and command.params[0].isdigit() and 1 < int(command.params[0]) \
            <= 2500:
        return wire.encode_command("RDY", 1)
    return None


def _accepted_after_sub(name: bytes) -> Callable:
    """``name`` in the subscribed state answered OK (and dropped) where nsqd closes with E_INVALID."""
    def command(command: wire.Command, session):
        if command.name == name and session.state.get("subscribed"):
            session.to_client(wire.encode_frame(wire.FRAME_RESPONSE, b"OK"))
            return b""
        if command.name == b"SUB":
            session.state["subscribed"] = True
        return None
    return command


def _rdy_before_sub(command: wire.Command, session):
    if command.name == b"SUB":
        session.state["subscribed"] = True
    if command.name == b"RDY" and not session.state.get("subscribed"):
        return b""  # ignored instead of the fatal E_INVALID
    return None


def _cls_keeps_rdy(command: wire.Command, session):
    if command.name == b"CLS" and not command.params and session.state.get("subscribed"):
        session.to_client(wire.encode_frame(wire.FRAME_RESPONSE, b"CLOSE_WAIT"))
        return b""
    if command.name == b"SUB":
        session.state["subscribed"] = True
    return None


def _tls_ok_first(frame: wire.Frame, session):
    """The upgrade's OK written in plaintext, before the handshake (T-01, ID-31)."""
    if frame.frame_type == wire.FRAME_RESPONSE and frame.data[:1] == b"{" and b'"tls_v1":true' in frame.data:
        return frame.encode() + wire.encode_frame(wire.FRAME_RESPONSE, b"OK")
    return None


def _config_put_ignored(request: HttpRequest, session):
    """The lookupd-address PUT answered (the body echoed, as nsqd does) but never applied."""
    if request.method != "PUT" or request.path != "/config/nsqlookupd_tcp_addresses" or request.body is None:
        return None
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: %d\r\n"
            b"Connection: close\r\n\r\n%s" % (len(request.body), request.body))


_MSG_TIMEOUT = ignored_identify_field("msg_timeout", lambda value: 1000 <= value <= 900000)
_SAMPLE_RATE = ignored_identify_field("sample_rate", lambda value: 1 <= value <= 99)
_BUFFER_TIMEOUT = ignored_identify_field("output_buffer_timeout", lambda value: 25 <= value <= 30000)
_BUFFER_SIZE = ignored_identify_field("output_buffer_size", lambda value: value == -1 or 64 <= value <= 65536)
_DEFLATE_LEVEL = ignored_identify_field("deflate_level", lambda value: 1 <= value <= 9)


_HEARTBEAT = ignored_identify_field("heartbeat_interval", lambda value: 1000 <= value <= 60000)  # not in the answer


def _doubled_msg_timeout(command: wire.Command, session):
    """msg_timeout applied as twice what was asked (a unit slip); the answer reports what was asked."""
    fields = _identify_fields(command)
    if fields is None or not isinstance(fields.get("msg_timeout"), int) or not 1000 <= fields["msg_timeout"] <= 450000:
        return None
    session.state["msg_timeout"] = fields["msg_timeout"]
    return wire.encode_command("IDENTIFY", body=json.dumps({**fields, "msg_timeout": fields["msg_timeout"] * 2})
                               .encode())


def _strip_identify_flag(flag: str) -> Callable:
    def command(command: wire.Command, session):
        fields = _identify_fields(command)
        if fields is None or fields.get(flag) is not True:
            return None
        fields.pop(flag)
        return wire.encode_command("IDENTIFY", body=json.dumps(fields).encode())
    return command


def _touch_ignored(command: wire.Command, session):
    """A TOUCH of a message this connection holds is accepted silently and changes nothing (others still fail)."""
    if command.name == b"TOUCH" and command.params and command.params[0] in session.state.get("delivered", ()):
        return b""
    return None


def _remember_deliveries(frame: wire.Frame, session):
    if _is_message(frame):
        session.state.setdefault("delivered", set()).add(frame.message_id)
    return None


def _req_immediate(command: wire.Command, session):
    if command.name == b"REQ" and len(command.params) == 2 and command.params[1].isdigit() \
            and int(command.params[1]) > 0:
        return wire.encode_command("REQ", command.params[0], 0)
    return None


def _dpub_is_pub(command: wire.Command, session):
    """A valid DPUB (the checks are the broker's, P-DPUB-01, P-DPUB-02) published at once."""
    if command.name == b"DPUB" and len(command.params) == 2 and VALID_NAME.fullmatch(command.params[0]) \
            and command.params[1].isdigit() and 0 < int(command.params[1]) <= 3600000 and command.body:
        return wire.encode_command("PUB", command.params[0], body=command.body)
    return None


def _rdy_zero_ignored(command: wire.Command, session):
    return b"" if command.name == b"RDY" and command.params == (b"0",) else None


def _uppercase_ids(frame: wire.Frame, session):
    if _is_message(frame):
        return _message(frame, message_id=frame.message_id.upper())
    return None


def _lowercase_settlement(command: wire.Command, session):
    """... while FIN/REQ/TOUCH still parse the ID case-insensitively."""
    if command.name in (b"FIN", b"REQ", b"TOUCH") and command.params and command.params[0] != \
            command.params[0].lower():
        return wire.encode_command(command.name, command.params[0].lower(), *command.params[1:])
    return None


def _restamped(frame: wire.Frame, session):
    if _is_message(frame) and frame.attempts > 1:
        return _message(frame, timestamp=time.time_ns())
    return None


# ---- the catalogue ------------------------------------------------------------------------------------------------

FAULTS: tuple[Fault, ...] = (
    Fault("none", "-", "a faithful proxy (the control)", "exactly the broker's bytes", ()),
    Fault("none-restart", "-", "a faithful restart (the persistence faults' control)", "the broker's own restart",
          (), restart="none"),
    # message loss
    Fault("lose-1-in-100", "loss", "the pump's write of every 100th first delivery on a connection is lost",
          "message 100, 200, ... of a connection missing; each comes back only after msg_timeout, attempts 2",
          ("NSQ-SEM-003",), frame=_lose(100)),
    Fault("pub-acked-not-stored", "loss", "every 50th PUB on a connection is answered OK but not queued",
          "OK for PUB 50, 100, ...; those messages are never delivered", ("NSQ-SEM-003", "NSQ-PUB-001"),
          command=_pub_acked_not_stored),
    Fault("mpub-drops-last", "loss", "MPUB's loop stops one message short", "OK for an MPUB of n; n-1 delivered",
          ("NSQ-MPUB-001",), command=_mpub_drops_last),
    Fault("dropped-without-channels", "loss", "a topic's pump drops what it is sent while it has no channel",
          "OK for a PUB before the topic's first SUB; the first channel never gets it",
          ("NSQ-SUB-001", "NSQ-FANOUT-002"), command=_DROPPED_WITHOUT_CHANNELS[0],
          request=_DROPPED_WITHOUT_CHANNELS[1]),
    Fault("replayed-into-new-channel", "duplication", "a new channel is handed a message its topic already copied "
          "to its other channels", "the first message of c1 delivered on c2, made after it, too",
          ("NSQ-FANOUT-002",), command=_REPLAYED_INTO_NEW_CHANNEL[0], frame=_REPLAYED_INTO_NEW_CHANNEL[1]),
    # delay
    Fault("late-flush", "delay", "the output buffer is flushed only by its 250 ms ticker, never when in-flight "
          "reaches RDY", "every message frame 250 ms late, also at RDY 1", ("NSQ-BUF-001",), frame=_late_flush),
    Fault("msg-timeout-doubled", "delay", "the negotiated msg_timeout applied as twice its value",
          "IDENTIFY msg_timeout 1000 answered 1000; the timeout fires after 2 s", ("NSQ-TIMEOUT-001",),
          command=_doubled_msg_timeout, frame=_MSG_TIMEOUT[1]),
    # duplication
    Fault("duplicate-1-in-50", "duplication", "every 50th message frame on a connection is written twice",
          "the same ID, attempts and body twice in a row; the second FIN gets E_FIN_FAILED",
          ("NSQ-SEM-003", "NSQ-SEM-001"), frame=_duplicate(50)),
    # order within a connection
    Fault("errors-overtake-responses", "order", "error frames bypass the buffered writer that still holds earlier "
          "responses", "pipelined 'OK' then 'E_...' arrive as 'E_...' then 'OK'", ("NSQ-FRAME-006",),
          frame=_errors_overtake),
    # message frame fields
    Fault("attempts-stuck", "frame", "attempts written as a constant 1",
          "a redelivery says attempts=1", ("NSQ-FRAME-004",), frame=lambda frame, session: _message(
              frame, attempts=1) if _is_message(frame) else None),
    Fault("attempts-from-zero", "frame", "attempts counted from 0", "first delivery attempts=0, then 1, 2",
          ("NSQ-FRAME-002",), frame=lambda frame, session: _message(
              frame, attempts=frame.attempts - 1) if _is_message(frame) else None),
    Fault("timestamp-in-microseconds", "frame", "the message timestamp written in µs, not ns",
          "ts=1.7e15 where nsqd writes 1.7e18", ("NSQ-FRAME-002",), frame=lambda frame, session: _message(
              frame, timestamp=frame.timestamp // 1000) if _is_message(frame) else None),
    Fault("timestamp-renewed-on-redelivery", "frame", "a requeued message is re-stamped with the time of its "
          "redelivery", "attempts=2 with a newer ts than attempts=1", ("NSQ-FRAME-004",), frame=_restamped),
    Fault("ids-uppercase", "frame", "message IDs printed with %X (parsed case-insensitively)",
          "id=0A1B... where nsqd sends 0a1b...", ("NSQ-FRAME-003",), command=_lowercase_settlement,
          frame=_uppercase_ids),
    # ignored parameters
    Fault("rdy-capped-at-1", "parameters", "RDY above 1 treated as 1", "RDY 5 and 5 queued messages: one frame "
          "until it is FINed", ("NSQ-RDY-004",), command=_one_at_a_time),
    Fault("rdy-0-ignored", "parameters", "RDY 0 does not stop delivery", "messages keep coming after RDY 0",
          ("NSQ-RDY-005",), command=_rdy_zero_ignored),
    Fault("req-delay-ignored", "parameters", "REQ's timeout parsed, then requeued at once",
          "REQ id 1000: the message is back within ms, attempts 2", ("NSQ-REQ-002",), command=_req_immediate),
    Fault("touch-ignored", "parameters", "TOUCH answered (silently) but the deadline not moved",
          "the message times out at msg_timeout despite TOUCH", ("NSQ-TOUCH-001",), command=_touch_ignored,
          frame=_remember_deliveries),
    Fault("dpub-defer-ignored", "parameters", "DPUB's defer checked, then the message published at once",
          "DPUB t 1000: the message arrives within ms", ("NSQ-DPUB-005",), command=_dpub_is_pub),
    Fault("http-defer-ignored", "parameters", "/pub's defer checked, then the message published at once",
          "POST /pub?topic=t&defer=1000: the message arrives within ms", ("NSQ-HTTP-012",),
          request=_query_without("defer", "/pub")),
    Fault("msg-timeout-ignored", "parameters", "IDENTIFY msg_timeout reported but the default 60 s used",
          "msg_timeout 1000 answered 1000; no redelivery after 1 s", ("NSQ-TIMEOUT-001",),
          command=_MSG_TIMEOUT[0], frame=_MSG_TIMEOUT[1]),
    Fault("heartbeat-interval-ignored", "parameters", "IDENTIFY heartbeat_interval validated, then 30 s used",
          "heartbeat_interval 1000: no _heartbeat_ within 1 s", ("NSQ-HB-001",), command=_HEARTBEAT[0]),
    Fault("output-buffer-timeout-ignored", "parameters", "IDENTIFY output_buffer_timeout reported but 250 ms used",
          "output_buffer_timeout 1000 at RDY 10: a lone message after 250 ms", ("NSQ-BUF-002",),
          command=_BUFFER_TIMEOUT[0], frame=_BUFFER_TIMEOUT[1]),
    Fault("output-buffer-size-ignored", "parameters", "IDENTIFY output_buffer_size reported but 16 KiB used",
          "output_buffer_size -1 at RDY 10: a lone message after 250 ms", ("NSQ-BUF-001",),
          command=_BUFFER_SIZE[0], frame=_BUFFER_SIZE[1]),
    Fault("sample-rate-ignored", "parameters", "IDENTIFY sample_rate reported but every message sent",
          "sample_rate 10: every message delivered", ("NSQ-SAMPLE-001",), command=_SAMPLE_RATE[0],
          frame=_SAMPLE_RATE[1]),
    Fault("deflate-level-ignored", "parameters", "IDENTIFY deflate_level ignored: the default 6 used",
          "deflate_level 1 answered deflate_level 6", ("NSQ-ID-013", "NSQ-COMP-001"), command=_DEFLATE_LEVEL[0]),
    Fault("snappy-ignored", "parameters", "IDENTIFY snappy ignored", "snappy true answered snappy false, no upgrade",
          ("NSQ-COMP-002",), command=_strip_identify_flag("snappy")),
    # errors
    Fault("error-reworded", "errors", "error texts not nsqd's", "E_INVALID reworded: ... (the code kept)",
          ("NSQ-ERR-001",), frame=lambda frame, session: wire.encode_frame(
              wire.FRAME_ERROR, frame.error_code.encode() + b" reworded: " + frame.data.partition(b" ")[2])
          if frame.frame_type == wire.FRAME_ERROR else None),
    Fault("fin-failed-as-invalid", "errors", "a FIN of an unknown ID reported as E_INVALID",
          "E_INVALID FIN ... failed ID not in flight (non-fatal)", ("NSQ-FIN-003",),
          frame=lambda frame, session: _error(frame, "E_FIN_FAILED", "E_INVALID")),
    Fault("bad-topic-as-invalid", "errors", "a bad topic name reported as E_INVALID",
          "E_INVALID PUB topic name \"a!b\" is not valid", ("NSQ-PUB-002",),
          frame=lambda frame, session: _error(frame, "E_BAD_TOPIC", "E_INVALID")),
    Fault("bad-message-as-bad-body", "errors", "a bad message body reported as E_BAD_BODY",
          "E_BAD_BODY PUB invalid message body size 0", ("NSQ-PUB-003",),
          frame=lambda frame, session: _error(frame, "E_BAD_MESSAGE", "E_BAD_BODY")),
    Fault("errors-as-responses", "errors", "errors written through the response path (frame type 0)",
          "a response frame 'E_BAD_TOPIC PUB topic name ...' where nsqd sends an error frame",
          ("NSQ-ERR-001", "NSQ-FRAME-001"), frame=lambda frame, session: wire.encode_frame(
              wire.FRAME_RESPONSE, frame.data) if frame.frame_type == wire.FRAME_ERROR else None),
    Fault("identify-answer-without-max-msg-timeout", "parameters", "max_msg_timeout left out of the IDENTIFY answer",
          "the JSON answer has every field but max_msg_timeout", ("NSQ-ID-010",), frame=_without_max_msg_timeout),
    Fault("no-close-after-fatal", "errors", "the connection is not closed after a fatal error",
          "E_INVALID ... and the socket stays open", ("NSQ-ERR-001",), keeps_client_open=True),
    Fault("close-after-non-fatal", "errors", "E_FIN_FAILED/E_REQ_FAILED/E_TOUCH_FAILED treated as fatal",
          "E_FIN_FAILED ... then the connection closes", ("NSQ-ERR-002",), frame=_close_after_failed),
    Fault("fatal-error-not-flushed", "errors", "the connection closes before the fatal error frame is flushed",
          "the socket closes with no E_... frame", ("NSQ-ERR-001",), frame=_fatal_unflushed),
    # the state machine
    Fault("second-sub-accepted", "state", "SUB allowed in the subscribed state",
          "a second SUB answered OK, not E_INVALID cannot SUB in current state", ("NSQ-SUB-002",),
          command=_accepted_after_sub(b"SUB")),
    Fault("identify-after-sub-accepted", "state", "IDENTIFY allowed after SUB",
          "IDENTIFY after SUB answered OK", ("NSQ-ID-002",), command=_accepted_after_sub(b"IDENTIFY")),
    Fault("rdy-before-sub-ignored", "state", "RDY before SUB silently ignored",
          "RDY 1 before SUB: no E_INVALID, no close", ("NSQ-RDY-001",), command=_rdy_before_sub),
    Fault("cls-keeps-rdy", "state", "CLS answers CLOSE_WAIT but leaves RDY as it was",
          "CLOSE_WAIT, then messages keep coming", ("NSQ-CLS-001", "NSQ-CLS-002"), command=_cls_keeps_rdy),
    # HTTP
    Fault("http-4xx-as-500", "http", "every handler error answered 500", "HTTP/1.1 500 with {\"message\":...}",
          ("NSQ-HTTP-003",), response=_status),
    Fault("bad-query-as-not-found", "http", "an unparsable query string fails the route lookup",
          "POST /pub?topic=%zz answered 404 NOT_FOUND, not 400 INVALID_REQUEST", ("NSQ-HTTP-009",),
          request=_bad_query_not_found),
    Fault("http-error-key-renamed", "http", "error bodies keyed 'error', not 'message'", "{\"error\":\"MSG_EMPTY\"}",
          ("NSQ-HTTP-003",), response=_json_body(rb'^\{"message":', b'{"error":')),
    Fault("stats-without-client-count", "stats", "channel stats lack client_count (an older nsqd's shape)",
          "/stats channels without \"client_count\"", ("NSQ-HTTP-008",),
          response=_json_body(rb'"client_count":\d+,?', b"")),
    Fault("stats-message-count-zero", "stats", "message_count never incremented",
          "/stats channel \"message_count\":0 after publishes", ("NSQ-HTTP-008",),
          response=_json_body(rb'"message_count":\d+', b'"message_count":0')),
    Fault("stats-in-flight-zero", "stats", "in_flight_count read from the wrong counter",
          "/stats \"in_flight_count\":0 with a message in flight", ("NSQ-HTTP-008",),
          response=_json_body(rb'"in_flight_count":\d+', b'"in_flight_count":0')),
    Fault("stats-deferred-zero", "stats", "deferred_count never reported", "/stats \"deferred_count\":0 after REQ 1000",
          ("NSQ-HTTP-008", "NSQ-REQ-002"), response=_json_body(rb'"deferred_count":\d+', b'"deferred_count":0')),
    Fault("stats-unsorted", "stats", "topics and channels listed as the map iterates, not sorted by name",
          "/stats channels zz, aa", ("NSQ-HTTP-016", "NSQ-HTTP-020"), response=_unsorted_stats),
    Fault("text-stats-without-paused-marks", "stats", "the text report ignores the paused flags",
          "/stats text: a paused topic's line without *P", ("NSQ-HTTP-011",), response=_text_stats_unpaused),
    # pause / empty / delete
    Fault("pause-of-missing-answered-ok", "admin", "/topic/pause and /channel/pause do not look the name up",
          "POST /topic/pause?topic=<missing> 200", ("NSQ-HTTP-021",), response=_missing_pause_target_ok),
    Fault("channel-pause-ignored", "admin", "/channel/pause routed to the unpause handler",
          "POST /channel/pause 200; messages keep coming", ("NSQ-ADMIN-001",),
          request=_routed("/channel/pause", "/channel/unpause")),
    Fault("topic-pause-ignored", "admin", "/topic/pause routed to the unpause handler",
          "POST /topic/pause 200; messages reach the channels", ("NSQ-ADMIN-001",),
          request=_routed("/topic/pause", "/topic/unpause")),
    Fault("channel-empty-ignored", "admin", "/channel/empty routed to the unpause handler",
          "POST /channel/empty 200; queued and in-flight messages stay", ("NSQ-ADMIN-003",),
          request=_routed("/channel/empty", "/channel/unpause")),
    Fault("channel-delete-only-empties", "admin", "/channel/delete only empties the channel",
          "POST /channel/delete 200; subscribers stay connected", ("NSQ-ADMIN-002",),
          request=_routed("/channel/delete", "/channel/empty")),
    # ephemeral lifetimes
    Fault("client-close-noticed-late", "ephemeral", "a client's EOF is noticed only at the next heartbeat write",
          "after the last client of c#ephemeral leaves, the channel stays in /stats for 2 s",
          ("NSQ-EPH-001",), linger=2.0),
    # registration with nsqlookupd
    Fault("lookupd-config-ignored", "registration", "PUT /config/nsqlookupd_tcp_addresses answered, not applied",
          "200 with the addresses echoed; no connection to the new nsqlookupd", ("NSQ-REG-001",),
          request=_config_put_ignored),
    Fault("no-ping", "registration", "the lookup loop's ticker never fires", "no PING to nsqlookupd",
          ("NSQ-REG-005",), relay=lambda command: command.name != b"PING"),
    Fault("unregister-missed", "registration", "deletions are not sent to nsqlookupd",
          "no UNREGISTER t c after /channel/delete", ("NSQ-REG-003", "NSQ-REG-004"),
          relay=lambda command: command.name != b"UNREGISTER"),
    # persistence across a restart (amnesiac.py)
    Fault("restart-forgets-everything", "persistence", "no disk backend: a restart starts empty",
          "after the restart the topic, channel and messages are gone", ("NSQ-RST-001",),
          restart="forget-everything"),
    Fault("restart-drops-delivered", "persistence", "shutdown flushes the memory queue but not in-flight or "
          "requeued messages", "after the restart the queued messages come, the in-flight one never",
          ("NSQ-RST-003", "NSQ-RST-004"), restart="drop-delivered"),
    Fault("restart-forgets-pause", "persistence", "nsqd.dat written without the paused flags",
          "after the restart /stats says paused:false", ("NSQ-RST-005",), restart="forget-pause"),
    # the broker's death (the suite names it once, in the case that caused it: liveness.py)
    Fault("exits-on-negative-deflate-level", "death", "IDENTIFY deflate_level -5 passed to flate.NewWriter: a panic "
          "that ends the process", "the ports refuse connections from that IDENTIFY on", ("NSQ-ID-013",),
          dies_on=_negative_deflate_level),
    Fault("hangs-on-negative-deflate-level", "death", "IDENTIFY deflate_level -5 deadlocks the broker",
          "connections are accepted and nothing is answered from that IDENTIFY on", ("NSQ-ID-013",),
          dies_on=_negative_deflate_level, death="hang"),
    # TLS
    Fault("tls-not-offered", "tls", "IDENTIFY says tls_v1 false though the broker upgrades",
          "\"tls_v1\":false, then the broker waits for a handshake", ("NSQ-TLS-002",),
          frame=lambda frame, session: wire.encode_frame(wire.FRAME_RESPONSE, frame.data.replace(
              b'"tls_v1":true', b'"tls_v1":false')) if frame.frame_type == wire.FRAME_RESPONSE else None,
          profile="nsqd-tls"),
    Fault("tls-ok-before-handshake", "tls", "the upgrade's OK written before the TLS handshake",
          "a plaintext OK after the JSON answer, where the handshake belongs", ("NSQ-TLS-002", "NSQ-TLS-007"),
          frame=_tls_ok_first, profile="nsqd-tls"),
)
BY_NAME = {fault.name: fault for fault in FAULTS}
