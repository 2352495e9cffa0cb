"""nsqlookupd's HTTP API (L-HTTP-* in conformance/spec/nsqlookupd.toml), against --lookupd-http-target or the embedded
reference nsqlookupd."""

import pytest

from conformance.client import HttpClient, as_read

requirement = pytest.mark.requirement
NSQ_CONTENT_TYPE = "nsq; version=1.0"


def expect(lookupd, response, status: int, message: str | None = None) -> None:
    """Status and JSON error code; every request has a connection of its own, so a difference is recorded and the
    case goes on to its other requests."""
    with lookupd.verify.soft():
        lookupd.verify.equal("HTTP status", status, response.status)
    if message is not None:
        with lookupd.verify.soft():
            error = {"message": message}
            lookupd.verify.equal("HTTP error body", error, as_read(error, response.json()))


@requirement("NSQLOOKUPD-HTTP-001")
def test_ping_info_and_lookup_errors(lookupd):
    """(L-HTTP-01, -02, -04, -06; rec-0314, rec-0316, rec-0317)"""
    ping = lookupd.http.get("/ping")
    lookupd.verify.equal("GET /ping", (200, b"OK"), (ping.status, ping.body))
    info = lookupd.http.get("/info")
    lookupd.verify.equal("GET /info status", 200, info.status)
    lookupd.verify.that("GET /info has a version", isinstance(info.json()["version"], str), "a string",
                        info.body)
    expect(lookupd, lookupd.http.get("/lookup"), 400, "MISSING_ARG_TOPIC")
    expect(lookupd, lookupd.http.get(f"/lookup?topic={lookupd.topic()}"), 404, "TOPIC_NOT_FOUND")
    expect(lookupd, lookupd.http.get("/channels"), 400, "MISSING_ARG_TOPIC")
    unknown = lookupd.http.get(f"/channels?topic={lookupd.topic()}")
    none = {"channels": []}
    lookupd.verify.equal("/channels of an unknown topic", (200, none), (unknown.status, as_read(none, unknown.json())))


@requirement("NSQLOOKUPD-HTTP-003")
def test_create_and_delete(lookupd):
    """(L-HTTP-08, L-HTTP-09, L-HTTP-10, L-HTTP-11; rec-0318..rec-0321)"""
    http, topic = lookupd.http, lookupd.topic()
    expect(lookupd, http.post("/topic/create"), 400, "MISSING_ARG_TOPIC")
    expect(lookupd, http.post("/topic/create?topic=bad!name"), 400, "INVALID_ARG_TOPIC")
    expect(lookupd, http.post(f"/channel/create?topic={topic}"), 400, "MISSING_ARG_CHANNEL")
    expect(lookupd, http.post(f"/channel/create?topic={topic}&channel=bad!name"), 400, "INVALID_ARG_CHANNEL")
    expect(lookupd, http.post(f"/channel/create?topic={topic}&channel=c"), 200)
    created = {"channels": ["c"], "producers": []}
    lookupd.verify.equal("/lookup after /channel/create: the topic too, no producers", created,
                         as_read(created, http.get(f"/lookup?topic={topic}").json()))
    expect(lookupd, http.post(f"/channel/delete?topic={topic}&channel=other"), 404, "CHANNEL_NOT_FOUND")
    expect(lookupd, http.post(f"/channel/delete?topic={topic}&channel=c"), 200)
    lookupd.verify.equal("/channels after /channel/delete", [],
                         http.get(f"/channels?topic={topic}").json()["channels"])
    conn = lookupd.connect()
    conn.identify()
    conn.command(f"REGISTER {topic} d\n".encode())
    expect(lookupd, http.post(f"/topic/delete?topic={topic}"), 200)
    expect(lookupd, http.get(f"/lookup?topic={topic}"), 404, "TOPIC_NOT_FOUND")
    lookupd.verify.equal("/channels after /topic/delete", [], http.get(f"/channels?topic={topic}").json()["channels"])
    expect(lookupd, http.post(f"/topic/delete?topic={lookupd.topic()}"), 200)


@requirement("NSQLOOKUPD-HTTP-004")
def test_tombstone_hides_a_producer_of_one_topic(lookupd):
    """(L-HTTP-12; rec-0322)"""
    http, tombstoned, other = lookupd.http, lookupd.topic(), lookupd.topic()
    conn = lookupd.connect()
    conn.identify()
    for topic in (tombstoned, other):
        conn.command(f"REGISTER {topic}\n".encode())
    expect(lookupd, http.post("/topic/tombstone"), 400, "MISSING_ARG_TOPIC")
    expect(lookupd, http.post(f"/topic/tombstone?topic={tombstoned}"), 400, "MISSING_ARG_NODE")
    expect(lookupd, http.post(f"/topic/tombstone?topic={tombstoned}&node=127.0.0.1:{conn.http_port}"), 200)
    lookupd.verify.equal("/lookup of the tombstoned topic", [], http.get(f"/lookup?topic={tombstoned}").json()[
        "producers"])
    lookupd.verify.equal("/lookup of the other topic", [conn.tcp_port],
                         [p["tcp_port"] for p in http.get(f"/lookup?topic={other}").json()["producers"]])
    node = next((n for n in http.get("/nodes").json()["producers"] if n["tcp_port"] == conn.tcp_port), None)
    flags = dict(zip(node["topics"], node["tombstones"], strict=False)) if node else {}
    lookupd.verify.equal("/nodes tombstone flags", {tombstoned: True, other: False}, flags)


@requirement("NSQLOOKUPD-HTTP-005")
def test_unknown_paths_and_methods(lookupd):
    """(L-HTTP-14, -15; rec-0324, rec-0325)"""
    expect(lookupd, lookupd.http.get("/nope"), 404, "NOT_FOUND")
    wrong = lookupd.http.get("/topic/create")
    expect(lookupd, wrong, 405, "METHOD_NOT_ALLOWED")
    if lookupd.has("L-HTTP-20"):
        lookupd.verify.equal("Allow of /topic/create", "OPTIONS, POST", wrong.headers.get("allow"), "L-HTTP-20")
    for path in ("/create_topic", "/delete_topic"):
        expect(lookupd, lookupd.http.get(f"{path}?topic=x"), 404, "NOT_FOUND")


@requirement("NSQLOOKUPD-HTTP-003")
def test_topic_create_registers_a_topic_without_producers(lookupd):
    """POST /topic/create?topic=T: an empty 200; /topics then lists T and /lookup?topic=T answers it with no
    channels and no producers (L-HTTP-08; rec-0318)."""
    topic = lookupd.topic()
    created = lookupd.http.post(f"/topic/create?topic={topic}")
    listed = topic in lookupd.http.get("/topics").json()["topics"]
    lookup = lookupd.http.get(f"/lookup?topic={topic}")
    lookupd.verify.equal("(status, body) of /topic/create, T in /topics, (status, document) of /lookup (L-HTTP-08)",
                         ((200, b""), True, (200, {"channels": [], "producers": []})),
                         ((created.status, created.body), listed, (lookup.status, lookup.json())))


@requirement("NSQLOOKUPD-HTTP-008")
def test_profiling_pages(lookupd):
    """GET /debug/pprof answers Go's profile index (at that path, without nsqd's trailing slash), and
    /debug/pprof/goroutine?debug=1 a profile (L-HTTP-18)."""
    index, goroutines = lookupd.http.get("/debug/pprof"), lookupd.http.get("/debug/pprof/goroutine?debug=1")
    lookupd.verify.equal("(GET /debug/pprof status, it lists goroutine, GET /debug/pprof/goroutine?debug=1 status) "
                         "(L-HTTP-18)", (200, True, 200), (index.status, b"goroutine" in index.body, goroutines.status))


@requirement("NSQLOOKUPD-HTTP-009")
def test_a_fresh_nsqlookupd_knows_nothing(lookupd, own_nsqlookupd):
    """An nsqlookupd no case has used answers /topics with no topics, /nodes with no producers and /debug with an
    empty object (L-HTTP-03; rec-0315)."""
    fresh = HttpClient(own_nsqlookupd.http_address, lookupd.transcript, lookupd.time_scale)
    answers = [(response.status, response.json()) for response in map(fresh.get, ("/topics", "/nodes", "/debug"))]
    lookupd.verify.equal("(status, document) of /topics, /nodes, /debug (L-HTTP-03)",
                         [(200, {"topics": []}), (200, {"producers": []}), (200, {})], answers)
