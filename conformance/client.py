"""What a case checks with: the outcomes that decide its verdict (:class:`Mismatch`, :class:`PreconditionFailed`,
:class:`Unsupported`, :class:`HarnessError`), the :class:`Verifier`, the suite's TLS settings and its HTTP client.
The TCP connection is ``connection.py``.

A check names the behaviour items it judges (``judges="H-07"``), and a difference is graded at their strongest level
(``verdicts.level_of``), whatever the case's requirement level. A hard check raises :class:`Mismatch` (the case
cannot go on); a soft one records it and the case goes on, so that every difference a case can observe is in its
verdict (``plugin/verdicts.py``). A hard check that names no item takes its case's requirement level; a soft one is a
SHOULD (nsqd's wording of an error text after a correct code).
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
from contextlib import contextmanager
from dataclasses import dataclass, field

from conformance.transcript import CLIENT_TO_SERVER, SERVER_TO_CLIENT, Endpoint, Transcript
from nsq_protocol.http import HttpExchange, Request, Response


class Mismatch(AssertionError):
    """A behaviour differs: what, expected, actual. ``cause`` names the first unexpected thing the broker did in
    words that group failures across cases ("PUB does not create topics (E_TOPIC_NOT_EXIST)"); None: the report
    derives one from ``what`` and ``actual``. ``judges``: the behaviour items the check judges ("C-08, C-23");
    ``unnamed_level``: the level of a check that names none (None: its case's requirement level)."""

    def __init__(self, what: str, expected, actual, cause: str | None = None, judges: str = "",
                 unnamed_level: str | None = None):
        super().__init__(f"{what}\n  expected: {_show(expected)}\n  actual:   {_show(actual)}")
        self.what, self.expected, self.actual, self.cause, self.judges = what, expected, actual, cause, judges
        self.unnamed_level = unnamed_level

    wording = False  # a difference in nsqd's wording only (Verifier.wording): reports fold these into one line


class PreconditionFailed(Exception):
    """A setup step of a case (a PUB, SUB or IDENTIFY the case only needs in order to reach what it checks, the
    topic it creates first) went wrong: the case could not test its requirement (verdict PRECONDITION)."""

    def __init__(self, step: str, mismatch: Mismatch):
        super().__init__(f"setup step {step} failed, so the case could not test its requirement:\n{mismatch}")
        self.step, self.mismatch = step, mismatch
        self.cause = mismatch.cause or f"{mismatch.what}: {_show(mismatch.actual)}"


# The requirement sections that test a step themselves; in a case of any other section the step is setup.
STEP_SECTIONS = {
    "PUB": frozenset({"PUB", "NAME", "SYNTAX"}),
    "SUB": frozenset({"SUB", "NAME", "SYNTAX", "STATE", "EPH"}),
    "IDENTIFY": frozenset({"ID", "COMP", "TLS", "BUF", "SAMPLE", "HB", "TIMEOUT", "AUTH"}),
    "AUTH": frozenset({"AUTH"}),
    "create topic": frozenset({"HTTP", "ADMIN"}),
}


@contextmanager
def setup_step(step: str, sections_under_test: frozenset[str]):
    """A Mismatch inside is the case's PreconditionFailed unless the case's requirements test ``step`` itself
    (``sections_under_test`` None: a caller outside a case, which checks every step)."""
    try:
        yield
    except Mismatch as mismatch:
        if sections_under_test is None or STEP_SECTIONS[step] & sections_under_test:
            raise
        raise PreconditionFailed(step, mismatch) from mismatch


def _show(value) -> str:
    return value.describe() if hasattr(value, "describe") else str(value)


class Unsupported(Exception):
    """The target does not offer an optional capability the case needs (TLS, snappy, HTTP, ...)."""


class HarnessError(Exception):
    """The suite could not do its part (e.g. connect); the case is an ERROR, not a FAIL."""


def open_test_socket(name: str, address: tuple[str, int], transcript: Transcript, time_scale: float,
                     program: str = "") -> socket.socket:
    """A TCP connection of the case's, its endpoints in the transcript (for the pcap); a refused connection is the
    suite's ERROR, naming ``program`` and the address."""
    try:
        sock = socket.create_connection(address, timeout=5 * time_scale)
    except OSError as exc:
        raise HarnessError(f"cannot connect to {program}{' ' if program else ''}{address[0]}:{address[1]}: {exc}") \
            from exc
    transcript.endpoints[name] = Endpoint(sock.getsockname()[:2], sock.getpeername()[:2])
    return sock


@dataclass
class Verifier:
    """The case's checks. ``equal`` and ``that`` raise: what follows needs it to hold. ``soft_equal`` and
    ``soft_that`` record the difference and let the case go on (naming no item, they are nsqd's details: SHOULD); a
    soft difference groups with others by ``what``. Inside ``with verify.soft("L-HTTP-13"):`` any check, and any
    answer read there that is not what the case needs (a body that is not JSON), is recorded as judging the block's
    items unless it names its own, and the case goes on after the block."""
    recorded: list[Mismatch] = field(default_factory=list)

    @contextmanager
    def soft(self, judges: str = ""):
        try:
            yield
        except Mismatch as mismatch:
            mismatch.judges = mismatch.judges or judges
            self.recorded.append(mismatch)

    def equal(self, what: str, expected, actual, judges: str = "") -> None:
        if expected != actual:
            raise Mismatch(what, expected, actual, judges=judges)

    def that(self, what: str, condition: bool, expected, actual, judges: str = "") -> None:
        if not condition:
            raise Mismatch(what, expected, actual, judges=judges)

    def soft_equal(self, what: str, expected, actual, judges: str = "") -> None:
        if expected != actual:
            self.recorded.append(Mismatch(what, expected, actual, what, judges, "SHOULD"))

    def wording(self, what: str, expected: str, actual: str) -> None:
        """nsqd's wording of a text whose code was right (an error frame's, an HTTP error's): a SHOULD, recorded."""
        if expected != actual:
            difference = Mismatch(what, expected, actual, what, unnamed_level="SHOULD")
            difference.wording = True
            self.recorded.append(difference)

    def soft_that(self, what: str, condition: bool, expected, actual, judges: str = "") -> None:
        if not condition:
            self.recorded.append(Mismatch(what, expected, actual, what, judges, "SHOULD"))


@dataclass(frozen=True)
class TlsClient:
    """The suite's side of a TLS session (the tls_v1 upgrade, ID-31; HTTPS): the CA that verifies the server's
    certificate (None: the protocol is checked, not the certificate), the certificate the suite presents for
    the client auth policies (T-12, T-13, T-14, T-15, T-16; None: none), and the newest TLS version it offers (T-17)."""
    ca: str | None = None
    certificate: str | None = None
    key: str | None = None  # None: the key is in the certificate's file
    maximum_version: ssl.TLSVersion = ssl.TLSVersion.MAXIMUM_SUPPORTED

    def context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=self.ca)
        context.check_hostname = False
        if self.ca is None:
            context.verify_mode = ssl.CERT_NONE
        if self.certificate:
            context.load_cert_chain(self.certificate, self.key)
        context.maximum_version = self.maximum_version
        return context


@dataclass
class HttpResponse:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self):
        """The body as JSON whose missing keys and indexes are Mismatches naming them, not a KeyError or
        IndexError that would make the case an ERROR (the broker answered; it is its answer that is wrong)."""
        try:
            return _reply(json.loads(self.body))
        except ValueError as exc:
            raise Mismatch("the HTTP body is JSON", "JSON", f"{self.body[:200]!r}") from exc


class ReplyObject(dict):
    def __missing__(self, key):
        raise Mismatch(f"the broker's JSON object has {key!r}", f"a {key!r} field",
                       f"only {sorted(self)}")


class ReplyList(list):
    def __getitem__(self, index):
        try:
            return super().__getitem__(index)
        except IndexError:
            raise Mismatch(f"the broker's JSON list has an item {index}", f"at least {index + 1} item(s)"
                           if isinstance(index, int) and index >= 0 else "an item", f"{len(self)} item(s)") from None
        except TypeError:  # read as an object: the broker answered a list where one was due
            raise Mismatch(f"the broker's JSON object has {index!r}", f"an object with {index!r}",
                           f"a list of {len(self)} item(s)") from None


def _reply(value):
    if isinstance(value, dict):
        return ReplyObject((key, _reply(item)) for key, item in value.items())
    if isinstance(value, list):
        return ReplyList(_reply(item) for item in value)
    return value


class HttpClient:
    """One request per connection to the target's HTTP port (HTTPS with ``tls``), recorded in the transcript."""

    def __init__(self, address: tuple[str, int] | None, transcript: Transcript, time_scale: float,
                 tls: TlsClient | None = None, absent: str = "the target has no HTTP API (no --http-target)",
                 unsupported_paths: dict[str, str] | None = None, monitored: bool = False):
        self.address = address
        self.monitored = monitored  # the case's target's API: each exchange to its monitors (conformance/monitoring.py)
        self.unsupported_paths = unsupported_paths or {}  # path -> why the target lacks it (the profile)
        self.transcript = transcript
        self.time_scale = time_scale
        self.tls = tls
        self.absent = absent  # why there is no address: the UNSUPPORTED reason of a case that needs one
        self.scheme = "HTTPS" if tls else "HTTP"

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict | None = None, chunked: bool = False) -> HttpResponse:
        """One HTTP/1.1 request. The body is written in full even if the server answers early
        (H-PUB-01: 413 before reading), and a write error still lets the response be read. ``chunked`` sends it
        as one chunk without a Content-Length (H-PUB-01: the server cannot refuse it before reading)."""
        if self.address is None:
            raise Unsupported(self.absent)
        if path.split("?", 1)[0] in self.unsupported_paths:
            raise Unsupported(self.unsupported_paths[path.split("?", 1)[0]])
        body = body or b""
        sent_at = self.transcript.now()
        self.transcript.record(self.scheme, CLIENT_TO_SERVER, [f"{method} {path}" + (
            f" [{len(body)} bytes] {body[:80]!r}" if body else "")])
        head = [f"{method} {path} HTTP/1.1", f"Host: {self.address[0]}:{self.address[1]}",
                "Transfer-Encoding: chunked" if chunked else f"Content-Length: {len(body)}", "Connection: close",
                "Accept: application/vnd.nsq; version=1.0"]  # as nsq's own tools ask: some brokers answer 0.x else
        head += [f"{key}: {value}" for key, value in (headers or {}).items()]
        try:
            sock = socket.create_connection(self.address, timeout=10 * self.time_scale)
        except OSError as exc:
            raise HarnessError(f"{self.scheme} {method} {path}: cannot connect: {exc}") from exc
        try:
            if self.tls:
                sock = self.tls.context().wrap_socket(sock)
            try:
                framed = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body) if chunked and body else (
                    b"0\r\n\r\n" if chunked else body)
                sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + framed)
            except OSError:
                pass  # the server may answer and close before reading an oversized body
            raw = http.client.HTTPResponse(sock, method=method)
            raw.begin()
            response = HttpResponse(raw.status, {key.lower(): value for key, value in raw.getheaders()},
                                    raw.read())
        except (OSError, http.client.HTTPException, ValueError, OverflowError) as exc:
            # ValueError, OverflowError: a Content-Length no read can honour (99999999999999999999)
            # Connected, then no well-formed answer: the broker's doing, a FAIL of the case's requirement.
            raise Mismatch(f"{self.scheme} {method} {path} is answered", f"a well-formed {self.scheme} response",
                           repr(exc)) from exc
        finally:
            sock.close()
        exchange = (HttpExchange(self.transcript.wall_started + sent_at, Request(method, path, body, {
            name.lower(): value for name, value in (line.split(": ", 1) for line in head[1:])}),
            Response(response.status, response.body, response.headers),
            self.transcript.wall_started + self.transcript.now(), tls=self.tls is not None),) if self.monitored else ()
        self.transcript.record(self.scheme, SERVER_TO_CLIENT, [f"{response.status} {response.body[:200]!r}"],
                               response.body, observed=exchange)
        return response

    def post(self, path: str, body: bytes | None = b"") -> HttpResponse:
        return self.request("POST", path, body)

    def get(self, path: str) -> HttpResponse:
        return self.request("GET", path)

    def stats(self, topic: str) -> dict:
        """The JSON stats of one topic (None when it does not exist)."""
        document = json_of_type(self.get(f"/stats?format=json&topic={quote(topic)}").json(), dict,
                                "the body of GET /stats?format=json")
        topics = json_of_type(document.get("topics") or [], list, "/stats' topics")
        return next((entry for entry in topics
                     if json_of_type(entry, dict, "an entry of /stats' topics").get("topic_name") == topic), None)

    def channel_stats(self, topic: str, channel: str) -> dict | None:
        topic_stats = self.stats(topic)
        if topic_stats is None:
            return None
        channels = json_of_type(topic_stats.get("channels") or [], list, f"/stats' channels of topic {topic}")
        return next((entry for entry in channels
                     if json_of_type(entry, dict, "an entry of /stats' channels").get("channel_name") == channel),
                    None)


def as_read(expected: dict, document):
    """The broker's JSON object cut down to the keys ``expected`` names: answers are checked as a superset, as nsq's
    clients read them (they ignore keys they do not know). Anything but an object stays whole, to differ."""
    return {key: document.get(key) for key in expected} if isinstance(document, dict) else document


def json_of_type(value, kind: type, what: str):
    """``value`` of the broker's JSON when it is of ``kind`` (dict, list, int, str...); else the broker's answer is
    wrong: a Mismatch naming the value, before anything reads it as one (no AttributeError, TypeError)."""
    if type(value) is bool and kind is not bool or not isinstance(value, kind):
        raise Mismatch(f"{what} is a JSON {_JSON_NAMES.get(kind, kind.__name__)}",
                       f"a JSON {_JSON_NAMES.get(kind, kind.__name__)}", _preview_value(value),
                       f"{what}: {_preview_value(value, 40)}")
    return value


_JSON_NAMES = {dict: "object", list: "array", int: "integer", str: "string", bool: "boolean", float: "number"}


def _preview_value(value, limit: int = 120) -> str:
    text = json.dumps(value)
    return text if len(text) <= limit else text[:limit] + "..."


def quote(name: str) -> str:
    """URL-encode a topic or channel name; '#' must become %23 (H-08)."""
    from urllib.parse import quote as url_quote
    return url_quote(name, safe="")
