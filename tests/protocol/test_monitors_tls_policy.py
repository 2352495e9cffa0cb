"""The TLS policy as the traffic shows it (tls_http.py; tls_handshake.py): plain HTTP refused or served as the broker's
--tls-required says (told, or shown by its first answers), and the plain records of the TLS handshake against
--tls-min-version and the client auth policy."""

from __future__ import annotations

from nsq_protocol import monitors, wire
from nsq_protocol.http import HttpExchange, Request, Response
from nsq_protocol.monitors import TlsPolicy
from nsq_protocol.monitors.tls_http import NOT_SHOWN, RESTARTED, PlainHttpPolicy

T0 = 1_800_000_000.0
JSON = {"x-nsq-content-type": "nsq; version=1.0", "content-type": "application/json; charset=utf-8"}
REFUSED = Response(403, b'{"message": "TLS_REQUIRED", "https_port": 4152}', JSON)
OTHER_PORT = Response(403, b'{"message": "TLS_REQUIRED", "https_port": 4999}', JSON)
SERVED = Response(200, b"OK", {"x-nsq-content-type": "nsq; version=1.0"})
TCP_REFUSAL = b"E_INVALID cannot PUB in current state (TLS required)"


class Traffic:
    def __init__(self, *watching, told: TlsPolicy | None = None):
        self.judge = monitors.Judge([monitor() for monitor in watching], timing=True, http_seen=True, tls_policy=told)

    def connect(self, name: str, at: float) -> Traffic:
        self.judge.open(name, T0 + at, True)
        return self

    def close(self, name: str, at: float) -> Traffic:
        self.judge.close(name, T0 + at, monitors.BROKER)
        return self

    def http(self, at: float, response: Response, path: str = "/ping", method: str = "GET", tls: bool = False
             ) -> Traffic:
        self.judge.http_exchange(HttpExchange(T0 + at, Request(method, path, b""), response, T0 + at, tls))
        return self

    def tcp_refused(self, at: float, name: str) -> Traffic:
        self.judge.observe(name, monitors.from_command(T0 + at, wire.Command(b"PUB", (b"t",), b"x")))
        self.judge.observe(name, monitors.from_frame(T0 + at, wire.Frame(wire.FRAME_ERROR, TCP_REFUSAL)))
        return self

    def named(self) -> set[tuple[str, str]]:
        return {(v.item, v.side) for v in self.judge.finish(T0 + 100)}


# ---- T-10, T-11, T-16: plain HTTP --------------------------------------------------------------------------

def test_plain_http_refused_alike_once_shown():
    kept = Traffic(PlainHttpPolicy).connect("A", 0).http(1, REFUSED).http(2, REFUSED, "/nope") \
        .http(3, REFUSED, "/pub?topic=t", "POST").http(4, SERVED, tls=True)  # HTTPS serves
    assert kept.named() == set()
    broken = Traffic(PlainHttpPolicy).connect("A", 0).http(1, REFUSED).http(2, SERVED, "/pub?topic=t", "POST")
    assert broken.named() == {("T-10", "broker")}
    moved = Traffic(PlainHttpPolicy).connect("A", 0).http(1, REFUSED).http(2, OTHER_PORT)
    assert moved.named() == {("T-10", "broker")}


def test_plain_http_policy_not_judged_before_it_shows_or_after_a_possible_restart():
    unshown = Traffic(PlainHttpPolicy).connect("A", 0).http(1, SERVED)
    assert unshown.named() == set()
    assert unshown.judge.not_judged["T-10", NOT_SHOWN] == 1
    restarted = Traffic(PlainHttpPolicy).connect("A", 0).http(1, REFUSED).close("A", 2).connect("B", 3) \
        .http(4, SERVED)  # no connection lived through: the broker may have restarted without --tls-required
    assert restarted.named() == set()
    assert restarted.judge.not_judged["T-10", RESTARTED] == 1


def test_tcp_https_shown_keeps_plain_http_served():
    kept = Traffic(PlainHttpPolicy).connect("A", 0).connect("B", 0).tcp_refused(1, "B").http(2, SERVED) \
        .http(3, SERVED, "/stats")
    assert kept.named() == set()
    broken = Traffic(PlainHttpPolicy).connect("A", 0).connect("B", 0).tcp_refused(1, "B").http(2, SERVED) \
        .http(3, REFUSED)
    assert broken.named() == {("T-11", "broker")}
    untold = Traffic(PlainHttpPolicy).connect("A", 0).http(1, REFUSED)  # nothing served before: no contradiction
    assert untold.named() == set()
    assert untold.judge.not_judged["T-11", NOT_SHOWN] == 1


def test_told_policy_judges_every_plain_request():
    required = TlsPolicy("true")
    assert Traffic(PlainHttpPolicy, told=required).http(1, REFUSED).http(2, REFUSED, "/x", "HEAD").named() == set()
    assert Traffic(PlainHttpPolicy, told=required).http(1, SERVED).named() == {("T-10", "broker")}
    implied = TlsPolicy(client_auth="require")  # T-12: the policy alone requires TLS on HTTP too
    assert implied.plain_http_refused
    assert Traffic(PlainHttpPolicy, told=implied).http(1, SERVED).named() == {("T-16", "broker")}
    tcp_https = TlsPolicy("tcp-https", "require")
    assert Traffic(PlainHttpPolicy, told=tcp_https).http(1, SERVED).named() == set()
    assert Traffic(PlainHttpPolicy, told=tcp_https).http(1, REFUSED).named() == {("T-11", "broker")}
    untold = Traffic(PlainHttpPolicy, told=TlsPolicy()).http(1, SERVED)
    assert untold.named() == set()
    assert untold.judge.not_judged["T-10", "the broker is told not to require TLS"] == 1


def test_policy_of_a_profile():
    assert TlsPolicy.of({"tls_required": "true", "tls_client_auth": "require-verify", "tls_min_version": "tls1.3"}) \
        == TlsPolicy("true", "require-verify", "tls1.3")
    assert TlsPolicy.of({}) == TlsPolicy()


def test_told_policy_judges_plain_tcp_from_the_first_connection():
    from nsq_protocol.monitors.tls import TlsRequired
    refused = Traffic(TlsRequired, told=TlsPolicy("tcp-https")).connect("A", 0).tcp_refused(1, "A")
    assert refused.named() == set()
    served = Traffic(TlsRequired, told=TlsPolicy(client_auth="require")).connect("A", 0)
    served.judge.observe("A", monitors.from_command(T0 + 1, wire.Command(b"PUB", (b"t",), b"x")))
    served.judge.observe("A", monitors.from_frame(T0 + 1, wire.Frame(wire.FRAME_RESPONSE, b"OK")))
    assert served.named() == {("T-07", "broker")}
    untold = Traffic(TlsRequired).connect("A", 0)
    untold.judge.observe("A", monitors.from_command(T0 + 1, wire.Command(b"NOP", ())))
    assert untold.named() == set()
    assert untold.judge.not_judged["T-07", "no TLS-required refusal (the broker's flag) while the connection was "
                                           "open"] == 1
