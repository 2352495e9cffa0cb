"""nsqlookupd's TCP protocol "  V1" (L-TCP-* in conformance/spec/nsqlookupd.toml), against --lookupd-target or the
embedded reference nsqlookupd."""

import json

import pytest

from conformance.client import as_read
from conformance.lookupd_client import PRODUCER, V1Connection, identify_command

requirement = pytest.mark.requirement


def expect_fatal_error(lookupd, conn, code: str, text: str) -> None:
    """The error's code is required, its text is nsqlookupd's (soft); every V1 error closes (L-TCP-21)."""
    reply = conn.reply().decode("utf-8", "replace")
    lookupd.verify.equal("error code", code, reply.split(" ")[0])
    lookupd.verify.wording("error text as nsqlookupd words it", f"{code} {text}", reply)
    lookupd.verify.that("the connection closes after the error (L-TCP-21)", conn.closed(), "closed", "open")


def lookup(lookupd, topic: str) -> dict:
    response = lookupd.http.get(f"/lookup?topic={topic}")
    lookupd.verify.equal(f"GET /lookup?topic={topic} status", 200, response.status)
    return response.json()


def producer_ports(document: dict) -> list[int]:
    return sorted(producer["tcp_port"] for producer in document["producers"])


@requirement("NSQLOOKUPD-V1-001")
def test_magic_framing_and_ping(lookupd):
    """(L-TCP-01, -02, -09, -03; rec-0288, rec-0289)"""
    conn = lookupd.connect()
    lookupd.verify.equal("PING before IDENTIFY", b"OK", conn.command(b"PING\n"))
    bad = lookupd.connect(magic=False)
    bad.send(b"  V2")
    lookupd.verify.equal("reply to the magic '  V2'", b"E_BAD_PROTOCOL", bad.reply())
    lookupd.verify.that("closed after E_BAD_PROTOCOL", bad.closed(), "closed", "open")


@requirement("NSQLOOKUPD-V1-002", "NSQLOOKUPD-V1-005")
def test_identify_reply_and_a_second_identify(lookupd):
    """(L-TCP-04, -05, -06; rec-0290, rec-0291)"""
    conn = lookupd.connect()
    reply = conn.identify()
    # a superset is fine: nsqd reads the keys it knows and ignores the rest, as every client does
    lookupd.verify.equal("IDENTIFY reply keys missing", [], sorted(
        {"broadcast_address", "hostname", "http_port", "tcp_port", "version"} - set(reply)), "L-TCP-05")
    lookupd.verify.equal("IDENTIFY reply tcp_port is the lookupd's", lookupd.target.tcp[1], reply["tcp_port"])
    lookupd.verify.equal("IDENTIFY reply http_port is the lookupd's", lookupd.target.http[1], reply["http_port"])
    conn.send(identify_command(PRODUCER))
    expect_fatal_error(lookupd, conn, "E_INVALID", "cannot IDENTIFY again")


@pytest.mark.parametrize("body, text", [
    (json.dumps({**PRODUCER, "version": ""}).encode(), "IDENTIFY missing fields"),
    (json.dumps({**PRODUCER, "tcp_port": 0}).encode(), "IDENTIFY missing fields"),
    (json.dumps({key: value for key, value in PRODUCER.items() if key != "broadcast_address"}).encode(),
     "IDENTIFY missing fields"),
    (b"not json", "IDENTIFY failed to decode JSON body"),
], ids=["no-version", "tcp-port-0", "no-broadcast-address", "not-json"])
@requirement("NSQLOOKUPD-V1-003", "NSQLOOKUPD-V1-005")
def test_bad_identify_bodies(lookupd, body, text):
    """(L-TCP-07; rec-0292..rec-0295)"""
    conn = lookupd.connect()
    conn.send(b"IDENTIFY\n" + len(body).to_bytes(4, "big") + body)
    expect_fatal_error(lookupd, conn, "E_BAD_BODY", text)


@pytest.mark.parametrize("identified, line, code, text", [
    (False, b"REGISTER t c\n", "E_INVALID", "client must IDENTIFY"),
    (False, b"UNREGISTER t\n", "E_INVALID", "client must IDENTIFY"),
    (False, b"FOO\n", "E_INVALID", "invalid command FOO"),
    (False, b"\n", "E_INVALID", "invalid command "),
    (False, b"ping\n", "E_INVALID", "invalid command ping"),
    (True, b"REGISTER\n", "E_INVALID", "REGISTER insufficient number of params"),
    (True, b"UNREGISTER\n", "E_INVALID", "UNREGISTER insufficient number of params"),
    (True, b"REGISTER bad!topic\n", "E_BAD_TOPIC", "REGISTER topic name 'bad!topic' is not valid"),
    (True, b"REGISTER t bad!channel\n", "E_BAD_CHANNEL", "REGISTER channel name 'bad!channel' is not valid"),
], ids=["register-first", "unregister-first", "unknown", "empty-line", "lower-case", "register-no-params",
        "unregister-no-params", "bad-topic", "bad-channel"])
@requirement("NSQLOOKUPD-V1-004", "NSQLOOKUPD-V1-005")
def test_command_errors_are_fatal(lookupd, identified, line, code, text):
    """(L-TCP-08, -10, -11, -21; rec-0296..rec-0306)"""
    conn = lookupd.connect()
    if identified:
        conn.identify()
    conn.send(line)
    expect_fatal_error(lookupd, conn, code, text)


@requirement("NSQLOOKUPD-V1-006", "NSQLOOKUPD-HTTP-002")
def test_register_shows_in_lookup_topics_channels_and_nodes(lookupd):
    """Two producers register a topic's channel (L-TCP-12, L-TCP-18, L-HTTP-04, L-HTTP-05, L-HTTP-06, L-HTTP-07;
    rec-0307, rec-0313)."""
    topic = lookupd.topic()
    first, second = lookupd.connect(), lookupd.connect()
    first.identify()
    second.identify()
    lookupd.verify.equal(f"REGISTER {topic} c", b"OK", first.command(f"REGISTER {topic} c\n".encode()))
    lookupd.verify.equal(f"REGISTER {topic}", b"OK", second.command(f"REGISTER {topic}\n".encode()))
    document = lookup(lookupd, topic)
    lookupd.verify.equal("/lookup channels", ["c"], document["channels"])
    lookupd.verify.equal("/lookup producers' tcp ports", sorted([first.tcp_port, second.tcp_port]),
                         producer_ports(document))
    mine = next((p for p in document["producers"] if p["tcp_port"] == first.tcp_port), {})
    lookupd.verify.equal("/lookup producer fields (L-HTTP-04)",
                         ("127.0.0.1", "conformance", first.http_port, "1.3.0"),
                         (mine.get("broadcast_address"), mine.get("hostname"), mine.get("http_port"),
                          mine.get("version")))
    lookupd.verify.that("/topics lists the topic", topic in lookupd.http.get("/topics").json()["topics"],
                        topic, "missing")
    lookupd.verify.equal("/channels", ["c"], lookupd.http.get(f"/channels?topic={topic}").json()["channels"])
    nodes = {node["tcp_port"]: node for node in lookupd.http.get("/nodes").json()["producers"]}
    node = nodes.get(first.tcp_port, {"topics": [], "tombstones": []})
    lookupd.verify.equal("/nodes: the producer's topics and tombstones", ([topic], [False]),
                         (node["topics"], node["tombstones"]))


@requirement("NSQLOOKUPD-V1-007")
def test_unregister(lookupd):
    """(L-TCP-14, L-TCP-15, L-TCP-16, L-TCP-17; rec-0309..rec-0312)"""
    topic, ephemeral_topic = lookupd.topic(), lookupd.topic() + "#ephemeral"
    conn = lookupd.connect()
    conn.identify()
    for line in (f"REGISTER {topic} c", f"REGISTER {topic} e#ephemeral", f"REGISTER {ephemeral_topic}"):
        lookupd.verify.equal(line, b"OK", conn.command(f"{line}\n".encode()))
    lookupd.verify.equal("UNREGISTER of a channel", b"OK", conn.command(f"UNREGISTER {topic} c\n".encode()))
    lookupd.verify.equal("UNREGISTER of an ephemeral channel", b"OK",
                         conn.command(f"UNREGISTER {topic} e#ephemeral\n".encode()))
    document = lookup(lookupd, topic)
    lookupd.verify.equal("channels after UNREGISTER: the normal one stays, the ephemeral one goes (L-TCP-14)",
                         ["c"], document["channels"])
    lookupd.verify.equal("the topic registration stays (L-TCP-14)", 1, len(document["producers"]))
    lookupd.verify.equal("UNREGISTER of the topic", b"OK", conn.command(f"UNREGISTER {topic}\n".encode()))
    left = {"channels": ["c"], "producers": []}
    lookupd.verify.equal("/lookup after UNREGISTER of the topic (L-TCP-15)", left,
                         as_read(left, lookup(lookupd, topic)))
    lookupd.verify.equal("UNREGISTER of the ephemeral topic", b"OK",
                         conn.command(f"UNREGISTER {ephemeral_topic}\n".encode()))
    if lookupd.has("L-TCP-16"):
        gone = lookupd.http.get(f"/lookup?topic={ephemeral_topic.replace('#', '%23')}")
        lookupd.verify.equal("/lookup of the unregistered ephemeral topic (L-TCP-16)", 404, gone.status, "L-TCP-16")
    lookupd.verify.equal("UNREGISTER of something never registered (L-TCP-17)", b"OK",
                         conn.command(f"UNREGISTER {lookupd.topic()} never\n".encode()))


@requirement("NSQLOOKUPD-V1-008")
def test_a_closed_connection_takes_its_registrations(lookupd):
    """(L-TCP-13; rec-0308)"""
    topic = lookupd.topic()
    conn = lookupd.connect()
    conn.identify()
    conn.command(f"REGISTER {topic} c\n".encode())
    conn.close()
    lookupd.until(lambda: lookup(lookupd, topic)["producers"] == [], 2.0, "the producer is gone")
    left = {"channels": ["c"], "producers": []}
    lookupd.verify.equal("/lookup after the producer disconnected", left, as_read(left, lookup(lookupd, topic)))
    ports = [node["tcp_port"] for node in lookupd.http.get("/nodes").json()["producers"]]
    lookupd.verify.that("/nodes no longer lists it", conn.tcp_port not in ports, "absent", ports)


@requirement("NSQLOOKUPD-V1-010")
def test_command_lines_are_trimmed(lookupd):
    """A PING ending in CRLF and one wrapped in spaces and a tab are answered OK; a REGISTER ending in CRLF registers
    the channel without the CR (L-TCP-20)."""
    topic, conn = lookupd.topic(), lookupd.connect()
    answers = [conn.command(b"PING\r\n"), conn.command(b" \tPING \r\n")]
    conn.identify()
    answers.append(conn.command(f"REGISTER {topic} c\r\n".encode()))
    channels = lookupd.http.get(f"/channels?topic={topic}").json()["channels"]
    lookupd.verify.equal("the answers to 'PING\\r\\n', ' \\tPING \\r\\n' and 'REGISTER t c\\r\\n', then the topic's "
                         "channels (L-TCP-20)", ([b"OK", b"OK", b"OK"], ["c"]), (answers, channels))


@requirement("NSQLOOKUPD-V1-011")
def test_shutdown_closes_producer_connections(lookupd, own_nsqlookupd):
    """A producer identified and registered with an nsqlookupd of the case's own; SIGTERM: its connection is closed
    within 3 s, the lookupd not waiting for it to hang up (L-TCP-22)."""
    topic, conn = lookupd.topic(), V1Connection("L0", own_nsqlookupd.tcp_address, lookupd.transcript,
                                                lookupd.time_scale)
    conn.identify()
    lookupd.verify.equal(f"REGISTER {topic}", b"OK", conn.command(f"REGISTER {topic}\n".encode()))
    own_nsqlookupd.terminate()
    lookupd.verify.that("the producer's connection closed after the SIGTERM (L-TCP-22)", conn.closed(3.0),
                        "closed within 3 s", "still open")
