"""What the client's bytes are: the V2 magic (NSQC-CONN-001), commands framed as nsqd reads them (C-18), through the
layers it asked for (NSQC-NEG-003 snappy, NSQC-NEG-004 deflate, NSQC-NEG-005 TLS), and never through one it did not
ask for (NSQC-NEG-002)."""

from __future__ import annotations

from nsq_protocol.monitors.connection import UPGRADES
from nsq_protocol.monitors.events import CLIENT, COMMAND, MAGIC, STREAM, UNREADABLE
from nsq_protocol.monitors.monitor import Monitor

ITEM_OF = {MAGIC: "NSQC-CONN-001", STREAM: "C-18", "snappy": "NSQC-NEG-003", "deflate": "NSQC-NEG-004",
           "tls_v1": "NSQC-NEG-005"}


def asked(connection, layer: str) -> bool:
    return (connection.identify or {}).get(layer) is True


def unasked_layers(connection) -> list[str]:
    """The layers the IDENTIFY answer turned on that the client's IDENTIFY did not ask for (ID-30)."""
    answer = connection.identify_answer or {}
    return [layer for layer in UPGRADES if answer.get(layer) is True and not asked(connection, layer)]


class ClientBytesReadable(Monitor):
    """NSQC-CONN-001: a connection starts with the magic '  V2' (C-01; nsqd answers another with E_BAD_PROTOCOL,
    C-02); C-18: what follows are commands framed as nsqd reads them; NSQC-NEG-003, NSQC-NEG-004, NSQC-NEG-005: through
    each layer the client asked for, its bytes decode (a snappy or deflate stream, a TLS handshake). Bytes a layer the
    client did not ask for cannot read are the broker's doing (NSQC-NEG-002 judges the client there)."""

    ITEMS = ("NSQC-CONN-001", "C-18", "NSQC-NEG-003", "NSQC-NEG-004", "NSQC-NEG-005")

    def observe(self, judge, connection, event, answered):
        if event.kind != UNREADABLE or event.name not in ITEM_OF:
            return
        if event.name in UPGRADES and not asked(connection, event.name):
            return
        what = "the magic '  V2'" if event.name == MAGIC else "commands nsqd reads" if event.name == STREAM \
            else f"a {event.name} stream nsqd reads"
        self.report(ITEM_OF[event.name], CLIENT, event.ts, connection.name, what, event.text[:120], event)


class UnaskedLayerRefused(Monitor):
    """NSQC-NEG-002 (SHOULD): a layer the IDENTIFY answer turned on although the client did not ask for it is refused:
    nothing comes from the client through it (it closes, or stays in plain text, which the broker cannot read). A
    command the broker read after such an answer came through the layer. nsqd itself never turns on a layer unasked
    (ID-30): the rule judges a client facing a broker that does."""

    ITEMS = ("NSQC-NEG-002",)

    def __init__(self):
        super().__init__()
        self._reported: set[str] = set()

    def observe(self, judge, connection, event, answered):
        if event.kind != COMMAND or connection.name in self._reported or connection.identified_at is None:
            return
        unasked = unasked_layers(connection)
        if unasked:
            self._reported.add(connection.name)
            self.report("NSQC-NEG-002", CLIENT, event.ts, connection.name,
                        f"no command through {', '.join(unasked)}, which the client did not ask for",
                        f"{event.name} through it", event)
