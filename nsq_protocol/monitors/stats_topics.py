"""Topics an MPUB made though it was refused: nsqd v1.3.0's MPUB gets its topic (nsqd/protocol_v2.go MPUB:
GetTopic) after the name's and auth's checks and before it reads the body, so an MPUB refused for its body (E_BAD_BODY,
E_BAD_MESSAGE) has made the topic, which every /stats answer asked after lists until a /topic/delete."""

from __future__ import annotations

from nsq_protocol.http import HttpExchange
from nsq_protocol.monitors.events import BROKER, ERROR
from nsq_protocol.monitors.monitor import Monitor
from nsq_protocol.monitors.stats_counters import stats_document, stats_topics

HTTP = "HTTP"
EPHEMERAL = "#ephemeral"
BODY_REFUSED = frozenset({"E_BAD_BODY", "E_BAD_MESSAGE"})  # readMPUB's and the body size's: after GetTopic
UNSEEN_HTTP = "the broker's HTTP requests are not all in the traffic: an unseen /topic/delete may have removed it"
OTHER_LIFE = "no /stats answer before the MPUB told the broker's life (its start_time), which a restart may end"


class RefusedMpubMadeTopic(Monitor):
    """P-MPUB-05: the topic of an MPUB refused for its body is listed in each /stats JSON answer asked after it, in
    the broker life an answer before the MPUB told (its start_time), until a /topic/delete of it."""

    ITEMS = ("P-MPUB-05",)
    KINDS = frozenset({ERROR})

    def __init__(self) -> None:
        super().__init__()
        self._made: dict[str, float] = {}  # topic -> when the refusal came
        self._start_time: int | None = None  # the broker's life, as the last /stats answer told it

    def observe(self, judge, connection, event, answered):
        if answered is not None and answered.name == "MPUB" and event.name in BODY_REFUSED and answered.topic \
                and not answered.topic.endswith(EPHEMERAL):
            if self._start_time is None:
                self.skip("P-MPUB-05", OTHER_LIFE)
            else:
                self._made.setdefault(answered.topic, event.ts)

    def http_exchange(self, judge, exchange: HttpExchange):
        request, response = exchange.request, exchange.response
        if response.status != 200:
            return
        if request.path == "/topic/delete":
            self._made.pop(request.query("topic"), None)
            return
        document = stats_document(exchange) if request.path == "/stats" and response.whole else None
        if document is None:
            return
        if document.get("start_time") != self._start_time:
            self._made.clear()  # a restart: what it made may not have been written down
            self._start_time = document.get("start_time")
            return
        params = request.params() or {}
        if params.get("channel"):
            return  # a channel filter leaves out the topics without it (H-STATS-05)
        listed = {entry["topic_name"] for entry in stats_topics(document)}
        for topic, made in self._made.items():
            if made >= exchange.ts or params.get("topic", "") not in ("", topic):
                continue
            if not judge.http_seen:
                self.skip("P-MPUB-05", UNSEEN_HTTP)
            elif topic not in listed:
                self.report("P-MPUB-05", BROKER, exchange.ts, HTTP, f"topic {topic}, made by an MPUB refused for "
                            "its body, listed", "not listed", exchange)
