"""The TCP protocol V2: the I/O loop, the command dispatch, and one method per verb (nsqd/protocol_v2.go).

Every verb does the same steps in nsqd's order: state guard, parameter count, validation, bounded body
read, action, counters. The first failing check wins, so the order is part of the protocol.
"""
from __future__ import annotations

import functools
import json
import logging
import ssl
import time

from . import wire
from .auth import AuthError, query_any_authd
from .channel import ChannelError, ChannelFullError
from .client_v2 import STATE_CLOSING, STATE_INIT, STATE_SUBSCRIBED, ClientV2
from .connection_reader import ConnectionClosed
from .identify import decode_identify
from .nsqd import VERSION
from .options import MS
from .topic import PutError
from .wire import ClientError, FatalClientError, go_quote

log = logging.getLogger("nsqd")

_INT64 = 1 << 63
_UINT64 = 1 << 64
_UINT64_DIGITS = 19  # any 19 decimal digits fit in a uint64


class ProtocolV2:
    def __init__(self, nsqd, client: ClientV2):
        self.nsqd = nsqd
        self.options = nsqd.options
        self.client = client
        self._verbs = {
            b"IDENTIFY": self.identify,
            b"FIN": self.fin,
            b"RDY": self.rdy,
            b"REQ": self.req,
            b"PUB": self.pub,
            b"MPUB": self.mpub,
            b"DPUB": self.dpub,
            b"NOP": self.nop,
            b"TOUCH": self.touch,
            b"SUB": self.sub,
            b"CLS": self.cls,
            b"AUTH": self.auth,
        }
        self._published_to = None  # the topic of a publish whose OK is on its way: its pump turn follows

    # -- the I/O loop -------------------------------------------------------------------------------------

    def io_loop(self) -> None:
        """nsqd's IOLoop, whose every way out is logged as nsqd logs it: each error an error frame answers, a
        read or write that failed (not a client's EOF), then "exiting ioloop"."""
        client, reader = self.client, self.client.reader
        failure = None
        while True:
            # C-29: a complete command within 2x the heartbeat interval; none when heartbeats are off (C-32).
            interval = client.heartbeat_interval
            reader.deadline = time.monotonic() + 2 * interval / 1e9 if interval > 0 else None
            try:
                line = reader.readline()
                name, params = wire.parse_command_line(line)
                response = self.execute(name, params)
            except ClientError as error:
                log.error("[%s] - %s", client, error)
                try:
                    client.send_frame(wire.FRAME_TYPE_ERROR, str(error).encode("utf-8", "surrogateescape"))
                except ConnectionClosed as closed:
                    log.error("[%s] - %s", client, closed)
                    break
                if error.fatal:  # C-23
                    break
                continue
            except ConnectionClosed as closed:  # C-19, C-25, C-29: closed without an error frame
                failure = None if str(closed) == "EOF" else f"failed to read command - {closed}"
                break
            try:
                if response is not None:
                    client.send_frame(wire.FRAME_TYPE_RESPONSE, response)
            except ConnectionClosed as closed:
                failure = f"failed to send response - {closed}"
            finally:
                if self._published_to is not None:  # published whether or not the OK got out
                    topic, self._published_to = self._published_to, None
                    topic.hand_over()
            if failure:
                break
        log.info("PROTOCOL(V2): [%s] exiting ioloop", client)
        if failure:
            log.error("client(%s) - %s", client, failure)

    def execute(self, name: bytes, params: list[bytes]) -> bytes | None:
        if name != b"IDENTIFY" and self.options.tls_required and self.client.tls is None:
            raise FatalClientError("E_INVALID", f"cannot {_text(name)} in current state (TLS required)")  # T-07
        verb = self._verbs.get(name)
        if verb is None:
            raise FatalClientError("E_INVALID", f"invalid command {_text(name)}")  # C-16, C-20, C-21
        return verb(params)

    # -- IDENTIFY (P-ID, section 3) ---------------------------------------------------------------------

    def identify(self, params: list[bytes]) -> bytes | None:
        client = self.client
        if client.state != STATE_INIT:
            raise FatalClientError("E_INVALID", "cannot IDENTIFY in current state")  # P-ID-01
        # P-ID-03: unlike PUB, "too big" is checked before "<= 0".
        size = self._read_size("E_BAD_BODY", "IDENTIFY failed to read body size")
        if size > self.options.max_body_size:
            raise FatalClientError("E_BAD_BODY",
                                   f"IDENTIFY body too big {size} > {self.options.max_body_size}")
        if size <= 0:
            raise FatalClientError("E_BAD_BODY", f"IDENTIFY invalid body size {size}")
        body = self._read_body(size, "E_BAD_BODY", "IDENTIFY failed to read body")
        data = decode_identify(body)
        if data is None:
            raise FatalClientError("E_BAD_BODY", "IDENTIFY failed to decode JSON body")
        client.identify(self._validate_identify(data))

        if not data["feature_negotiation"]:
            return wire.OK  # ID-09, ID-10
        deflate = self.options.deflate_enabled and data["deflate"]
        level = data["deflate_level"] if deflate and data["deflate_level"] > 0 else 6
        level = min(level, self.options.max_deflate_level)  # ID-11: clamped silently
        snappy = self.options.snappy_enabled and data["snappy"]
        tls = self.nsqd.tls_context is not None and data["tls_v1"]  # T-05: only when asked and configured
        if deflate and snappy:
            raise FatalClientError("E_IDENTIFY_FAILED", "cannot enable both deflate and snappy compression")
        response = {  # ID-20, in nsqd's key order
            "max_rdy_count": self.options.max_rdy_count,
            "version": VERSION,
            "max_msg_timeout": self.options.max_msg_timeout // MS,
            "msg_timeout": client.msg_timeout // MS,
            "tls_v1": tls,  # ID-21
            "deflate": deflate,
            "deflate_level": level,
            "max_deflate_level": self.options.max_deflate_level,
            "snappy": snappy,
            "sample_rate": client.sample_rate,
            "auth_required": self.options.auth_enabled,
            "output_buffer_size": client.output_buffer_size,
            "output_buffer_timeout": client.output_buffer_timeout // MS,
            "topology_region": self.options.topology_region,
            "topology_zone": self.options.topology_zone,
        }
        client.send_frame(wire.FRAME_TYPE_RESPONSE, json.dumps(response, separators=(",", ":")).encode())
        # ID-30: each upgrade is followed by an OK sent through the new layer; TLS first, then compression
        # inside it (T-01, T-02, T-03).
        if tls:
            log.info("PROTOCOL(V2): [%s] upgrading connection to TLS", client)
            try:
                client.upgrade_tls(self.nsqd.tls_context)
            except (OSError, ssl.SSLError) as error:
                raise FatalClientError("E_IDENTIFY_FAILED", f"IDENTIFY failed {_tls_error(error)}") from None
            client.send_frame(wire.FRAME_TYPE_RESPONSE, wire.OK)
        if snappy:
            client.upgrade_snappy()
            client.send_frame(wire.FRAME_TYPE_RESPONSE, wire.OK)
        if deflate:
            client.upgrade_deflate(level)
            client.send_frame(wire.FRAME_TYPE_RESPONSE, wire.OK)
        return None

    def _validate_identify(self, data: dict) -> dict:
        """ID-08: metadata first, then heartbeat, output buffer timeout, size, sample rate, msg timeout."""
        options = self.options
        settings = {"client_id_label": data["client_id"], "hostname": data["hostname"],
                    "user_agent": data["user_agent"], "topology_region": data["topology_region"],
                    "topology_zone": data["topology_zone"]}

        heartbeat = data["heartbeat_interval"]  # ID-02
        if heartbeat == -1:
            settings["heartbeat_interval"] = 0
        elif 1000 <= heartbeat <= options.max_heartbeat_interval // MS:
            settings["heartbeat_interval"] = heartbeat * MS
        elif heartbeat != 0:
            raise _identify_error(f"heartbeat interval ({heartbeat}) is invalid")

        timeout, size = data["output_buffer_timeout"], data["output_buffer_size"]
        if timeout == -1:  # ID-03
            settings["output_buffer_timeout"] = 0
        elif options.min_output_buffer_timeout // MS <= timeout <= options.max_output_buffer_timeout // MS:
            settings["output_buffer_timeout"] = timeout * MS
        elif timeout != 0:
            raise _identify_error(f"output buffer timeout ({timeout}) is invalid")  # ID-05: timeout first
        if size == -1:  # ID-04: effectively unbuffered
            settings["output_buffer_size"] = 1
            settings["output_buffer_timeout"] = 0
        elif 64 <= size <= options.max_output_buffer_size:
            settings["output_buffer_size"] = size
        elif size != 0:
            raise _identify_error(f"output buffer size ({size}) is invalid")

        sample_rate = data["sample_rate"]  # ID-06
        if not 0 <= sample_rate <= 99:
            raise _identify_error(f"sample rate ({sample_rate}) is invalid")
        settings["sample_rate"] = sample_rate

        msg_timeout = data["msg_timeout"]  # ID-07
        if 1000 <= msg_timeout <= options.max_msg_timeout // MS:
            settings["msg_timeout"] = msg_timeout * MS
        elif msg_timeout != 0:
            raise _identify_error(f"msg timeout ({msg_timeout}) is invalid")
        return settings

    # -- AUTH (P-AUTH) ----------------------------------------------------------------------------------

    def auth(self, params: list[bytes]) -> bytes | None:
        if self.client.state != STATE_INIT:
            raise FatalClientError("E_INVALID", "cannot AUTH in current state")  # P-AUTH-01
        if len(params) != 0:
            raise FatalClientError("E_INVALID", "AUTH invalid number of parameters")  # P-AUTH-02
        size = self._read_size("E_BAD_BODY", "AUTH failed to read body size")  # P-AUTH-03
        if size > self.options.max_body_size:
            raise FatalClientError("E_BAD_BODY", f"AUTH body too big {size} > {self.options.max_body_size}")
        if size <= 0:
            raise FatalClientError("E_BAD_BODY", f"AUTH invalid body size {size}")
        secret = self._read_body(size, "E_BAD_BODY", "AUTH failed to read body")
        client = self.client
        if client.has_authorizations:
            raise FatalClientError("E_INVALID", "AUTH already set")  # P-AUTH-04
        if not self.options.auth_enabled:
            raise FatalClientError("E_AUTH_DISABLED", "AUTH disabled")  # P-AUTH-05
        client.auth_secret = secret.decode("utf-8", "surrogateescape")
        try:
            client.auth_state = self._query_auth()
        except AuthError as error:
            log.warning("PROTOCOL(V2): [%s] AUTH failed %s", client, error)
            raise FatalClientError("E_AUTH_FAILED", "AUTH failed") from None  # P-AUTH-06
        if not client.has_authorizations:
            raise FatalClientError("E_UNAUTHORIZED", "AUTH no authorizations found")  # P-AUTH-07
        response = {"identity": client.auth_state.identity, "identity_url": client.auth_state.identity_url,
                    "permission_count": len(client.auth_state.authorizations)}  # P-AUTH-08
        client.send_frame(wire.FRAME_TYPE_RESPONSE, json.dumps(response, separators=(",", ":")).encode())
        return None

    def _query_auth(self):
        """P-AUTH-13; the auth server learns whether the connection is TLS and its certificate's CN."""
        client = self.client
        return query_any_authd(self.options, client.remote_ip, client.tls is not None,
                               client.tls.peer_common_name() if client.tls else "", client.auth_secret)

    def _check_auth(self, verb: str, topic_name: str, channel_name: str = "") -> None:
        """P-AUTH-09, P-AUTH-10, P-AUTH-11, P-AUTH-12: only SUB and the publish commands ask, and only when auth is
        enabled."""
        if not self.options.auth_enabled:
            return
        client = self.client
        if not client.has_authorizations:
            raise FatalClientError("E_AUTH_FIRST", f"AUTH required before {verb}")
        if client.auth_state.expired:  # P-AUTH-12
            try:
                client.auth_state = self._query_auth()
            except AuthError as error:
                log.warning("PROTOCOL(V2): [%s] AUTH failed %s", client, error)
                raise FatalClientError("E_AUTH_FAILED", "AUTH failed") from None
        if not client.auth_state.is_allowed(topic_name, channel_name):
            raise FatalClientError("E_UNAUTHORIZED", f"AUTH failed for {verb} on {go_quote(topic_name.encode())} "
                                                     f"{go_quote(channel_name.encode())}")  # P-AUTH-10

    # -- SUB (P-SUB) ----------------------------------------------------------------------------------

    def sub(self, params: list[bytes]) -> bytes | None:
        client = self.client
        if client.state != STATE_INIT:
            raise FatalClientError("E_INVALID", "cannot SUB in current state")  # P-SUB-01
        if client.heartbeat_interval <= 0:
            raise FatalClientError("E_INVALID", "cannot SUB with heartbeats disabled")  # P-SUB-02
        if len(params) < 2:
            raise FatalClientError("E_INVALID", "SUB insufficient number of parameters")  # P-SUB-03
        topic_name, channel_name = params[0], params[1]
        if not wire.is_valid_name(topic_name):  # P-SUB-04
            raise FatalClientError("E_BAD_TOPIC", f"SUB topic name {go_quote(topic_name)} is not valid")
        if not wire.is_valid_name(channel_name):
            raise FatalClientError("E_BAD_CHANNEL", f"SUB channel name {go_quote(channel_name)} is not valid")
        self._check_auth("SUB", topic_name.decode(), channel_name.decode())  # P-SUB-05
        for attempt in range(2):  # P-SUB-07: one retry when racing an exiting ephemeral topic/channel
            topic = self.nsqd.get_topic(topic_name.decode())
            channel = topic.get_channel(channel_name.decode())
            try:
                channel.add_client(client)
            except ChannelFullError as error:  # P-SUB-06
                raise FatalClientError("E_SUB_FAILED", f"SUB failed {error}") from None
            except ChannelError as error:
                raise FatalClientError("E_SUB_FAILED", f"SUB failed {error}") from None
            if not (topic.exiting or channel.exiting):
                break
            channel.remove_client(client)
            if attempt == 0:
                time.sleep(0.1)
        else:
            raise FatalClientError("E_SUB_FAILED", "SUB failed to deleted topic/channel")
        client.channel = channel
        client.state = STATE_SUBSCRIBED  # P-SUB-08: RDY starts at 0
        return wire.OK

    # -- RDY (P-RDY, D-01, D-02, D-03, D-04, D-05)
    # ------------------------------------------------------------------------

    def rdy(self, params: list[bytes]) -> bytes | None:
        client = self.client
        if client.state == STATE_CLOSING:
            return None  # P-RDY-01: ignored after CLS
        if client.state != STATE_SUBSCRIBED:
            raise FatalClientError("E_INVALID", "cannot RDY in current state")  # P-RDY-02
        count = 1  # P-RDY-05: no parameter means 1, an empty one 0
        if params:
            parsed = _base10(params[0])
            if parsed is None:
                raise FatalClientError("E_INVALID", f"RDY could not parse count {_text(params[0])}")
            count = _as_int64(parsed)  # P-RDY-06
        if not 0 <= count <= self.options.max_rdy_count:
            raise FatalClientError("E_INVALID", f"RDY count {count} out of range 0-{self.options.max_rdy_count}")
        client.ready_count = count  # D-02: a window, never decremented by deliveries
        client.channel.client_ready_changed()
        return None

    # -- FIN / REQ / TOUCH (P-FIN, P-REQ, P-TOUCH) ------------------------------------------------------

    def _require_in_flight_state(self, verb: str) -> None:
        if self.client.state not in (STATE_SUBSCRIBED, STATE_CLOSING):
            raise FatalClientError("E_INVALID", f"cannot {verb} in current state")

    @staticmethod
    def _message_id(raw: bytes) -> bytes:
        if len(raw) != wire.MESSAGE_ID_LENGTH:
            raise FatalClientError("E_INVALID", "invalid message ID")  # P-FIN-03: any 16 bytes pass
        return raw

    def fin(self, params: list[bytes]) -> bytes | None:
        self._require_in_flight_state("FIN")  # P-FIN-01
        if not params:
            raise FatalClientError("E_INVALID", "FIN insufficient number of params")  # P-FIN-02
        message_ids = [self._message_id(params[0])]
        # Consecutive FINs already buffered are settled under one channel lock: one dispatch, one write.
        message_ids += self.client.reader.parse_buffered(wire.buffered_fins)
        for message_id, reason in self.client.channel.finish(self.client, message_ids):
            # P-FIN-04, P-FIN-05: non-fatal; later FINs of the batch were settled, so report each failure in order.
            self.client.send_frame(wire.FRAME_TYPE_ERROR,
                                   f"E_FIN_FAILED FIN {_text(message_id)} failed {reason}".encode(
                                       "utf-8", "surrogateescape"))
        return None

    def req(self, params: list[bytes]) -> bytes | None:
        self._require_in_flight_state("REQ")  # P-REQ-01
        if len(params) < 2:
            raise FatalClientError("E_INVALID", "REQ insufficient number of params")  # P-REQ-02
        message_id = self._message_id(params[0])  # P-REQ-03
        parsed = _base10(params[1])
        if parsed is None:
            raise FatalClientError("E_INVALID", f"REQ could not parse timeout {_text(params[1])}")  # P-REQ-04
        delay = _as_int64(parsed * MS)
        delay = min(max(delay, 0), self.options.max_req_timeout)  # P-REQ-05: clamped silently
        try:
            self.client.channel.requeue(self.client, message_id, delay)
        except ChannelError as error:  # P-REQ-06
            raise ClientError("E_REQ_FAILED", f"REQ {_text(message_id)} failed {error}") from None
        return None

    def touch(self, params: list[bytes]) -> bytes | None:
        self._require_in_flight_state("TOUCH")  # P-TOUCH-01
        if not params:
            raise FatalClientError("E_INVALID", "TOUCH insufficient number of params")  # P-TOUCH-02
        message_id = self._message_id(params[0])
        try:
            self.client.channel.touch(self.client, message_id, self.client.msg_timeout)  # P-TOUCH-04
        except ChannelError as error:  # P-TOUCH-03
            raise ClientError("E_TOUCH_FAILED", f"TOUCH {_text(message_id)} failed {error}") from None
        return None

    # -- CLS / NOP (P-CLS, P-NOP) -----------------------------------------------------------------------

    def cls(self, params: list[bytes]) -> bytes | None:
        if self.client.state != STATE_SUBSCRIBED:
            raise FatalClientError("E_INVALID", "cannot CLS in current state")  # P-CLS-01
        self.client.ready_count = 0  # P-CLS-02, D-04
        self.client.state = STATE_CLOSING
        return wire.CLOSE_WAIT

    def nop(self, params: list[bytes]) -> bytes | None:
        return None  # P-NOP-01

    # -- PUB / MPUB / DPUB (P-PUB, P-MPUB, P-DPUB) ----------------------------------------------------

    def pub(self, params: list[bytes]) -> bytes | None:
        if not params:
            raise FatalClientError("E_INVALID", "PUB insufficient number of parameters")
        topic_name = self._topic_name("PUB", params[0], "E_BAD_TOPIC")
        body = self._read_message_body("PUB")
        self._check_auth("PUB", topic_name)
        self._publish("PUB", "E_PUB_FAILED", topic_name, [body])
        return wire.OK

    def dpub(self, params: list[bytes]) -> bytes | None:
        if len(params) < 2:
            raise FatalClientError("E_INVALID", "DPUB insufficient number of parameters")
        topic_name = self._topic_name("DPUB", params[0], "E_BAD_TOPIC")
        parsed = _base10(params[1])  # P-DPUB-01: "-1" fails to parse; P-DPUB-03: empty is 0
        if parsed is None:
            raise FatalClientError("E_INVALID", f"DPUB could not parse timeout {_text(params[1])}")
        delay = _as_int64(_as_int64(parsed) * MS)
        if not 0 <= delay <= self.options.max_req_timeout:  # P-DPUB-02: inclusive
            raise FatalClientError("E_INVALID", f"DPUB timeout {parsed} out of range "
                                                f"0-{self.options.max_req_timeout // MS}")
        body = self._read_message_body("DPUB")
        self._check_auth("DPUB", topic_name)
        self._publish("DPUB", "E_DPUB_FAILED", topic_name, [body], delay)
        return wire.OK

    def mpub(self, params: list[bytes]) -> bytes | None:
        options = self.options
        if not params:
            raise FatalClientError("E_INVALID", "MPUB insufficient number of parameters")
        # P-MPUB-02: nsqd writes the code twice in this one message.
        topic_name = self._topic_name("MPUB", params[0], "E_BAD_TOPIC E_BAD_TOPIC")
        self._check_auth("MPUB", topic_name)
        topic = self.nsqd.get_topic(topic_name)  # P-MPUB-05: created before the body is validated
        size = self._read_size("E_BAD_BODY", "MPUB failed to read body size")
        if size <= 0:
            raise FatalClientError("E_BAD_BODY", f"MPUB invalid body size {size}")
        if size > options.max_body_size:
            raise FatalClientError("E_BAD_BODY", f"MPUB body too big {size} > {options.max_body_size}")
        # P-MPUB-04: the outer size is only range-checked; the count and member sizes drive the framing.
        count = self._read_size("E_BAD_BODY", "MPUB failed to read message count")
        if count <= 0 or count > (options.max_body_size - 4) // 5:
            raise FatalClientError("E_BAD_BODY", f"MPUB invalid message count {count}")
        bodies: list[bytes] = []
        while len(bodies) < count:  # P-MPUB-03: every member is read and checked before any is queued
            index = len(bodies)
            member_size = self._read_size("E_BAD_MESSAGE", f"MPUB failed to read message({index}) body size")
            if member_size <= 0:
                raise FatalClientError("E_BAD_MESSAGE", f"MPUB invalid message({index}) body size {member_size}")
            if member_size > options.max_msg_size:
                raise FatalClientError("E_BAD_MESSAGE",
                                       f"MPUB message too big {member_size} > {options.max_msg_size}")
            bodies.append(self._read_body(member_size, "E_BAD_MESSAGE", "MPUB failed to read message body"))
            # The members already buffered behind it, in one pass. It stops before one that is not wholly
            # buffered or whose size is refused: the next turn reads that one and checks it as above.
            bodies += self.client.reader.parse_buffered(
                functools.partial(wire.buffered_members, count - len(bodies), options.max_msg_size))
        self._publish("MPUB", "E_MPUB_FAILED", topic_name, bodies, topic=topic)
        return wire.OK

    def _topic_name(self, verb: str, raw: bytes, code: str) -> str:
        if not wire.is_valid_name(raw):
            raise FatalClientError(code, f"{verb} topic name {go_quote(raw)} is not valid")
        return raw.decode()

    def _read_message_body(self, verb: str) -> bytes:
        """P-PUB-02, P-PUB-03: read the size, then "<= 0", then "too big" (inclusive limit), then the body."""
        size = self._read_size("E_BAD_MESSAGE", f"{verb} failed to read message body size")
        if size <= 0:
            raise FatalClientError("E_BAD_MESSAGE", f"{verb} invalid message body size {size}")
        if size > self.options.max_msg_size:
            raise FatalClientError("E_BAD_MESSAGE", f"{verb} message too big {size} > {self.options.max_msg_size}")
        return self._read_body(size, "E_BAD_MESSAGE", f"{verb} failed to read message body")

    def _publish(self, verb: str, failure_code: str, topic_name: str, bodies: list[bytes], delay: int = 0,
                 topic=None) -> None:
        topic = topic or self.nsqd.get_topic(topic_name)  # P-PUB-04: created by a successful publish only
        try:
            topic.put_messages(topic.new_messages(bodies, delay))
        except PutError as error:
            raise FatalClientError(failure_code, f"{verb} failed {error}") from None
        counts = self.client.pub_counts
        counts[topic_name] = counts.get(topic_name, 0) + len(bodies)  # P-PUB-05
        self._published_to = topic

    # -- bounded reads ----------------------------------------------------------------------------------

    def _read_size(self, code: str, text: str) -> int:
        try:
            return wire.read_size(self.client.reader.read_exactly(4))  # C-18
        except ConnectionClosed:
            raise FatalClientError(code, text) from None

    def _read_body(self, size: int, code: str, text: str) -> bytes:
        try:
            return self.client.reader.read_exactly(size)
        except ConnectionClosed:
            raise FatalClientError(code, text) from None


def _identify_error(text: str) -> FatalClientError:
    return FatalClientError("E_BAD_BODY", f"IDENTIFY {text}")


def _base10(raw: bytes) -> int | None:
    """nsqd's protocol.ByteToBase10: decimal digits only, empty is 0, wraps at 2^64. A line may carry ~16 KiB
    of digits (C-19), past what int() converts at once (sys.get_int_max_str_digits): 19 digits at a time,
    reduced as Go's uint64 wraps, in linear time."""
    if raw and not raw.isdigit():  # bytes.isdigit: ASCII digits only
        return None
    value = 0
    for start in range(0, len(raw), _UINT64_DIGITS):
        digits = raw[start:start + _UINT64_DIGITS]
        value = (value * 10 ** len(digits) + int(digits)) % _UINT64
    return value


def _as_int64(value: int) -> int:
    """Go's int64(x) conversion of a uint64 (and time.Duration overflow): two's complement wrap."""
    value %= _UINT64
    return value - _UINT64 if value >= _INT64 else value


def _text(raw: bytes) -> str:
    """Raw protocol bytes inside an error text, byte for byte."""
    return raw.decode("utf-8", "surrogateescape")


def _tls_error(error: Exception) -> str:
    """What Go's handshake error would say, near enough: OpenSSL's reason, or the I/O error."""
    reason = getattr(error, "reason", None)
    return f"remote error: tls: {reason.lower().replace('_', ' ')}" if reason else str(error)
