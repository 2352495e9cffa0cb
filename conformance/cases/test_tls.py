"""TLS on a server with a certificate (T-01, T-02, T-03, T-04, T-05, T-06, T-07, T-08, T-09, T-10, T-11, T-12, T-13,
T-14, T-15, T-16, T-17 in conformance/spec/tls.toml). Profile nsqd-tls: the embedded broker with the suite's test
certificates; nsqd-tls-required and nsqd-tls-client-cert add --tls-required, the client auth policies and
--tls-min-version. For a target started by the user: a profile with the `tls` capability (and `tls_required`,
`tls_client_auth`, `tls_min_version` as its flags say), --https-target, --tls-ca to verify its certificate and
--tls-client-cert for the certificate its policy asks for. The refused certificate of NSQ-TLS-011, NSQ-TLS-012 is the
suite's own, from a CA of its own (tls/other-client.pem), unrelated to any CA of the target."""

import dataclasses
import ssl
import time

import pytest

from conformance.client import HttpClient, TlsClient, as_read, json_of_type
from conformance.target import TLS_DIR

requirement = pytest.mark.requirement
UPGRADE = {"feature_negotiation": True, "tls_v1": True}
TLS13_SUITE_IDS = {"TLS_AES_128_GCM_SHA256": 0x1301, "TLS_AES_256_GCM_SHA384": 0x1302,
                   "TLS_CHACHA20_POLY1305_SHA256": 0x1303}


def https(nsq, tls=None) -> HttpClient:
    """The target's HTTPS API, the suite presenting ``tls`` (default: --tls-ca and --tls-client-cert)."""
    if nsq.target.https is None:
        pytest.skip("no HTTPS address (--https-target)")
    return HttpClient(nsq.target.https, nsq.transcript, nsq.time_scale, tls=tls or nsq.target.tls, monitored=True)


def unrelated_client(nsq):
    """The suite's test client certificate from a CA of its own, which no target trusts (T-13, T-15)."""
    return dataclasses.replace(nsq.target.tls, certificate=str(TLS_DIR / "other-client.pem"),
                               key=str(TLS_DIR / "other-client.key"))


def works_inside_tls(nsq, conn, topic: str) -> None:
    conn.publish(topic, b"inside tls")
    conn.subscribe(topic, "c", ready=1)
    message = conn.expect_message(b"inside tls", attempts=1)
    conn.command("FIN", message.id_text)
    conn.expect_silence(0.2, "FIN of the delivered message is silent")


@requirement("NSQ-TLS-001")
def test_a_client_that_does_not_ask_stays_plaintext(nsq):
    """(T-05; rec-0346)"""
    nsq.require("tls")
    conn = nsq.connect()
    response = conn.identify({"feature_negotiation": True})
    nsq.verify.equal("tls_v1 in the IDENTIFY response", False, response["tls_v1"])
    conn.publish(nsq.topic(), b"plain")


@requirement("NSQ-TLS-002")
def test_tls_then_snappy_inside_it(nsq):
    """(T-02, ID-30; rec-0343)"""
    nsq.require("tls")
    nsq.require("snappy")
    topic = nsq.topic()
    conn = nsq.connect(tls=nsq.target.tls)
    response = conn.identify({**UPGRADE, "snappy": True})
    nsq.verify.equal("(tls_v1, snappy) in the IDENTIFY response", (True, True),
                     (response["tls_v1"], response["snappy"]))
    conn.subscribe(topic, "c", ready=1)
    conn.publish(topic, b"inside tls and snappy")
    conn.expect_message(b"inside tls and snappy", attempts=1)


@requirement("NSQ-TLS-003")
def test_stats_show_the_tls_client(nsq):
    """(T-04; rec-0345)"""
    nsq.require("tls")
    nsq.require("http")
    topic = nsq.topic()
    secure = nsq.connect(tls=nsq.target.tls)
    secure.identify({**UPGRADE, "client_id": "secure"})
    secure.subscribe(topic, "c")
    plain = None if nsq.target.requires_tls("tcp") else nsq.connect()  # T-07: no plain client to compare
    if plain:
        plain.identify({"feature_negotiation": True, "client_id": "plain"})
        plain.subscribe(topic, "c")

    def clients():
        channel = nsq.http.channel_stats(topic, "c") or {"clients": []}
        return {client["client_id"]: client for client in channel["clients"]}

    expected = {"secure", "plain"} if plain else {"secure"}
    nsq.until(lambda: set(clients()) == expected, 2.0, f"the clients {sorted(expected)} are in /stats")
    found = clients()
    tls = found.get("secure", {})
    nsq.verify.equal("(tls, tls_version in TLS1.2/TLS1.3, tls_negotiated_protocol) of the TLS client",
                     (True, True, ""), (tls.get("tls"), tls.get("tls_version") in ("TLS1.2", "TLS1.3"),
                                        tls.get("tls_negotiated_protocol")))
    cipher, version, _ = secure.sock.cipher()
    if version == "TLSv1.3":
        nsq.verify.soft_equal("the TLS 1.3 suite the broker picks from the client's (T-01: Go's preference)",
                              "TLS_AES_128_GCM_SHA256", cipher)
        nsq.verify.soft_equal("(tls_cipher_suite, tls_negotiated_protocol_is_mutual) in /stats: the suite by Go's "
                              "name, which go1.19 lacks for TLS 1.3 ones (T-04)",
                              ({f"Unknown {TLS13_SUITE_IDS.get(cipher)}", cipher}, True),
                              ({f"Unknown {TLS13_SUITE_IDS.get(cipher)}", cipher} | {tls.get("tls_cipher_suite")},
                               tls.get("tls_negotiated_protocol_is_mutual")))
    if plain:
        no_tls = found.get("plain", {})
        nsq.verify.equal("(tls, tls_version) of the plaintext client", (False, ""),
                         (no_tls.get("tls"), no_tls.get("tls_version")))


@requirement("NSQ-TLS-004")
def test_https_serves_the_api(nsq):
    """(T-06; rec-0347)"""
    nsq.require("tls")
    api = https(nsq)
    ping = api.get("/ping")
    nsq.verify.equal("HTTPS /ping", (200, b"OK"), (ping.status, ping.body))
    info = api.get("/info")
    nsq.verify.that("HTTPS /info is nsqd's JSON", info.status == 200 and json_of_type(
        info.json(), dict, "the body of HTTPS GET /info").get("version"), "a version", info.body[:200])
    if not nsq.target.requires_tls("http"):
        plain = nsq.http.get("/ping")
        nsq.verify.equal("plain HTTP /ping still works", (200, b"OK"), (plain.status, plain.body))


@requirement("NSQ-TLS-005")
def test_commands_before_the_upgrade_are_refused(nsq):
    """(T-07, T-11, T-12, P-G-01; rec-0348, rec-0349, rec-0353, rec-0355)"""
    nsq.require("tls_required")
    topic = nsq.topic()
    for command, body in (("PUB", b"x"), ("NOP", None)):
        conn = nsq.connect(tls=nsq.target.tls)
        conn.command(command, *([topic] if body else []), body=body)
        conn.expect_error("E_INVALID", f"cannot {command} in current state (TLS required)")


@requirement("NSQ-TLS-006")
def test_identify_without_tls_does_not_lift_the_requirement(nsq):
    """(T-08, ID-20; rec-0350)"""
    nsq.require("tls_required")
    conn = nsq.connect(tls=nsq.target.tls)
    response = conn.identify({"feature_negotiation": True})
    nsq.verify.equal("tls_v1 in the IDENTIFY response", False, response["tls_v1"])
    conn.command("SUB", nsq.topic(), "c")
    conn.expect_error("E_INVALID", "cannot SUB in current state (TLS required)")


@requirement("NSQ-TLS-007")
def test_the_protocol_goes_on_inside_tls(nsq):
    """(T-01, T-09, T-12, T-14, ID-31; rec-0342, rec-0351, rec-0355, rec-0357)"""
    nsq.require("tls")
    conn = nsq.connect(tls=nsq.target.tls)
    response = conn.identify(UPGRADE)
    nsq.verify.equal("tls_v1 in the IDENTIFY response", True, response["tls_v1"])
    works_inside_tls(nsq, conn, nsq.topic())


@requirement("NSQ-TLS-008")
def test_plain_http_is_refused_with_the_https_port(nsq):
    """(T-10, T-16, H-06; rec-0352, rec-0359)"""
    nsq.require("tls_required", "true")
    api = https(nsq)
    if nsq.target.http is None:
        pytest.skip("no HTTP address (--http-target)")
    plain = HttpClient(nsq.target.http, nsq.transcript, nsq.time_scale, monitored=True)
    topic = nsq.topic()
    for method, path in (("GET", "/ping"), ("GET", "/nope"), ("POST", f"/pub?topic={topic}")):
        answer = plain.request(method, path, b"x" if method == "POST" else None)
        nsq.verify.equal(f"plain HTTP {method} {path}: status", 403, answer.status)
        refusal = {"message": "TLS_REQUIRED", "https_port": nsq.target.https[1]}
        nsq.verify.equal(f"plain HTTP {method} {path}: body", refusal, as_read(refusal, answer.json()))
    ping, pub = api.get("/ping"), api.post(f"/pub?topic={topic}", b"x")
    nsq.verify.equal("HTTPS /ping and /pub", [(200, b"OK"), (200, b"OK")],
                     [(ping.status, ping.body), (pub.status, pub.body)])
    nsq.verify.equal("HTTPS /topic/delete", 200, api.post(f"/topic/delete?topic={topic}").status)


@requirement("NSQ-TLS-009")
def test_tcp_https_leaves_plain_http_open(nsq):
    """(T-11, H-06; rec-0353)"""
    nsq.require("tls_required", "tcp-https")
    ping = nsq.http.get("/ping")
    nsq.verify.equal("plain HTTP /ping", (200, b"OK"), (ping.status, ping.body))
    conn = nsq.connect(tls=nsq.target.tls)
    conn.command("PUB", nsq.topic(), body=b"x")
    conn.expect_error("E_INVALID", "cannot PUB in current state (TLS required)")


@requirement("NSQ-TLS-010")
def test_a_client_without_a_certificate_is_refused(nsq):
    """(T-12, ID-32; rec-0354)"""
    nsq.require("tls_client_auth")
    conn = nsq.connect(tls=dataclasses.replace(nsq.target.tls, certificate=None, key=None))
    response = conn.identify(UPGRADE, upgrade=False)
    nsq.verify.equal("tls_v1 in the IDENTIFY response", True, response["tls_v1"])
    conn.expect_tls_refused("a client without a certificate is refused (T-12)")


@requirement("NSQ-TLS-011")
def test_require_accepts_any_certificate(nsq):
    """(T-13; rec-0356)"""
    nsq.require("tls_client_auth", "require")
    conn = nsq.connect(tls=unrelated_client(nsq))
    conn.identify(UPGRADE)
    works_inside_tls(nsq, conn, nsq.topic())


@requirement("NSQ-TLS-012")
def test_require_verify_refuses_a_certificate_of_another_ca(nsq):
    """(T-15, ID-32; rec-0358)"""
    nsq.require("tls_client_auth", "require-verify")
    conn = nsq.connect(tls=unrelated_client(nsq))
    conn.identify(UPGRADE, upgrade=False)
    conn.expect_tls_refused("a certificate from another CA is refused (T-15)")


@requirement("NSQ-TLS-014")
def test_the_auth_server_is_told_the_certificates_common_name(nsq):
    """Any client certificate accepted, and an auth server: a client with the certificate of CN other-client
    upgrades, then AUTHs; nsqd's query to the auth server says tls=true and common_name=other-client (P-AUTH-13,
    T-13)."""
    nsq.require("tls_client_auth", "require")
    nsq.require("auth")
    secret = f"all-{nsq.name_prefix}"  # the fake auth server allows it all and keeps its queries apart
    conn = nsq.connect(tls=unrelated_client(nsq), authenticate=False)
    conn.identify(UPGRADE)
    conn.command("AUTH", body=secret.encode())
    conn.expect_json_response()
    nsq.verify.equal("the auth server's queries for the AUTH: tls and common_name (P-AUTH-13)",
                     [{"tls": "true", "common_name": "other-client"}],
                     [{key: query.get(key) for key in ("tls", "common_name")} for query in nsq.auth_queries(secret)])


@requirement("NSQ-TLS-013")
def test_a_client_below_the_minimum_version_is_refused(nsq):
    """(T-17, ID-32; rec-0360)"""
    nsq.require("tls_min_version", "tls1.3")
    old = nsq.connect(tls=dataclasses.replace(nsq.target.tls, maximum_version=ssl.TLSVersion.TLSv1_2))
    old.identify(UPGRADE, upgrade=False)
    old.expect_tls_refused("a TLS 1.2 client is refused at the handshake (T-17)")
    current = nsq.connect(tls=nsq.target.tls)
    current.identify(UPGRADE)
    works_inside_tls(nsq, current, nsq.topic())


@dataclasses.dataclass(frozen=True)
class OneSuite(TlsClient):
    """A TLS 1.2 client that offers one cipher suite (OpenSSL's name)."""
    suite: str = ""

    def context(self) -> ssl.SSLContext:
        context = super().context()
        context.set_ciphers(self.suite)
        return context


# OpenSSL's name -> what nsqd's /stats calls it: Go's name for the suites nsqd's prettyConnectionState names,
# "Unknown <id>" for any other (T-04)
TLS12_SUITES = {"AES128-SHA": "TLS_RSA_WITH_AES_128_CBC_SHA", "AES256-SHA": "TLS_RSA_WITH_AES_256_CBC_SHA",
                "ECDHE-RSA-AES128-SHA": "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
                "ECDHE-RSA-AES256-SHA": "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
                "ECDHE-RSA-AES128-GCM-SHA256": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
                "ECDHE-RSA-AES256-GCM-SHA384": f"Unknown {0xC030}"}


@requirement("NSQ-TLS-003")
def test_stats_name_each_tls12_cipher_suite(nsq):
    """A TLS 1.2 client per suite the broker offers with an RSA certificate: /stats names each as nsqd does (T-04)."""
    nsq.require("tls")
    nsq.require("http")
    if nsq.profile.capabilities.get("tls_min_version") == "tls1.3":
        pytest.skip(f"profile {nsq.profile.name}: the target refuses TLS 1.2 (T-17)")
    topic = nsq.topic()
    for suite in TLS12_SUITES:
        offer = {**dataclasses.asdict(nsq.target.tls), "maximum_version": ssl.TLSVersion.TLSv1_2}
        conn = nsq.connect(tls=OneSuite(**offer, suite=suite))
        conn.identify({**UPGRADE, "client_id": suite})
        conn.subscribe(topic, "c")

    def named() -> dict:
        channel = nsq.http.channel_stats(topic, "c") or {"clients": []}
        return {client["client_id"]: client.get("tls_cipher_suite") for client in channel["clients"]}

    nsq.until(lambda: set(named()) == set(TLS12_SUITES), 2.0, "every client is in /stats")
    nsq.verify.soft_equal("tls_cipher_suite of each TLS 1.2 client (T-04)", TLS12_SUITES, named())


@pytest.mark.long_wait(6)
@requirement("NSQ-TLS-007")
def test_a_client_that_never_starts_the_handshake_is_closed_after_5_s(nsq):
    """IDENTIFY with tls_v1, then silence: the broker gives the handshake 5 s, then closes (ID-31)."""
    nsq.require("tls")
    conn = nsq.connect(tls=nsq.target.tls)
    conn.identify(UPGRADE, upgrade=False)
    started = time.monotonic()
    conn.sock.settimeout(nsq.seconds(10))
    try:
        while conn.sock.recv(4096):  # its plaintext E_IDENTIFY_FAILED may come before the close (ID-31)
            pass
    except OSError:
        pass
    nsq.within("the broker closes a connection whose TLS handshake never began (ID-31: a 5 s deadline)",
               nsq.elapsed_since(started), 4.5, 5.8)
