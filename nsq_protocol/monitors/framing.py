"""Frames and errors: an error is an error frame with a code (C-07, C-08), and a fatal one ends the connection
(C-23)."""

from __future__ import annotations

import re
from itertools import repeat

from nsq_protocol.monitors.events import (
    BROKER,
    CLIENT,
    ERROR,
    FINS,
    HEARTBEAT,
    MESSAGE,
    MESSAGES,
    NON_FATAL_ERRORS,
    RESPONSE,
    UNFRAMED,
)
from nsq_protocol.monitors.monitor import Monitor

_ERROR_CODE = re.compile(r"E_[A-Z_]+\Z")
_MESSAGE_ID = re.compile(r"[0-9a-f]{16}\Z")
_HEX = re.compile(r"[0-9a-f]*\Z")
NSQ_EPOCH_NS = 1_325_376_000 * 10**9  # 2012-01-01: no nsqd stamped a message before it
STAMP_SLACK_NS = 2 * 10**9  # between the broker's clock and the traffic's
FATAL_CLOSE_S = 1.0  # nsqd closes right after writing a fatal error; this is the capture's slack
KEEP_OPEN_S = 1.0  # a broker's close this soon after a non-fatal error is that error's doing
ALIVE_S = 0.5  # a broker that answers on another connection this soon after a close did not shut down
IDLE_FACTOR, IDLE_LEAST_S = 1.5, 10.0  # an error frame this long after the client's last command answers none (C-25)

_FRAME_SIZE = re.compile(r"frame size (-?[0-9]+) out of range")  # the wire decoder's reason (C-06)
UNSUBSCRIBED = "the consumer's subscription is not in the traffic"

class ErrorsAreErrorFrames(Monitor):
    """C-08: an error is an error frame (type 1) whose data starts with its E_ code; C-07: a response frame is not
    an error. A broker that answers a refused command with a response frame holding ``E_...`` breaks both."""

    ITEMS = ("C-07", "C-08")
    KINDS = frozenset({RESPONSE, ERROR})

    def observe(self, judge, connection, event, answered):
        if event.kind == RESPONSE and _ERROR_CODE.match(event.name.split(" ", 1)[0]):
            self.report("C-07", BROKER, event.ts, connection.name, "an error as an error frame (type 1)",
                        f"a response frame (type 0) holding {event.name[:60]!r}", event)
        elif event.kind == ERROR and not _ERROR_CODE.match(event.name):
            self.report("C-08", BROKER, event.ts, connection.name, "an error frame starting with its E_ code",
                        f"an error frame starting {event.name[:40]!r}", event)


class FatalErrorsClose(Monitor):
    """C-23: after a fatal error frame the broker closes the connection and sends nothing more. A heartbeat may
    still slip out between the error and the close (nsqd's message pump writes it), so only other frames count;
    where times are read times (the suite), order alone decides."""

    ITEMS = ("C-23",)
    RUNS = frozenset({MESSAGES, FINS})

    def __init__(self):
        super().__init__()
        self._reported: set[str] = set()
        self._alive_after_error: set[str] = set()

    def observe_run(self, judge, connection, run):
        if connection.fatal_error is None:
            return  # the bulk of a healthy connection
        for event in run.events():
            self.observe(judge, connection, event, None)

    def observe(self, judge, connection, event, answered):
        error = connection.fatal_error
        if error is not None and event.ts - error.ts > FATAL_CLOSE_S:
            self._alive_after_error.add(connection.name)
        if error is None or event is error or event.sender != BROKER or event.kind == HEARTBEAT \
                or connection.name in self._reported:
            return
        if not judge.timing or event.ts - error.ts > FATAL_CLOSE_S:
            self._reported.add(connection.name)
            self.report("C-23", BROKER, event.ts, connection.name, "the connection closed after the fatal error",
                        f"a frame {event.ts - error.ts:.1f} s later", error, event)

    def closed(self, judge, connection):
        error = connection.fatal_error
        if error is None or connection.name in self._reported:
            return
        late = connection.closed_at - error.ts
        if connection.closed_by != CLIENT or late <= FATAL_CLOSE_S:
            return  # closed by the broker, or the traffic does not say by whom
        self.report("C-23", BROKER, connection.closed_at, connection.name,
                    "the broker closes the connection after the fatal error",
                    f"still open {late:.1f} s later, then closed by the client",
                    error)

    def finish(self, judge, now):
        """Still open when the traffic ends is a violation only where the traffic shows the connection alive more
        than a second after the error (a later packet of it): a capture that lost the close shows nothing more."""
        for name in self._alive_after_error - self._reported:
            connection = judge.connections[name]
            if connection.open:
                self.report("C-23", BROKER, now, name, "the broker closes the connection after the fatal error",
                            f"still open {now - connection.fatal_error.ts:.1f} s later, when the traffic ends",
                            connection.fatal_error)


class NonFatalErrorsKeepOpen(Monitor):
    """C-23: after E_FIN_FAILED, E_REQ_FAILED or E_TOUCH_FAILED the connection stays usable. A close by the broker
    within a second of one is judged where nothing else explains it (C-25): no fatal error, a command from the client
    within two heartbeat intervals (C-29), no HTTP delete of a channel or topic (D-62), and the broker sending on
    another connection right afterwards (no shutdown)."""

    ITEMS = ("C-23",)
    KINDS = frozenset({RESPONSE, ERROR, MESSAGE, HEARTBEAT})
    RUNS = frozenset({MESSAGES})

    def __init__(self):
        super().__init__()
        self._failed: dict[str, object] = {}  # connection -> its latest non-fatal error
        self._closes: list = []  # (close time, connection, error): closes still to be told from a shutdown
        self._deleted_at: list[float] = []

    def observe_run(self, judge, connection, run):
        if not self._closes:
            return  # a message frame tells a close from a shutdown, else it is no error
        for event in run.events():
            self.observe(judge, connection, event, None)

    def observe(self, judge, connection, event, answered):
        if event.kind == ERROR and event.name in NON_FATAL_ERRORS:
            self._failed[connection.name] = event
        elif event.sender == BROKER and self._closes:
            for close in [close for close in self._closes if close[1] != connection.name]:
                self._closes.remove(close)
                closed_at, name, error = close
                if closed_at < event.ts <= closed_at + ALIVE_S:
                    self.report("C-23", BROKER, closed_at, name, "the connection open after a non-fatal error",
                                f"closed by the broker {closed_at - error.ts:.2f} s after it", error)

    def http(self, judge, action):
        if action.path in ("/channel/delete", "/topic/delete") and action.status == 200:
            self._deleted_at.append(action.ts)

    def closed(self, judge, connection):
        error = self._failed.pop(connection.name, None)
        if error is None or not judge.timing or connection.closed_by != BROKER or connection.fatal_error is not None \
                or connection.closed_at - error.ts > KEEP_OPEN_S:
            return
        interval, last = connection.heartbeat_ms, connection.last_command_at
        if not judge.http_seen or interval is None or last is None:
            self.skip("C-23", "the HTTP requests or the heartbeat interval of this connection are not in the traffic")
            return
        if (interval and connection.closed_at - last >= 2 * interval / 1000) or \
                any(error.ts <= deleted <= connection.closed_at for deleted in self._deleted_at):
            return
        self._closes.append((connection.closed_at, connection.name, error))


class MessageFields(Monitor):
    """C-10: a message ID is sixteen lowercase hex characters; C-09: its timestamp is the publish time in
    nanoseconds, so never before nsqd existed nor after the message crossed the wire."""

    ITEMS = ("C-09", "C-10")
    KINDS = frozenset({MESSAGE})
    RUNS = frozenset({MESSAGES})

    def observe_run(self, judge, connection, run):
        stamps = run.msg_ts_ns
        if set(map(len, run.msg_ids)) == {16} and _HEX.match("".join(run.msg_ids)) and None not in stamps \
                and NSQ_EPOCH_NS <= min(stamps) and max(stamps) <= run.ts[0] * 1e9 + STAMP_SLACK_NS:
            return  # every ID and stamp as the rules want them
        for event in run.events():
            self.observe(judge, connection, event, None)

    def observe(self, judge, connection, event, answered):
        if event.kind != MESSAGE:
            return
        if event.msg_id is None:
            self.report("C-09", BROKER, event.ts, connection.name, "a message frame of 26 bytes or more",
                        event.text, event)
            return
        if not _MESSAGE_ID.match(event.msg_id):
            self.report("C-10", BROKER, event.ts, connection.name, "an ID of 16 lowercase hex characters",
                        f"ID {event.msg_id!r}", event)
        stamp = event.msg_ts_ns
        if stamp is not None and not NSQ_EPOCH_NS <= stamp <= event.ts * 1e9 + STAMP_SLACK_NS:
            self.report("C-09", BROKER, event.ts, connection.name, "a publish time in nanoseconds since the epoch",
                        f"timestamp {stamp}", event)


class CopiesAreOneMessage(Monitor):
    """C-11: a topic's IDs are its own generator's, each naming one message: every copy of an ID in the topic's
    other channels carries the one timestamp and body (a redelivery in the same channel: C-12). Judged where the
    consumer's subscription is in the traffic; an ID's first copy is kept while the judge follows its messages
    (judge.MESSAGES_KEPT)."""

    ITEMS = ("C-11",)
    KINDS = frozenset({MESSAGE})
    RUNS = frozenset({MESSAGES})

    def __init__(self):
        super().__init__()
        self._first: dict[tuple, tuple] = {}  # (topic, ID) -> (timestamp, bodies, channel) of its first copy

    def observe_run(self, judge, connection, run):
        topic, channel = connection.topic, connection.channel
        if topic is None:
            self.skip("C-11", UNSUBSCRIBED, len(run.ts))
            return
        copies = dict(zip(zip(repeat(topic), run.msg_ids), zip(run.msg_ts_ns, zip(run.bodies), repeat(channel)),
                          strict=True))
        again = self._first.keys() & copies.keys()
        if any(self._first[key][2] != channel for key in again):  # a copy of another channel's: compared
            for event in run.events():
                self.observe(judge, connection, event, None)
            return
        for key in again:  # a redelivery in the same channel is C-12's, and its first copy stays
            del copies[key]
        self._first.update(copies)

    def observe(self, judge, connection, event, answered):
        if event.kind != MESSAGE or event.msg_id is None:
            return
        if connection.topic is None:
            self.skip("C-11", UNSUBSCRIBED)
            return
        seen = (event.msg_ts_ns, event.bodies, connection.channel)
        first = self._first.setdefault((connection.topic, event.msg_id), seen)
        if first[:2] != seen[:2] and first[2] != seen[2]:  # a redelivery in the same channel is C-12's
            self.report("C-11", BROKER, event.ts, connection.name,
                        f"ID {event.msg_id} with the timestamp and body of its copy in channel {first[2]!r}",
                        "another timestamp" if first[0] != seen[0] else "another body", event)

    def forget(self, judge, now):
        kept = {(key[0], key[-1]) for key in judge.messages}
        self._first = {key: first for key, first in self._first.items() if key in kept}


class AnswersOnlyToCommands(Monitor):
    """C-13: each command that is answered gets one answer, in order; a response frame that answers no command (not
    a heartbeat, nor the OK an upgrade sends through its new layer, ID-30) is one too many; ID-35 when it follows
    IDENTIFY's answer. Judged from the connection's start."""

    ITEMS = ("C-13", "ID-35")
    KINDS = frozenset({RESPONSE})

    def observe(self, judge, connection, event, answered):
        if event.kind != RESPONSE or answered is not None or not connection.started:
            return
        if connection.upgrade_ok_taken(event):
            return
        # ID-35: IDENTIFY sends its answer and one OK per upgrade it granted, nothing more
        after_identify = connection.identified_at is not None and connection.last_command_at is not None and \
            connection.last_command_at < connection.identified_at
        self.report("ID-35" if after_identify else "C-13", BROKER, event.ts, connection.name,
                    "a response only to a command that is answered",
                    f"{event.name[:40]!r} with no command awaiting an answer", event)


class OwnClosesSilent(Monitor):
    """C-25: when the broker ends a connection on its own account it sends no error frame first. Its read deadline
    (two heartbeat intervals without a command, C-29) is the one a capture shows: an error frame long after the
    client's last command answers nothing (nsqd answers at once; AUTH's wait on the auth server is seconds) and is
    such a notice. Judged where the heartbeat interval and the times are the wire's."""

    ITEMS = ("C-25",)
    KINDS = frozenset({ERROR})

    def observe(self, judge, connection, event, answered):
        if event.kind != ERROR or not judge.timing:
            return
        interval, last = connection.heartbeat_ms, connection.last_command_at or connection.opened_at
        if interval is None or last is None:
            self.skip("C-25", "the heartbeat interval or the connection's start is not in the traffic")
            return
        idle = event.ts - last
        if interval and idle >= max(IDLE_FACTOR * interval / 1000, IDLE_LEAST_S):
            self.report("C-25", BROKER, event.ts, connection.name, "the broker's own close without an error frame",
                        f"{event.name} {event.text[:60]} {idle:.1f} s after the client's last command", event)


class FramesSized(Monitor):
    """C-06: a frame's size covers its type word and its data, so it is never below 4: the broker stream decoder's
    ``UNFRAMED`` event says where one was (the suite's feeding gives it; a capture's decoder does not yet)."""

    ITEMS = ("C-06",)
    KINDS = frozenset({UNFRAMED})

    def __init__(self):
        super().__init__()
        self._told = False

    def observe(self, judge, connection, event, answered):
        self._told = True
        size = _FRAME_SIZE.match(event.text)
        if size is not None and int(size.group(1)) < 4:
            self.report("C-06", BROKER, event.ts, connection.name, "a frame size of 4 (its type word) or more",
                        f"frame size {size.group(1)}", event)

    def finish(self, judge, now):
        if judge.timing and not self._told:  # a capture's
            self.skip("C-06", "a frame the capture's decoder could not read is not among its events (nsq-trace gives "
                              "none yet)")
