"""The two stream layers IDENTIFY can negotiate (ID-33, ID-34): raw DEFLATE and the snappy framing format."""
from __future__ import annotations

import struct
import zlib

import cramjam

_SNAPPY_STREAM_IDENTIFIER = b"\xff\x06\x00\x00sNaPpY"
_SNAPPY_COMPRESSED = 0x00
_SNAPPY_UNCOMPRESSED = 0x01


class StreamError(Exception):
    pass


class DeflateWriter:
    def __init__(self, level: int):
        self._compressor = zlib.compressobj(level, zlib.DEFLATED, -15)  # raw: no zlib header (ID-33)

    def __call__(self, data: bytes) -> bytes:
        return self._compressor.compress(data) + self._compressor.flush(zlib.Z_SYNC_FLUSH)


class DeflateReader:
    def __init__(self):
        self._decompressor = zlib.decompressobj(-15)

    def __call__(self, data: bytes) -> bytes:
        try:
            return self._decompressor.decompress(data)
        except zlib.error as error:
            raise StreamError(str(error)) from None


class SnappyWriter:
    """Each write becomes complete framed chunks; the stream identifier goes out once, first."""

    def __init__(self):
        self._started = False

    def __call__(self, data: bytes) -> bytes:
        if not data:
            return b""
        framed = bytes(cramjam.snappy.compress(data))
        if self._started:
            return framed[len(_SNAPPY_STREAM_IDENTIFIER):]
        self._started = True
        return framed


class SnappyReader:
    """Incremental decoder of the snappy framing format; keeps a partial chunk until the rest arrives."""

    def __init__(self):
        self._pending = b""

    def __call__(self, data: bytes) -> bytes:
        buffer = self._pending + data
        out = []
        pos = 0
        while len(buffer) - pos >= 4:
            chunk_type = buffer[pos]
            (length,) = struct.unpack_from("<I", buffer[pos + 1:pos + 4] + b"\x00")
            end = pos + 4 + length
            if end > len(buffer):
                break
            payload = buffer[pos + 4:end]
            pos = end
            if chunk_type == _SNAPPY_COMPRESSED:
                try:
                    out.append(bytes(cramjam.snappy.decompress_raw(payload[4:])))
                except Exception as error:  # cramjam raises its own DecompressionError
                    raise StreamError(f"snappy: {error}") from None
            elif chunk_type == _SNAPPY_UNCOMPRESSED:
                out.append(payload[4:])
            elif chunk_type == 0xFF:
                if payload != _SNAPPY_STREAM_IDENTIFIER[4:]:
                    raise StreamError("snappy: bad stream identifier")
            elif 0x02 <= chunk_type <= 0x7F:
                raise StreamError(f"snappy: unskippable chunk type {chunk_type:#x}")
            # 0x80..0xFD and padding (0xFE) are skippable by the framing spec.
        self._pending = buffer[pos:]
        return b"".join(out)
