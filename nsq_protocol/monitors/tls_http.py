"""Plain HTTP under the TLS policy (T-10, T-11, T-16): with --tls-required=true, or a client auth policy that implies
it, nsqd's plain HTTP server answers every request 403 {"message": "TLS_REQUIRED", "https_port": <port>} before any
route (nsqd/http.go ServeHTTP); with --tls-required=tcp-https it serves plain HTTP as usual while TCP needs TLS."""

from __future__ import annotations

import json

from nsq_protocol.monitors.events import BROKER, ERROR
from nsq_protocol.monitors.http_answers import HTTP
from nsq_protocol.monitors.monitor import Monitor
from nsq_protocol.monitors.tls import tls_refusal
from nsq_protocol.monitors.tls_policy import RESTARTED, Shown

REFUSAL = "TLS_REQUIRED"
NOT_SHOWN = "the TLS policy is neither told nor shown yet (no plain HTTP refusal, or TCP refusal and plain answer)"


def https_port(exchange) -> int | None | bool:
    """The HTTPS port of nsqd's TLS_REQUIRED refusal; None: the answer is no such refusal; True: a refusal whose
    body the traffic does not show (HEAD)."""
    if exchange.response.status != 403:
        return None
    if exchange.request.method == "HEAD" and not exchange.response.body:
        return True
    try:
        body = json.loads(exchange.response.body)
    except ValueError:
        return None
    if not isinstance(body, dict) or body.get("message") != REFUSAL:
        return None
    port = body.get("https_port")
    return port if isinstance(port, int) and not isinstance(port, bool) and set(body) == {"message", "https_port"} \
        else None


class PlainHttpPolicy(Monitor):
    """T-10 (T-16 where the judge is told a client auth policy implied it): where plain HTTP requires TLS, every
    plain request answers the refusal with the one HTTPS port; T-11: under tcp-https, none does. Judged against the
    told flags (judge.tls_policy), else against what the broker showed: its first plain refusal shows
    --tls-required=true, a TCP refusal and a plain answer served show tcp-https; consistency holds while a V2
    connection open then stays open (a restart, with other flags perhaps, would have ended it)."""

    ITEMS = ("T-10", "T-11", "T-16")
    KINDS = frozenset({ERROR})

    def __init__(self):
        super().__init__()
        self._refused: Shown | None = None  # plain HTTP refused
        self._served: Shown | None = None  # plain HTTP answered otherwise
        self._tcp_refused: Shown | None = None  # TCP showed TLS required (T-07's refusal)

    def observe(self, judge, connection, event, answered):
        if tls_refusal(event):
            self._tcp_refused = Shown(event.ts, event.describe())

    def http_exchange(self, judge, exchange):
        if exchange.tls:
            return
        port = https_port(exchange)
        told = judge.tls_policy
        if told is not None:
            self._told(told, exchange, port)
            return
        refused, served, tcp = (self._alive(judge, shown, exchange.ts)
                                for shown in (self._refused, self._served, self._tcp_refused))
        if port is None:
            if refused is not None:  # T-10: every plain request refused alike
                self._break("T-10", exchange, f"403 {REFUSAL} as plain HTTP got before ({refused.evidence})")
            else:
                self.skip("T-10", NOT_SHOWN)
            self._served = Shown(exchange.ts, exchange.describe()[:120])
            return
        if served is not None:
            # tcp-https shown (T-11), else the refusal contradicts the plain answer before it (T-10)
            item = "T-11" if tcp is not None else "T-10"
            self._break(item, exchange, f"plain HTTP served as before ({served.evidence})")
        elif refused is not None and port is not True and refused.value not in (None, port):
            self._break("T-10", exchange, f"https_port {refused.value} as before ({refused.evidence})")
        else:
            self.skip("T-11", NOT_SHOWN)
        self._refused = Shown(exchange.ts, exchange.describe()[:120], None if port is True else port)

    def _told(self, told, exchange, port) -> None:
        if told.plain_http_refused:
            item = "T-16" if told.client_auth is not None else "T-10"
            if port is None:
                self._break(item, exchange, f"403 {{\"message\": \"{REFUSAL}\", \"https_port\": <port>}}: "
                            f"--tls-required={told.required or 'true'} (client auth policy {told.client_auth})")
            elif port is not True and self._refused is not None and self._refused.value not in (None, port):
                self._break(item, exchange, f"https_port {self._refused.value} as before")
            if port is not None and port is not True and self._refused is None:
                self._refused = Shown(exchange.ts, exchange.describe()[:120], port)
        elif told.required == "tcp-https" and port is not None:
            self._break("T-11", exchange, "plain HTTP served: --tls-required=tcp-https")
        elif told.required is None:
            self.skip("T-10", "the broker is told not to require TLS")

    def _alive(self, judge, shown: Shown | None, now: float) -> Shown | None:
        """``shown`` while it holds; forgotten when it no longer can."""
        if shown is None or shown.holds(judge, now):
            return shown
        self.skip("T-10", RESTARTED)
        if shown is self._refused:
            self._refused = None
        elif shown is self._served:
            self._served = None
        else:
            self._tcp_refused = None
        return None

    def _break(self, item: str, exchange, expected: str) -> None:
        response = exchange.response
        self.report(item, BROKER, exchange.ts, HTTP, expected, f"{response.status} {response.body[:80]!r}", exchange)
