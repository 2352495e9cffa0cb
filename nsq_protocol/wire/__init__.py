"""The project's reading of the NSQ TCP protocol V2: pure codecs over bytes, both directions.

No sockets, no threads. The suite's test client and ``spark_analysis`` (which decodes reassembled
pcap streams, possibly gigabytes of them) both use this module, so a frame means the same thing to
both. The decoders are incremental (``feed`` keeps partial input) and work per frame or per command,
never per byte: offsets move with ``struct.unpack_from`` and ``bytes.find`` over one buffer.

Behaviour IDs (``C-06`` ...) are items of ``conformance/spec/`` (``nsq-conformance explain C-06``).

Split as h11 is (``_events.py``, ``_readers.py``, ``_writers.py``): ``_frames.py`` holds the constants, the records,
their decoders and encoders, ``_compression.py`` the negotiated compression layers; this module is the one place
callers import them from.
"""

from nsq_protocol.wire._compression import (
    SNAPPY_STREAM_IDENTIFIER,
    DeflateStreamDecoder,
    DeflateStreamEncoder,
    SnappyStreamDecoder,
    SnappyStreamEncoder,
    crc32c,
    snappy_masked_crc,
)
from nsq_protocol.wire._frames import (
    BODY_COMMANDS,
    DEFAULT_MAX_BODY_SIZE,
    DEFAULT_MAX_FRAME_SIZE,
    DEFAULT_MAX_LINE,
    FRAME_ERROR,
    FRAME_MESSAGE,
    FRAME_RESPONSE,
    FRAME_TYPE_NAMES,
    HEARTBEAT,
    MAGIC_V2,
    MESSAGE_HEADER_SIZE,
    MESSAGE_ID_SIZE,
    Command,
    CommandDecoder,
    CommandLineDecoder,
    CommandSpans,
    Frame,
    FrameDecoder,
    FrameSpans,
    ProtocolViolation,
    encode_command,
    encode_frame,
    encode_message,
    identify_body,
    mpub_body,
    parse_mpub_body,
    upgrades,
)

__all__ = [
    "BODY_COMMANDS",
    "Command",
    "CommandDecoder",
    "CommandLineDecoder",
    "CommandSpans",
    "DEFAULT_MAX_BODY_SIZE",
    "DEFAULT_MAX_FRAME_SIZE",
    "DEFAULT_MAX_LINE",
    "DeflateStreamDecoder",
    "DeflateStreamEncoder",
    "FRAME_ERROR",
    "FRAME_MESSAGE",
    "FRAME_RESPONSE",
    "FRAME_TYPE_NAMES",
    "Frame",
    "FrameDecoder",
    "FrameSpans",
    "HEARTBEAT",
    "MAGIC_V2",
    "MESSAGE_HEADER_SIZE",
    "MESSAGE_ID_SIZE",
    "ProtocolViolation",
    "SNAPPY_STREAM_IDENTIFIER",
    "SnappyStreamDecoder",
    "SnappyStreamEncoder",
    "crc32c",
    "encode_command",
    "encode_frame",
    "encode_message",
    "identify_body",
    "mpub_body",
    "parse_mpub_body",
    "snappy_masked_crc",
    "upgrades",
]
