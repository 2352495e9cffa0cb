"""The HTTP plumbing nsqd gets from Go's net/http, julienschmidt/httprouter v1.3.0 and its own
internal/http_api: request-target and query parsing, request bodies (Content-Length or chunked), the router
with the redirect, OPTIONS and 405 rules nsqd inherits (H-04, H-05), and the two response styles of nsqd's
decorators: `V1` (JSON errors, X-NSQ-Content-Type: H-01, H-02) and `PLAIN` (text, no X-NSQ-Content-Type: H-03).

A handler takes a `Request` and returns a value or raises `HTTPError`; its style turns either into bytes.
"""
from __future__ import annotations

import email.utils
import http.server
import json
import logging
import posixpath
import re
import socket
import ssl
import sys
import threading
import time
import urllib.parse

from .stats import go_duration

log = logging.getLogger("nsqd")

V1, PLAIN = "v1", "plain"
_TREE_METHODS = ("GET", "POST", "PUT")  # httprouter redirects only for methods that have routes
_POST_HANDLER_DISCARD = 256 * 1024  # Go reads at most this much of an unread body to keep the connection
_CHUNK_LINE_MAX = 4096
_CHUNK_SIZE = re.compile(rb"[0-9a-fA-F]{1,16}")


class HTTPError(Exception):
    def __init__(self, status: int, text: str):
        super().__init__(text)
        self.status = status
        self.text = text


class JSONValue(bytes):
    """Already-encoded JSON that a V1 handler returns as is (Go's nil slice in an interface: `null`)."""


class _BadRequest(Exception):
    """What Go's server rejects before any handler runs: a plain `400 Bad Request`."""


# -- Go's URL and body handling ----------------------------------------------------------------------------

_ESCAPE = re.compile(rb"%([0-9A-Fa-f]{2})|%|\+")


def _unescape(raw: bytes, plus_is_space: bool) -> str:
    def replace(match: re.Match) -> bytes:
        if match.group(1):
            return bytes([int(match.group(1), 16)])
        if match.group(0) == b"+":
            return b" " if plus_is_space else b"+"
        raise ValueError("invalid URL escape")
    return _ESCAPE.sub(replace, raw).decode("utf-8", "surrogateescape")


def parse_query(raw: bytes) -> tuple[dict[str, list[str]], bool]:
    """Go's url.ParseQuery: `&`-separated, `;` is an error, a bad escape is an error; parsing goes on after
    an error, so the values come back with a flag saying whether all of it parsed (H-07)."""
    values: dict[str, list[str]] = {}
    ok = True
    for pair in raw.split(b"&"):
        if not pair:
            continue
        if b";" in pair:
            ok = False
            continue
        key, _, value = pair.partition(b"=")
        try:
            values.setdefault(_unescape(key, True), []).append(_unescape(value, True))
        except ValueError:
            ok = False
    return values, ok


class RequestBody:
    """The request body as Go hands it to a handler: `length` is None when chunked (Go's -1)."""

    def __init__(self, rfile, headers):
        self._rfile = rfile
        self.chunked = "chunked" in headers.get("Transfer-Encoding", "").lower()
        self.length = None
        if not self.chunked:
            lengths = set(headers.get_all("Content-Length") or ["0"])
            if len(lengths) != 1 or not next(iter(lengths)).strip().isdigit():
                raise _BadRequest()
            self.length = int(next(iter(lengths)))
        self._left = 0 if self.chunked else self.length  # in the current chunk, or in the whole body
        self.done = self._left == 0 and not self.chunked

    def read(self, limit: int) -> bytes:
        """Up to `limit` bytes, fewer only at the body's end. A broken body raises OSError."""
        parts, wanted = [], limit
        while wanted > 0 and not self.done:
            if self.chunked and self._left == 0:
                self._next_chunk()
                continue
            data = self._rfile.read(min(wanted, self._left, 65536))
            if not data:
                raise OSError("unexpected EOF in request body")
            parts.append(data)
            wanted -= len(data)
            self._left -= len(data)
            if self._left == 0 and not self.chunked:
                self.done = True
            elif self._left == 0 and self._rfile.readline(_CHUNK_LINE_MAX) not in (b"\r\n", b"\n"):
                raise OSError("malformed chunk end")
        return b"".join(parts)

    def _next_chunk(self) -> None:
        line = self._rfile.readline(_CHUNK_LINE_MAX)
        size = line.split(b";")[0].strip()
        # Go's parseHexUint (net/http/internal/chunked.go): 1 to 16 hex digits; int() would also take a sign,
        # "0x" or "_", and a negative size broke the body's reads (found by tests/broker/test_fuzz.py).
        if not _CHUNK_SIZE.fullmatch(size):
            raise OSError("malformed chunk size")
        self._left = int(size, 16)
        if self._left == 0:
            while self._rfile.readline(_CHUNK_LINE_MAX) not in (b"\r\n", b"\n", b""):
                pass  # trailers
            self.done = True

    def finish(self) -> bool:
        """Drop what the handler left, if that is little; False when the connection must close instead."""
        if self.done:
            return True
        if self.length is not None and self._left > _POST_HANDLER_DISCARD:
            return False
        try:
            self.read(_POST_HANDLER_DISCARD)
        except OSError:
            return False
        return self.done


def go_json(value) -> bytes:
    """Go's json.Marshal: compact; <, >, &, U+2028/9 escaped; invalid UTF-16 becomes U+FFFD."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return _GO_JSON_ESCAPES.sub(_go_json_escape, text).encode()


_GO_JSON_ESCAPES = re.compile("[<>&\u2028\u2029\ud800-\udfff]")


def _go_json_escape(match: re.Match) -> str:
    char = match.group(0)
    return "\ufffd" if "\ud800" <= char <= "\udfff" else "\\u%04x" % ord(char)


# -- the handler --------------------------------------------------------------------------------------------

class Request:
    def __init__(self, handler: RequestHandler, path: str, raw_query: bytes, body: RequestBody, params: dict):
        self.method = handler.command
        self.nsqd = handler.server.nsqd  # the program behind the server: Go's httpServer.nsqd or .nsqlookupd
        self.nsqlookupd = handler.server.nsqlookupd
        self.path = path
        self.body = body
        self.params = params
        self.raw_query = raw_query

    def query(self) -> dict[str, list[str]]:
        values, ok = parse_query(self.raw_query)
        if not ok:
            raise HTTPError(400, "INVALID_REQUEST")  # H-07
        return values


class RequestHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):
        pass

    def handle_one_request(self) -> None:
        """BaseHTTPRequestHandler's loop body, with every method going to `_serve` (Go takes any token)."""
        self.raw_requestline = self.rfile.readline(65537)
        if len(self.raw_requestline) > 65536:
            self.send_error(414)
            return
        if not self.raw_requestline:
            self.close_connection = True
            return
        if self.parse_request():
            self._serve()
            self.wfile.flush()

    def send_error(self, code: int, message=None, explain=None) -> None:
        """Go's server answers unparseable requests in plain text and closes."""
        reason = http.server.BaseHTTPRequestHandler.responses.get(code, ("Error",))[0]
        self.close_connection = True
        self._respond(code, {"Connection": "close", "Content-Type": "text/plain; charset=utf-8"},
                      f"{code} {reason}".encode())

    def _serve(self) -> None:
        started = time.monotonic()
        try:
            path, raw_query = self._parse_target()
            body = RequestBody(self.rfile, self.headers)
        except _BadRequest:
            self.send_error(400)
            return
        if self.server.tls_required_https_port is not None:  # T-10, H-06: before any route
            status, headers = 403, {"X-Nsq-Content-Type": "nsq; version=1.0",
                                    "Content-Type": "application/json; charset=utf-8"}
            payload = f'{{"message": "TLS_REQUIRED", "https_port": {self.server.tls_required_https_port}}}'.encode()
            if not body.finish():
                self.close_connection = True
                headers["Connection"] = "close"
            self._respond(status, headers, payload)
            return
        status, headers, payload = self.server.router.dispatch(self, path, raw_query, body)
        if not body.finish():
            self.close_connection = True
            headers["Connection"] = "close"
        self._respond(status, headers, payload)
        if path not in ("/pub", "/mpub"):  # nsqd logs every route but these two
            log.info("%d %s %s (%s:%d) %s", status, self.command, self.requestline.split()[1], *self.client_address[:2],
                     go_duration(int((time.monotonic() - started) * 1e9)))

    def _parse_target(self) -> tuple[str, bytes]:
        """Go's ParseRequestURI: an origin-form or absolute-form target, `#` kept, the path unescaped. The
        target comes from the request line: BaseHTTPRequestHandler rewrites a leading `//` in `self.path`."""
        target = self.requestline.split()[1].encode("latin-1")
        if re.match(rb"(?i)https?://", target):
            target = b"/" + target.split(b"/", 3)[3] if target.count(b"/") >= 3 else b""
        elif not target.startswith(b"/"):
            raise _BadRequest()
        raw_path, question, raw_query = target.partition(b"?")
        try:
            path = _unescape(raw_path, False)
        except ValueError:
            raise _BadRequest() from None
        self.force_query = bool(question)
        return path, raw_query

    def _respond(self, status: int, headers: dict, payload: bytes) -> None:
        """Go's order: the handler's headers sorted, then Date, Content-Length, and the Content-Type Go
        sniffs from the body (passed as `headers["sniffed"]`, as Go writes it after the others)."""
        sniffed = headers.pop("sniffed", None)
        lines = [f"{self.protocol_version} {status} {self.responses.get(status, ('',))[0]}"]
        lines += [f"{name}: {headers[name]}" for name in sorted(headers)]
        lines.append(f"Date: {email.utils.formatdate(usegmt=True)}")
        if self.command != "HEAD":  # Go sends no length, and no body, for HEAD
            lines.append(f"Content-Length: {len(payload)}")
        if sniffed:
            lines.append(f"Content-Type: {sniffed}")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace")
        self.wfile.write(head if self.command == "HEAD" else head + payload)


# -- the router (httprouter v1.3.0 as nsqd configures it) -------------------------------------------------

def _match(pattern: str, path: str, fold_case: bool = False) -> str | None:
    """The path as the route spells it, if it matches. `:name` takes one non-empty segment, kept as is."""
    prefix, colon, _ = pattern.partition(":")
    head = path[:len(prefix)]
    if (head.lower() == prefix.lower()) if fold_case else (head == prefix):
        if not colon:
            return prefix if len(path) == len(prefix) else None
        rest = path[len(prefix):]
        return prefix + rest if rest and "/" not in rest else None
    return None


def _clean_path(path: str) -> str:
    """httprouter's CleanPath: path.Clean that keeps a trailing slash."""
    cleaned = posixpath.normpath("/" + path)
    cleaned = "/" + cleaned.lstrip("/")
    return cleaned + "/" if path.endswith("/") and cleaned != "/" else cleaned


class Router:
    def __init__(self, routes: list[tuple[str, str, object, str]]):
        self._routes = routes

    def _find(self, method: str, path: str, fold_case: bool = False):
        for route_method, pattern, handler, style in self._routes:
            if route_method == method:
                matched = _match(pattern, path, fold_case)
                if matched is not None:
                    return matched, pattern, handler, style
        return None

    def _allowed(self, path: str, method: str) -> str:
        methods = {m for m, pattern, _, _ in self._routes if m != method and _match(pattern, path) is not None}
        return ", ".join(sorted(methods | {"OPTIONS"})) if methods else ""

    def dispatch(self, handler: RequestHandler, path: str, raw_query: bytes,
                 body: RequestBody) -> tuple[int, dict, bytes]:
        method = handler.command
        found = self._find(method, path)
        if found:
            _, pattern, function, style = found
            params = {"opt": path[len(pattern.partition(":")[0]):]} if ":" in pattern else {}
            return _call(function, style, Request(handler, path, raw_query, body, params))
        if method in _TREE_METHODS and path != "/":
            code = 301 if method == "GET" else 307  # H-05
            toggled = path[:-1] if path.endswith("/") else path + "/"
            if self._find(method, toggled):
                return _redirect(handler, toggled, raw_query, code)
            cleaned = _clean_path(path)
            for candidate in (cleaned, cleaned[:-1] if cleaned.endswith("/") else cleaned + "/"):
                fixed = self._find(method, candidate, fold_case=True)
                if fixed:
                    return _redirect(handler, fixed[0], raw_query, code)
        allow = self._allowed(path, method)
        if method == "OPTIONS" and allow:
            return 200, {"Allow": allow}, b""  # H-05
        if method != "OPTIONS" and allow:
            status, headers, payload = _v1_response(405, HTTPError(405, "METHOD_NOT_ALLOWED"))  # H-04
            return status, {**headers, "Allow": allow}, payload
        return _v1_response(404, HTTPError(404, "NOT_FOUND"))  # H-04, H-09


def _redirect(handler: RequestHandler, path: str, raw_query: bytes, code: int) -> tuple[int, dict, bytes]:
    """Go's http.Redirect to the URL string of the corrected request."""
    location = urllib.parse.quote(_clean_path(path).encode("utf-8", "surrogateescape"), safe="$&+,/:;=@")
    if handler.force_query:
        location += "?" + raw_query.decode("latin-1")
    headers = {"Location": location}
    if handler.command != "GET":
        return code, headers, b""
    escaped = (location.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
               .replace('"', "&#34;").replace("'", "&#39;"))
    headers["Content-Type"] = "text/html; charset=utf-8"
    return code, headers, f'<a href="{escaped}">Moved Permanently</a>.\n\n'.encode()


def _call(function, style: str, request: Request) -> tuple[int, dict, bytes]:
    try:
        result = function(request)
    except HTTPError as error:
        if style == PLAIN:
            return error.status, {"sniffed": "text/plain; charset=utf-8"}, error.text.encode()
        return _v1_response(error.status, error)
    except OSError:
        return _v1_response(500, HTTPError(500, "INTERNAL_ERROR"))  # a body that broke off mid-read
    if style == PLAIN:
        if result is None:
            # nsqd's PlainText decorator panics on a nil result; the panic handler answers 500 (rec-0230).
            return _v1_response(500, HTTPError(500, "INTERNAL_ERROR"))
        return 200, {"sniffed": "text/plain; charset=utf-8"}, result.encode()
    return _v1_response(200, result)


def _v1_response(status: int, result) -> tuple[int, dict, bytes]:
    """H-01/H-02: errors and structs as JSON, strings as sniffed text, nothing as an empty body."""
    headers = {"X-Nsq-Content-Type": "nsq; version=1.0"}
    if isinstance(result, (HTTPError, JSONValue)):
        headers["Content-Type"] = "application/json; charset=utf-8"
        return status, headers, result if isinstance(result, JSONValue) else go_json({"message": result.text})
    if result is None:
        return status, headers, b""
    if isinstance(result, (str, bytes)):
        headers["sniffed"] = "text/plain; charset=utf-8"
        return status, headers, result.encode() if isinstance(result, str) else result
    headers["Content-Type"] = "application/json; charset=utf-8"
    return status, headers, go_json(result)




# -- the server ---------------------------------------------------------------------------------------------

class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    tls_context: ssl.SSLContext | None = None

    def get_request(self):
        """HTTPS: the handshake happens on the connection's own thread, at its first read, so a client that never
        finishes one holds up nobody."""
        conn, address = self.socket.accept()
        if self.tls_context is not None:
            conn = self.tls_context.wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
        return conn, address

    def handle_error(self, request, client_address) -> None:
        """A peer that resets or goes away mid-request or mid-response: Go's net/http drops the connection
        without a word, where socketserver would print a traceback to stderr (found by tests/broker/test_fuzz.py).
        A failed TLS handshake is one log line, as Go's server logs it."""
        error = sys.exc_info()[1]
        if isinstance(error, ssl.SSLError):
            log.warning("http: TLS handshake error from %s:%d: %s", *client_address[:2], error.reason or error)
        elif not isinstance(error, ConnectionError):
            super().handle_error(request, client_address)


class HTTPServer:
    """One thread per connection on an already bound `listener`, `routes` served for nsqd or nsqlookupd; HTTPS
    with a `tls_context`; with `tls_required_https_port`, every request is refused with TLS_REQUIRED."""

    def __init__(self, listener: socket.socket, routes: list, nsqd=None, nsqlookupd=None,
                 tls_context: ssl.SSLContext | None = None, tls_required_https_port: int | None = None):
        self.listener = listener
        self._server = _Server(listener.getsockname()[:2], RequestHandler, bind_and_activate=False)
        self._server.socket.close()
        self._server.socket = listener
        self._server.nsqd = nsqd
        self._server.nsqlookupd = nsqlookupd
        self._server.router = Router(routes)
        self._server.tls_context = tls_context
        self._server.tls_required_https_port = tls_required_https_port
        self._thread = threading.Thread(target=self._server.serve_forever, name="http", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
