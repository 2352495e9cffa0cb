"""What a broker tells nsqlookupd (R-01, R-02, R-03, R-04, R-05, R-06, R-07, R-08, R-09, R-10, R-11, R-12, R-13, R-14,
R-15 in conformance/spec/registration.toml), seen by the suite's fake nsqlookupd, which the target is pointed at
through PUT /config/nsqlookupd_tcp_addresses (or --lookupd-listen). The target is shared: only lines naming this case's
topics are judged, and one registration case at a time sets its lookupd."""

import contextlib
import json
import time

import pytest

from conformance.client import HttpClient, json_of_type

requirement = pytest.mark.requirement
# What nsqlookupd needs of a broker's IDENTIFY (it refuses the body without them: E_BAD_BODY IDENTIFY missing
# fields, L-TCP), and what nsqd also sends; nsqlookupd ignores any other key.
REQUIRED_IDENTIFY = {"broadcast_address": str, "tcp_port": int, "http_port": int, "version": str}
TOPOLOGY_KEYS = ["topology_region", "topology_zone"]  # master after v1.3.0


def lines_for(nsq, start: int, topic: str) -> list[str]:
    return [event.line for event in nsq.lookupd.since(start)
            if event.line.split(" ")[1:2] == [topic]]


def wait_for_lines(nsq, start: int, topic: str, expected: list[str], seconds: float = 3.0) -> None:
    """The fake lookupd got exactly these commands about `topic`, in any order, within `seconds`."""
    nsq.until(lambda: len(lines_for(nsq, start, topic)) >= len(expected), seconds,
              f"the broker tells lookupd {expected}")
    time.sleep(0.2)  # and nothing more right after
    nsq.transcript.note(f"fake lookupd got about {topic}: {lines_for(nsq, start, topic)}")
    # A repeat is allowed: nsqd itself repeats what raced with a (re)connection's REGISTERs.
    nsq.verify.equal(f"commands to nsqlookupd about {topic}", sorted(set(expected)),
                     sorted(set(lines_for(nsq, start, topic))))


def http_ok(nsq, path: str) -> None:
    nsq.verify.equal(f"POST {path}", 200, nsq.http.post(path).status)


@requirement("NSQ-REG-001")
def test_the_broker_identifies_itself(registration):
    """(R-01, R-02, R-11; rec-0328, rec-0337)"""
    nsq = registration
    nsq.until(lambda: any(event.line == "IDENTIFY" for event in nsq.lookupd.since(0)), 3.0,
              "the broker connected and IDENTIFYed")
    events = nsq.lookupd.since(0)
    first = next((event for event in events if event.line == "MAGIC"), None)
    identify = next((event for event in events if event.line == "IDENTIFY"), None)
    nsq.verify.that("the broker sends the magic '  V1' first (R-01)", first is not None and identify is not None
                    and first.at <= identify.at, "MAGIC, then IDENTIFY", [event.line for event in events[:3]])
    body = identify.body if identify else {}
    nsq.verify.that("IDENTIFY body is a JSON object (R-02)", isinstance(body, dict), "{...}", repr(body))
    missing = sorted(set(REQUIRED_IDENTIFY) - set(body))
    nsq.verify.equal("IDENTIFY keys nsqlookupd requires (R-02; other keys are ignored by it)", [], missing)
    for key, kind in REQUIRED_IDENTIFY.items():
        value = body[key]
        usable = type(value) is kind and (0 < value < 65536 if kind is int else bool(value))
        nsq.verify.that(f"IDENTIFY {key} is a usable {'port' if kind is int else 'string'} (R-02)", usable,
                        "1..65535" if kind is int else "a non-empty string", repr(value))
    nsq.verify.soft_equal("IDENTIFY hostname, a string (R-02: nsqd sends its host name)", str,
                          type(body.get("hostname")))
    nsq.verify.soft_equal("IDENTIFY tcp_port: the broker's TCP port unless --broadcast-tcp-port says otherwise",
                          nsq.target.tcp[1], body["tcp_port"])
    if nsq.target.http:
        nsq.verify.soft_equal("IDENTIFY http_port: the broker's HTTP port unless --broadcast-http-port says "
                              "otherwise", nsq.target.http[1], body["http_port"])


@requirement("NSQ-REG-015")
def test_the_broker_identifies_its_topology(registration):
    """(R-16; rec-0328) the topology pair, empty without --topology-region and --topology-zone."""
    nsq = registration
    nsq.until(lambda: any(event.line == "IDENTIFY" for event in nsq.lookupd.since(0)), 3.0,
              "the broker connected and IDENTIFYed")
    identify = next(event for event in nsq.lookupd.since(0) if event.line == "IDENTIFY")
    body = identify.body if isinstance(identify.body, dict) else {}
    nsq.verify.equal("IDENTIFY topology_region and topology_zone, strings (R-16)", TOPOLOGY_KEYS,
                     sorted(key for key in TOPOLOGY_KEYS if isinstance(body.get(key), str)), "R-16")


@requirement("NSQ-REG-002")
def test_new_topics_and_channels_are_registered(registration):
    """(R-03; rec-0329, rec-0330)"""
    nsq = registration
    topic, created = nsq.topic(create=False), nsq.topic(create=False)
    start = nsq.lookupd.mark()
    nsq.prepare_topic(topic)  # a broker that does not create topics on PUB is told to here
    conn = nsq.connect()
    conn.publish(topic, b"x")
    conn.subscribe(topic, "c")
    conn.publish(topic, b"again")  # nothing more for later activity
    wait_for_lines(nsq, start, topic, [f"REGISTER {topic}", f"REGISTER {topic} c"])
    http_ok(nsq, f"/topic/create?topic={created}")
    http_ok(nsq, f"/channel/create?topic={created}&channel=d")
    wait_for_lines(nsq, start, created, [f"REGISTER {created}", f"REGISTER {created} d"])


@requirement("NSQ-REG-003")
def test_deletions_are_unregistered(registration):
    """(R-04, R-05; rec-0330, rec-0331)"""
    nsq = registration
    topic = nsq.topic()
    for path in (f"/topic/create?topic={topic}", f"/channel/create?topic={topic}&channel=c1",
                 f"/channel/create?topic={topic}&channel=c2", f"/channel/create?topic={topic}&channel=c3"):
        http_ok(nsq, path)
    wait_for_lines(nsq, 0, topic, [f"REGISTER {topic}"] + [f"REGISTER {topic} c{i}" for i in (1, 2, 3)])
    start = nsq.lookupd.mark()
    http_ok(nsq, f"/channel/delete?topic={topic}&channel=c1")
    wait_for_lines(nsq, start, topic, [f"UNREGISTER {topic} c1"])
    start = nsq.lookupd.mark()
    http_ok(nsq, f"/topic/delete?topic={topic}")
    wait_for_lines(nsq, start, topic, [f"UNREGISTER {topic} c2", f"UNREGISTER {topic} c3", f"UNREGISTER {topic}"])


@requirement("NSQ-REG-004")
def test_an_ephemeral_channel_comes_and_goes(registration):
    """(R-06; rec-0332)"""
    nsq = registration
    topic = nsq.topic(create=False)
    start = nsq.lookupd.mark()
    http_ok(nsq, f"/topic/create?topic={topic}")
    wait_for_lines(nsq, start, topic, [f"REGISTER {topic}"])  # nsqd registers a new topic asynchronously
    start = nsq.lookupd.mark()
    conn = nsq.connect()
    conn.subscribe(topic, "e#ephemeral")
    wait_for_lines(nsq, start, topic, [f"REGISTER {topic} e#ephemeral"])
    start = nsq.lookupd.mark()
    conn.close()
    nsq.until(lambda: f"UNREGISTER {topic} e#ephemeral" in lines_for(nsq, start, topic), 3.0,
              "the last client left")
    nsq.verify.that("UNREGISTER of the ephemeral channel after its last client left (R-06; a repeat is allowed)",
                    f"UNREGISTER {topic} e#ephemeral" in lines_for(nsq, start, topic), "sent",
                    lines_for(nsq, start, topic))


@requirement("NSQ-REG-005")
def test_ping_every_fifteen_seconds(registration):
    """The ticker runs from the broker's start, so the first PING to a new lookupd comes at any phase, but within
    15 s (R-08; rec-0334: every 14973-14976 ms)."""
    nsq = registration
    start = nsq.lookupd.mark()
    nsq.until(lambda: any(event.line == "PING" for event in nsq.lookupd.since(start)), 15.5, "a PING")
    pings = [event for event in nsq.lookupd.since(start) if event.line == "PING"]
    nsq.verify.that("a PING within 15 s (R-08)", bool(pings), "PING", "none within 15.5 s")


@requirement("NSQ-REG-010")
def test_an_ephemeral_topic_is_unregistered_with_its_last_channel(registration):
    """A consumer of an ephemeral topic's ephemeral channel: both registered at its SUB; when it leaves, the channel
    and then the topic are unregistered, in either order (R-07; rec-0333)."""
    nsq = registration
    start = nsq.lookupd.mark()
    topic = nsq.topic("#ephemeral")  # a broker that does not create topics on SUB is told to here
    conn = nsq.connect()
    conn.subscribe(topic, "e#ephemeral")
    wait_for_lines(nsq, start, topic, [f"REGISTER {topic}", f"REGISTER {topic} e#ephemeral"])
    start = nsq.lookupd.mark()
    conn.close()
    wait_for_lines(nsq, start, topic, [f"UNREGISTER {topic} e#ephemeral", f"UNREGISTER {topic}"])


@contextlib.contextmanager
def registered_with(nsq, tcp: tuple[str, int], http: tuple[str, int]):
    """The target registers with the nsqlookupd at ``tcp`` (R-11) for the case's while; its own list is put back
    afterwards. Yields an HTTP client of that nsqlookupd (``http``), recording into the case's transcript."""
    before = nsq.http.get("/config/nsqlookupd_tcp_addresses")
    listed = ["%s:%d" % tcp]
    put = nsq.http.request("PUT", "/config/nsqlookupd_tcp_addresses", json.dumps(listed).encode())
    nsq.verify.equal("PUT /config/nsqlookupd_tcp_addresses (R-11)", 200, put.status)
    try:
        yield HttpClient(http, nsq.transcript, nsq.time_scale)
    finally:
        nsq.http.request("PUT", "/config/nsqlookupd_tcp_addresses", before.body)


def lookup(lookupd_http, topic: str) -> tuple[int, dict]:
    response = lookupd_http.get(f"/lookup?topic={topic}")
    return response.status, json_of_type(response.json(), dict, "the body of /lookup") if response.status == 200 else {}


@requirement("NSQ-REG-011")
def test_a_real_nsqlookupd_lists_the_broker(registration, lookupd_target):
    """With the nsqlookupd under test as its only lookupd, a topic created in the broker: the lookupd's /lookup lists
    the broker with a broadcast address, hostname and version, and its TCP and HTTP ports (nsqd's; soft, as a broker
    behind a proxy names its own), and /nodes lists the topic under it (R-12; rec-0338)."""
    nsq, topic = registration, registration.topic(create=False)
    with registered_with(nsq, lookupd_target.tcp, lookupd_target.http) as lookupd_http:
        http_ok(nsq, f"/topic/create?topic={topic}")
        nsq.until(lambda: lookup(lookupd_http, topic)[0] == 200, 3.0, "the lookupd knows the topic")
        producers = json_of_type(lookup(lookupd_http, topic)[1].get("producers") or [{}], list, "/lookup's producers")
        nodes = json_of_type(json_of_type(lookupd_http.get("/nodes").json(), dict, "the body of /nodes")
                             .get("producers") or [], list, "/nodes' producers")
    me = json_of_type(producers[0], dict, "a producer of /lookup")
    node = next((n for n in nodes if isinstance(n, dict) and n.get("tcp_port") == me.get("tcp_port")), {})
    nsq.verify.equal("one producer under /lookup with a broadcast_address, hostname and version, and the topic under "
                     "its entry of /nodes (R-12)", (1, True, True, True, True),
                     (len(producers), bool(me.get("broadcast_address")), bool(me.get("hostname")),
                      bool(me.get("version")), topic in (node.get("topics") or [])))
    nsq.verify.soft_equal("its tcp_port and http_port, the target's (R-12; a broker behind a proxy names its own)",
                          (nsq.target.tcp[1], nsq.http.address[1]), (me.get("tcp_port"), me.get("http_port")))


@requirement("NSQ-REG-012")
def test_a_topic_deleted_in_the_broker_leaves_the_real_nsqlookupd(registration, lookupd_target):
    """A topic registered with the nsqlookupd under test, then deleted in the broker: the lookupd's /lookup answers
    200 with no producers, the name kept (R-13; rec-0339)."""
    nsq, topic = registration, registration.topic(create=False)
    with registered_with(nsq, lookupd_target.tcp, lookupd_target.http) as lookupd_http:
        http_ok(nsq, f"/topic/create?topic={topic}")
        nsq.until(lambda: lookup(lookupd_http, topic)[0] == 200, 3.0, "the lookupd knows the topic")
        http_ok(nsq, f"/topic/delete?topic={topic}")
        nsq.until(lambda: lookup(lookupd_http, topic)[1].get("producers") == [], 3.0, "the broker left it")
        status, document = lookup(lookupd_http, topic)
    nsq.verify.equal("/lookup of the topic after the broker deleted it: (status, producers) (R-13)", (200, []),
                     (status, document.get("producers")))


@pytest.mark.long_wait(36)
@requirement("NSQ-REG-013")
def test_the_broker_registers_again_with_a_restarted_nsqlookupd(registration, own_nsqlookupd):
    """The broker registered with an nsqlookupd of the case's own, which then restarts and knows nothing: the broker
    finds the dead link at its next 15 s PING and registers everything again at the tick after, so the lookupd lists
    the topic again within two ticks (R-14; rec-0340: about 30 s)."""
    nsq, topic = registration, registration.topic(create=False)
    with registered_with(nsq, own_nsqlookupd.tcp_address, own_nsqlookupd.http_address) as lookupd_http:
        http_ok(nsq, f"/topic/create?topic={topic}")
        nsq.until(lambda: lookup(lookupd_http, topic)[0] == 200, 3.0, "the lookupd knows the topic")
        own_nsqlookupd.restart()
        restarted = time.monotonic()
        nsq.until(lambda: lookup(lookupd_http, topic)[0] == 200, 34.0, "the broker registered the topic again")
        again = nsq.elapsed_since(restarted)
    nsq.within("the topic back in the restarted lookupd's /lookup: two 15 s ticks, 3 s to spare (R-14)", again, 0,
               33.0)
