"""The compression layers that IDENTIFY negotiates (ID-33 deflate, ID-34 snappy framing format), both directions."""

from __future__ import annotations

import struct
import zlib

import cramjam

from nsq_protocol.wire._frames import ProtocolViolation


class DeflateStreamDecoder:
    """Raw DEFLATE (RFC 1951, no zlib header) as negotiated by IDENTIFY (ID-33)."""

    def __init__(self):
        self._inflater = zlib.decompressobj(-15)

    def feed(self, data: bytes) -> bytes:
        try:
            return self._inflater.decompress(data)
        except zlib.error as exc:
            raise ProtocolViolation(f"deflate: {exc}") from exc


class DeflateStreamEncoder:
    """Raw DEFLATE with a sync flush after every ``encode`` so the peer can decode at once."""

    def __init__(self, level: int = 6):
        self._deflater = zlib.compressobj(level, zlib.DEFLATED, -15)

    def encode(self, data: bytes) -> bytes:
        return self._deflater.compress(data) + self._deflater.flush(zlib.Z_SYNC_FLUSH)


SNAPPY_STREAM_IDENTIFIER = b"\xff\x06\x00\x00sNaPpY"
_SNAPPY_CHUNK_HEADER = struct.Struct("<I")


def _crc32c_table() -> tuple[int, ...]:
    table = []
    for index in range(256):
        crc = index
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return tuple(table)


_CRC32C_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), as the snappy framing format checksums each chunk."""
    crc = 0xFFFFFFFF
    table = _CRC32C_TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def snappy_masked_crc(data: bytes) -> int:
    crc = crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


class SnappyStreamDecoder:
    """The snappy framing format (ID-34): stream identifier, then compressed (0x00) and
    uncompressed (0x01) chunks; padding and skippable chunks are ignored.

    ``verify_checksums`` checks every chunk's CRC-32C. The suite's client turns it on; it is off by
    default because the CRC runs in pure Python and bulk trace decoding cannot afford it.
    """

    def __init__(self, verify_checksums: bool = False):
        self._buffer = bytearray()
        self._verify = verify_checksums
        self._seen_identifier = False

    def feed(self, data: bytes) -> bytes:
        buffer = self._buffer
        buffer += data
        out = bytearray()
        position = 0
        end = len(buffer)
        try:
            while end - position >= 4:
                (header,) = _SNAPPY_CHUNK_HEADER.unpack_from(buffer, position)
                chunk_type, length = header & 0xFF, header >> 8
                if end - position - 4 < length:
                    break
                start = position + 4
                position = start + length
                if chunk_type == 0xFF:
                    if buffer[start:position] != b"sNaPpY":
                        raise ProtocolViolation("snappy: bad stream identifier")
                    self._seen_identifier = True
                elif chunk_type in (0x00, 0x01):
                    if not self._seen_identifier:
                        raise ProtocolViolation("snappy: data chunk before the stream identifier")
                    if length < 4:
                        raise ProtocolViolation("snappy: data chunk shorter than its checksum")
                    payload = memoryview(buffer)[start + 4:position]
                    try:
                        plain = bytes(cramjam.snappy.decompress_raw(payload)) if chunk_type == 0 \
                            else bytes(payload)
                    except cramjam.DecompressionError as exc:
                        raise ProtocolViolation(f"snappy: {exc}") from exc
                    finally:
                        payload.release()
                    if self._verify:
                        (expected,) = _SNAPPY_CHUNK_HEADER.unpack_from(buffer, start)
                        if snappy_masked_crc(plain) != expected:
                            raise ProtocolViolation("snappy: chunk checksum mismatch")
                    out += plain
                elif 0x02 <= chunk_type <= 0x7F:
                    raise ProtocolViolation(f"snappy: reserved unskippable chunk 0x{chunk_type:02x}")
                # 0x80..0xfe: skippable and padding chunks carry nothing for us.
        finally:
            del buffer[:position]
        return bytes(out)


class SnappyStreamEncoder:
    """The snappy framing format (ID-34): the stream identifier once, then each input as chunks of
    <= 64 KiB with their masked CRC-32C. cramjam (Rust) writes the frames, checksums included: the
    pure-Python CRC would cap bulk encoding (the trace generator) at a few MB/s."""

    def __init__(self):
        self._started = False

    def encode(self, data: bytes) -> bytes:
        framed = bytes(cramjam.snappy.compress(data))
        if self._started:
            return framed[len(SNAPPY_STREAM_IDENTIFIER):]
        self._started = True
        return framed
