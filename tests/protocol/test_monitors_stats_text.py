"""The text /stats report's client lines against the connections they describe (stats_text.py): a line that shows
its connection's IDENTIFY keeps H-STATS-13, one with other strings, a consumer missing beneath its channel or a
producer line of a connection that never published break it, and a line whose IDENTIFY was still in flight is not
judged."""

from __future__ import annotations

from nsq_protocol.http import HttpExchange, Request, Response
from nsq_protocol.monitors.stats_text import IN_FLUX, TextStatsClients
from tests.protocol.test_monitors import T0, Traffic

HEAD = "nsqd v1.3.0 (built w/go1.21)\nstart_time 2026-01-01T00:00:00Z\nuptime 1m\n\nHealth: OK\n\nTopics:"
CHANNEL = "\n   [t              ] depth: 0     be-depth: 0     msgs: 1        e2e%: \n" \
          "      [c                        ] depth: 0     be-depth: 0     inflt: 0    def: 0    re-q: 0     " \
          "timeout: 0     msgs: 1        e2e%: \n"


def consumer_line(hostname: str = "box", port: int = 5001, agent: str = "lib/1.0") -> str:
    ident = f"{hostname}:{port} {agent}"
    return f"        [V2 {ident:<21}] state: 3 inflt: 0    rdy: 1    fin: 0        re-q: 0        msgs: 0        " \
           "connected: 1s\n"


def producer_line(topics: str = "t=1", port: int = 5002) -> str:
    ident = f"pub:{port} lib/1.0"
    return f"   [V2 {ident:<21}] msgs: 1        topics: {topics} connected: 1s\n"


def traffic_of(identify_answered: float = 0.2) -> Traffic:
    traffic = Traffic()
    traffic.judge.open("A", T0, True, client="127.0.0.1:5001")
    traffic.identify(0.1, {"hostname": "box", "user_agent": "lib/1.0"}).ok(identify_answered)
    traffic.send(0.3, b"SUB", "t", "c").ok(0.31)
    traffic.judge.open("P", T0, True, client="127.0.0.1:5002")
    traffic.identify(0.1, {"hostname": "pub", "user_agent": "lib/1.0"}, conn="P").ok(0.2, "P")
    traffic.send(0.3, b"PUB", "t", body=b"x", conn="P").ok(0.31, "P")
    return traffic


def report(traffic: Traffic, body: str, at: float = 1.0) -> TextStatsClients:
    traffic.judge.http_exchange(HttpExchange(T0 + at, Request("GET", "/stats", b""), Response(200, body.encode()),
                                             T0 + at + 0.01))
    traffic.judge.finish(T0 + 2.0)
    return next(monitor for monitor in traffic.judge.monitors if isinstance(monitor, TextStatsClients))


def test_lines_as_the_connections_identified_keep_h_stats_13():
    monitor = report(traffic_of(), HEAD + CHANNEL + consumer_line() + "\nProducers:\n" + producer_line())
    assert monitor.violations == []


def test_another_hostname_a_missing_consumer_or_a_producer_that_never_published_is_h_stats_13():
    wrong_name = report(traffic_of(), HEAD + CHANNEL + consumer_line(hostname="other") + "\nProducers: None\n")
    assert [(violation.item, violation.side) for violation in wrong_name.violations] == [("H-STATS-13", "broker")]
    missing = report(traffic_of(), HEAD + CHANNEL + "\nProducers:\n" + producer_line())
    assert [violation.observed for violation in missing.violations] == ["not listed"]
    never = report(traffic_of(), HEAD + CHANNEL + consumer_line() + "\nProducers:\n" + producer_line("u=1"))
    assert len(never.violations) == 1 and "u=1" in never.violations[0].observed


def test_an_identify_answered_after_the_request_was_sent_is_not_judged():
    monitor = report(traffic_of(identify_answered=1.005), HEAD + CHANNEL + consumer_line(hostname="old") +
                     "\nProducers:\n" + producer_line())
    assert monitor.violations == [] and ("H-STATS-13", IN_FLUX) in monitor.not_judged
