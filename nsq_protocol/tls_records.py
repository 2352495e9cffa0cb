"""The plaintext part of a TLS handshake, read from one direction's bytes (RFC 5246, RFC 8446): sans-IO, bounded, and
never raising on garbage. What it reads is what a capture of nsqd's TLS upgrade shows in the clear (ID-31, ID-32,
T-17): the ClientHello's versions, the ServerHello's choice or the alert that refused it, and under TLS 1.2 the
CertificateRequest and the client's Certificate. TLS 1.3 encrypts everything after the ServerHello; the first
ChangeCipherSpec or application data record ends the plaintext in either version."""

from __future__ import annotations

from typing import NamedTuple

HANDSHAKE, ALERT, CHANGE_CIPHER_SPEC, APPLICATION_DATA = 22, 21, 20, 23
TLS10, TLS11, TLS12, TLS13 = 0x0301, 0x0302, 0x0303, 0x0304
VERSION_NAMES = {TLS10: "tls1.0", TLS11: "tls1.1", TLS12: "tls1.2", TLS13: "tls1.3"}
PROTOCOL_VERSION = 70  # the alert a server sends when no version the ClientHello offers is one it accepts
MESSAGES = {1: "client_hello", 2: "server_hello", 11: "certificate", 12: "server_key_exchange",
            13: "certificate_request", 14: "server_hello_done", 16: "client_key_exchange"}
ENCRYPTED = "encrypted"  # a ChangeCipherSpec or application data record: the plaintext ends
NOT_TLS = "not_tls"  # bytes that are no TLS record where the handshake belonged
ALERT_NAME = "alert"
RECORD_NAMES = frozenset({*MESSAGES.values(), ALERT_NAME, ENCRYPTED, NOT_TLS})
PLAINTEXT_LIMIT = 64 * 1024  # what one direction's handshake shows in the clear is far less: read no more
_SUPPORTED_VERSIONS = 43
_MAX_RECORD = (1 << 14) + 2048


class Record(NamedTuple):
    """One handshake message, alert or the end of the plaintext: ``name`` (MESSAGES' names, ALERT_NAME, ENCRYPTED,
    NOT_TLS), with what the rules read of it."""

    name: str
    versions: tuple[int, ...] = ()  # client_hello: the versions it offers; server_hello: the one it chose
    alert: int | None = None  # an alert's description
    certificates: int | None = None  # a certificate message: how many certificates it carries
    text: str = ""  # NOT_TLS: why

    def as_text(self) -> str:
        """What a table's text column keeps of it (``from_text`` reads it back, with the name)."""
        versions = ",".join(f"{version:04x}" for version in self.versions)
        return f"{versions}|{'' if self.alert is None else self.alert}|" \
               f"{'' if self.certificates is None else self.certificates}|{self.text}"

    @classmethod
    def from_text(cls, name: str, text: str) -> Record:
        versions, alert, certificates, why = (text.split("|", 3) + ["", "", "", ""])[:4]
        return cls(name, tuple(int(version, 16) for version in versions.split(",") if version),
                   int(alert) if alert.isdigit() else None, int(certificates) if certificates.isdigit() else None, why)

    def describe(self) -> str:
        parts = [self.name, *(VERSION_NAMES.get(version, f"{version:#06x}") for version in self.versions)]
        if self.alert is not None:
            parts.append(f"description {self.alert}")
        if self.certificates is not None:
            parts.append(f"{self.certificates} certificates")
        return " ".join([*parts, self.text]).strip()


def offered(legacy: int, supported: tuple[int, ...] | None) -> tuple[int, ...]:
    """A ClientHello's versions: its supported_versions extension, else every version from TLS 1.0 up to its
    legacy_version (RFC 8446 4.2.1; Go's supportedVersionsFromMax); GREASE and unknown values left out."""
    if supported is not None:
        return tuple(sorted(version for version in supported if version in VERSION_NAMES))
    return tuple(version for version in VERSION_NAMES if version <= legacy)


class TlsReader:
    """One direction's plaintext handshake, fed as it arrives: ``feed`` returns the records it completes. After the
    plaintext ends (``ENCRYPTED``, an alert, ``NOT_TLS``, or ``PLAINTEXT_LIMIT``) it is ``done`` and reads no more."""

    def __init__(self):
        self._buffer = bytearray()
        self._handshake = bytearray()  # handshake messages may span records, and records hold several
        self._read = 0
        self.done = False

    @property
    def pending(self) -> int:
        """Bytes held that make no whole record or handshake message yet."""
        return len(self._buffer) + len(self._handshake)

    def feed(self, data: bytes) -> list[Record]:
        if self.done:
            return []
        self._buffer += data[:max(0, PLAINTEXT_LIMIT - self._read)]
        self._read += len(data)
        found: list[Record] = []
        buffer = self._buffer
        position = 0
        while not self.done and len(buffer) - position >= 5:
            content, major, length = buffer[position], buffer[position + 1], int.from_bytes(
                buffer[position + 3:position + 5], "big")
            if major != 3 or content not in (HANDSHAKE, ALERT, CHANGE_CIPHER_SPEC, APPLICATION_DATA) or \
                    length > _MAX_RECORD:
                self._end(found, Record(NOT_TLS, text=f"record header {bytes(buffer[position:position + 5]).hex()}"))
                break
            if len(buffer) - position < 5 + length:
                break
            fragment = bytes(buffer[position + 5:position + 5 + length])
            position += 5 + length
            if content == HANDSHAKE:
                self._handshake += fragment
                self._messages(found)
            elif content == ALERT:
                self._end(found, Record(ALERT_NAME, alert=fragment[1] if len(fragment) >= 2 else None))
            else:
                self._end(found, Record(ENCRYPTED))
        del buffer[:position]
        if not self.done and self._read >= PLAINTEXT_LIMIT:
            self.done = True
        return found

    def _end(self, found: list[Record], record: Record) -> None:
        found.append(record)
        self.done = True
        self._buffer.clear()

    def _messages(self, found: list[Record]) -> None:
        handshake = self._handshake
        while len(handshake) >= 4:
            size = int.from_bytes(handshake[1:4], "big")
            if len(handshake) < 4 + size:
                return
            kind, body = handshake[0], bytes(handshake[4:4 + size])
            del handshake[:4 + size]
            name = MESSAGES.get(kind)
            if name == "client_hello":
                found.append(Record(name, versions=_client_hello(body)))
            elif name == "server_hello":
                found.append(Record(name, versions=_server_hello(body)))
            elif name == "certificate":
                found.append(Record(name, certificates=_certificates(body)))
            elif name is not None:
                found.append(Record(name))


def _client_hello(body: bytes) -> tuple[int, ...]:
    """legacy_version(2) random(32) session_id<1> cipher_suites<2> compression_methods<1> extensions<2>."""
    if len(body) < 35:
        return ()
    legacy = int.from_bytes(body[:2], "big")
    position = 34
    for width in (1, 2, 1):
        if position + width > len(body):
            return offered(legacy, None)
        position += width + int.from_bytes(body[position:position + width], "big")
    supported = None
    for extension, data in _extensions(body, position):
        if extension == _SUPPORTED_VERSIONS and data:
            supported = tuple(int.from_bytes(data[i:i + 2], "big") for i in range(1, min(len(data), 1 + data[0]), 2))
    return offered(legacy, supported)


def _server_hello(body: bytes) -> tuple[int, ...]:
    """legacy_version(2) random(32) session_id<1> cipher_suite(2) compression_method(1) extensions<2>: the version
    chosen, supported_versions' where present (TLS 1.3)."""
    if len(body) < 35:
        return ()
    chosen = int.from_bytes(body[:2], "big")
    position = 35 + body[34] + 3
    for extension, data in _extensions(body, position):
        if extension == _SUPPORTED_VERSIONS and len(data) == 2:
            chosen = int.from_bytes(data, "big")
    return (chosen,)


def _extensions(body: bytes, position: int):
    if position + 2 > len(body):
        return
    end = min(len(body), position + 2 + int.from_bytes(body[position:position + 2], "big"))
    position += 2
    while position + 4 <= end:
        extension, size = int.from_bytes(body[position:position + 2], "big"), int.from_bytes(
            body[position + 2:position + 4], "big")
        yield extension, body[position + 4:position + 4 + size]
        position += 4 + size


def _certificates(body: bytes) -> int | None:
    """TLS 1.2's Certificate: certificate_list<3> of certificates<3> (TLS 1.3's is encrypted)."""
    if len(body) < 3:
        return None
    end, position, count = min(len(body), 3 + int.from_bytes(body[:3], "big")), 3, 0
    while position + 3 <= end:
        position += 3 + int.from_bytes(body[position:position + 3], "big")
        count += 1
    return count
