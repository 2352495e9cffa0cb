"""``nsq_protocol.wire`` against bytes the real nsqd produced: the compressed capture's three connections
(snappy, deflate, plain) decode to exactly the counts in its ground truth, snappy checksums verified."""

import gc
import json
import weakref
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from nsq_protocol import wire

PCAPS = Path(__file__).parents[2] / "pcaps"
NSQD_PORT = 24150


def tcp_streams(path: Path) -> dict[tuple, bytes]:
    """Payload per direction (src port, dst port), in sequence order; loopback capture, no loss."""
    from scapy.layers.inet import TCP
    from scapy.utils import rdpcap

    segments = defaultdict(dict)
    for packet in rdpcap(str(path)):
        if TCP in packet and len(packet[TCP].payload):
            segments[(packet[TCP].sport, packet[TCP].dport)][packet[TCP].seq] = bytes(packet[TCP].payload)
    return {key: b"".join(data for _, data in sorted(parts.items())) for key, parts in segments.items()}


def decode_connection(to_server: bytes, to_client: bytes):
    """Plain up to the IDENTIFY upgrade, where both decoders pause; then the negotiated layer both ways (ID-30)."""
    frame_decoder = wire.FrameDecoder(pause_at_upgrade=True)
    command_decoder = wire.CommandDecoder(pause_at_upgrade=True)
    frames, commands = frame_decoder.feed(to_client), command_decoder.feed(to_server)
    kind = next(iter(wire.upgrades(frames[-1].data)), None) if frame_decoder.paused else None
    assert command_decoder.paused == bool(kind)  # the client asked for what the server agreed to
    if kind:
        layer = {"snappy": lambda: wire.SnappyStreamDecoder(True), "deflate": wire.DeflateStreamDecoder}[kind]
        frames += frame_decoder.feed(layer().feed(frame_decoder.take_trailing_data()))
        commands += command_decoder.feed(layer().feed(command_decoder.take_trailing_data()))
    return kind, commands, frames


@pytest.mark.parametrize("name", ["S-snappy", "Z-deflate", "P-plain"])
def test_compressed_capture_matches_truth(name):
    truth = json.loads((PCAPS / "compressed.truth.json").read_text())
    connection = next(entry for entry in truth["connections"] if entry["name"] == name)
    streams = tcp_streams(PCAPS / "compressed.pcap")
    port = connection["port"]
    kind, commands, frames = decode_connection(streams[(port, NSQD_PORT)], streams[(NSQD_PORT, port)])
    verbs = Counter(command.name.decode() for command in commands)
    assert (kind or "plain") in name.lower()
    assert sum(frame.frame_type == wire.FRAME_MESSAGE for frame in frames) == connection.get("deliveries", 0)
    assert sum(frame.is_heartbeat for frame in frames) == connection["heartbeats"]
    assert verbs["NOP"] == connection["nops"]
    assert verbs["FIN"] == connection.get("fin", 0)
    assert verbs["REQ"] == connection.get("req", 0)
    assert verbs["PUB"] + verbs["MPUB"] == connection["publish_commands"]
    published = sum(len(command.messages) if command.name == b"MPUB" else 1 for command in commands
                    if command.name in (b"PUB", b"MPUB"))
    assert published == connection["messages_published"]


def test_incremental_decoding_is_split_independent():
    """Feeding a stream byte by byte gives the same frames as feeding it whole."""
    frames = [wire.encode_frame(wire.FRAME_RESPONSE, b"OK"), wire.encode_frame(wire.FRAME_RESPONSE, wire.HEARTBEAT),
              wire.encode_frame(wire.FRAME_MESSAGE, wire.encode_message(1, 2, b"0123456789abcdef", b"body")),
              wire.encode_frame(wire.FRAME_ERROR, b"E_INVALID invalid command ASDF")]
    stream = b"".join(frames)
    decoder = wire.FrameDecoder()
    one_by_one = [frame for index in range(len(stream)) for frame in decoder.feed(stream[index:index + 1])]
    assert one_by_one == wire.FrameDecoder().feed(stream)
    assert [frame.describe().split()[0] for frame in one_by_one] == ["RESPONSE", "RESPONSE", "MESSAGE", "ERROR"]
    assert one_by_one[2].attempts == 2 and one_by_one[3].error_code == "E_INVALID"


def test_command_decoder_follows_nsqd_syntax():
    """CRLF stripped (C-14), literal single-space split (C-15), int32 body sizes (C-18)."""
    decoder = wire.CommandDecoder()
    mpub = wire.encode_command("MPUB", "t", body=wire.mpub_body([b"a", b"bc"]))
    commands = decoder.feed(wire.MAGIC_V2 + b"SUB  t c\r\nRDY \n" + mpub)
    assert decoder.magic == wire.MAGIC_V2
    assert [(c.name, c.params) for c in commands] == [(b"SUB", (b"", b"t", b"c")), (b"RDY", (b"",)), (b"MPUB", (b"t",))]
    assert commands[2].messages == [b"a", b"bc"]
    with pytest.raises(wire.ProtocolViolation):
        wire.CommandDecoder().feed(wire.MAGIC_V2 + b"PUB t\n\xff\xff\xff\xff")


def test_undecodable_frames_raise():
    with pytest.raises(wire.ProtocolViolation) as caught:
        wire.FrameDecoder().feed(wire.encode_frame(0, b"OK") + b"\x00\x00\x00\x02\x00\x00\x00\x00")
    assert [frame.data for frame in caught.value.frames] == [b"OK"]


def test_a_failed_decoder_refuses_more_and_is_freed_without_the_cycle_collector():
    """A decoder keeps the reason and offset of the violation that stopped it, not the exception: the exception's
    traceback holds the decoder, and a capture decodes millions of rows with the cycle collector off."""

    def violation(decoder: wire.FrameDecoder, data: bytes) -> tuple[str, int]:
        try:
            decoder.feed(data)
        except wire.ProtocolViolation as exc:
            return exc.reason, exc.offset
        raise AssertionError("no violation")

    decoder = wire.FrameDecoder()
    ok = wire.encode_frame(0, b"OK")
    assert violation(decoder, ok + b"\x00\x00\x00\x02\x00\x00\x00\x00") == ("frame size 2 out of range", 10)
    assert violation(decoder, ok) == ("decoder already failed: frame size 2 out of range", 10)
    freed = weakref.ref(decoder)
    gc.disable()
    try:
        del decoder
        assert freed() is None
    finally:
        gc.enable()


def test_decoders_pause_at_the_upgrade_and_hand_back_the_rest():
    """h11's PAUSED + trailing_data: the frame decoder stops after the IDENTIFY response naming a layer, and, with
    TLS and compression, again after the OK inside TLS (ID-30); the command decoder after an IDENTIFY asking."""
    ok = wire.encode_frame(wire.FRAME_RESPONSE, b"OK")
    answer = wire.encode_frame(wire.FRAME_RESPONSE, b'{"tls_v1":true,"snappy":true,"max_rdy_count":2500}')
    frames = wire.FrameDecoder(pause_at_upgrade=True)
    assert [frame.data[:1] for frame in frames.feed(answer + b"\x16\x03\x01")] == [b"{"]
    assert frames.paused and frames.feed(b"more") == []  # held while paused
    assert frames.take_trailing_data() == b"\x16\x03\x01more" and not frames.paused
    assert [frame.data for frame in frames.feed(ok + b"\xff\x06\x00\x00sNaPpY")] == [b"OK"]  # the OK inside TLS
    assert frames.paused and frames.take_trailing_data() == b"\xff\x06\x00\x00sNaPpY"

    declined = wire.FrameDecoder(pause_at_upgrade=True)
    assert len(declined.feed(wire.encode_frame(wire.FRAME_RESPONSE, b'{"tls_v1":false}') + ok)) == 2
    assert not declined.paused

    commands = wire.CommandDecoder(pause_at_upgrade=True)
    asked = wire.encode_command("IDENTIFY", body=b'{"Feature_Negotiation":true,"DEFLATE":true}')
    assert [c.name for c in commands.feed(wire.MAGIC_V2 + asked + b"NOP\n")] == [b"IDENTIFY"]
    trailing = commands.take_trailing_data()  # the server declined: the bytes after it are plain
    assert [c.name for c in commands.feed(trailing)] == [b"NOP"]
    plain = wire.CommandDecoder(pause_at_upgrade=True)
    body = wire.encode_command("IDENTIFY", body=b'{"deflate":true}')  # without feature_negotiation: no upgrade
    assert len(plain.feed(wire.MAGIC_V2 + body + b"NOP\n")) == 2 and not plain.paused


def test_mpub_is_framed_by_its_count_and_sizes_as_nsqd_reads_it():
    """P-MPUB-04 (rec-0118): an outer size larger than the messages is only range-checked; the next command
    follows the last message."""
    messages = wire.mpub_body([b"one", b"two"])
    lying = b"MPUB t\n" + (len(messages) + 30).to_bytes(4, "big") + messages + b"NOP\n"
    decoder = wire.CommandDecoder()
    commands = decoder.feed(wire.MAGIC_V2 + lying)
    assert [command.name for command in commands] == [b"MPUB", b"NOP"]
    assert commands[0].messages == [b"one", b"two"] and decoder.pending == 0
    refused = wire.CommandDecoder().feed(wire.MAGIC_V2 + b"MPUB t\n" + (8).to_bytes(4, "big")
                                         + (1).to_bytes(4, "big") + (0).to_bytes(4, "big") + b"NOP\n")
    assert [command.name for command in refused] == [b"MPUB", b"NOP"], "a message size of 0 ends the framing"


def test_an_mpub_beyond_the_decoders_bound_is_a_protocol_violation():
    decoder = wire.CommandDecoder(max_body_size=100)
    body = (1).to_bytes(4, "big") + (200).to_bytes(4, "big")
    with pytest.raises(wire.ProtocolViolation, match="beyond 100 bytes"):
        decoder.feed(wire.MAGIC_V2 + b"MPUB t\n" + (50).to_bytes(4, "big") + body)


def test_http_requests_and_responses_decode_incrementally_with_lengths_and_chunks():
    from nsq_protocol.http import HttpDecoder, Request, Response

    requests = HttpDecoder(requests=True)
    raw = (b"POST /pub?topic=t HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
           b"POST /mpub?topic=t HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
           b"POST /channel/empty?topic=t&channel=c HTTP/1.1\r\n\r\n")
    decoded = [message for index in range(0, len(raw), 7) for message in requests.feed(raw[index:index + 7])]
    assert decoded == [Request("POST", "/pub?topic=t", b"hello"), Request("POST", "/mpub?topic=t", b"abcde"),
                       Request("POST", "/channel/empty?topic=t&channel=c", b"")]
    assert decoded[2].path == "/channel/empty" and decoded[2].query("channel") == "c"
    responses = HttpDecoder(requests=False)
    assert responses.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nOK") == [Response(200, b"OK")]
    with pytest.raises(wire.ProtocolViolation, match="not an HTTP/1.1"):
        HttpDecoder(requests=True).feed(b"  V2IDENTIFY\r\n\r\n")
