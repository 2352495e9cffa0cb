"""TLS on a server with a certificate (nsqd-behavior.md section 11): profile nsqd-tls, whose embedded broker
has the suite's test certificates; for a target started by the user, a profile with the `tls` capability and
--https-target (and --tls-ca to verify its certificate)."""

import json
import socket
import ssl

import pytest

requirement = pytest.mark.requirement


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
    conn = nsq.connect()
    response = conn.identify({"feature_negotiation": True, "tls_v1": True, "snappy": True})
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
    secure, plain = nsq.connect(), nsq.connect()
    secure.identify({"feature_negotiation": True, "tls_v1": True, "client_id": "secure"})
    plain.identify({"feature_negotiation": True, "client_id": "plain"})
    secure.subscribe(topic, "c")
    plain.subscribe(topic, "c")

    def clients():
        channel = nsq.http.channel_stats(topic, "c") or {"clients": []}
        return {client["client_id"]: client for client in channel["clients"]}

    nsq.until(lambda: len(clients()) == 2, 2.0, "both clients are in /stats")
    found = clients()
    tls, no_tls = found.get("secure", {}), found.get("plain", {})
    nsq.verify.equal("(tls, tls_version in TLS1.2/TLS1.3, tls_negotiated_protocol) of the TLS client",
                     (True, True, ""), (tls.get("tls"), tls.get("tls_version") in ("TLS1.2", "TLS1.3"),
                                        tls.get("tls_negotiated_protocol")))
    nsq.verify.equal("(tls, tls_version) of the plaintext client", (False, ""),
                     (no_tls.get("tls"), no_tls.get("tls_version")))


@requirement("NSQ-TLS-004")
def test_https_serves_the_api(nsq):
    """(T-06; rec-0347)"""
    nsq.require("tls")
    nsq.require("http")
    if nsq.target.https is None:
        pytest.skip("no HTTPS address (--https-target)")
    context = ssl.create_default_context(cafile=nsq.target.tls_ca)
    context.check_hostname = False
    if nsq.target.tls_ca is None:
        context.verify_mode = ssl.CERT_NONE
    replies = {}
    for path in ("/ping", "/info"):
        nsq.transcript.note(f"HTTPS GET {path}")
        with context.wrap_socket(socket.create_connection(nsq.target.https, timeout=5)) as tls:
            tls.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
            data = b""
            while chunk := tls.recv(65536):
                data += chunk
        replies[path] = data
    head, _, body = replies["/ping"].partition(b"\r\n\r\n")
    nsq.verify.equal("HTTPS /ping", (b"HTTP/1.1 200 OK", b"OK"), (head.split(b"\r\n")[0], body))
    info = replies["/info"].partition(b"\r\n\r\n")[2]
    nsq.verify.that("HTTPS /info is nsqd's JSON", b"version" in info and json.loads(info).get("version"),
                    "a version", info[:200])
    plain = nsq.http.get("/ping")
    nsq.verify.equal("plain HTTP /ping still works", (200, b"OK"), (plain.status, plain.body))
