"""Which producers nsqlookupd names, and for which topic (L-TCP-*, L-HTTP-* in conformance/spec/nsqlookupd.toml):
answers that never mix one topic's producers or channels into another's, and its two producer timeouts, which need a
lookupd profile with short ones (--lookupd-profile nsqlookupd-short-timeouts: the embedded nsqlookupd gets its
flags)."""

import time

import pytest

from conformance.cases.test_lookupd_v1 import lookup, producer_ports
from conformance.client import as_read

requirement = pytest.mark.requirement
OBSERVABLE_MS = 5000  # longer timeouts than this are not waited out
PEER_KEYS = ["broadcast_address", "hostname", "http_port", "remote_address", "tcp_port", "version"]  # L-HTTP-04
DEBUG_KEYS = ["broadcast_address", "hostname", "http_port", "id", "last_update", "tcp_port", "tombstoned",
              "tombstoned_at", "version"]  # L-HTTP-13
GO_ZERO_TIME_NS = -6795364578871345152  # time.Time{}.UnixNano(): "tombstoned_at" of a producer never tombstoned


def short(lookupd, limit: str) -> float:
    """The lookupd profile's timeout in seconds; UNSUPPORTED when it is too long to wait out."""
    milliseconds = lookupd.target.limits.get(limit)
    if milliseconds is None or milliseconds > OBSERVABLE_MS:
        pytest.skip(f"the lookupd profile's {limit} ({milliseconds} ms) is too long to wait out: give "
                    "--lookupd-profile nsqlookupd-short-timeouts (and start the nsqlookupd with its flags)")
    return milliseconds / 1000


def node(lookupd, port: int) -> dict | None:
    return next((n for n in lookupd.http.get("/nodes").json()["producers"] if n["tcp_port"] == port), None)


@requirement("NSQLOOKUPD-V1-009")
def test_answers_name_only_the_topic_asked_about(lookupd):
    """Producer A registers X with channel a and Y; B registers Y with channel b: /lookup, /channels, /nodes and
    /debug keep them apart, and a tombstone, an UNREGISTER or a producer leaving one topic leave the other alone
    (L-TCP-12, L-TCP-14, L-TCP-15, L-HTTP-04, L-HTTP-05, L-HTTP-06, L-HTTP-07, L-HTTP-12, L-HTTP-13)."""
    x, y = lookupd.topic(), lookupd.topic()
    a, b = lookupd.connect(), lookupd.connect()
    a.identify()
    b.identify()
    for conn, line in ((a, f"REGISTER {x} a"), (a, f"REGISTER {y}"), (b, f"REGISTER {y} b")):
        lookupd.verify.equal(line, b"OK", conn.command(f"{line}\n".encode()), "L-TCP-12")
    # Each answer below is a request of its own: a difference is recorded and the case goes on to the others.
    soft = lookupd.verify.soft
    producers = []
    with soft("L-HTTP-04"):
        lookupd.verify.equal("/lookup of X", (["a"], [a.tcp_port]), (lookup(lookupd, x)["channels"],
                                                                producer_ports(lookup(lookupd, x))))
    with soft("L-HTTP-04"):
        producers = lookup(lookupd, y)["producers"]
        lookupd.verify.equal("/lookup of Y", (["b"], sorted([a.tcp_port, b.tcp_port])), (lookup(lookupd, y)["channels"],
                                                                       producer_ports(lookup(lookupd, y))))
    with soft("L-HTTP-06"):
        lookupd.verify.equal("/channels of X and of Y", (["a"], ["b"]), tuple(
            lookupd.http.get(f"/channels?topic={t}").json()["channels"] for t in (x, y)))
    with soft("L-HTTP-04"):  # a superset is fine: clients read the fields they know
        lookupd.verify.equal("/lookup producer fields missing", [[]] * len(producers),
                             [sorted(set(PEER_KEYS) - set(producer)) for producer in producers])
    with soft("L-HTTP-13"):
        debug = lookupd.http.get("/debug").json()
        lookupd.verify.equal("/debug: channel:X:a and channel:Y:b each name their own producer",
                             ([a.tcp_port], [b.tcp_port]), tuple(sorted(p.get("tcp_port") for p in debug.get(key, []))
                                                       for key in (f"channel:{x}:a", f"channel:{y}:b")))
        entry = next(iter(debug.get(f"channel:{x}:a", [])), {})
        lookupd.verify.soft_equal("/debug producer fields missing, tombstoned_at of one never tombstoned "
                                  "(L-HTTP-13)", ([], a.http_port, "1.3.0", False, GO_ZERO_TIME_NS),
                                  (sorted(set(DEBUG_KEYS) - set(entry)), entry.get("http_port"), entry.get("version"),
                                   entry.get("tombstoned"), entry.get("tombstoned_at")))
    with soft("L-HTTP-07"):
        nodes = {port: node(lookupd, port) or {} for port in (a.tcp_port, b.tcp_port)}
        lookupd.verify.equal("/nodes: each producer's topics", {a.tcp_port: sorted([x, y]), b.tcp_port: [y]},
                             {port: sorted(n.get("topics", [])) for port, n in nodes.items()})
    with soft("L-HTTP-12"):
        lookupd.verify.equal("POST /topic/tombstone of A for X", 200,
                             lookupd.http.post(f"/topic/tombstone?topic={x}&node=127.0.0.1:{a.http_port}").status)
    with soft("L-HTTP-12"):
        lookupd.verify.equal("after A's tombstone for X: /lookup of X, of Y", ([], sorted([a.tcp_port, b.tcp_port])),
                             (producer_ports(lookup(lookupd, x)), producer_ports(lookup(lookupd, y))))
    with soft("L-HTTP-07, L-HTTP-12"):
        flags = node(lookupd, a.tcp_port) or {}
        lookupd.verify.equal("/nodes: A's tombstone flags per topic", {x: True, y: False},
                             dict(zip(flags.get("topics", []), flags.get("tombstones", []), strict=False)))
    lookupd.verify.equal(f"UNREGISTER {y} by B", b"OK", b.command(f"UNREGISTER {y}\n".encode()), "L-TCP-15")
    with soft("L-TCP-15"):
        lookupd.verify.equal("after B's UNREGISTER of Y: /lookup of Y", (["b"], [a.tcp_port]),
                             (lookup(lookupd, y)["channels"], producer_ports(lookup(lookupd, y))))
    lookupd.verify.equal(f"UNREGISTER {x} a by A", b"OK", a.command(f"UNREGISTER {x} a\n".encode()), "L-TCP-14")
    with soft("L-TCP-14"):
        lookupd.verify.equal("after A's UNREGISTER of X's channel: /channels of X, of Y (names stay), /lookup of Y",
                             (["a"], ["b"], [a.tcp_port]),
                             (*(lookupd.http.get(f"/channels?topic={t}").json()["channels"] for t in (x, y)),
                              producer_ports(lookup(lookupd, y))))
    b.close()
    lookupd.until(lambda: node(lookupd, b.tcp_port) is None, 2.0, "B is gone")
    with soft():
        lookupd.verify.equal("after B left: /lookup of Y still names A", [a.tcp_port],
                             producer_ports(lookup(lookupd, y)))


@requirement("NSQLOOKUPD-HTTP-010")
def test_names_each_producers_topology(lookupd):
    """A producer that IDENTIFYs with a region and a zone is named with them in /lookup, /nodes and /debug
    (L-HTTP-19)."""
    topic, conn = lookupd.topic(), lookupd.connect()
    conn.identify(topology_region="region-a", topology_zone="zone-1")
    lookupd.verify.equal(f"REGISTER {topic} c", b"OK", conn.command(f"REGISTER {topic} c\n".encode()))
    expected = ("region-a", "zone-1")

    def topology(entry: dict | None) -> tuple:
        return (entry or {}).get("topology_region"), (entry or {}).get("topology_zone")

    with lookupd.verify.soft("L-HTTP-19"):
        producers = lookup(lookupd, topic)["producers"]
        lookupd.verify.equal("/lookup producer's (topology_region, topology_zone)", [expected],
                             [topology(producer) for producer in producers])
    with lookupd.verify.soft("L-HTTP-19"):
        lookupd.verify.equal("/nodes producer's (topology_region, topology_zone)", expected,
                             topology(node(lookupd, conn.tcp_port)))
    with lookupd.verify.soft("L-HTTP-19"):
        debug = lookupd.http.get("/debug").json()
        lookupd.verify.equal(f"/debug channel:{topic}:c producer's (topology_region, topology_zone)", [expected],
                             [topology(entry) for entry in debug.get(f"channel:{topic}:c", [])])


@requirement("NSQLOOKUPD-HTTP-006")
def test_a_silent_producer_goes_inactive_and_a_ping_revives_it(lookupd):
    """No PING for --inactive-producer-timeout: gone from /lookup and /nodes (the names stay); a PING brings it
    back (L-TCP-19, L-HTTP-16; rec-0326)."""
    timeout = short(lookupd, "inactive_producer_timeout_ms")
    topic, conn = lookupd.topic(), lookupd.connect()
    started = time.monotonic()  # before the IDENTIFY, which makes it active (L-TCP-19)
    conn.identify()
    conn.command(f"REGISTER {topic} c\n".encode())
    lookupd.verify.equal("/lookup right after REGISTER", [conn.tcp_port], producer_ports(lookup(lookupd, topic)))
    if time.monotonic() - started < timeout / 2:
        time.sleep(max(0.0, started + timeout / 2 - time.monotonic()))
        lookupd.verify.equal("/lookup within the timeout: still active", [conn.tcp_port],
                             producer_ports(lookup(lookupd, topic)))
    lookupd.until(lambda: producer_ports(lookup(lookupd, topic)) == [], timeout + 2.0, "it goes inactive")
    lookupd.verify.that("it goes inactive no sooner than the timeout (L-TCP-19)",
                        time.monotonic() - started >= timeout, f">= {timeout:g} s",
                        f"{time.monotonic() - started:.2f} s")
    left = {"channels": ["c"], "producers": []}
    lookupd.verify.equal("/lookup after the timeout: the channel stays, no producer", left,
                         as_read(left, lookup(lookupd, topic)))
    lookupd.verify.equal("/nodes after the timeout: not listed", None, node(lookupd, conn.tcp_port))
    lookupd.verify.equal("PING", b"OK", conn.command(b"PING\n"))
    lookupd.verify.equal("/lookup after a PING: active again", [conn.tcp_port], producer_ports(lookup(lookupd, topic)))
    lookupd.verify.equal("/nodes after a PING: listed with its topic", [topic],
                         (node(lookupd, conn.tcp_port) or {}).get("topics"))


@requirement("NSQLOOKUPD-HTTP-007")
def test_a_tombstone_expires(lookupd):
    """A producer tombstoned for a topic is hidden from its /lookup for --tombstone-lifetime, then listed again;
    /nodes flags it meanwhile (L-HTTP-12, L-HTTP-17; rec-0327)."""
    lifetime = short(lookupd, "tombstone_lifetime_ms")
    inactive = lookupd.target.limits.get("inactive_producer_timeout_ms", 0) / 1000
    topic, conn = lookupd.topic(), lookupd.connect()
    conn.identify()
    conn.command(f"REGISTER {topic}\n".encode())
    lookupd.verify.equal("POST /topic/tombstone", 200,
                         lookupd.http.post(f"/topic/tombstone?topic={topic}&node=127.0.0.1:{conn.http_port}").status)
    tombstoned = time.monotonic()
    lookupd.verify.equal("/lookup right after the tombstone", [], producer_ports(lookup(lookupd, topic)))
    lookupd.verify.equal("/nodes: tombstoned", [True], (node(lookupd, conn.tcp_port) or {}).get("tombstones"))

    pinged = [tombstoned]

    def listed_again() -> bool:
        if inactive and time.monotonic() - pinged[0] > inactive / 3:
            conn.command(b"PING\n")  # stays active meanwhile (L-TCP-19)
            pinged[0] = time.monotonic()
        return producer_ports(lookup(lookupd, topic)) == [conn.tcp_port]

    lookupd.until(listed_again, lifetime + 2.0, "the tombstone expires")
    elapsed = time.monotonic() - tombstoned
    lookupd.verify.that("listed again after --tombstone-lifetime, not sooner (L-HTTP-17)",
                        lifetime <= elapsed <= lifetime + 2.0, f"{lifetime:g}..{lifetime + 2:g} s", f"{elapsed:.2f} s")
    lookupd.verify.equal("/nodes after the tombstone expired", [False],
                         (node(lookupd, conn.tcp_port) or {}).get("tombstones"))


@requirement("NSQLOOKUPD-HTTP-003")
def test_a_name_that_is_not_utf8_is_invalid(lookupd):
    """A topic or channel name of bytes that are not UTF-8 is refused like any invalid name (L-HTTP-08, -09)."""
    for path, message in (("/topic/create?topic=bad%FF", "INVALID_ARG_TOPIC"),
                          (f"/channel/create?topic={lookupd.topic()}&channel=bad%FF", "INVALID_ARG_CHANNEL")):
        response = lookupd.http.post(path)
        error = {"message": message}
        lookupd.verify.equal(f"POST {path}", (400, error), (response.status, as_read(error, response.json())))
