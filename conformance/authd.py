"""The suite's fake auth server (stdlib ``http.server``): the target's ``--auth-http-address`` points here.

nsqd asks ``GET /auth?common_name=..&remote_ip=..&secret=S&tls=..`` (P-AUTH-13), or with
``--auth-http-request-method=post`` POSTs the same fields as a JSON object of lists, and the reply depends
only on the secret, as the recordings' fake auth server did (nsqd-recordings/README.md, "auth"):

| secret      | reply |
|-------------|-------|
| ``all``     | publish + subscribe on every topic and channel (the other cases' connections use it) |
| ``ok``      | identity ``alice``: publish on topics ending ``-auth`` (channel ``.*``), subscribe there to ``c1`` |
| ``chanonly``| identity ``bob``: publish + subscribe on every topic, channels ``^c1$`` only |
| ``empty``   | no authorizations |
| ``fail500`` | HTTP 500 |
| ``badperm`` | the unknown permission ``admin`` |
| ``ttl1-<n>``| first query: like ``ok`` with ttl 1; later queries: HTTP 500 |
| ``all-<n>`` | like ``all``: a secret of the case's own, whose queries it reads back |

``GET /queries?secret=S`` answers the parameters of each ``/auth`` query with secret S so far (and its
``http_method``), a JSON list: the
cases run in other processes (pytest-xdist workers) than the one that serves.
"""

from __future__ import annotations

import http.server
import json
import threading
import urllib.parse

ALLOW_ALL_SECRET = "all"
AUTHORIZED_SUFFIX = "-auth"  # topics `ok` may use: the recordings' `^auth-`, turned into a suffix for case names
ALICE = {"identity": "alice", "identity_url": "http://authd.test/alice", "authorizations": [
    {"topic": AUTHORIZED_SUFFIX + "$", "channels": [".*"], "permissions": ["publish"]},
    {"topic": AUTHORIZED_SUFFIX + "$", "channels": ["^c1$"], "permissions": ["subscribe"]}]}
REPLIES = {
    ALLOW_ALL_SECRET: {"ttl": 3600, "identity": "conformance", "identity_url": "", "authorizations": [
        {"topic": ".*", "channels": [".*"], "permissions": ["publish", "subscribe"]}]},
    "ok": {"ttl": 3600, **ALICE},
    "chanonly": {"ttl": 3600, "identity": "bob", "authorizations": [
        {"topic": ".*", "channels": ["^c1$"], "permissions": ["publish", "subscribe"]}]},
    "empty": {"ttl": 3600, "authorizations": []},
    "badperm": {"ttl": 3600, "authorizations": [{"topic": ".*", "channels": [".*"], "permissions": ["admin"]}]},
}

_MAX_POST_BODY = 1 << 16  # nsqd's POST body is a handful of short fields


class _AuthHandler(http.server.BaseHTTPRequestHandler):
    server: AuthServer

    def do_GET(self):  # noqa: N802 (http.server's naming)
        url = urllib.parse.urlsplit(self.path)
        self._answer(url.path, {**dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True)),
                                "http_method": "GET"})

    def do_POST(self):  # noqa: N802 (http.server's naming)
        """--auth-http-request-method=post (nsqd master): the query's fields as a JSON object of lists (P-AUTH-13)."""
        length = int(self.headers.get("Content-Length") or 0)
        try:
            document = json.loads(self.rfile.read(min(length, _MAX_POST_BODY)) or b"{}")
        except ValueError:
            document = {}
        fields = {key: str(values[0]) if isinstance(values, list) and values else str(values)
                  for key, values in (document.items() if isinstance(document, dict) else ())}
        self._answer(urllib.parse.urlsplit(self.path).path, {**fields, "http_method": "POST"})

    def _answer(self, path: str, query: dict[str, str]) -> None:
        """/auth: the reply for the query's secret, which is recorded with the method it came by; /queries: those
        recorded for a secret."""
        secret = query.get("secret", "")
        if path == "/auth":
            self.server.record(query)
            reply = self.server.reply_for(secret)
        else:
            reply = self.server.queries(secret) if path == "/queries" else None
        if reply is None:
            self.send_response(500 if path == "/auth" else 404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format, *args):  # noqa: A002 (the base class's signature)
        pass  # nsqd's queries are visible in the broker's own log


class AuthServer(http.server.ThreadingHTTPServer):
    """Serves on a daemon thread from ``start()`` to ``stop()``; ``address`` is the bound HOST:PORT."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int] = ("127.0.0.1", 0)):
        super().__init__(address, _AuthHandler)
        self._lock = threading.Lock()
        self._queries: dict[str, list[dict[str, str]]] = {}

    @property
    def address(self) -> str:
        host, port = self.server_address[:2]
        return f"{host}:{port}"

    def record(self, parameters: dict[str, str]) -> None:
        with self._lock:
            self._queries.setdefault(parameters.get("secret", ""), []).append(parameters)

    def queries(self, secret: str) -> list[dict[str, str]]:
        with self._lock:
            return list(self._queries.get(secret, []))

    def reply_for(self, secret: str) -> dict | None:
        """The JSON reply for ``secret``, or None for HTTP 500."""
        with self._lock:
            first = len(self._queries.get(secret, [])) == 1
        if secret.startswith("ttl1-"):
            return {**ALICE, "ttl": 1} if first else None  # P-AUTH-12: the re-query after the ttl fails
        if secret.startswith(ALLOW_ALL_SECRET + "-"):
            return REPLIES[ALLOW_ALL_SECRET]
        return REPLIES.get(secret)

    def start(self) -> AuthServer:
        threading.Thread(target=self.serve_forever, daemon=True, name="authd").start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
