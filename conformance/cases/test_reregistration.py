"""What a broker registers again (R-01, R-02, R-03, R-04, R-05, R-06, R-07, R-08, R-09, R-10, R-11, R-12, R-13, R-14,
R-15 in conformance/spec/registration.toml): after its own restart, with a lookupd added at run time, and after a
lookupd dropped the connection. On a broker of the case's own that registers with a fake nsqlookupd from its start
(conformance/crash.py), so nothing of other cases' topics gets in the way."""

import json
import socket
import time

import pytest

from conformance import crash
from conformance.lookupd_fake import FakeLookupd
from conformance.target import free_loopback_address

requirement = pytest.mark.requirement


def registered(nsq, lookupd, start: int, expected: set[str], seconds: float, why: str) -> set[str]:
    """The REGISTER/UNREGISTER lines about this case's topics from `start` on, once `expected` are all in."""
    def mine() -> set[str]:
        return {event.line for event in lookupd.since(start)
                if event.line.split(" ")[0] in ("REGISTER", "UNREGISTER")
                and event.line.split(" ")[1].startswith(nsq.name_prefix)}
    nsq.until(lambda: expected <= mine(), seconds, why)
    time.sleep(0.2)  # and what follows right after
    return mine()


def identify_after(lookupd, start: int) -> dict | None:
    return next((event.body for event in lookupd.since(start) if event.line == "IDENTIFY"), None)


@requirement("NSQ-REG-006")
def test_a_restarted_broker_registers_everything_again(crashable):
    """After a SIGTERM restart: a new connection, IDENTIFY with its own ports and version, REGISTER of each channel
    and of a topic without channels; no UNREGISTER (R-02, R-09; rec-0335)."""
    nsq = crashable
    crash.require(nsq, "restart", "lookupd")
    lookupd, topic, lone = nsq.target.lookupd, nsq.topic(), nsq.topic()
    for path in (f"/topic/create?topic={topic}", f"/channel/create?topic={topic}&channel=c",
                 f"/topic/create?topic={lone}"):
        nsq.verify.equal(f"POST {path}", 200, nsq.http.post(path).status)
    registered(nsq, lookupd, 0, {f"REGISTER {topic} c", f"REGISTER {lone}"}, 3.0, "the broker registered them")
    start = lookupd.mark()
    nsq.restart()
    lines = registered(nsq, lookupd, start, {f"REGISTER {topic} c", f"REGISTER {lone}"}, 5.0,
                       "the restarted broker registers them again")
    nsq.verify.equal("what the restarted broker registers (R-09; REGISTER of the topic too, from restoring it)",
                     {f"REGISTER {topic} c", f"REGISTER {topic}", f"REGISTER {lone}"}, lines)
    body = identify_after(lookupd, start) or {}
    version = nsq.http.get("/info").json().get("version")
    nsq.verify.equal("IDENTIFY after the restart: tcp_port, http_port, version (R-02)",
                     (nsq.target.tcp[1], nsq.target.http[1], version),
                     (body.get("tcp_port"), body.get("http_port"), body.get("version")))
    if nsq.target.tcp[0].startswith("127."):
        nsq.verify.soft_equal("IDENTIFY hostname and default broadcast_address: the OS hostname of a broker on this "
                              "machine (R-02)", (socket.gethostname(),) * 2,
                              (body.get("hostname"), body.get("broadcast_address")))


@requirement("NSQ-REG-007")
def test_a_lookupd_added_at_run_time_gets_every_registration(crashable):
    """PUT /config/nsqlookupd_tcp_addresses with one more lookupd: it gets the magic, IDENTIFY and a REGISTER of
    every channel at once, and new topics while another listed one is down; taken out of the list again, its
    connection is closed at once (R-10, R-11; rec-0337)."""
    nsq = crashable
    crash.require(nsq, "lookupd")
    first, topic = nsq.target.lookupd, nsq.topic()
    for path in (f"/topic/create?topic={topic}", f"/channel/create?topic={topic}&channel=c"):
        nsq.verify.equal(f"POST {path}", 200, nsq.http.post(path).status)
    registered(nsq, first, 0, {f"REGISTER {topic} c"}, 3.0, "the first lookupd has it")
    second = FakeLookupd().start()
    try:
        both = ["%s:%d" % first.address, "%s:%d" % second.address]
        listed = [*both, free_loopback_address()]  # and one where nothing listens
        put = nsq.http.request("PUT", "/config/nsqlookupd_tcp_addresses", json.dumps(listed).encode())
        nsq.verify.equal("PUT /config/nsqlookupd_tcp_addresses echoes the list (R-11)", (200, listed),
                         (put.status, put.json()))
        lines = registered(nsq, second, 0, {f"REGISTER {topic} c"}, 3.0, "the new lookupd gets the registrations")
        nsq.verify.equal("what the new lookupd gets (R-11)", {f"REGISTER {topic} c"}, lines)
        firsts = [event.line for event in second.since(0)][:2]
        nsq.verify.equal("the new lookupd's first commands (R-01)", ["MAGIC", "IDENTIFY"], firsts)
        later, start = nsq.topic(), second.mark()
        nsq.connect().publish(later, b"with a lookupd down")  # one unreachable lookupd stops nothing
        for lookupd in (first, second):
            registered(nsq, lookupd, start if lookupd is second else 0, {f"REGISTER {later}"}, 3.0,
                       "both reachable lookupds get the new topic")
        nsq.verify.equal("REGISTER of a topic made while a listed lookupd is down, at both others",
                         [True, True], [any(event.line == f"REGISTER {later}" for event in lookupd.since(0))
                                        for lookupd in (first, second)])
        nsq.http.request("PUT", "/config/nsqlookupd_tcp_addresses", json.dumps(both[:1]).encode())
        nsq.until(lambda: any(event.line == "CLOSED" for event in second.since(0)), 2.0,
                  "the lookupd taken out is closed")
        nsq.verify.that("a lookupd taken out of the list is closed at once (R-11)",
                        any(event.line == "CLOSED" for event in second.since(0)), "closed", "still connected")
    finally:
        second.stop()


@requirement("NSQ-REG-008")
@pytest.mark.long_wait(16)
def test_a_lookupd_that_dropped_the_connection_gets_everything_again(crashable):
    """The lookupd closes the broker's connection; the broker's next REGISTER fails and is not retried; at the
    next 15 s tick it connects again: IDENTIFY, a REGISTER of every channel and topic, the lost one too (R-10;
    rec-0336)."""
    nsq = crashable
    crash.require(nsq, "lookupd")
    lookupd, topic, later = nsq.target.lookupd, nsq.topic(), nsq.topic()
    for path in (f"/topic/create?topic={topic}", f"/channel/create?topic={topic}&channel=c"):
        nsq.verify.equal(f"POST {path}", 200, nsq.http.post(path).status)
    registered(nsq, lookupd, 0, {f"REGISTER {topic} c"}, 3.0, "the lookupd has it")
    lookupd.drop()
    nsq.until(lambda: any(event.line == "CLOSED" for event in lookupd.since(0)), 2.0, "the connection is closed")
    start = lookupd.mark()
    nsq.verify.equal(f"POST /topic/create?topic={later}", 200, nsq.http.post(f"/topic/create?topic={later}").status)
    lines = registered(nsq, lookupd, start, {f"REGISTER {topic} c", f"REGISTER {later}"}, 16.0,
                       "the broker connected again at its next tick and registered everything")
    nsq.verify.equal("what the broker registers on its new connection (R-10)",
                     {f"REGISTER {topic} c", f"REGISTER {later}"}, lines)
    nsq.verify.that("it IDENTIFYed again first (R-10)", identify_after(lookupd, start) is not None, "IDENTIFY",
                    [event.line for event in lookupd.since(start)][:3])


@requirement("NSQ-REG-009")
def test_a_new_topic_gets_the_channels_its_lookupd_knows(crashable):
    """The first PUB to a topic its nsqlookupd knows channels of: the broker asks the lookupd's GET /channels and
    creates them before the message goes in, so they all get it; an ephemeral one is not made without a consumer,
    and a name the broker refuses elsewhere stops none of the others (nsqd.go GetTopic)."""
    nsq = crashable
    crash.require(nsq, "lookupd")
    topic, lookupd = nsq.topic(), nsq.target.lookupd
    # the ephemeral one sorts first; nsqd creates even a name its own API would refuse, the reference skips it
    lookupd.channels[topic] = ["0-seen#ephemeral", "known", "a-second", "bad!name"]
    lookupd.settle(5.0 * nsq.time_scale)  # the broker asks only the lookupds that answered its IDENTIFY
    nsq.connect().publish(topic, b"for every known channel")

    def channels() -> dict:
        return {channel["channel_name"]: channel["depth"] for channel in (nsq.http.stats(topic) or {}).get(
            "channels", []) if channel["channel_name"] != "bad!name"}

    nsq.until(lambda: channels() == {"a-second": 1, "known": 1}, 2.0, "the message reached the channels")
    nsq.verify.equal("the topic's channels after its first PUB, with their depth", {"a-second": 1, "known": 1},
                     channels())


@requirement("NSQ-REG-014")
@pytest.mark.parametrize("reply", [b"E_INVALID", b"not json"], ids=["e-invalid", "not-json"])
def test_a_lookupd_refusing_the_identify_is_hung_up_on(crashable, reply):
    """With a topic registered, a second lookupd is added at run time that answers the broker's IDENTIFY with
    E_INVALID or with what is not JSON: the broker hangs up on it without registering the topic there, while its
    first lookupd still gets what is new (R-02)."""
    nsq = crashable
    crash.require(nsq, "lookupd")
    first, topic, later = nsq.target.lookupd, nsq.topic(), nsq.topic()
    nsq.verify.equal(f"POST /topic/create?topic={topic}", 200, nsq.http.post(f"/topic/create?topic={topic}").status)
    registered(nsq, first, 0, {f"REGISTER {topic}"}, 3.0, "the first lookupd has the topic")
    refusing = FakeLookupd(identify_reply=reply).start()
    try:
        listed = ["%s:%d" % first.address, "%s:%d" % refusing.address]
        nsq.http.request("PUT", "/config/nsqlookupd_tcp_addresses", json.dumps(listed).encode())
        nsq.until(lambda: any(event.line == "CLOSED" for event in refusing.since(0)), 3.0,
                  "the broker hung up on the refusing lookupd")
        nsq.verify.equal(f"POST /topic/create?topic={later}", 200, nsq.http.post(f"/topic/create?topic={later}").status)
        registered(nsq, first, 0, {f"REGISTER {later}"}, 3.0, "the first lookupd gets the new topic")
        first_connection = [event.line for event in refusing.since(0) if event.connection == 1]
        nsq.verify.equal("the refusing lookupd's first connection, and the first lookupd's REGISTER of the new topic "
                         "(R-02)", (["MAGIC", "IDENTIFY", "CLOSED"], True),
                         (first_connection, any(event.line == f"REGISTER {later}" for event in first.since(0))))
    finally:
        refusing.stop()
