"""What nsqd tells a new connection to an nsqlookupd (registration.toml, R-10, R-11): its lookupd.go connectCallback
REGISTERs every channel it has and every topic without channels before the connection's first PING, after a lost
connection (R-10) and for a PUT of its lookupds' list (R-11). Judged by NsqdAnnounces over nsqd's topics as its
own traffic shows them (NamesChanged); the recordings of the real nsqd (rec-0336, rec-0337) keep it, and the same
recordings with a REGISTER left out break it."""

from __future__ import annotations

import copy
import json
import pathlib

from test_monitors_lookupd import TRANSCRIPTS, judge_recording  # noqa: E402 isort: skip
from test_monitors_registration import ANSWER, IDENTIFY, NSQD, Cluster  # noqa: E402 isort: skip

from nsq_protocol import wire_v1
from nsq_protocol.http import HttpExchange, Request, Response
from nsq_protocol.monitors import BROKER
from nsq_protocol.monitors.lookupd_announces import ANNOUNCE_S, ENDED
from nsq_protocol.monitors.lookupd_nsqd import PING_S
from nsq_protocol.monitors.nsqd_names import RESTARTED, NameChange


class Reconnecting(Cluster):
    """The Cluster's nsqd, whose first lookupd connection "L" is lost and which connects again as ``name``."""

    def lost(self) -> Reconnecting:
        self.lookupd.close("L", self.tick(), BROKER)
        return self

    def connects(self, name: str, *registers: tuple[str, ...], ping: bool = True) -> Reconnecting:
        self.lookupd.open(name, self.tick(), True, "10.0.0.1:50001")
        body = json.dumps(IDENTIFY).encode()
        self.lookupd.client_bytes(name, self.tick(), wire_v1.MAGIC_V1 + wire_v1.encode_command("IDENTIFY", body=body))
        self.lookupd.server_bytes(name, self.tick(), wire_v1.encode_reply(ANSWER))
        for words in (*registers, *((("PING",),) if ping else ())):
            self.on(name, *words)
        return self

    def on(self, name: str, *words: str) -> Reconnecting:
        """nsqd sent ``words`` on connection ``name``, answered OK."""
        self.lookupd.client_bytes(name, self.tick(), " ".join(words).encode() + b"\n")
        self.lookupd.server_bytes(name, self.tick(), wire_v1.encode_reply(b"OK"))
        return self

    def puts_lookupds(self) -> Reconnecting:
        at = self.tick()
        self.nsqd.http_exchange(HttpExchange(at, Request("PUT", "/config/nsqlookupd_tcp_addresses", b'["l2:4160"]'),
                                             Response(200, b'["l2:4160"]', {}), self.tick()))
        return self

    def restarted(self) -> Reconnecting:
        at = self.tick()
        self.lookupd.nsqd_changed(NSQD, NameChange(at, at, RESTARTED, ""))
        return self


def has_topics() -> Reconnecting:
    """nsqd has a topic with a channel and a topic without, both registered on "L"."""
    return Reconnecting().http("/channel/create?topic=t&channel=c").told("REGISTER", "t", "c") \
        .http("/topic/create?topic=u").told("REGISTER", "u")


def test_a_reconnection_registering_everything_keeps_r_10():
    # a topic with channels is registered by its channels' REGISTERs alone (lookupd.go connectCallback)
    assert has_topics().lost().connects("L2", ("REGISTER", "t", "c"), ("REGISTER", "u")).found() == []
    # the topic made while the connection was down, whose REGISTER was lost, comes on the new one
    lost = has_topics().lost().http("/topic/create?topic=v").told("REGISTER", "v")
    assert lost.connects("L2", ("REGISTER", "t", "c"), ("REGISTER", "u"), ("REGISTER", "v")).found() == []


def test_a_reconnection_leaving_a_topic_out_is_r_10():
    assert has_topics().lost().connects("L2", ("REGISTER", "t", "c")).found() == [("R-10", BROKER)]
    assert has_topics().lost().connects("L2", ("REGISTER", "u"), ("REGISTER", "t")).found() == [("R-10", BROKER)]


def test_what_was_deleted_before_the_reconnection_is_not_due():
    deleted = has_topics().http("/topic/delete?topic=u").told("UNREGISTER", "u").lost()
    assert deleted.connects("L2", ("REGISTER", "t", "c")).found() == []
    # a deletion told after the IDENTIFY (the snapshot may have been later) lifts the due too
    racing = has_topics().lost().connects("L2", ("REGISTER", "t", "c"), ping=False).http("/topic/delete?topic=u")
    assert racing.on("L2", "UNREGISTER", "u").on("L2", "PING").later(ANNOUNCE_S + 1).found() == []


def test_a_connection_after_a_put_of_the_lookupds_list_is_r_11():
    kept = has_topics().puts_lookupds().connects("L2", ("REGISTER", "t", "c"), ("REGISTER", "u"))
    assert kept.found() == []
    assert has_topics().puts_lookupds().connects("L2", ("REGISTER", "u")).found() == [("R-11", BROKER)]


def test_without_a_ping_yet_the_registrations_are_not_judged():
    ended = has_topics().lost().connects("L2", ("REGISTER", "u"), ping=False)
    assert ended.found() == [] and ended.not_judged("R-10")
    # a new connection with no PING within a tick: its connectCallback's REGISTERs are overdue
    silent = has_topics().lost().connects("L2", ("REGISTER", "u"), ping=False).later(PING_S + 2)
    assert ("R-10", BROKER) in silent.found()


def test_after_a_restart_nothing_known_is_due():
    restarted = has_topics().lost().restarted().connects("L2")
    assert restarted.later(ANNOUNCE_S + 1).found() == []


def test_a_new_topic_after_the_restart_is_due_again():
    restarted = has_topics().lost().restarted().http("/topic/create?topic=w").connects("L2", ("REGISTER", "u"))
    assert restarted.found() == [("R-10", BROKER)]


def _recording(identifier: str) -> dict:
    return next(transcript for transcript in map(json.loads, pathlib.Path(TRANSCRIPTS).read_text().splitlines())
                if transcript["id"] == identifier)


def _without(transcript: dict, line: str, lookupd: int, conn: int) -> dict:
    """The recording with nsqd's ``line`` to fake ``lookupd``'s connection ``conn`` left out."""
    broken = copy.deepcopy(transcript)
    for step in broken["steps"]:
        if step.get("lookupd") == lookupd and "lookupd_expect" in step:
            step["lookupd_expect"] = [said for said in step["lookupd_expect"]
                                      if not (said.get("conn") == conn and said.get("line") == line)]
    return broken


def _pinged(transcript: dict, lookupd: int, conn: int) -> dict:
    """The recording with the PING of nsqd's next tick after its last line to fake ``lookupd``."""
    pinged = copy.deepcopy(transcript)
    last = [step for step in pinged["steps"] if step.get("lookupd") == lookupd and "lookupd_expect" in step][-1]
    last["lookupd_expect"].append({"conn": conn, "line": "PING"})
    return pinged


def test_the_real_nsqd_keeps_r_10_and_r_11_and_leaving_a_register_out_breaks_them():
    # rec-0337 ends before the new connection's first PING: the tick's is added
    for recorded, item, lookupd, conn, line in ((_recording("rec-0336"), "R-10", 1, 2, "REGISTER r0336-b"),
                                                (_pinged(_recording("rec-0337"), 2, 1), "R-11", 2, 1,
                                                 "REGISTER r0337")):
        assert judge_recording(recorded).violations == []
        broken = judge_recording(_without(recorded, line, lookupd, conn))
        assert [(violation.item, violation.side) for violation in broken.violations] == [(item, BROKER)]
    # without the tick's PING, the connectCallback may not be over: not judged
    assert judge_recording(_without(_recording("rec-0337"), "REGISTER r0337", 2, 1)).not_judged[("R-11", ENDED)] == 1
