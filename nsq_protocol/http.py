"""HTTP/1.1 as the nsqd and nsqlookupd HTTP APIs speak it, read from both directions of a connection: requests
(method, target, body by Content-Length or chunked) and responses (status, body). Sans-IO and incremental, as the
V2 codec: ``feed`` takes bytes and returns what completed; bodies are bounded, and what cannot be HTTP raises
``ProtocolViolation`` once."""

from __future__ import annotations

import json
import re
from collections import deque
from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote_to_bytes, urlsplit

from nsq_protocol.wire import ProtocolViolation

MAX_HEAD = 64 * 1024
MAX_BODY = 8 * 1024 * 1024  # beyond nsqd's --max-body-size default (5 MiB, LIM-01)
_REQUEST_LINE = re.compile(rb"([A-Z]+) (\S+) HTTP/1\.[01]\Z")
_STATUS_LINE = re.compile(rb"HTTP/1\.[01] (\d{3})(?: .*)?\Z")


_HEX = re.compile(r"%(?![0-9a-fA-F]{2})")


@dataclass(frozen=True)
class Request:
    method: str
    target: str
    body: bytes
    headers: dict[str, str] = field(default_factory=dict, compare=False)  # names in lower case
    size: int | None = None  # the body's whole size where ``body`` holds only its start (a capture's kept bytes)

    @property
    def path(self) -> str:
        return urlsplit(self.target).path

    @property
    def body_size(self) -> int:
        return len(self.body) if self.size is None else self.size

    def query(self, name: str) -> str | None:
        values = parse_qs(urlsplit(self.target).query, keep_blank_values=True).get(name)
        return values[0] if values else None

    def params(self) -> dict[str, str] | None:
        """The query as nsqd reads it (Go's url.ParseQuery, H-07): each key's first value, ``+`` a space; None where
        Go refuses the query (a ``%`` without two hex digits, a ``;``)."""
        query = urlsplit(self.target).query
        if ";" in query or _HEX.search(query):
            return None
        values: dict[str, str] = {}
        for pair in query.split("&"):
            key, _, value = pair.partition("=")
            key, value = (unquote_to_bytes(part.replace("+", " ")).decode("utf-8", "surrogateescape")
                          for part in (key, value))
            if key:
                values.setdefault(key, value)
        return values


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict, compare=False)  # names in lower case
    size: int | None = None  # as Request's

    @property
    def body_size(self) -> int:
        return len(self.body) if self.size is None else self.size

    @property
    def whole(self) -> bool:
        return self.size is None

    @property
    def message(self) -> str | None:
        """An error answer's code: its JSON body's ``message`` (nsqd's and nsqlookupd's ``{"message": "..."}``)."""
        try:
            document = json.loads(self.body)
        except ValueError:
            return None
        return document.get("message") if isinstance(document, dict) else None


@dataclass(frozen=True)
class HttpExchange:
    """One request to a broker's HTTP API and its answer: ``ts`` when the request was sent, ``answered`` when the
    answer came (the broker acted between them); ``tls``: over HTTPS."""

    ts: float
    request: Request
    response: Response
    answered: float
    tls: bool = False

    def describe(self) -> str:
        """One line for a violation's evidence."""
        request, response = self.request, self.response
        sent = f" [{request.body_size} bytes]" if request.body_size else ""
        return f"> {request.method} {request.target[:100]}{sent} < {response.status} {response.body[:100]!r}"


class HttpDecoder:
    """One direction of an HTTP/1.1 connection: ``requests=True`` for the client's, False for the server's."""

    def __init__(self, requests: bool):
        self.requests = requests
        self._buffer = bytearray()
        self._failed: ProtocolViolation | None = None
        # a response decoder: the methods of the requests still to be answered, in order, where the caller knows
        # them (an answer to HEAD has no body, whatever its Content-Length)
        self.asked: deque[str] = deque()

    def feed(self, data: bytes) -> list[Request | Response]:
        if self._failed:
            raise self._failed
        self._buffer += data
        done = []
        while True:
            message = self._next()
            if message is None:
                return done
            done.append(message)

    def _fail(self, reason: str) -> ProtocolViolation:
        self._failed = ProtocolViolation(reason)
        return self._failed

    def _next(self) -> Request | Response | None:
        buffer = self._buffer
        head_end = buffer.find(b"\r\n\r\n", 0, MAX_HEAD)
        if head_end < 0:
            if len(buffer) >= MAX_HEAD:
                raise self._fail(f"no end of the HTTP head within {MAX_HEAD} bytes")
            return None
        first, *header_lines = bytes(buffer[:head_end]).split(b"\r\n")
        headers = {}
        for line in header_lines:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        match = (_REQUEST_LINE if self.requests else _STATUS_LINE).match(first)
        if not match:
            raise self._fail(f"not an HTTP/1.1 {'request' if self.requests else 'status'} line: {first[:60]!r}")
        interim = not self.requests and match.group(1)[:1] == b"1"  # 100 Continue: the answer still to come
        bodiless = not self.requests and (interim or match.group(1) in (b"204", b"304") or
                                          bool(self.asked) and self.asked[0] == "HEAD")
        body = (b"", head_end + 4) if bodiless else self._body(headers, head_end + 4)
        if body is None:
            return None
        body, end = body
        del buffer[:end]
        if interim:
            return self._next()
        if not self.requests and self.asked:
            self.asked.popleft()
        text = {name.decode("latin-1"): value.decode("latin-1") for name, value in headers.items()}
        if self.requests:
            return Request(match.group(1).decode(), match.group(2).decode("latin-1"), body, text)
        return Response(int(match.group(1)), body, text)

    def _body(self, headers: dict, start: int) -> tuple[bytes, int] | None:
        buffer = self._buffer
        if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
            return self._chunked(start)
        length = headers.get(b"content-length", b"0")
        if not length.isdigit() or int(length) > MAX_BODY:
            raise self._fail(f"Content-Length {length[:20]!r} not a size up to {MAX_BODY}")
        end = start + int(length)
        return (bytes(buffer[start:end]), end) if len(buffer) >= end else None

    def _chunked(self, position: int) -> tuple[bytes, int] | None:
        buffer, parts, total = self._buffer, [], 0
        while True:
            line_end = buffer.find(b"\r\n", position, position + 1024)
            if line_end < 0:
                if len(buffer) - position >= 1024:
                    raise self._fail("a chunk size line longer than 1024 bytes")
                return None
            size_text = bytes(buffer[position:line_end]).split(b";")[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise self._fail(f"a chunk size that is not hex: {size_text[:20]!r}") from None
            total += size
            if total > MAX_BODY:
                raise self._fail(f"a chunked body over {MAX_BODY} bytes")
            data_start, data_end = line_end + 2, line_end + 2 + size
            if len(buffer) < data_end + 2:
                return None
            if size == 0:
                trailer_end = buffer.find(b"\r\n", line_end + 2)
                if trailer_end < 0:
                    return None
                return b"".join(parts), trailer_end + 2
            parts.append(bytes(buffer[data_start:data_end]))
            position = data_end + 2
