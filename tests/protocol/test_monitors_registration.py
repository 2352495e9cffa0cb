"""nsqd's announcements to nsqlookupd (registration.toml, R-03 to R-07): its own traffic (a V2 connection, its HTTP
API) read by NamesChanged, its V1 connection to a lookupd judged by NsqdAnnounces against what that showed. Each
rule holds on nsqd v1.3.0's behaviour, fires where nsqd stays silent, and is not judged where the traffic ends too
soon or the lookupd connection is not the nsqd's."""

from __future__ import annotations

import json

from nsq_protocol import monitors, wire_v1
from nsq_protocol.http import HttpExchange, Request, Response
from nsq_protocol.monitors import BROKER
from nsq_protocol.monitors.events import COMMAND, RESPONSE, Observed
from nsq_protocol.monitors.lookupd_announces import ANNOUNCE_S, NsqdAnnounces
from nsq_protocol.monitors.nsqd_names import NamesChanged

T0 = 1_800_000_000.0
NSQD = "10.0.0.1:4150"
IDENTIFY = {"broadcast_address": "h", "hostname": "h", "tcp_port": 4150, "http_port": 4151, "version": "1.3.0"}
ANSWER = b'{"broadcast_address":"lk","hostname":"lk","http_port":4161,"tcp_port":4160,"version":"1.3.0"}'


class Cluster:
    """One nsqd registered with one nsqlookupd (its V1 connection "L"), in the order the traffic crossed the wire."""

    def __init__(self, tcp_port: int = 4150, knows=lambda judge, topic: True, nsqd_clients: bool = True):
        self.lookupd = monitors.new_lookupd_judge(http_seen=False, timing=True, nsqd_clients=nsqd_clients)
        names = NamesChanged(lambda change: self.lookupd.nsqd_changed(NSQD, change), knows)
        self.nsqd = monitors.Judge([names], timing=True, http_seen=True)
        self.at = T0
        self.lookupd.open("L", self.tick(), True, "10.0.0.1:50000")
        body = json.dumps({**IDENTIFY, "tcp_port": tcp_port}).encode()
        self.lookupd.client_bytes("L", self.tick(), wire_v1.MAGIC_V1 + wire_v1.encode_command("IDENTIFY", body=body))
        self.lookupd.server_bytes("L", self.tick(), wire_v1.encode_reply(ANSWER))

    def tick(self, seconds: float = 0.001) -> float:
        self.at += seconds
        return self.at

    def told(self, *words: str) -> Cluster:
        """nsqd sent the lookupd ``words``, answered OK."""
        self.lookupd.client_bytes("L", self.tick(), " ".join(words).encode() + b"\n")
        self.lookupd.server_bytes("L", self.tick(), wire_v1.encode_reply(b"OK"))
        return self

    def v2(self, name: str, verb: str, topic: str, channel: str | None = None) -> Cluster:
        """A V2 command on the nsqd, answered OK."""
        if name not in self.nsqd.connections:
            self.nsqd.open(name, self.tick(), True)
        self.nsqd.observe(name, Observed(self.tick(), COMMAND, verb, topic=topic, channel=channel))
        self.nsqd.observe(name, Observed(self.tick(), RESPONSE, "OK"))
        return self

    def leaves(self, name: str) -> Cluster:
        self.nsqd.close(name, self.tick(), monitors.CLIENT)
        return self

    def http(self, path: str, status: int = 200) -> Cluster:
        at = self.tick()
        self.nsqd.http_exchange(HttpExchange(at, Request("POST", path, b""), Response(status, b"", {}), self.tick()))
        return self

    def later(self, seconds: float) -> Cluster:
        self.tick(seconds)
        return self

    def found(self) -> list[tuple[str, str]]:
        return [(violation.item, violation.side) for violation in self.lookupd.finish(self.tick())]

    def not_judged(self, item: str) -> list[str]:
        return [why for (judged, why) in self.lookupd.not_judged if judged == item]


def test_creations_registered_once_keep_r_03():
    kept = Cluster().v2("A", "PUB", "t").told("REGISTER", "t").v2("A", "SUB", "t", "c").told("REGISTER", "t", "c")
    assert kept.v2("A", "PUB", "t").later(ANNOUNCE_S + 1).found() == []
    # the REGISTER may cross the wire before the client reads its OK
    early = Cluster().told("REGISTER", "t").v2("A", "PUB", "t").later(ANNOUNCE_S + 1)
    assert early.found() == []
    over_http = Cluster().http("/topic/create?topic=t").http("/channel/create?topic=t&channel=c")
    assert over_http.told("REGISTER", "t", "c").told("REGISTER", "t").later(ANNOUNCE_S + 1).found() == []


def test_a_creation_never_registered_is_r_03():
    assert Cluster().v2("A", "SUB", "t", "c").told("REGISTER", "t").later(ANNOUNCE_S + 1).found() == \
        [("R-03", BROKER)]
    assert Cluster().http("/topic/create?topic=t").later(ANNOUNCE_S + 1).found() == [("R-03", BROKER)]


def test_a_creation_raced_by_its_deletion_needs_no_register():
    raced = Cluster().http("/channel/create?topic=t&channel=c").told("REGISTER", "t")
    raced.http("/channel/delete?topic=t&channel=c").told("UNREGISTER", "t", "c").told("UNREGISTER", "t", "c")
    assert raced.later(ANNOUNCE_S + 1).found() == []


def test_r_03_not_judged_when_the_traffic_ends_first_or_on_another_nsqd():
    short = Cluster().v2("A", "PUB", "t")
    assert short.found() == [] and short.not_judged("R-03")
    other = Cluster(tcp_port=5150).v2("A", "PUB", "t").later(ANNOUNCE_S + 1)
    assert other.found() == []
    unknown = Cluster(knows=lambda judge, topic: False).v2("A", "PUB", "t").later(ANNOUNCE_S + 1)
    assert unknown.found() == []


def test_a_lost_lookupd_connection_owes_nothing():
    cluster = Cluster().v2("A", "PUB", "t")
    cluster.lookupd.close("L", cluster.tick(), BROKER)
    assert cluster.later(ANNOUNCE_S + 1).found() == []


def deleted_topic() -> Cluster:
    cluster = Cluster().http("/topic/create?topic=t")
    for channel in ("c1", "c2"):
        cluster.http(f"/channel/create?topic=t&channel={channel}")
    return cluster.told("REGISTER", "t").told("REGISTER", "t", "c1").told("REGISTER", "t", "c2")


def test_channel_deletion_is_unregistered_r_04():
    assert deleted_topic().http("/channel/delete?topic=t&channel=c1").told("UNREGISTER", "t", "c1") \
        .later(ANNOUNCE_S + 1).found() == []
    # the UNREGISTER may cross the wire before the HTTP answer
    cluster = deleted_topic()
    at = cluster.tick()
    cluster.told("UNREGISTER", "t", "c1")
    cluster.nsqd.http_exchange(HttpExchange(at, Request("POST", "/channel/delete?topic=t&channel=c1", b""),
                                            Response(200, b"", {}), cluster.tick()))
    assert cluster.later(ANNOUNCE_S + 1).found() == []
    assert deleted_topic().http("/channel/delete?topic=t&channel=c1").later(ANNOUNCE_S + 1).found() == \
        [("R-04", BROKER)]
    refused = deleted_topic().http("/channel/delete?topic=t&channel=c9", 404).later(ANNOUNCE_S + 1)
    assert refused.found() == []
    short = deleted_topic().http("/channel/delete?topic=t&channel=c1")
    assert short.found() == [] and short.not_judged("R-04")


def test_topic_deletion_unregisters_each_channel_and_the_topic_r_05():
    kept = deleted_topic().http("/topic/delete?topic=t")
    kept.told("UNREGISTER", "t", "c2").told("UNREGISTER", "t").told("UNREGISTER", "t", "c1")
    assert kept.later(ANNOUNCE_S + 1).found() == []
    broken = deleted_topic().http("/topic/delete?topic=t").told("UNREGISTER", "t").told("UNREGISTER", "t", "c1")
    assert broken.later(ANNOUNCE_S + 1).found() == [("R-05", BROKER)]
    short = deleted_topic().http("/topic/delete?topic=t")
    assert short.found() == [] and short.not_judged("R-05")


def ephemeral(topic: str = "t") -> Cluster:
    cluster = Cluster().v2("A", "SUB", topic, "e#ephemeral").v2("B", "SUB", topic, "e#ephemeral")
    return cluster.told("REGISTER", topic).told("REGISTER", topic, "e#ephemeral")


def test_an_ephemeral_channel_unregistered_when_its_last_consumer_leaves_r_06():
    kept = ephemeral().leaves("A").later(ANNOUNCE_S + 1).leaves("B").told("UNREGISTER", "t", "e#ephemeral")
    assert kept.later(ANNOUNCE_S + 1).found() == []
    assert ephemeral().leaves("A").leaves("B").later(ANNOUNCE_S + 1).found() == [("R-06", BROKER)]
    unseen = Cluster(knows=lambda judge, topic: False).v2("A", "SUB", "t", "e#ephemeral")
    unseen.told("REGISTER", "t", "e#ephemeral")
    assert unseen.leaves("A").later(ANNOUNCE_S + 1).found() == []
    short = ephemeral().leaves("A").leaves("B")
    assert short.found() == [] and short.not_judged("R-06")


def test_an_ephemeral_topic_leaves_with_its_last_channel_r_07():
    kept = ephemeral("t#ephemeral").leaves("A").leaves("B")
    kept.told("UNREGISTER", "t#ephemeral").told("UNREGISTER", "t#ephemeral", "e#ephemeral")
    assert kept.later(ANNOUNCE_S + 1).found() == []
    broken = ephemeral("t#ephemeral").leaves("A").leaves("B").told("UNREGISTER", "t#ephemeral", "e#ephemeral")
    assert broken.later(ANNOUNCE_S + 1).found() == [("R-07", BROKER)]
    # another channel keeps it
    kept_by_other = ephemeral("t#ephemeral").v2("C", "SUB", "t#ephemeral", "d").told("REGISTER", "t#ephemeral", "d")
    kept_by_other.leaves("A").leaves("B").told("UNREGISTER", "t#ephemeral", "e#ephemeral")
    assert kept_by_other.later(ANNOUNCE_S + 1).found() == []
    short = ephemeral("t#ephemeral").leaves("A").leaves("B")
    assert short.found() == [] and short.not_judged("R-07")


def test_test_clients_of_lookupd_owe_nothing():
    cluster = Cluster(nsqd_clients=False)
    assert cluster.v2("A", "PUB", "t").later(ANNOUNCE_S + 1).found() == []
    assert NsqdAnnounces in monitors.LOOKUPD_MONITORS


class LoggedLookupd:
    """What conformance.lookupd_fake.FakeLookupd logged (its ``since``), at the transcript's clock."""

    def __init__(self, events: list):
        self.events = events

    def since(self, start: int) -> list:
        return self.events[start:]


def test_a_registration_case_judges_the_fake_lookupds_log():
    """conformance/monitoring.judge_registration: the case's HTTP exchanges with nsqd and what the fake lookupd
    logged reach NsqdAnnounces, on one clock; only the case's own topics are judged."""
    from conformance.lookupd_fake import Event
    from conformance.monitoring import judge_registration
    from conformance.transcript import CLIENT_TO_SERVER, SERVER_TO_CLIENT, Transcript

    transcript = Transcript()
    at = transcript.started
    body = {**IDENTIFY, "tcp_port": 4150}
    opening = [Event(at, 1, "MAGIC"), Event(at, 1, "IDENTIFY", body), Event(at + 0.01, 1, "REGISTER own0 c"),
               Event(at + 0.01, 1, "REGISTER other c")]
    for path in ("/channel/delete?topic=own0&channel=c", "/channel/delete?topic=other&channel=c"):
        transcript.record("HTTP", CLIENT_TO_SERVER, [f"POST {path}"])
        sent = transcript.wall_started + 0.02
        transcript.record("HTTP", SERVER_TO_CLIENT, ["200 b''"], b"", observed=(
            HttpExchange(sent, Request("POST", path, b""), Response(200, b"", {}), sent + 0.001),))
    later = [Event(at + ANNOUNCE_S + 1, 1, "PING")]

    def found(logged: list) -> list:
        judges = judge_registration(transcript, LoggedLookupd(logged), "127.0.0.1:4150", "own")
        return [(violation.item, violation.side) for judge in judges for violation in judge.violations
                if violation.item.startswith("R-")]  # nsqd's HTTP monitors judge the bare answers made here

    assert found(opening + later) == [("R-04", BROKER)]
    assert found(opening + [Event(at + 0.03, 1, "UNREGISTER own0 c")] + later) == []
