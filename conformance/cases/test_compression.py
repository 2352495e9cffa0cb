"""Feature upgrades: deflate and snappy (ID-30, ID-31, ID-32, ID-33, ID-34, ID-35 in conformance/spec/identify.toml).
Optional capabilities: UNSUPPORTED when the profile or the IDENTIFY response says the target does not offer them
(ID-21)."""

import pytest

from conformance.client import Unsupported

requirement = pytest.mark.requirement


def compressed_session(nsq, kind: str):
    nsq.require(kind)
    conn = nsq.connect()
    response = conn.identify({"feature_negotiation": True, kind: True})
    if not response.get(kind):
        raise Unsupported(f"the target answered {kind}: false (ID-21)")
    return conn  # identify() switched to the layer and read the upgrade's OK (ID-30)


@requirement("NSQ-COMP-001")
def test_deflate_session(nsq):
    """SUB, PUB, RDY, message and FIN all through raw DEFLATE (ID-30, ID-33; rec-0081, rec-0086)."""
    topic = nsq.topic()
    conn = compressed_session(nsq, "deflate")
    body = (b"deflated body " * 20)[:min(280, nsq.limits["max_msg_size"])]
    conn.subscribe(topic, "c")
    conn.publish(topic, body)
    conn.command("RDY", 1)
    message = conn.expect_message(body, attempts=1)
    conn.command("FIN", message.id_text)
    conn.expect_silence(0.3)


@requirement("NSQ-COMP-002")
def test_snappy_session(nsq):
    """The OK is snappy-framed; a compressible and a binary message round-trip (ID-34; rec-0087)."""
    topic = nsq.topic()
    conn = compressed_session(nsq, "snappy")
    size = min(2000, nsq.limits["max_msg_size"])
    conn.subscribe(topic, "c")
    conn.publish(topic, b"s" * size)
    conn.command("RDY", 1)
    first = conn.expect_message(b"s" * size, attempts=1)
    binary = bytes(range(256))[:size]
    conn.publish(topic, binary)
    conn.command("FIN", first.id_text)
    second = conn.expect_message(binary, attempts=1)
    conn.command("FIN", second.id_text)
    conn.expect_silence(0.3)


@requirement("NSQ-COMP-001", "NSQ-ID-001")
def test_compression_not_offered_comes_back_false(nsq):
    """When the profile says a compression is off, IDENTIFY reports it false and nothing is upgraded
    (ID-21; rec-0247). With both offered, the negotiated response must say true."""
    conn = nsq.connect()
    for kind in ("deflate", "snappy"):
        response = nsq.connect().identify({"feature_negotiation": True, kind: True})
        nsq.verify.equal(f"{kind} in the IDENTIFY response", nsq.profile.capabilities[kind], response[kind])
    conn.publish(nsq.topic(), b"plain")


@requirement("NSQ-COMP-003")
def test_tls_session(nsq):
    """tls_v1 (and deflate when offered): handshake, OK over TLS, then the deflated OK; a message
    round-trips (ID-30, ID-31; TestTLS/TestTLSDeflate, not recorded: the recordings have no certificate)."""
    nsq.require("tls")
    topic = nsq.topic()
    conn = nsq.connect()
    fields = {"feature_negotiation": True, "tls_v1": True, "deflate": nsq.profile.capabilities["deflate"]}
    response = conn.identify(fields)  # the TLS and compression OKs are read inside identify()
    nsq.verify.equal("tls_v1 in the IDENTIFY response", True, response["tls_v1"])
    conn.subscribe(topic, "c", ready=1)
    conn.publish(topic, b"secret")
    conn.expect_message(b"secret", attempts=1)
