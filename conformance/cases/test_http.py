"""The HTTP API (H-*, in conformance/spec/http.toml). Every case needs --http-target (UNSUPPORTED without it)."""

import time

import pytest

from conformance.client import as_read, json_of_type, quote
from nsq_protocol import wire

requirement = pytest.mark.requirement
NSQ_CONTENT_TYPE = "nsq; version=1.0"


@pytest.fixture
def http(nsq):
    nsq.require("http")
    return nsq.http


def expect(nsq, response, status: int, message: str | None = None, body: bytes | None = None, judges: str = ""):
    """Status and JSON error code are required (H-01), at the level of the items the answer ``judges`` (else the
    case's requirement's); header details are nsqd's (soft). Every request has a connection of its own, so a
    difference is recorded and the case goes on to its other requests."""
    with nsq.verify.soft(judges):
        nsq.verify.equal("HTTP status", status, response.status)
    if message is not None:
        with nsq.verify.soft(judges):
            error = {"message": message}
            nsq.verify.equal("HTTP error body (H-01)", error, as_read(error, response.json()))
        nsq.verify.soft_equal("error Content-Type (H-01)", "application/json; charset=utf-8",
                              response.headers.get("content-type"))
    if body is not None:
        with nsq.verify.soft(judges):
            nsq.verify.equal("HTTP body", body, response.body)
    if status != 404 or message != "NOT_FOUND":
        nsq.verify.soft_equal("X-NSQ-Content-Type header (H-01, H-02)", NSQ_CONTENT_TYPE,
                              response.headers.get("x-nsq-content-type"))


def error_code(response) -> str | None:
    """The JSON error code of a 4xx/5xx answer, None for a success."""
    if response.status < 400:
        return None
    return json_of_type(response.json(), dict, "an HTTP error body").get("message")


def stats_topics(http) -> list[dict]:
    """The topics of GET /stats?format=json, every topic, each checked to be a JSON object."""
    document = json_of_type(http.get("/stats?format=json").json(), dict, "the body of GET /stats")
    return [json_of_type(topic, dict, "an entry of /stats' topics")
            for topic in json_of_type(document.get("topics") or [], list, "/stats' topics")]


def channels_of(topic: dict) -> list[dict]:
    return [json_of_type(channel, dict, "an entry of /stats' channels")
            for channel in json_of_type(topic.get("channels") or [], list, "/stats' channels")]


@requirement("NSQ-HTTP-001")
def test_ping(nsq, http):
    """200 'OK', plain text, no X-NSQ-Content-Type (H-03; rec-0203)."""
    response = http.get("/ping")
    nsq.verify.equal("GET /ping", (200, b"OK"), (response.status, response.body))
    nsq.verify.soft_equal("no X-NSQ-Content-Type on /ping (H-03)", None, response.headers.get("x-nsq-content-type"))


@requirement("NSQ-HTTP-001")
def test_info(nsq, http):
    """JSON with version and the limits in the profile (H-EP:/info; rec-0204: max_heartbeat_interval in ns)."""
    response = http.get("/info")
    expect(nsq, response, 200)
    info = json_of_type(response.json(), dict, "the body of GET /info")
    nsq.verify.that("/info has a version", isinstance(info.get("version"), str), "a version string", info)
    if nsq.has("H-INFO-02"):
        nsq.verify.soft_equal("/info max_heartbeat_interval (ns)", nsq.limits["max_heartbeat_interval_ms"] * 10**6,
                              info.get("max_heartbeat_interval"), "H-INFO-02")
    nsq.verify.soft_equal("/info tcp_port", nsq.target.tcp[1], info.get("tcp_port"))


@requirement("NSQ-HTTP-002")
def test_unknown_path_and_wrong_method(nsq, http):
    """404 NOT_FOUND; POST /stats and PUT /ping are 405 with an Allow header (H-04; rec-0205)."""
    expect(nsq, http.get("/not_found"), 404, "NOT_FOUND", judges="H-04")
    for method, path in (("POST", "/stats"), ("PUT", "/ping")):
        response = http.request(method, path, b"")
        expect(nsq, response, 405, "METHOD_NOT_ALLOWED", judges="H-04")
        if nsq.has("H-10"):
            nsq.verify.soft_equal(f"Allow header of {method} {path}", "GET, OPTIONS", response.headers.get("allow"),
                                  "H-10")


@requirement("NSQ-HTTP-003")
def test_pub_argument_checks(nsq, http):
    """MSG_EMPTY is checked before the topic, then MISSING_ARG_TOPIC, INVALID_TOPIC (H-PUB-02, H-PUB-03; rec-0209)."""
    expect(nsq, http.post("/pub", b""), 400, "MSG_EMPTY")
    expect(nsq, http.post(f"/pub?topic={nsq.topic()}", b""), 400, "MSG_EMPTY")
    expect(nsq, http.post("/pub", b"x"), 400, "MISSING_ARG_TOPIC")
    expect(nsq, http.post("/pub?topic=a!b", b"x"), 400, "INVALID_TOPIC")


@requirement("NSQ-HTTP-003")
def test_pub_publishes_and_only_post_is_routed(nsq, http):
    """POST /pub -> 200 OK and the message is consumable over TCP; GET/PUT -> 405 (H-PUB-07, H-PUB-08; rec-0212)."""
    topic = nsq.topic()
    expect(nsq, http.post(f"/pub?topic={topic}", b"via http"), 200, body=b"OK")
    for method in ("GET", "PUT"):
        expect(nsq, http.request(method, f"/pub?topic={topic}", b"x"), 405, "METHOD_NOT_ALLOWED")
    conn = nsq.connect()
    conn.subscribe(topic, "c", ready=1)
    conn.expect_message(b"via http", attempts=1)


@requirement("NSQ-HTTP-003")
def test_pub_size_limit(nsq, http):
    """max-msg-size bytes -> 200; +1 -> 413 MSG_TOO_BIG (H-PUB-01; rec-0244)."""
    maximum = nsq.limits["max_msg_size"]
    topic = nsq.topic()
    expect(nsq, http.post(f"/pub?topic={topic}", b"m" * maximum), 200, body=b"OK")
    expect(nsq, http.post(f"/pub?topic={topic}", b"m" * (maximum + 1)), 413, "MSG_TOO_BIG")


@requirement("NSQ-HTTP-004")
def test_pub_defer_range(nsq, http):
    """-1, abc and max+1 -> 400 INVALID_DEFER (the topic is created anyway); max and 0 -> 200
    (H-PUB-04, H-PUB-05; rec-0210, rec-0246)."""
    maximum = nsq.limits["max_req_timeout_ms"]
    topic = nsq.topic()
    expect(nsq, http.post(f"/pub?topic={topic}&defer=-1", b"x"), 400, "INVALID_DEFER")
    nsq.verify.that("topic created before the defer check (H-PUB-04)", http.stats(topic) is not None,
                    "topic exists", "missing")
    for bad in ("abc", maximum + 1):
        expect(nsq, http.post(f"/pub?topic={topic}&defer={bad}", b"x"), 400, "INVALID_DEFER")
    for good in (maximum, 0):
        expect(nsq, http.post(f"/pub?topic={topic}&defer={good}", b"x"), 200, body=b"OK")
    nsq.verify.equal("topic message_count", 2, http.stats(topic)["message_count"])


@pytest.mark.long_wait(7)
@requirement("NSQ-HTTP-012")
def test_pub_defer_delays_delivery(nsq, http):
    """POST /pub?defer=1000 to a channel with a ready consumer: deferred_count 1 at once, the message after >= 1 s,
    attempts 1 (H-PUB-05, D-30; rec-0133 observed 1.06-1.08 s for DPUB's same path)."""
    topic = nsq.topic()
    nsq.fresh_channel(topic, "c")
    consumer = nsq.connect()
    consumer.subscribe(topic, "c", ready=1)
    start = time.monotonic()
    expect(nsq, http.post(f"/pub?topic={topic}&defer=1000", b"later"), 200, body=b"OK")
    nsq.until(lambda: (http.channel_stats(topic, "c") or {}).get("deferred_count") == 1, 0.8,
              "the message is deferred in c")
    nsq.verify.equal("deferred_count soon after /pub?defer=1000 (D-30)", 1,
                     http.channel_stats(topic, "c")["deferred_count"])
    consumer.expect_message(b"later", attempts=1, timeout=8)
    nsq.within("/pub?defer=1000 delivery", nsq.elapsed_since(start), 0.95, 2.6)


@requirement("NSQ-HTTP-005")
def test_mpub_text_mode(nsq, http):
    """Split on \\n, \\r kept, empty lines skipped; empty bodies are 200 and publish nothing (H-MPUB-04; rec-0215)."""
    topic = nsq.topic()
    expect(nsq, http.post(f"/mpub?topic={topic}", b"one\r\ntwo\r\n\n\nthree\n"), 200, body=b"OK")
    expect(nsq, http.post(f"/mpub?topic={topic}", b""), 200, body=b"OK")
    expect(nsq, http.post(f"/mpub?topic={topic}", b"\n\n"), 200, body=b"OK")
    conn = nsq.connect()
    conn.subscribe(topic, "c", ready=5)
    bodies = sorted(frame.body for frame in conn.expect_messages(3))
    nsq.verify.equal("text /mpub members", [b"one\r", b"three", b"two\r"], bodies)
    conn.expect_silence(0.3)


@requirement("NSQ-HTTP-005")
def test_mpub_binary_mode(nsq, http):
    """binary=yes and binary=1 are binary; errors are 413 BAD_BODY / BAD_MESSAGE (H-MPUB-03, H-MPUB-05; rec-0213,
    rec-0214)."""
    topic = nsq.topic()
    expect(nsq, http.post("/mpub", b"a\nb"), 400, "MISSING_ARG_TOPIC")
    expect(nsq, http.post("/mpub?topic=a!b", b"a"), 400, "INVALID_TOPIC")
    binary = wire.mpub_body([b"y1", b"y2"])  # [count][size][bytes]...: no total size word, unlike TCP
    expect(nsq, http.post(f"/mpub?topic={topic}&binary=yes", binary), 200, body=b"OK")
    expect(nsq, http.post(f"/mpub?topic={topic}&binary=1", wire.mpub_body([b"y3"])), 200, body=b"OK")
    expect(nsq, http.post(f"/mpub?topic={topic}&binary=true", b""), 413, "BAD_BODY")
    expect(nsq, http.post(f"/mpub?topic={topic}&binary=true", b"\x00\x00\x00\x00"), 413, "BAD_BODY")
    expect(nsq, http.post(f"/mpub?topic={topic}&binary=true", b"\x00\x00\x00\x01\x00\x00\x00\x00"), 413,
           "BAD_MESSAGE")
    nsq.verify.equal("published by binary /mpub", 3, http.stats(topic)["message_count"])


@requirement("NSQ-HTTP-005")
def test_mpub_size_limits(nsq, http):
    """Body > max-body-size -> 413 BODY_TOO_BIG; a line > max-msg-size -> 413 MSG_TOO_BIG (H-MPUB-01, H-MPUB-04;
    rec-0245)."""
    topic = nsq.topic()
    expect(nsq, http.post(f"/mpub?topic={topic}", b"b" * (nsq.limits["max_body_size"] + 1)), 413, "BODY_TOO_BIG")
    expect(nsq, http.post(f"/mpub?topic={topic}", b"ok\n" + b"l" * (nsq.limits["max_msg_size"] + 1) + b"\n"),
           413, "MSG_TOO_BIG")


@requirement("NSQ-HTTP-006")
def test_topic_create_delete_empty(nsq, http):
    """(H-EP:/topic/*, X-27: delete does not validate names; rec-0217, rec-0218, rec-0219)"""
    topic = nsq.topic(create=False)
    expect(nsq, http.post("/topic/create"), 400, "MISSING_ARG_TOPIC")
    expect(nsq, http.post("/topic/create?topic=a!b"), 400, "INVALID_TOPIC")
    expect(nsq, http.post("/topic/empty?topic=a$b"), 400, "INVALID_TOPIC")
    expect(nsq, http.post(f"/topic/empty?topic={topic}"), 404, "TOPIC_NOT_FOUND")
    expect(nsq, http.post(f"/topic/delete?topic={topic}"), 404, "TOPIC_NOT_FOUND")
    expect(nsq, http.post("/topic/delete?topic=a!b"), 404, "TOPIC_NOT_FOUND")
    for _ in range(2):  # idempotent
        expect(nsq, http.post(f"/topic/create?topic={topic}"), 200, body=b"")
    expect(nsq, http.post(f"/pub?topic={topic}", b"x"), 200, body=b"OK")
    expect(nsq, http.post(f"/topic/empty?topic={topic}"), 200, body=b"")
    nsq.verify.equal("depth after /topic/empty", 0, http.stats(topic)["depth"])
    expect(nsq, http.post(f"/topic/delete?topic={topic}"), 200, body=b"")
    nsq.verify.equal("topic after /topic/delete", None, http.stats(topic))


@requirement("NSQ-HTTP-007")
def test_channel_endpoint_argument_order(nsq, http):
    """INVALID_REQUEST, MISSING_ARG_TOPIC, INVALID_ARG_TOPIC, MISSING_ARG_CHANNEL, INVALID_ARG_CHANNEL,
    then TOPIC_NOT_FOUND; create is idempotent (H-EP:/channel/create; rec-0221, rec-0223)."""
    topic = nsq.topic(create=False)
    expect(nsq, http.post("/channel/create?topic=%zz"), 400, "INVALID_REQUEST")
    expect(nsq, http.post("/channel/create"), 400, "MISSING_ARG_TOPIC")
    expect(nsq, http.post("/channel/create?topic=a!b&channel=c"), 400, "INVALID_ARG_TOPIC")
    expect(nsq, http.post(f"/channel/create?topic={topic}"), 400, "MISSING_ARG_CHANNEL")
    expect(nsq, http.post(f"/channel/empty?topic={topic}"), 400, "MISSING_ARG_CHANNEL")
    expect(nsq, http.post(f"/channel/create?topic={topic}&channel=a!b"), 400, "INVALID_ARG_CHANNEL")
    expect(nsq, http.post(f"/channel/create?topic={topic}&channel=c"), 404, "TOPIC_NOT_FOUND")
    expect(nsq, http.post(f"/topic/create?topic={topic}"), 200, body=b"")
    for _ in range(2):
        expect(nsq, http.post(f"/channel/create?topic={topic}&channel=c"), 200, body=b"")
    nsq.verify.that("channel in /stats", http.channel_stats(topic, "c") is not None, "present", "missing")


@requirement("NSQ-HTTP-007")
def test_channel_delete_and_empty_codes(nsq, http):
    """(H-EP:/channel/delete, /channel/empty; rec-0222, rec-0223)"""
    topic = nsq.topic(create=False)
    expect(nsq, http.post(f"/channel/delete?topic={topic}&channel=c"), 404, "TOPIC_NOT_FOUND")
    expect(nsq, http.post(f"/topic/create?topic={topic}"), 200, body=b"")
    expect(nsq, http.post(f"/channel/delete?topic={topic}&channel=c"), 404, "CHANNEL_NOT_FOUND")
    expect(nsq, http.post(f"/channel/empty?topic={topic}&channel=c"), 404, "CHANNEL_NOT_FOUND")
    expect(nsq, http.post(f"/channel/create?topic={topic}&channel=c"), 200, body=b"")
    expect(nsq, http.post(f"/channel/empty?topic={topic}&channel=c"), 200, body=b"")
    expect(nsq, http.post(f"/channel/delete?topic={topic}&channel=c"), 200, body=b"")
    nsq.verify.equal("channel after /channel/delete", None, http.channel_stats(topic, "c"))


@requirement("NSQ-HTTP-008")
def test_stats_filters(nsq, http):
    """A missing topic gives topics null; a channel filter keeps only that channel; a missing channel gives []
    (H-STATS-04, H-STATS-05; rec-0225). Before 1.1.0 a filter naming nothing is ignored (H-STATS-16)."""
    topic = nsq.topic()
    nsq.create_over_http(topic, "c1", "c2")
    missing = http.get(f"/stats?format=json&topic={quote(topic + '-missing')}").json()
    if nsq.has("H-STATS-15"):
        nsq.verify.equal("topics for a missing topic (H-STATS-15)", None, missing["topics"], "H-STATS-15")
    elif nsq.has("H-STATS-16"):
        nsq.verify.that("topics for a missing topic: every topic, the case's among them (H-STATS-16)",
                        topic in [entry["topic_name"] for entry in missing["topics"]], f"[... {topic} ...]",
                        str([entry["topic_name"] for entry in missing["topics"]])[:400])
    filtered = http.get(f"/stats?format=json&topic={topic}&channel=c2").json()["topics"]
    nsq.verify.equal("channels with channel=c2", ["c2"],
                     [channel["channel_name"] for channel in filtered[0]["channels"]])
    nope = http.get(f"/stats?format=json&topic={topic}&channel=nope").json()["topics"]
    if nsq.has("H-STATS-05"):
        nsq.verify.equal("topics with a missing channel (H-STATS-05)", [], nope)
    else:
        nsq.verify.equal("topics with a missing channel: the topic with all its channels (H-STATS-16)",
                         [(topic, ["c1", "c2"])],
                         [(entry["topic_name"], [channel["channel_name"] for channel in entry["channels"]])
                          for entry in nope])


@requirement("NSQ-HTTP-008")
def test_stats_counters(nsq, http):
    """message_count, depth, in_flight_count, requeue_count after PUB x2 and one delivery, then after its REQ 0
    (H-STATS-07, H-STATS-08, H-STATS-11)."""
    topic = nsq.topic()
    conn = nsq.connect()
    conn.subscribe(topic, "c", ready=1)
    conn.publish(topic, b"s1")
    conn.publish(topic, b"s2")
    first = conn.expect_message(b"s1")

    counted = ("message_count", "depth", "in_flight_count", "requeue_count") + (
        ("client_count",) if nsq.has("H-STATS-14") else ())  # client_count since 1.2.0
    one_client = (1,) if nsq.has("H-STATS-14") else ()

    def counters():
        stats = http.stats(topic)
        channel = stats["channels"][0]
        return stats, tuple(channel[key] for key in counted)

    nsq.until(lambda: counters()[1] == (2, 1, 1, 0, *one_client), 1.0, "both messages reached the channel")
    nsq.verify.equal(f"channel {counted} with s1 in flight", (2, 1, 1, 0, *one_client), counters()[1])
    conn.command("RDY", 0)
    conn.command("REQ", first.id_text, 0)
    conn.expect_silence(0.2)
    nsq.until(lambda: counters()[1] == (2, 2, 0, 1, *one_client), 1.0, "s1 requeued")
    stats, channel_counters = counters()
    nsq.verify.equal("topic message_count", 2, stats["message_count"])
    nsq.verify.equal(f"channel {counted}", (2, 2, 0, 1, *one_client), channel_counters)


@requirement("NSQ-HTTP-022")
def test_stats_count_deliveries_by_locality(nsq, http):
    """Two deliveries to a consumer with no topology: global_msg_count 2, no local count (H-STATS-12)."""
    topic = nsq.topic()
    conn = nsq.connect()
    conn.subscribe(topic, "c", ready=2)
    for body in (b"g1", b"g2"):
        conn.publish(topic, body)
        conn.expect_message(body)
    keys = ("global_msg_count", "zone_local_msg_count", "region_local_msg_count")
    nsq.until(lambda: http.stats(topic)["channels"][0].get(keys[0]) == 2, 1.0, "both deliveries are counted")
    nsq.verify.equal("channel (global_msg_count, zone_local_msg_count, region_local_msg_count)", (2, None, None),
                     tuple(http.stats(topic)["channels"][0].get(key) for key in keys), "H-STATS-12")


@requirement("NSQ-HTTP-008")
def test_client_counters_add_up(nsq, http):
    """A consumer's message_count, finish_count and requeue_count count every delivery, FIN and REQ, each sent on
    its own (H-STATS-09)."""
    topic = nsq.topic()
    conn = nsq.connect()
    conn.identify({"feature_negotiation": True, "client_id": "counted"})
    conn.subscribe(topic, "c", ready=3)
    for body in (b"k1", b"k2", b"k3"):
        conn.publish(topic, body)
    messages = conn.expect_messages(3)
    conn.command("FIN", messages[0].id_text)
    conn.command("FIN", messages[1].id_text)
    conn.command("REQ", messages[2].id_text, 0)
    conn.expect_message(b"k3", attempts=2)

    def counters():
        clients = (http.channel_stats(topic, "c") or {}).get("clients", [])
        client = next((c for c in clients if c.get("client_id") == "counted"), {})
        return tuple(client.get(key) for key in ("message_count", "finish_count", "requeue_count"))

    nsq.until(lambda: counters() == (4, 2, 1), 1.0, "the counters caught up")
    nsq.verify.equal("client (message_count, finish_count, requeue_count)", (4, 2, 1), counters())


@requirement("NSQ-HTTP-009")
def test_query_string_rules_and_removed_endpoints(nsq, http):
    """%zz -> 400 INVALID_REQUEST; topic=a&topic=b publishes to a; /put, /create_topic -> 404 (H-07, H-09, X-29;
    rec-0207, rec-0208)."""
    first, second = nsq.topic(), nsq.topic(create=False)
    expect(nsq, http.post("/pub?topic=%zz", b"x"), 400, "INVALID_REQUEST", judges="H-07")
    expect(nsq, http.post(f"/pub?topic={first}&topic={second}", b"x"), 200, body=b"OK", judges="H-07")
    nsq.verify.soft_equal("(first topic exists, second topic exists)", (True, False),
                          (http.stats(first) is not None, http.stats(second) is not None), "H-07")
    expect(nsq, http.post(f"/put?topic={first}", b"x"), 404, "NOT_FOUND", judges="H-09")
    expect(nsq, http.post(f"/create_topic?topic={first}"), 404, "NOT_FOUND", judges="H-09")


@requirement("NSQ-HTTP-010")
def test_config_endpoint(nsq, http):
    """GET values under config names; node_id is not one; PUT log_level WARN -> 3, bad -> 400, empty -> 413;
    other options are not settable; POST -> 405. The original log level is restored (H-CFG-01, H-CFG-02, H-CFG-03;
    rec-0228, rec-0229)."""
    expect(nsq, http.get("/config/max_msg_size"), 200, body=str(nsq.limits["max_msg_size"]).encode())
    expect(nsq, http.get("/config/max_rdy_count"), 200, body=str(nsq.limits["max_rdy_count"]).encode())
    expect(nsq, http.get("/config/node_id"), 400, "INVALID_OPTION")
    if nsq.has("H-CFG-06"):  # before 1.1.0 log_level is no option
        expect(nsq, http.get("/config/log_level"), 400, "INVALID_OPTION")
        expect(nsq, http.request("PUT", "/config/log_level", b"WARN"), 400, "INVALID_OPTION")
        expect(nsq, http.request("POST", "/config/log_level", b"x"), 405, "METHOD_NOT_ALLOWED")
        return
    original = http.get("/config/log_level")
    expect(nsq, original, 200)
    levels = {b"1": b"debug", b"2": b"info", b"3": b"warn", b"4": b"error", b"5": b"fatal"}
    try:
        expect(nsq, http.request("PUT", "/config/log_level", b"WARN"), 200,
               body=b"3" if nsq.has("H-CFG-04") else b"WARN")  # a number since 1.2.0 (H-CFG-04, H-CFG-05)
        expect(nsq, http.request("PUT", "/config/log_level", b"bad"), 400, "INVALID_VALUE")
        expect(nsq, http.request("PUT", "/config/log_level", b""), 413, "INVALID_VALUE")
        expect(nsq, http.request("PUT", "/config/mem_queue_size", b"5"), 400, "INVALID_OPTION")
        expect(nsq, http.request("POST", "/config/log_level", b"x"), 405, "METHOD_NOT_ALLOWED")
    finally:
        http.request("PUT", "/config/log_level", levels.get(original.body, b"info"))


@requirement("NSQ-HTTP-011")
def test_stats_text_format(nsq, http):
    """(H-STATS-01; rec-0002, rec-0227)"""
    topic = nsq.topic()
    nsq.connect().publish(topic, b"x")
    response = http.get(f"/stats?format=text&include_mem=false&topic={topic}")
    expect(nsq, response, 200)
    text = response.body.decode("utf-8", "replace")
    nsq.verify.that("text stats start with 'nsqd v'", text.startswith("nsqd v"), "nsqd v...", text[:80])
    nsq.verify.that("text stats list the topic", f"[{topic}" in text, f"[{topic} ...", text[:400])


@requirement("NSQ-HTTP-013")
def test_router_answers_options_head_and_misspelt_paths(nsq, http):
    """OPTIONS /pub: 200 with Allow; HEAD /ping: 405; GET /ping/ and GET /PING: 301 to /ping; POST /pub/: 307 to
    /pub keeping the query; GET /debug/pprof: 301 to /debug/pprof/ (H-05; rec-0206)."""
    asked = (("OPTIONS", "/pub"), ("HEAD", "/ping"), ("GET", "/ping/"), ("GET", "/PING"), ("POST", "/pub/?topic=x"),
             ("GET", "/debug/pprof"))
    expected = [(200, "OPTIONS, POST"), (405, "GET, OPTIONS"), (301, "/ping"), (301, "/ping"), (307, "/pub?topic=x"),
                (301, "/debug/pprof/")]
    if not nsq.has("H-10"):  # the router's OPTIONS and Allow came with 1.2.0: HEAD's 405 and the redirects remain
        asked, expected = asked[1:], [(405, None), *expected[2:]]
    answers = [(response.status, (response.headers.get("allow") if nsq.has("H-10") else None) if method == "HEAD"
                else response.headers.get("allow") if method == "OPTIONS" else response.headers.get("location"))
               for method, path in asked
               for response in [http.request(method, path, b"x" if method == "POST" else None)]]
    nsq.verify.equal("(status, Allow or Location) of OPTIONS /pub, HEAD /ping, GET /ping/, GET /PING, POST /pub/, "
                     "GET /debug/pprof (H-05, H-10)", expected, answers)


@requirement("NSQ-HTTP-014")
def test_mpub_ignores_defer(nsq, http):
    """/mpub?defer=5000 publishes at once: both messages are in the channel's queue, none deferred (H-MPUB-06, X-21;
    rec-0216)."""
    topic = nsq.topic()
    nsq.create_over_http(topic, "c")
    expect(nsq, http.post(f"/mpub?topic={topic}&defer=5000", b"m1\nm2"), 200, body=b"OK")
    nsq.until(lambda: (http.channel_stats(topic, "c") or {}).get("depth") == 2, 1.0, "both reach c")
    channel = http.channel_stats(topic, "c") or {}
    nsq.verify.equal("c's (depth, deferred_count) after /mpub?defer=5000 (H-MPUB-06)", (2, 0),
                     (channel.get("depth"), channel.get("deferred_count")))


@requirement("NSQ-HTTP-015")
def test_mpub_creates_the_topic_before_reading_the_body(nsq, http):
    """A binary /mpub with an empty body is 413 BAD_BODY, and the topic exists afterwards, empty (H-MPUB-02;
    rec-0213)."""
    nsq.require("topic_autocreate")
    topic = nsq.topic(create=False)
    expect(nsq, http.post(f"/mpub?topic={topic}&binary=true", b""), 413, "BAD_BODY")
    stats = http.stats(topic)
    nsq.verify.equal("the topic's message_count after the refused /mpub, None if it does not exist (H-MPUB-02)", 0,
                     stats and stats.get("message_count"))


@requirement("NSQ-HTTP-016")
def test_stats_without_clients_keeps_client_count_and_sorts_by_name(nsq, http):
    """Consumers on channels zz and aa (created in that order): include_clients=false gives clients null, the
    client_count 1 each, producers null, and the channels sorted aa, zz (H-STATS-03, H-STATS-06; rec-0226)."""
    topic = nsq.topic()
    for channel in ("zz", "aa"):
        nsq.connect().subscribe(topic, channel)
    for flag in ("false", "0"):
        document = json_of_type(http.get(f"/stats?format=json&include_clients={flag}&topic={topic}").json(), dict,
                                "the body of GET /stats")
        channels = [(channel.get("channel_name"), channel.get("client_count"), channel.get("clients"))
                    for topic_stats in json_of_type(document.get("topics") or [], list, "/stats' topics")
                    for channel in channels_of(json_of_type(topic_stats, dict, "an entry of /stats' topics"))]
        if not nsq.has("H-STATS-03"):  # no include_clients before 1.2.0: the order alone
            nsq.verify.equal("channels sorted by name (H-STATS-06)", ["aa", "zz"], [name for name, *_ in channels],
                             "H-STATS-06")
            continue
        nsq.verify.equal(f"include_clients={flag}: (channel, client_count, clients) and producers (H-STATS-03, "
                         "H-STATS-06)", ([("aa", 1, None), ("zz", 1, None)], None),
                         (channels, document.get("producers")))


@requirement("NSQ-HTTP-017")
def test_stats_producers_are_tcp_publishers(nsq, http):
    """A TCP publisher with a client_id of the case's own, two PUBs: a producer with pub_counts [{topic, 2}]; an HTTP
    /pub to the same topic adds no producer (P-PUB-05, H-STATS-10; rec-0111); before 1.2.0 there is no producers list
    (H-STATS-18)."""
    topic = nsq.topic()
    publisher = nsq.connect()
    client_id = nsq.name_prefix + "prod"
    publisher.identify({"client_id": client_id, "hostname": "ph", "user_agent": "pa"})
    publisher.publish(topic, b"1")
    publisher.publish(topic, b"2")
    expect(nsq, http.post(f"/pub?topic={topic}", b"3"), 200, body=b"OK")
    document = json_of_type(http.get(f"/stats?format=json&topic={topic}").json(), dict, "the body of GET /stats")
    if not nsq.has("H-STATS-10"):
        nsq.verify.equal("/stats has a producers list", False, "producers" in document, "H-STATS-18")
        return
    producers = [json_of_type(producer, dict, "an entry of /stats' producers")
                 for producer in json_of_type(document.get("producers") or [], list, "/stats' producers")]
    mine = [(producer.get("client_id"), producer.get("pub_counts")) for producer in producers
            if any(json_of_type(count, dict, "an entry of pub_counts").get("topic") == topic
                   for count in json_of_type(producer.get("pub_counts") or [], list, "a producer's pub_counts"))]
    nsq.verify.equal("the producers that published to the topic, with their pub_counts (H-STATS-10)",
                     [(client_id, [{"topic": topic, "count": 2}])], mine)


@requirement("NSQ-HTTP-018")
def test_debug_endpoints(nsq, http):
    """GET /debug/pprof/ answers 200 with Go's profile index, and PUT /debug/setblockrate?rate=abc is 400 (H-DEBUG-01;
    rec-0230)."""
    index, bad_rate = http.get("/debug/pprof/"), http.request("PUT", "/debug/setblockrate?rate=abc")
    nsq.verify.equal("(GET /debug/pprof/ status, it lists goroutine, PUT /debug/setblockrate?rate=abc status) "
                     "(H-DEBUG-01)", (200, True, 400), (index.status, b"goroutine" in index.body, bad_rate.status))


@requirement("NSQ-HTTP-019")
def test_chunked_bodies_over_the_limit(nsq, http):
    """Sent chunked, without a Content-Length to refuse it by: /pub of --max-msg-size bytes is 200, one more is 413
    MSG_TOO_BIG; a text /mpub of --max-body-size + 1 bytes is 413 BODY_TOO_BIG (H-PUB-01, H-MPUB-01: nsqd reads a
    chunked body up to the limit + 1)."""
    topic, most, body_most = nsq.topic(), nsq.limits["max_msg_size"], nsq.limits["max_body_size"]
    line = b"l" * (min(most, 1000) - 1) + b"\n"
    over = (line * (body_most // len(line) + 1))[:body_most + 1]
    answers = [(response.status, error_code(response) or response.body)
               for response in (http.request("POST", f"/pub?topic={topic}", b"m" * most, chunked=True),
                                http.request("POST", f"/pub?topic={topic}", b"m" * (most + 1), chunked=True),
                                http.request("POST", f"/mpub?topic={topic}", over, chunked=True))]
    nsq.verify.equal("(status, body or error) of chunked /pub of the maximum, /pub of one more, /mpub past "
                     "--max-body-size (H-PUB-01, H-MPUB-01)",
                     [(200, b"OK"), (413, "MSG_TOO_BIG"), (413, "BODY_TOO_BIG")], answers)


@requirement("NSQ-HTTP-020")
def test_stats_without_a_topic_filter_lists_every_topic(nsq, http):
    """/stats?format=json with no topic= lists every topic, sorted by name, among them the case's two, each with its
    channel (H-STATS-02, H-STATS-06; rec-0002 asks /stats unfiltered)."""
    second, first = nsq.topic(), nsq.topic()
    for topic in (second, first):
        nsq.create_over_http(topic, "c")
    names = [(entry.get("topic_name"), [channel.get("channel_name") for channel in channels_of(entry)])
             for entry in stats_topics(http)]
    nsq.verify.equal("/stats' topics: the case's, in name order, with their channel; and every topic sorted by "
                     "name (H-STATS-02, H-STATS-06)",
                     ([(second, ["c"]), (first, ["c"])], True),
                     ([entry for entry in names if entry[0] in (first, second)],
                      [str(name) for name, _ in names] == sorted(str(name) for name, _ in names)))


@pytest.mark.transcript_varies("the unfiltered text report holds the other cases' topics and the broker's memory "
                                "figures, which --compare does not mask in text")
@requirement("NSQ-HTTP-011")
def test_stats_text_report(nsq, http):
    """The text report without filters: a Memory section, every topic (the case's two, the paused one marked *P),
    the channel line (paused: *P) with its consumer's client line beneath, and the TCP publisher under Producers
    (H-STATS-01; rec-0227's format)."""
    paused, other = nsq.topic(), nsq.topic()
    nsq.create_over_http(paused, "c")
    nsq.create_over_http(other)
    for path in (f"/topic/pause?topic={paused}", f"/channel/pause?topic={paused}&channel=c"):
        expect(nsq, http.post(path), 200)
    consumer = nsq.connect()
    consumer.identify({"hostname": "reporthost", "user_agent": "report-agent"})
    consumer.subscribe(paused, "c")
    publisher = nsq.connect()
    publisher.identify({"hostname": "pubhost"})
    publisher.publish(other, b"x")
    lines = http.get("/stats").body.decode("utf-8", "replace").splitlines()
    at = next((index for index, line in enumerate(lines) if line.startswith(f"*P [{paused}")), None)
    # the paused topic's line, then its channel's, then the consumer's (other cases' topics have a channel c too)
    beneath = lines[at + 1:at + 3] if at is not None else []
    producers = lines[lines.index("Producers:"):] if "Producers:" in lines else []
    found = {
        "Memory section, since 1.1.0 (H-STATS-17)": ("Memory:" in lines) == nsq.has("H-STATS-17"),
        "paused topic line": at is not None,
        "other topic line": any(line.startswith(f"   [{other}") for line in lines),
        "paused channel line": beneath[:1] != [] and beneath[0].startswith("   *P [c "),
        "consumer's client line": beneath[1:] != [] and beneath[1].startswith("        [V2 reporthost:"),
        "publisher under Producers": any(line.startswith("   [V2 pubhost:") and f"topics: {other}=1" in line
                                         for line in producers),
    }
    if not nsq.has("H-STATS-13"):  # those two lines' format came with 1.2.0
        found = {key: shown for key, shown in found.items() if key not in ("consumer's client line",
                                                                            "publisher under Producers")}
    nsq.verify.equal("what the text report shows (H-STATS-01, H-STATS-13, H-STATS-17)", {key: True for key in found},
                     found)


@requirement("NSQ-HTTP-021")
def test_pause_endpoints_refuse_what_is_missing(nsq, http):
    """/topic/pause and /topic/unpause: no topic= is 400 MISSING_ARG_TOPIC, a topic that does not exist (its name not
    checked) 404 TOPIC_NOT_FOUND; /channel/pause and /channel/unpause: 404 TOPIC_NOT_FOUND, then for a missing
    channel of an existing topic 404 CHANNEL_NOT_FOUND (H-TOPIC-04, H-CHANNEL-04; rec-0220, rec-0224)."""
    missing, topic = nsq.topic(create=False), nsq.topic()
    nsq.create_over_http(topic)
    calls = [(f"/{kind}/{verb}{query}", status, code) for verb in ("pause", "unpause")
             for kind, query, status, code in (
        ("topic", "", 400, "MISSING_ARG_TOPIC"), ("topic", "?topic=a!b", 404, "TOPIC_NOT_FOUND"),
        ("topic", f"?topic={missing}", 404, "TOPIC_NOT_FOUND"),
        ("channel", f"?topic={missing}&channel=c", 404, "TOPIC_NOT_FOUND"),
        ("channel", f"?topic={topic}&channel=c", 404, "CHANNEL_NOT_FOUND"))]
    answers = [(path, response.status, error_code(response)) for path, _, _ in calls for response in [http.post(path)]]
    nsq.verify.equal("(path, status, error) of the pause endpoints (H-TOPIC-04, H-CHANNEL-04)",
                     [(path, status, code) for path, status, code in calls], answers)
