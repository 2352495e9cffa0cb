"""The values of the events' label columns (events.EVENT_SCHEMA): ``kind``, ``direction``, ``status``, and the
connection row's ``close``. String enums: a row holds the value itself, as the Parquet tables do."""

from enum import StrEnum


class Kind(StrEnum):
    """What an event row stands for (its ``name`` says which one of them)."""

    COMMAND = "command"  # a client's command; name: the verb
    FRAME = "frame"  # a server's frame or V1 reply; name: message | heartbeat | response | error
    PUBLISH = "publish"  # one message a PUB, MPUB or DPUB published; name: the verb
    GAP = "gap"  # bytes the capture lacks
    ERROR = "error"  # what could not be decoded, or the capture's own problems; name: what went wrong
    IN_FLIGHT = "inflight"  # the most messages in flight in one second of a subscription
    TLS = "tls"  # a plaintext record of the TLS handshake after the upgrade; name: nsq_protocol.tls_records' names
    CONNECTION = "connection"  # the connection's own row; name: nsq | lookupd | other


# the error row where TLS starts: not bytes the decoder failed on, bytes it cannot read
TLS_OPAQUE = "tls_opaque"
# the error rows of a V2 client's own bytes that nsqd cannot read, in a stream seen from its start without a gap:
# its magic (C-02), its command stream (C-19), the compression layer it negotiated (ID-33, ID-34). nsqd ends the
# connection there, so the client's direction is decoded no further; the monitors judge nsqd's answer to them.
# MAGIC_CUT_SHORT: the client ended its side within the magic (C-03), at its FIN.
BAD_MAGIC, UNREADABLE_COMMAND, UNREADABLE_LAYER = "bad_magic", "unreadable_command", "unreadable_layer"
MAGIC_CUT_SHORT = "magic_cut_short"
CLIENT_UNREADABLE = (BAD_MAGIC, UNREADABLE_COMMAND, UNREADABLE_LAYER, MAGIC_CUT_SHORT)


class Direction(StrEnum):
    CLIENT = "c2s"  # client to server
    SERVER = "s2c"  # server to client
    CONNECTION = "conn"  # the connection's as a whole: its own row, violations, in-flight counts
    FILE = "file"  # the capture file's (read/pcapfile.py)


class Status(StrEnum):
    """A command's outcome (its publish rows share it); on a frame, only ``UPGRADE`` and ``OUTSIDE_TLS``."""

    OK = "ok"
    FAILED = "failed"  # an error frame named its message ID (P-FIN-04)
    ERROR = "error"  # its answer was an error frame
    UNANSWERED = "unanswered"  # no answer in the capture
    UPGRADE = "upgrade"  # a response frame: the OK that confirms an upgrade through the new layer, answering no command
    OUTSIDE_TLS = "outside_tls"  # a frame sent in plaintext where the TLS handshake belonged (ID-30)


class Close(StrEnum):
    """How a connection ended."""

    RST = "rst"
    CLIENT_FIN = "client_fin"  # the client's FIN came first
    SERVER_FIN = "server_fin"
    OPEN = "open"  # still open where the capture ends
