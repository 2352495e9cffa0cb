"""What the monitors know of one V2 connection: what it negotiated, its subscription and RDY, which command each
answer answers, and whether the broker or the client closed it. A fact the traffic did not show is None, never a
default: a capture that starts mid-connection knows neither the heartbeat interval nor the RDY."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from nsq_protocol.monitors.events import (
    COMMAND,
    ERROR,
    FINS,
    JSON,
    NON_FATAL_ERRORS,
    RESPONSE,
    Observed,
    Run,
)

DEFAULT_HEARTBEAT_MS = 30_000  # C-27: without IDENTIFY, whatever the broker's flags
MIN_MSG_TIMEOUT_MS = 1_000  # ID-07: the least msg_timeout an IDENTIFY can set
ANSWERED = frozenset({"IDENTIFY", "AUTH", "SUB", "PUB", "MPUB", "DPUB", "CLS"})  # one answer each, in order (C-13)
UPGRADES = ("tls_v1", "snappy", "deflate")  # each sends one OK through its new layer (ID-30)
IDENTIFY_ANSWER_FIELDS = ("max_rdy_count", "version", "max_msg_timeout", "msg_timeout", "tls_v1", "deflate",
                          "deflate_level", "max_deflate_level", "snappy", "sample_rate", "auth_required",
                          "output_buffer_size", "output_buffer_timeout")  # ID-20


TAIL_LOST = "the capture shows nothing of the connection after then, nor its end: its tail may be lost"


@dataclass
class Connection:
    name: str
    started: bool  # the traffic showed the connection's start (its magic): its defaults are known
    opened_at: float | None = None
    server: str | None = None  # host:port the client dialed (an nsqd /lookup lists so), where the feeder knows it
    client: str | None = None  # host:port of the client's end, as the broker names it (/stats remote_address)
    identify: dict | None = None  # the first IDENTIFY's body, once answered without an error (ID-40)
    identify_answer: dict | None = None  # its JSON answer
    identify_later: dict | None = None  # the latest IDENTIFY after it answered without an error: nsqd's answer echoes
    # it, its message pump keeps the first one's heartbeat and msg timeout (ID-40)
    identified_at: float | None = None
    topic: str | None = None
    channel: str | None = None
    subscribed_at: float | None = None
    rdy: int | None = None
    closing: bool = False  # CLS answered
    closed_at: float | None = None
    closed_by: str | None = None  # BROKER, CLIENT, or None: the traffic did not say
    # when the client's FIN came, where a capture shows it: it sent nothing after, and nsqd reads its end there
    # (D-50), while ``closed_at`` is the connection's last packet
    client_done_at: float | None = None
    # a capture that holds nothing of the connection after this time, nor its end (a sniffer that lost its tail):
    # a silence past it is no evidence. None: the traffic holds all of it so far
    seen_until: float | None = None
    fatal_error: Observed | None = None  # the first fatal error frame (C-23)
    last_command_at: float | None = None
    in_flight: dict = field(default_factory=dict)  # msg_id -> the Delivery (ledger.py) in flight to it
    _unanswered: deque = field(default_factory=deque)  # (verb, event) of commands awaiting their answer
    _upgrade_oks: int = 0
    _upgrade_ok: Observed | None = None

    def unseen_at(self, ts: float) -> bool:
        """Whether the traffic can no longer show what the connection did at ``ts`` (``seen_until``)."""
        return self.seen_until is not None and ts > self.seen_until

    def upgrade_ok_taken(self, event: Observed) -> bool:
        """Whether ``event`` is the OK an upgrade sent through its new layer (ID-30)."""
        return event is self._upgrade_ok

    @property
    def upgrades_pending(self) -> bool:
        """An upgrade the JSON answer agreed to has not sent its OK yet (ID-30)."""
        return self._upgrade_oks > 0

    @property
    def unanswered(self) -> bool:
        """A command that gets an answer (C-13) has not had it."""
        return bool(self._unanswered)

    @property
    def subscription(self) -> tuple[str, str] | None:
        return (self.topic, self.channel) if self.topic is not None else None

    @property
    def heartbeat_ms(self) -> int | None:
        """The heartbeat interval in force (C-27, ID-02): 0 when disabled, None when the traffic does not tell."""
        if self.identify is not None:
            asked = self.identify.get("heartbeat_interval")
            if isinstance(asked, int) and not isinstance(asked, bool):
                if asked == -1:
                    return 0
                if asked >= 1:  # ID-02: a value nsqd refuses never got here, the IDENTIFY failed
                    return asked
        return DEFAULT_HEARTBEAT_MS if self.started else None

    @property
    def msg_timeout_ms(self) -> int | None:
        """The msg_timeout of this connection's messages (ID-07): the JSON answer's, or an accepted IDENTIFY's own
        value (nsqd applies it without feature negotiation too); None when it is the broker's --msg-timeout,
        which the traffic does not show."""
        if self.identify_answer is not None and isinstance(self.identify_answer.get("msg_timeout"), int):
            return self.identify_answer["msg_timeout"]
        if self.identify is not None:
            asked = self.identify.get("msg_timeout")
            if isinstance(asked, int) and not isinstance(asked, bool) and asked >= MIN_MSG_TIMEOUT_MS:
                return asked
        return None

    @property
    def max_msg_timeout_ms(self) -> int | None:
        answer = self.identify_answer or {}
        return answer.get("max_msg_timeout") if isinstance(answer.get("max_msg_timeout"), int) else None

    @property
    def open(self) -> bool:
        return self.closed_at is None

    def lived_through(self, ts: float) -> bool:
        """The connection was open at ``ts``: what the broker showed then holds for it, whatever the traffic's
        length (a restart, perhaps with other flags, ends every connection)."""
        return self.opened_at is not None and self.opened_at < ts and self.open

    def has_room(self, now: float) -> bool:
        """Subscribed, open and ready, with fewer messages in flight at ``now`` than its RDY, counting each until
        the latest its timeout can fire (D-01): the broker could deliver to it."""
        if not (self.open and not self.closing and self.rdy):
            return False
        in_flight = sum(1 for delivery in self.in_flight.values()
                        if delivery.latest_timeout is None or delivery.latest_timeout > now)
        return in_flight < self.rdy

    def observe(self, event: Observed, answered_command: Observed | None = None) -> Observed | None:
        """Takes ``event`` in; returns the command a response or error frame answers (C-13), if any."""
        if event.kind == COMMAND:
            # C-22: the broker takes commands in arrival order, so a pipelined SUB, RDY, CLS takes effect when
            # sent; a refusal is fatal (C-23) and ends the connection
            self.last_command_at = event.ts
            if event.name in ANSWERED:
                self._unanswered.append(event)
            if event.name == "SUB" and self.subscription is None and self.fatal_error is None:
                self.topic, self.channel, self.subscribed_at, self.rdy = event.topic, event.channel, event.ts, 0
            elif event.name == "RDY" and self.subscription is not None and not self.closing:
                self.rdy = event.number  # P-RDY-01: ignored after CLS; an unparsable count is fatal anyway
            elif event.name == "CLS" and self.subscription is not None:
                self.closing, self.rdy = True, 0  # D-04
            return None
        if event.kind == RESPONSE and self._upgrade_oks and event.name == "OK":
            self._upgrade_oks -= 1  # ID-30: the OK through a new layer answers no command
            self._upgrade_ok = event
            return None
        if event.kind not in (RESPONSE, ERROR) or (event.kind == ERROR and event.name in NON_FATAL_ERRORS):
            return None
        if event.kind == ERROR and self.fatal_error is None:
            self.fatal_error = event
        command = self._unanswered.popleft() if self._unanswered else None
        if command is not None and event.kind == RESPONSE:
            self._answered(command, event)
        return command

    def observe_run(self, run: Run) -> None:
        """``observe`` of each of ``run``'s events (events.Run), in turn."""
        if run.key == FINS:
            self.last_command_at = run.ts[-1]

    def later(self, name: str) -> int | None:
        """The positive ``name`` (heartbeat_interval, msg_timeout) a later IDENTIFY asked for (ID-40), if any."""
        value = (self.identify_later or {}).get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

    def _answered(self, command: Observed, answer: Observed) -> None:
        if command.name == "IDENTIFY" and self.identify is not None:
            self.identify_later = {key.lower(): value for key, value in (command.fields or {}).items()}
        if command.name == "IDENTIFY" and self.identify is None:
            self.identify = {key.lower(): value for key, value in (command.fields or {}).items()}  # ID-14
            self.identified_at = answer.ts
            if answer.name == JSON and answer.fields is not None:
                self.identify_answer = answer.fields
                self._upgrade_oks = sum(bool(answer.fields.get(name)) for name in UPGRADES)

    def close(self, ts: float, by: str | None, client_done: float | None = None) -> None:
        if self.closed_at is None:
            self.closed_at, self.closed_by, self.client_done_at = ts, by, client_done
