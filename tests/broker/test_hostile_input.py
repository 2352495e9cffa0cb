"""Hostile input over real sockets: compression bombs, broken compressed streams, IDENTIFY bodies that Go's
encoding/json and Python's json disagree on, and numbers past Python's int-string limit. Each expectation is
what nsqd v1.3.0 does, with its source (a Go file and function, or an observation of the real binary); the
broker must answer the same, never log a traceback, and keep its memory bounded whatever a peer compresses.

NSQD_BINARY=/path/to/nsqd runs the socket tests against the real nsqd instead, to check the expectations: every
one of them passed against nsqd v1.3.0 (3103474b, go1.19.8), so each is also observed on nsqd v1.3.0."""
from __future__ import annotations

import json
import socket
import struct
import time
import urllib.request
import zlib

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_broker.compression import DeflateReader, SnappyReader, StreamError
from reference_broker.identify import _go_json, _go_json_without_recursion

from .target import running_target

SNAPPY_STREAM_IDENTIFIER = b"\xff\x06\x00\x00sNaPpY"
MESSAGE_ID = b"0123456789abcdef"
MiB = 1 << 20


@pytest.fixture(scope="module")
def broker():
    with running_target() as running:
        yield running


# -- a raw client with its own codecs -----------------------------------------------------------------------

def _frames(data: bytes, limit: int | None = None) -> tuple[list[tuple[int, bytes]], bytes]:
    """Complete frames at the start of `data` (at most `limit`), and the bytes after them."""
    frames, pos = [], 0
    while len(data) - pos >= 8 and len(frames) != limit:
        size, frame_type = struct.unpack_from(">Ii", data, pos)
        if len(data) - pos < 4 + size:
            break
        frames.append((frame_type, data[pos + 8:pos + 4 + size]))
        pos += 4 + size
    return frames, data[pos:]


class Peer:
    """One connection: writes go through the negotiated compression, reads come back as frames."""

    def __init__(self, broker):
        self.sock = socket.create_connection(broker.tcp_address)
        self.sock.sendall(b"  V2")
        self._compression = None
        self._snappy_started = False
        self._plain = b""
        self._compressed_in = b""
        self._deflater = self._inflater = None

    def close(self) -> None:
        self.sock.close()

    def encode(self, data: bytes) -> bytes:
        """`data` as the negotiated layer sends it; a snappy stream starts with its identifier."""
        if self._compression == "deflate":
            return self._deflater.compress(data) + self._deflater.flush(zlib.Z_SYNC_FLUSH)
        if self._compression == "snappy":
            framed = bytes(cramjam.snappy.compress(data))
            if self._snappy_started:
                return framed[len(SNAPPY_STREAM_IDENTIFIER):]
            self._snappy_started = True
            return framed
        return data

    def send(self, data: bytes) -> None:
        self.sock.sendall(self.encode(data))

    def identify(self, fields: dict, extra: bytes = b"") -> dict | bytes:
        """IDENTIFY (plus `extra` raw bytes in the same segment); switches to the compression negotiated."""
        body = json.dumps(fields).encode()
        self.sock.sendall(b"IDENTIFY\n" + struct.pack(">I", len(body)) + body + extra)
        response = self.read_frames(1)[0][1]
        if not fields.get("feature_negotiation"):
            return response
        negotiated = json.loads(response)
        for kind in ("snappy", "deflate"):
            if negotiated[kind]:
                self._compression = kind
                self._deflater = zlib.compressobj(6, zlib.DEFLATED, -15)
                self._inflater = zlib.decompressobj(-15)
                compressed, self._plain = self._plain, b""  # what came after the JSON came compressed
                self._decode(compressed)
                assert self.read_frames(1) == [(0, b"OK")]  # ID-30: the OK through the new layer
        return negotiated

    def _decode(self, data: bytes) -> None:
        if self._compression == "deflate":
            self._plain += self._inflater.decompress(data)
            return
        if self._compression != "snappy":
            self._plain += data
            return
        self._compressed_in += data
        while len(self._compressed_in) >= 4:
            length = int.from_bytes(self._compressed_in[1:4], "little")
            if len(self._compressed_in) < 4 + length:
                return
            chunk, self._compressed_in = self._compressed_in[:4 + length], self._compressed_in[4 + length:]
            if chunk[0] in (0x00, 0x01):
                self._plain += bytes(cramjam.snappy.decompress(SNAPPY_STREAM_IDENTIFIER + chunk))

    def read_frames(self, count: int, timeout: float = 5.0) -> list[tuple[int, bytes]]:
        deadline = time.monotonic() + timeout
        while len(_frames(self._plain, count)[0]) < count:
            self.sock.settimeout(max(deadline - time.monotonic(), 0.01))
            data = self.sock.recv(65536)
            assert data, f"closed after {_frames(self._plain)[0]}"
            self._decode(data)
        frames, self._plain = _frames(self._plain, count)
        return frames

    def frames_until_closed(self, timeout: float = 5.0) -> list[tuple[int, bytes]]:
        """Every frame still to come, then the close; fails if the connection stays open."""
        deadline = time.monotonic() + timeout
        while True:
            self.sock.settimeout(max(deadline - time.monotonic(), 0.01))
            try:
                data = self.sock.recv(65536)
            except ConnectionResetError:  # nsqd closes with unread input pending: the kernel sends a reset
                data = b""
            except TimeoutError:
                pytest.fail(f"still open after {timeout} s; got {_frames(self._plain)[0]}")
            if not data:
                frames, rest = _frames(self._plain)
                assert rest == b""
                return frames
            self._decode(data)

    def assert_open(self, timeout: float = 5.0) -> None:
        """A PUB gets its OK: the connection still reads commands."""
        self.send(b"PUB hostile\n" + struct.pack(">I", 2) + b"ok")
        assert self.read_frames(1, timeout) == [(0, b"OK")]


@pytest.fixture
def peer(broker):
    connections = []

    def connect() -> Peer:
        connections.append(Peer(broker))
        return connections[-1]

    yield connect
    for connection in connections:
        connection.close()
    time.sleep(0.1)  # a connection thread's traceback is printed after its socket closes
    assert "Traceback" not in "".join(broker.log)


def _identify_body(body: bytes) -> bytes:
    return b"IDENTIFY\n" + struct.pack(">I", len(body)) + body


def _peak_rss_kib(broker) -> int:
    with open(f"/proc/{broker.process.pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))


# -- decompression bombs (item 2) ---------------------------------------------------------------------------

# A NOP line nsqd accepts (C-17: parameters ignored) just under its 16 KiB line buffer (C-19); 64 of them
# make 1 MiB, and 1100 MiB of them decompress to more than 1 GiB from 1.2 MiB of deflate or 52 MiB of snappy.
NOP_LINE = b"NOP " + b"x" * (16 * 1024 - 6) + b"\n"
NOP_BLOCK = NOP_LINE * 64
BOMB_MIB = 1100


def _deflate_bomb() -> list[bytes]:
    """The first block's compression, then the second's repeated: the window before each repeat holds the same
    periodic bytes, so every repeat inflates to the same MiB."""
    deflater = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = deflater.compress(NOP_BLOCK) + deflater.flush(zlib.Z_SYNC_FLUSH)
    repeat = deflater.compress(NOP_BLOCK) + deflater.flush(zlib.Z_SYNC_FLUSH)
    return [first] + [repeat] * (BOMB_MIB - 1)


def _snappy_bomb() -> list[bytes]:
    chunks = bytes(cramjam.snappy.compress(NOP_BLOCK))[len(SNAPPY_STREAM_IDENTIFIER):]  # independent chunks
    return [chunks] * BOMB_MIB


@pytest.mark.parametrize("kind,bomb", [("deflate", _deflate_bomb), ("snappy", _snappy_bomb)])
def test_a_gigabyte_of_compressed_commands_costs_a_bounded_amount_of_memory(kind, bomb):
    # nsqd inflates through a 16 KiB bufio.Reader over flate's 32 KiB window or snappy's 64 KiB block
    # (client_v2.go UpgradeDeflate/UpgradeSnappy), so it reads all of this in constant memory.
    with running_target() as broker:
        peer = Peer(broker)
        peer.identify({"feature_negotiation": True, kind: True})
        peer.send(b"NOP\n")  # starts the snappy stream with its identifier
        before = _peak_rss_kib(broker)
        for piece in bomb():
            peer.sock.sendall(piece)
        peer.assert_open(timeout=120)  # every NOP was read, in order, before the PUB (seconds of work)
        growth_mib = (_peak_rss_kib(broker) - before) / 1024
        peer.close()
        assert "Traceback" not in "".join(broker.log)
    assert growth_mib < 50, f"peak RSS grew by {growth_mib:.0f} MiB for {BOMB_MIB} MiB of {kind} input"


def test_an_oversized_snappy_chunk_is_refused_at_its_header(broker, peer):
    # golang/snappy v0.0.4 Reader.fill: chunkLen > len(r.buf) (76490 + 4) is ErrUnsupported before the chunk
    # is read; nsqd's ReadSlice fails and IOLoop closes without a frame (protocol_v2.go IOLoop, C-25).
    connection = peer()
    connection.identify({"feature_negotiation": True, "snappy": True})
    connection.sock.sendall(connection.encode(b"NOP\n") + b"\x00" + (76495).to_bytes(3, "little"))  # no chunk follows
    assert connection.frames_until_closed(timeout=3) == []


def test_the_longest_snappy_chunk_is_read(broker, peer):
    # golang/snappy Reader.fill: a chunk of exactly len(r.buf) = 76494 bytes is fine (here a padding chunk).
    connection = peer()
    connection.identify({"feature_negotiation": True, "snappy": True})
    connection.sock.sendall(connection.encode(b"NOP\n") + b"\xfe" + (76494).to_bytes(3, "little") + b"\x00" * 76494)
    connection.assert_open()


def test_a_snappy_bomb_in_one_chunk_costs_nothing():
    # The largest chunk the framing's 3-byte length allows, decoding to 340 MiB: refused at the header as above.
    copies = (0xFFFFFF - 16) // 3
    block = _uvarint(1 + 64 * copies) + b"\x00a" + b"\xfe\x01\x00" * copies  # one literal, then copy-2 of 64
    chunk = _compressed_chunk(block)
    with running_target() as broker:
        connection = Peer(broker)
        connection.identify({"feature_negotiation": True, "snappy": True})
        before = _peak_rss_kib(broker)
        try:
            connection.sock.sendall(connection.encode(b"NOP\n") + chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed at the header, before the chunk was sent in full
        assert connection.frames_until_closed() == []
        growth_mib = (_peak_rss_kib(broker) - before) / 1024
        connection.close()
    assert growth_mib < 50


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out + bytes([value]))


def _snappy_chunk(payload: bytes) -> bytes:
    """A compressed-data chunk as a standard encoder writes it (checksum included)."""
    return bytes(cramjam.snappy.compress(payload))[len(SNAPPY_STREAM_IDENTIFIER):]


def _compressed_chunk(block: bytes) -> bytes:
    """A compressed-data chunk around a raw snappy block, checksum zero."""
    return b"\x00" + (4 + len(block)).to_bytes(3, "little") + b"\x00" * 4 + block


def _with_checksum_flipped(chunk: bytes) -> bytes:
    return chunk[:4] + bytes([chunk[4] ^ 1]) + chunk[5:]


@pytest.mark.parametrize("garbage", [
    # golang/snappy Reader.fill, each a read error: nsqd closes without a frame (IOLoop, C-25).
    pytest.param(_compressed_chunk(bytes(cramjam.snappy.compress_raw(b"a" * 70000))),
                 id="block-decoding-past-64KiB"),  # DecodedLen > len(r.decoded): ErrCorrupt, before the checksum
    pytest.param(b"\x01" + (4 + 65537).to_bytes(3, "little") + b"\x00" * 4,  # refused after the checksum,
                 id="uncompressed-past-64KiB"),  # before the data: observed on nsqd v1.3.0
    pytest.param(_with_checksum_flipped(_snappy_chunk(b"NOP\n")), id="bad-checksum"),  # crc mismatch: ErrCorrupt
    pytest.param(b"\x02\x00\x00\x00", id="reserved-unskippable-chunk"),  # 0x02..0x7f: ErrUnsupported
    pytest.param(b"\xff\x06\x00\x00sNoPpY", id="bad-stream-identifier"),  # ErrCorrupt
    pytest.param(b"\x00\x02\x00\x00ab", id="chunk-shorter-than-checksum"),  # ErrCorrupt
])
def test_a_broken_snappy_stream_closes_without_a_frame(broker, peer, garbage):
    connection = peer()
    connection.identify({"feature_negotiation": True, "snappy": True})
    connection.sock.sendall(connection.encode(b"NOP\n") + garbage)
    assert connection.frames_until_closed() == []


def test_a_snappy_stream_must_start_with_its_identifier(broker, peer):
    # golang/snappy Reader.fill: the first chunk must be the stream identifier (ErrCorrupt).
    connection = peer()
    connection.identify({"feature_negotiation": True, "snappy": True})
    connection.sock.sendall(_snappy_chunk(b"NOP\n"))  # a valid chunk, but no identifier first
    assert connection.frames_until_closed() == []


def test_snappy_padding_and_skippable_chunks_are_skipped(broker, peer):
    # golang/snappy Reader.fill: 0x80..0xfe are read and dropped.
    connection = peer()
    connection.identify({"feature_negotiation": True, "snappy": True})
    connection.sock.sendall(connection.encode(b"NOP\n") + b"\xfe\x03\x00\x00pad" + b"\x80\x00\x00\x00")
    connection.assert_open()


@pytest.mark.parametrize("garbage", [
    pytest.param(b"\x07garbage", id="reserved-block-type"),  # BTYPE=11: flate.CorruptInputError
    pytest.param(b"\x00\x05\x00\x05\x00hello", id="stored-length-mismatch"),  # LEN != ^NLEN: CorruptInputError
])
def test_a_broken_deflate_stream_closes_without_a_frame(broker, peer, garbage):
    # compress/flate's decompressor fails the read; nsqd's ReadSlice error ends IOLoop without a frame (C-25).
    connection = peer()
    connection.identify({"feature_negotiation": True, "deflate": True})
    connection.sock.sendall(connection.encode(b"NOP\n") + garbage)
    assert connection.frames_until_closed() == []


def test_the_end_of_the_deflate_stream_closes_the_connection(broker, peer):
    # After a final block compress/flate returns io.EOF: nsqd's IOLoop treats it as the client closing, after
    # the commands before it were served.
    connection = peer()
    connection.identify({"feature_negotiation": True, "deflate": True})
    final = zlib.compressobj(6, zlib.DEFLATED, -15)
    connection.sock.sendall(connection._deflater.compress(b"PUB hostile\n\x00\x00\x00\x02ok")
                            + connection._deflater.flush(zlib.Z_FINISH) + final.compress(b"NOP\n") + final.flush())
    assert connection.frames_until_closed() == [(0, b"OK")]


@pytest.mark.parametrize("kind,garbage", [("deflate", b"\x07garbage"), ("snappy", b"\x02\x00\x00\x00")])
def test_commands_before_a_corruption_are_served_first(broker, peer, kind, garbage):
    # compress/flate decompressor.Read hands over what it decoded before a corruption ("Flush what's left in
    # case of error"), golang/snappy every chunk before the broken one; nsqd serves those commands, then closes.
    connection = peer()
    connection.identify({"feature_negotiation": True, kind: True})
    publish = b"PUB hostile\n" + struct.pack(">I", 5) + b"first"
    connection.sock.sendall(connection.encode(publish) + garbage)  # one segment: read together
    assert connection.frames_until_closed() == [(0, b"OK")]


@pytest.mark.parametrize("kind,garbage", [("deflate", b"\x07garbage"), ("snappy", b"\x02\x00\x00\x00")])
def test_a_broken_stream_inside_a_body_gets_the_body_error(broker, peer, kind, garbage):
    # protocol_v2.go PUB: io.ReadFull of the body fails, so "E_BAD_MESSAGE PUB failed to read message body" goes
    # out (through the compression) and the connection closes (Appendix A).
    connection = peer()
    connection.identify({"feature_negotiation": True, kind: True})
    connection.send(b"PUB hostile\n" + struct.pack(">I", 100) + b"partial")
    connection.sock.sendall(garbage)
    assert connection.frames_until_closed() == [(1, b"E_BAD_MESSAGE PUB failed to read message body")]


@pytest.mark.parametrize("kind", ["deflate", "snappy"])
def test_bytes_pipelined_behind_an_upgrading_identify_are_dropped(broker, peer, kind):
    # client_v2.go UpgradeDeflate/UpgradeSnappy put a new bufio.Reader on the raw connection: what the old one
    # had already read past IDENTIFY's body is dropped, neither decoded nor answered, and the connection goes on.
    connection = peer()
    connection.identify({"feature_negotiation": True, kind: True}, extra=b"\x07garbage\nNOP\nRDY x\n")
    connection.assert_open()


# -- IDENTIFY bodies: Go's encoding/json, not Python's (item 3) -------------------------------------------

DECODE_FAILED = (1, b"E_BAD_BODY IDENTIFY failed to decode JSON body")


@pytest.mark.parametrize("body", [
    # scanner.go maxNestingDepth = 10000: one level more is "exceeded max depth".
    pytest.param(b"[" * 10001 + b"]" * 10001, id="nested-10001"),
    pytest.param(b'{"x":' + b"[" * 10000 + b"]" * 10000 + b"}", id="nested-10001-under-a-key"),
    # scanner.go stateBeginValue: a byte that starts no value ("invalid character 'ï'", "'\x00'", "'ÿ'").
    pytest.param(b'\xef\xbb\xbf{"client_id":"a"}', id="utf8-bom"),
    pytest.param('{"client_id":"a"}'.encode("utf-16"), id="utf16-with-bom"),
    pytest.param('{"client_id":"a"}'.encode("utf-16-le"), id="utf16-le"),
    pytest.param('{"client_id":"a"}'.encode("utf-16-be"), id="utf16-be"),
    pytest.param('{"client_id":"a"}'.encode("utf-32"), id="utf32"),
    pytest.param(b'{"client_id":"a"\xff}', id="invalid-utf8-outside-a-string"),
    pytest.param(b'{"x":NaN}', id="nan"), pytest.param(b'{"x":-Infinity}', id="infinity"),
    # decode.go literalStore: strconv.ParseInt fails for an int field (UnmarshalTypeError).
    pytest.param(b'{"msg_timeout":' + b"7" * 5000 + b"}", id="5000-digit-int-field"),
    pytest.param(b'{"heartbeat_interval":9223372036854775808}', id="int-field-past-int64"),
    pytest.param(b'{"sample_rate":-2147483649}', id="int32-field-past-int32"),
    pytest.param(b'{"msg_timeout":6e4}', id="exponent-for-an-int-field"),
])
def test_identify_bodies_go_cannot_decode(broker, peer, body):
    connection = peer()
    connection.sock.sendall(_identify_body(body))
    assert connection.frames_until_closed() == [DECODE_FAILED]  # fatal (P-ID-03)


@pytest.mark.parametrize("body", [
    pytest.param(b'{"x":' + b"[" * 9999 + b"]" * 9999 + b"}", id="nested-10000"),  # scanner.go: within the limit
    pytest.param(b'{"x":' + b"7" * 5000 + b"}", id="5000-digit-number-under-an-unknown-key"),  # never converted
    pytest.param(b'{"x":1e999999}', id="huge-exponent-under-an-unknown-key"),
    pytest.param(b'{"x":"\xff\xfe"}', id="invalid-utf8-in-an-unknown-string"),  # unquoteBytes: U+FFFD
])
def test_identify_bodies_go_decodes(broker, peer, body):
    connection = peer()
    connection.sock.sendall(_identify_body(body))
    assert connection.read_frames(1) == [(0, b"OK")]
    connection.assert_open()


def _negotiated(connection: Peer, body: bytes) -> dict:
    connection.sock.sendall(_identify_body(body))
    return json.loads(connection.read_frames(1)[0][1])


def test_identify_keys_fold_as_go_folds_them(broker, peer):
    # fold.go foldName: U+017F LATIN SMALL LETTER LONG S folds to s, so these keys name snappy and msg_timeout;
    # U+0131 DOTLESS I folds to itself (unicode caseOrbit), so that key is unknown, not a string field given 5.
    connection = peer()
    negotiated = _negotiated(connection, '{"feature_negotiation":true,"\u017fnappy":true,"m\u017fg_timeout":5000,'
                                         '"cl\u0131ent_id":5}'.encode())
    assert (negotiated["snappy"], negotiated["msg_timeout"]) == (True, 5000)


def test_repeated_identify_keys_apply_in_document_order(broker, peer):
    # decode.go object: each key, whatever its case, overwrites the field in the order the body gives them.
    connection = peer()
    negotiated = _negotiated(connection, b'{"feature_negotiation":true,"msg_timeout":6000,"MSG_TIMEOUT":5000,'
                                         b'"msg_timeout":7000,"Msg_Timeout":null}')
    assert negotiated["msg_timeout"] == 7000  # the last non-null value; null leaves the field alone


def test_invalid_utf8_in_identify_strings_becomes_one_replacement_per_byte(broker, peer):
    # decode.go unquoteBytes: utf8.DecodeRune gives (RuneError, 1) for each byte that is not UTF-8, and a lone
    # surrogate escape becomes U+FFFD too; /stats shows the client's strings as nsqd holds them.
    connection = peer()
    body = b'{"client_id":"a\xe2\x82b\xff\\ud800c","hostname":"h\xed\xa0\x80","user_agent":"ok\xc3\xa9"}'
    connection.sock.sendall(_identify_body(body))
    assert connection.read_frames(1) == [(0, b"OK")]
    connection.send(b"PUB hostile_utf8\n" + struct.pack(">I", 2) + b"ok")
    assert connection.read_frames(1) == [(0, b"OK")]
    with urllib.request.urlopen(f"http://{broker.host}:{broker.http_port}/stats?format=json&topic=hostile_utf8") as r:
        producers = json.load(r)["producers"]
    mine = [p for p in producers if p["user_agent"] == "ok\u00e9"]
    assert [(p["client_id"], p["hostname"]) for p in mine] == [("a\ufffd\ufffdb\ufffd\ufffdc", "h\ufffd\ufffd\ufffd")]


# -- numbers past Python's int-string limit (item 3) --------------------------------------------------------

DIGITS = 16 * 1024 - 64  # a whole line stays under nsqd's 16 KiB buffer (C-19)


def _wrapped_int64(decimal_nines: int) -> int:
    """protocol.ByteToBase10 of that many 9s (wrapping uint64), then int64(): computed without parsing it."""
    value = (pow(10, decimal_nines, 1 << 64) - 1) % (1 << 64)
    return value - (1 << 64) if value >= 1 << 63 else value


def test_a_huge_rdy_count_wraps_as_nsqd_does(broker, peer):
    # internal/protocol/byte_base10.go ByteToBase10 wraps at 2^64; protocol_v2.go RDY: int64(), then the range.
    connection = peer()
    connection.send(b"SUB hostile c\nRDY " + b"1" + b"0" * DIGITS + b"\n")  # 10^n wraps to 0: a valid RDY 0
    assert connection.read_frames(1) == [(0, b"OK")]
    connection.assert_open()
    connection.send(b"RDY " + b"9" * DIGITS + b"\n")
    expected = f"E_INVALID RDY count {_wrapped_int64(DIGITS)} out of range 0-2500".encode()
    assert connection.frames_until_closed() == [(1, expected)]


def test_a_huge_req_timeout_is_clamped_not_fatal(broker, peer):
    # protocol_v2.go REQ: the wrapped duration is clamped to 0..max-req-timeout, then the ID is looked up:
    # E_REQ_FAILED is not fatal (C-23).
    connection = peer()
    connection.send(b"SUB hostile c\nREQ " + MESSAGE_ID + b" " + b"9" * DIGITS + b"\n")
    not_in_flight = b"E_REQ_FAILED REQ " + MESSAGE_ID + b" failed ID not in flight"
    assert connection.read_frames(2) == [(0, b"OK"), (1, not_in_flight)]
    connection.assert_open()


def test_a_huge_dpub_timeout_is_out_of_range(broker, peer):
    # protocol_v2.go DPUB: the message prints ByteToBase10's uint64, the check uses time.Duration(it) * ms.
    connection = peer()
    connection.send(b"DPUB hostile " + b"9" * DIGITS + b"\n")
    wrapped = _wrapped_int64(DIGITS) % (1 << 64)
    assert connection.frames_until_closed() == [
        (1, f"E_INVALID DPUB timeout {wrapped} out of range 0-3600000".encode())]


# -- the codecs on their own: any input gives output or StreamError, in bounded steps ------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=5),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=4), children, max_size=4),
    max_leaves=15)
JSON_CHARACTERS = st.sampled_from(list('{}[]:,"\\ -.e0tnNI\x00\udc80'))
JSON_EDITS = st.lists(st.tuples(st.integers(0, 300), st.booleans(), JSON_CHARACTERS), max_size=4)


@settings(max_examples=300, deadline=None)
@given(value=JSON_VALUES, edits=JSON_EDITS, ascii_only=st.booleans())
def test_the_iterative_json_scanner_agrees_with_the_c_one(value, edits, ascii_only):
    # _go_json_without_recursion only runs for bodies nested too deep for json.loads; it must accept and
    # return exactly what the json.loads call does, on valid and broken documents alike.
    text = json.dumps(value, ensure_ascii=ascii_only)
    for at, insert, char in edits:
        at %= len(text) + 1
        text = text[:at] + char + text[at + (0 if insert else 1):]

    def outcome(parse):
        try:
            return parse(text)
        except ValueError:
            return ValueError

    assert outcome(_go_json_without_recursion) == outcome(_go_json)


def _read_all(reader, pieces: list[bytes], step: int) -> bytes:
    out = b""
    for piece in pieces:
        reader.feed(piece)
        while data := reader.read(step):
            assert len(data) <= step
            out += data
    return out


def _mutated(stream: bytes, flips: list[tuple[int, int]]) -> bytes:
    data = bytearray(stream)
    for at, value in flips:
        data[at % len(data)] = value
    return bytes(data)


COMMANDS = st.binary(min_size=1, max_size=3000)
FLIPS = st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=3)


def _pieces(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({cut % (len(data) + 1) for cut in cuts} | {0, len(data)})
    return [data[start:end] for start, end in zip(points, points[1:], strict=False)]


CUTS = st.lists(st.integers(0, 10**6), max_size=6)  # as TCP may deliver it


@settings(max_examples=200, deadline=None)
@given(payload=COMMANDS, flips=FLIPS, cuts=CUTS, step=st.integers(1, 5000))
def test_any_snappy_input_decodes_or_raises_stream_error(payload, flips, cuts, step):
    stream = _mutated(bytes(cramjam.snappy.compress(payload)), flips)
    try:
        out = _read_all(SnappyReader(), _pieces(stream, cuts), step)
    except StreamError:
        return
    if not flips:
        assert out == payload


@settings(max_examples=200, deadline=None)
@given(payload=COMMANDS, flips=FLIPS, cuts=CUTS, step=st.integers(1, 5000))
def test_any_deflate_input_decodes_or_raises_stream_error(payload, flips, cuts, step):
    deflater = zlib.compressobj(6, zlib.DEFLATED, -15)
    stream = _mutated(deflater.compress(payload) + deflater.flush(zlib.Z_SYNC_FLUSH), flips)
    try:
        out = _read_all(DeflateReader(), _pieces(stream, cuts), step)
    except StreamError:
        return
    if not flips:
        assert out == payload


def test_deflate_output_before_a_corruption_comes_out_before_the_error():
    # compress/flate decompressor.Read: "Flush what's left in case of error".
    deflater = zlib.compressobj(6, zlib.DEFLATED, -15)
    reader = DeflateReader()
    reader.feed(deflater.compress(b"NOP\n" * 1000) + deflater.flush(zlib.Z_SYNC_FLUSH) + b"\x07")
    assert reader.read(MiB) == b"NOP\n" * 1000
    with pytest.raises(StreamError):
        reader.read(MiB)


def test_a_deflate_bomb_inflates_in_bounded_steps():
    deflater = zlib.compressobj(9, zlib.DEFLATED, -15)
    reader = DeflateReader()
    reader.feed(deflater.compress(b"\x00" * (64 * MiB)) + deflater.flush(zlib.Z_SYNC_FLUSH))  # ~64 KiB in
    sizes = []
    while data := reader.read(64 * 1024):
        sizes.append(len(data))
    assert max(sizes) == 64 * 1024 and sum(sizes) == 64 * MiB
