"""The two stream layers IDENTIFY can negotiate (ID-33, ID-34): raw DEFLATE and the snappy framing format.

The writers turn one write into compressed bytes. The readers are push decoders with no socket: `feed` takes
compressed bytes as they arrive, `read(max_size)` hands back at most `max_size` decoded bytes, or b"" when it
needs more input. Like nsqd's readers (golang/snappy's Reader, compress/flate's decompressor) they decode a
bounded step at a time, so what a peer compresses never costs more than one step of memory, and output decoded
before a corruption is handed over before the error is raised.
"""
from __future__ import annotations

import zlib

import cramjam

_SNAPPY_STREAM_IDENTIFIER = b"\xff\x06\x00\x00sNaPpY"
_SNAPPY_COMPRESSED = 0x00
_SNAPPY_UNCOMPRESSED = 0x01
_SNAPPY_STREAM_IDENTIFIER_TYPE = 0xFF
_SNAPPY_CHECKSUM_SIZE = 4
# golang/snappy v0.0.4 (decode.go, snappy.go): the Reader's chunk buffer holds maxEncodedLenOfMaxBlockSize (76490)
# plus a checksum; a longer chunk is refused at its header (ErrUnsupported) before any of it is read.
_SNAPPY_MAX_CHUNK_LENGTH = 76490 + _SNAPPY_CHECKSUM_SIZE
_SNAPPY_MAX_BLOCK_SIZE = 65536  # a chunk that decodes to more is ErrCorrupt


class StreamError(Exception):
    """The compressed stream is broken or has ended: nsqd's read fails and the connection closes (C-25)."""


class DeflateWriter:
    def __init__(self, level: int):
        self._compressor = zlib.compressobj(level, zlib.DEFLATED, -15)  # raw: no zlib header (ID-33)

    def __call__(self, data: bytes) -> bytes:
        return self._compressor.compress(data) + self._compressor.flush(zlib.Z_SYNC_FLUSH)


class DeflateReader:
    """Raw DEFLATE in (ID-33), at most `max_size` inflated bytes per read (compress/flate's NewReader)."""

    def __init__(self):
        self._inflater = zlib.decompressobj(-15)
        self._input = b""  # compressed bytes not inflated yet: zlib's unconsumed tail
        self._error: StreamError | None = None

    def feed(self, data: bytes) -> None:
        self._input += data

    def read(self, max_size: int) -> bytes:
        if self._error is not None:
            raise self._error
        before = self._inflater.copy()  # zlib drops the output of a call that fails; a copy can redo it
        try:
            out = self._inflater.decompress(self._input, max_size)
        except zlib.error as error:
            # compress/flate's decompressor.Read flushes what it decoded before the corruption, then fails.
            self._error = StreamError(f"flate: {error}")
            out = self._inflate_before_error(before, max_size)
            self._input = b""
            if not out:
                raise self._error from None
            return out
        self._input = self._inflater.unconsumed_tail
        if not out and self._inflater.eof:
            # After the final block compress/flate returns io.EOF: nsqd's read ends as at a closed socket.
            raise StreamError("flate: end of stream")
        return out

    def _inflate_before_error(self, before, max_size: int) -> bytes:
        """The output of the longest prefix of the input that inflates without an error (a binary search)."""
        good, bad, out = 0, len(self._input), b""
        while bad - good > 1:
            middle = (good + bad) // 2
            try:
                trial = before.copy().decompress(self._input[:middle], max_size)
            except zlib.error:
                bad = middle
            else:
                good, out = middle, trial
        return out


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
    """The snappy framing format in (ID-34), one chunk at a time, as golang/snappy's Reader checks it: the stream
    identifier first, the chunk length against the limit before the chunk is buffered, at most 64 KiB decoded
    per chunk, and every checksum."""

    def __init__(self):
        self._input = bytearray()
        self._decoded = memoryview(b"")
        self._identified = False
        self._error: StreamError | None = None

    def feed(self, data: bytes) -> None:
        self._input += data

    def read(self, max_size: int) -> bytes:
        while not self._decoded:
            if self._error is not None:
                raise self._error
            try:
                if not self._next_chunk():
                    return b""
            except StreamError as error:
                self._error = error
        out = bytes(self._decoded[:max_size])
        self._decoded = self._decoded[max_size:]
        return out

    def _next_chunk(self) -> bool:
        """Decode the next chunk into `_decoded`; False when the chunk has not fully arrived."""
        if len(self._input) < 4:
            return False
        chunk_type = self._input[0]
        length = int.from_bytes(self._input[1:4], "little")
        if not self._identified and chunk_type != _SNAPPY_STREAM_IDENTIFIER_TYPE:
            raise StreamError("snappy: corrupt input (no stream identifier)")
        if length > _SNAPPY_MAX_CHUNK_LENGTH:
            raise StreamError("snappy: unsupported input (chunk too long)")
        if 0x02 <= chunk_type <= 0x7F:
            raise StreamError("snappy: unsupported input (reserved unskippable chunk)")
        if chunk_type in (_SNAPPY_COMPRESSED, _SNAPPY_UNCOMPRESSED) and length < _SNAPPY_CHECKSUM_SIZE:
            raise StreamError("snappy: corrupt input (chunk shorter than its checksum)")
        if chunk_type == _SNAPPY_UNCOMPRESSED and length - _SNAPPY_CHECKSUM_SIZE > _SNAPPY_MAX_BLOCK_SIZE:
            if len(self._input) < 4 + _SNAPPY_CHECKSUM_SIZE:
                return False  # golang/snappy reads the checksum, then refuses the length
            raise StreamError("snappy: corrupt input (block longer than 64 KiB)")
        if chunk_type == _SNAPPY_STREAM_IDENTIFIER_TYPE and length != len(_SNAPPY_STREAM_IDENTIFIER) - 4:
            raise StreamError("snappy: corrupt input (bad stream identifier)")
        if len(self._input) < 4 + length:
            return False
        chunk = bytes(self._input[:4 + length])
        del self._input[:4 + length]
        if chunk_type == _SNAPPY_STREAM_IDENTIFIER_TYPE:
            if chunk != _SNAPPY_STREAM_IDENTIFIER:
                raise StreamError("snappy: corrupt input (bad stream identifier)")
            self._identified = True
        elif chunk_type == _SNAPPY_COMPRESSED:
            if _snappy_decoded_length(chunk[4 + _SNAPPY_CHECKSUM_SIZE:]) > _SNAPPY_MAX_BLOCK_SIZE:
                raise StreamError("snappy: corrupt input (block longer than 64 KiB)")
            self._decoded = memoryview(_decode_snappy_chunk(chunk))
        elif chunk_type == _SNAPPY_UNCOMPRESSED:
            self._decoded = memoryview(_decode_snappy_chunk(chunk))
        # 0x80..0xFE: padding and reserved skippable chunks are dropped.
        return True


def _snappy_decoded_length(block: bytes) -> int:
    """The uvarint that starts a snappy block, as golang/snappy's decodedLen reads it (binary.Uvarint, then
    at most 32 bits)."""
    value = 0
    for index, byte in enumerate(block[:10]):
        value |= (byte & 0x7F) << (7 * index)
        if byte < 0x80:
            if value > 0xFFFFFFFF:
                break
            return value
    raise StreamError("snappy: corrupt input (bad block length)")


def _decode_snappy_chunk(chunk: bytes) -> bytes:
    """One data chunk, checksum verified; cramjam's frame decoder checks what golang/snappy checks."""
    try:
        return bytes(cramjam.snappy.decompress(_SNAPPY_STREAM_IDENTIFIER + chunk))
    except cramjam.DecompressionError as error:
        raise StreamError(str(error)) from None
