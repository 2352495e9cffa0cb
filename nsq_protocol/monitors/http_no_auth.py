"""nsqd's HTTP API asks no secret, whatever --auth-http-address says (nsqd/http.go: no handler checks auth; its one
403 is TLS_REQUIRED, H-06): with auth on, an HTTP request is never refused for want of one."""

from __future__ import annotations

from nsq_protocol.http import HttpExchange
from nsq_protocol.monitors.events import BROKER, JSON, RESPONSE
from nsq_protocol.monitors.monitor import Monitor

HTTP = "HTTP"
AUTH_UNKNOWN = "no IDENTIFY answer of a connection open at the request said whether auth is on"


class HttpWithoutAuth(Monitor):
    """P-AUTH-15: while an IDENTIFY answer of a connection still open says auth_required, no HTTP answer is 401, nor
    a 403 but TLS_REQUIRED's (that connection lived through the request: no restart since, perhaps with auth off)."""

    ITEMS = ("P-AUTH-15",)
    KINDS = frozenset({RESPONSE})

    def __init__(self) -> None:
        super().__init__()
        self._auth_on: list = []  # connections whose IDENTIFY answer said auth_required

    def observe(self, judge, connection, event, answered):
        if answered is not None and answered.name == "IDENTIFY" and event.name == JSON and \
                (event.fields or {}).get("auth_required") is True:
            self._auth_on.append(connection)

    def http_exchange(self, judge, exchange: HttpExchange):
        response = exchange.response
        if response.status not in (401, 403):
            return
        if not any(connection.identified_at is not None and connection.identified_at < exchange.ts
                   and connection.lived_through(exchange.answered) for connection in self._auth_on):
            self.skip("P-AUTH-15", AUTH_UNKNOWN)
            return
        if response.status == 401 or response.message != "TLS_REQUIRED":
            self.report("P-AUTH-15", BROKER, exchange.ts, HTTP, "an answer without any secret (the HTTP API is not "
                        "subject to auth)", f"{response.status} {response.body[:80]!r}", exchange)
