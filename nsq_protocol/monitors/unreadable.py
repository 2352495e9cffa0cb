"""nsqd's answer to client bytes it cannot read (nsqd/tcp.go, protocol_v2.go IOLoop): a bad magic gets one
E_BAD_PROTOCOL frame and the close; a magic cut short by the client's end, a line that overflows the 16 KiB read
buffer, or a compression layer that does not decode, ends the read with no frame at all, and the connection."""

from __future__ import annotations

from nsq_protocol.monitors.events import (
    BROKER,
    CLIENT,
    ERROR,
    HEARTBEAT,
    MAGIC,
    MESSAGE,
    MESSAGES,
    RESPONSE,
    SHORT_MAGIC,
    STREAM,
    UNREADABLE,
    Observed,
)
from nsq_protocol.monitors.framing import FATAL_CLOSE_S
from nsq_protocol.monitors.monitor import Monitor

BAD_PROTOCOL = "E_BAD_PROTOCOL"
# wire.CommandLineDecoder's reason for a line without a newline in its first 16 KiB: nsqd's bufio.Reader of
# defaultBufferSize is full then (ErrBufferFull); the decoder's other reasons (a body size) are answered by an error
# frame the publishing rules judge
OVERLONG_LINE = "command line longer than"
MAGIC_ITEMS = ("C-02", "C-05")
LAYER_ITEMS = {"deflate": "ID-33", "snappy": "ID-34"}  # the layer nsqd reads raw DEFLATE, or snappy's framing, in


def item_of(event: Observed) -> str | None:
    """The item nsqd's answer to these unreadable bytes keeps; None: not judged here."""
    if event.name == MAGIC:
        # C-05: 'V2  ', '  v2': a near miss of the magic is refused as any other is (C-02)
        return "C-05" if "v2" in event.text.lower() else "C-02"
    if event.name == STREAM:
        return "C-19" if event.text.startswith(OVERLONG_LINE) else None
    if event.name == SHORT_MAGIC:
        return "C-03"
    return LAYER_ITEMS.get(event.name)


class UnreadableBytesEnd(Monitor):
    """C-02, C-05: a magic other than '  V2' gets one E_BAD_PROTOCOL frame, then the broker's close; C-01: the magic
    '  V2' never gets it. C-19: a command line overflowing the 16 KiB buffer ends the connection with no frame; ID-33,
    ID-34: so does what the client sent through deflate or snappy that is no raw DEFLATE or snappy framing (a broker
    that read on read another format). Answers to the commands before the bytes still come; a heartbeat or message
    the pump was writing may slip out before the close, but not later than a fatal error's slack. C-03: a client
    that ends its side within the magic gets nothing at all (nsqd's read of the magic fails: no protocol, no pump),
    before its end or after; judged where the connection's start is in the traffic."""

    ITEMS = ("C-01", "C-02", "C-03", "C-05", "C-19", "ID-33", "ID-34")
    KINDS = frozenset({UNREADABLE, RESPONSE, ERROR, MESSAGE, HEARTBEAT})
    RUNS = frozenset({MESSAGES})

    def __init__(self):
        super().__init__()
        self._unreadable: dict[str, tuple[str, Observed]] = {}  # connection -> (item, the client's bytes)
        self._refused: set[str] = set()  # bad magic's connections that got their E_BAD_PROTOCOL
        self._done: set[str] = set()
        self._before_magic: dict[str, Observed] = {}  # connection -> the broker's first frame before any command

    def observe_run(self, judge, connection, run):
        if connection.name not in self._unreadable and connection.last_command_at is not None:
            return  # messages after the magic and a command: only an error frame is C-01's
        for event in run.events():
            self.observe(judge, connection, event, None)

    def observe(self, judge, connection, event, answered):
        name = connection.name
        if event.kind == UNREADABLE:
            item = item_of(event)
            if item is not None and name not in self._unreadable:
                self._unreadable[name] = (item, event)
                early = self._before_magic.pop(name, None)
                if item == "C-03" and early is not None and connection.started:
                    self._wrong(name, item, early, event, early.describe()[2:] + " before the client's end")
            return
        seen = self._unreadable.get(name)
        if seen is None and connection.last_command_at is None:
            # before any command: whether the magic was whole (C-01) or the client's end cuts it short (C-03) is
            # told by what comes next, or by the close
            self._before_magic.setdefault(name, event)
            return
        if seen is None:
            self._accepted(connection, event)
            return
        item, bytes_seen = seen
        if name in self._done:
            return
        if item == "C-03":
            if connection.started:
                self._wrong(name, item, event, bytes_seen, event.describe()[2:])
            return
        if event.kind in (MESSAGE, HEARTBEAT) and item not in MAGIC_ITEMS:
            if judge.timing and event.ts - bytes_seen.ts > FATAL_CLOSE_S:  # the pump still runs: nothing closed
                self._wrong(name, item, event, bytes_seen, f"{event.kind} {event.ts - bytes_seen.ts:.1f} s later")
            return
        if item in MAGIC_ITEMS:
            if event.kind == ERROR and event.name == BAD_PROTOCOL and name not in self._refused:
                self._refused.add(name)
            else:
                after = f" after {BAD_PROTOCOL}" if name in self._refused else ""
                self._wrong(name, item, event, bytes_seen, event.describe()[2:] + after)
        elif answered is None:  # an answer to a command before the bytes is still due
            self._wrong(name, item, event, bytes_seen, event.describe()[2:])

    def _accepted(self, connection, event: Observed) -> None:
        """C-01: the magic '  V2' never gets E_BAD_PROTOCOL."""
        name = connection.name
        if event.kind == ERROR and event.name == BAD_PROTOCOL and connection.started and name not in self._done:
            self._done.add(name)
            self.report("C-01", BROKER, event.ts, name, "the magic '  V2' accepted", f"{BAD_PROTOCOL} after it", event)

    def _wrong(self, name: str, item: str, event: Observed, bytes_seen: Observed, observed: str) -> None:
        self._done.add(name)
        self.report(item, BROKER, event.ts, name, self._expected(item), observed, bytes_seen, event)

    @staticmethod
    def _expected(item: str) -> str:
        if item in MAGIC_ITEMS:
            return f"one {BAD_PROTOCOL} frame, then the close"
        return "no frame, the close"

    def closed(self, judge, connection):
        name = connection.name
        early = self._before_magic.pop(name, None)
        if early is not None and name not in self._unreadable:
            self._accepted(connection, early)
        seen, refused, done = self._unreadable.pop(name, None), name in self._refused, name in self._done
        self._refused.discard(name)
        self._done.discard(name)
        if seen is None or done:
            return
        item, bytes_seen = seen
        late = connection.closed_at - bytes_seen.ts
        if connection.closed_by == CLIENT and judge.timing and late > FATAL_CLOSE_S:
            self.report(item, BROKER, connection.closed_at, connection.name, self._expected(item),
                        f"still open {late:.1f} s later, then closed by the client", bytes_seen)
        elif connection.closed_by == BROKER and item in MAGIC_ITEMS and not refused:
            self.report(item, BROKER, connection.closed_at, connection.name, self._expected(item),
                        f"the close without {BAD_PROTOCOL}", bytes_seen)
        elif connection.closed_by != BROKER:
            self.skip(item, "the broker's close after the client's unreadable bytes is not in the traffic (the "
                      "client closed first, or the traffic ended)")
