"""An ephemeral topic's or channel's queue in /stats: nsqd v1.3.0 gives it a dummy backend (nsqd/channel.go
NewChannel, nsqd/topic.go NewTopic: newDummyBackendQueue, whose Depth is 0) and a memory queue of --mem-queue-size
even where that is 0; put drops what the memory queue cannot take. Its depth is len(memoryMsgChan) plus the dummy's
0 (Channel.Depth, Topic.Depth), so however messages move while /stats reads them, backend_depth is 0 and depth at most
--mem-queue-size, which a GET /config/mem_queue_size answer tells.

A normal channel's depth and backend_depth are no such bound: NewChannelStats reads the disk queue's depth twice
(once in Depth, once for backend_depth) while the broker's pumps move messages between memory, disk and clients
unseen, so neither their difference nor their order is certain in one answer."""

from __future__ import annotations

import json

from nsq_protocol.http import HttpExchange
from nsq_protocol.monitors.events import BROKER
from nsq_protocol.monitors.monitor import Monitor
from nsq_protocol.monitors.stats_counters import EPHEMERAL, HTTP, stats_channels, stats_document, stats_topics

NO_SIZE = "no GET /config/mem_queue_size answer in the broker's life (its start_time) tells its --mem-queue-size"


class EphemeralQueueInMemory(Monitor):
    """D-50, D-52: an ephemeral channel's or topic's backend_depth 0 in every /stats JSON answer (no disk queue);
    D-53, D-74: its depth at most --mem-queue-size (0 with --mem-queue-size=0: it keeps nothing), where a
    /config/mem_queue_size answer in the same life tells it."""

    ITEMS = ("D-50", "D-52", "D-53", "D-74")
    KINDS = frozenset()

    def __init__(self) -> None:
        super().__init__()
        self._life: int | None = None  # the start_time the last /stats answer told
        self._sizes: dict[int, int] = {}  # start_time -> the --mem-queue-size a /config answer in that life told

    def http_exchange(self, judge, exchange: HttpExchange):
        request, response = exchange.request, exchange.response
        if request.method != "GET" or response.status != 200 or not response.whole:
            return
        if request.path == "/config/mem_queue_size":
            size = _number(response.body)
            if size is not None and self._life is not None:
                self._sizes[self._life] = size
            return
        document = stats_document(exchange) if request.path == "/stats" else None
        if document is None:
            return
        self._life = document.get("start_time") if isinstance(document.get("start_time"), int) else None
        size = self._sizes.get(self._life)
        for topic in stats_topics(document):
            name = topic["topic_name"]
            if name.endswith(EPHEMERAL):
                self._queue(exchange, f"topic {name}", topic, "D-52", size)
            for channel in stats_channels(topic):
                if channel["channel_name"].endswith(EPHEMERAL):
                    self._queue(exchange, f"channel {name}/{channel['channel_name']}", channel, "D-50", size)

    def _queue(self, exchange: HttpExchange, what: str, entry: dict, item: str, size: int | None) -> None:
        backend = entry.get("backend_depth")
        if isinstance(backend, int) and backend != 0:
            self.report(item, BROKER, exchange.ts, HTTP, f"ephemeral {what}'s backend_depth 0 (no disk queue)",
                        f"{backend}", exchange)
        depth = entry.get("depth")
        if size is None:
            self.skip("D-53", NO_SIZE)
        elif isinstance(depth, int) and depth > size:
            self.report("D-74" if size == 0 else "D-53", BROKER, exchange.ts, HTTP, f"ephemeral {what}'s depth at "
                        f"most {size}, --mem-queue-size: what its memory queue cannot take is dropped",
                        f"{depth}", exchange)


def _number(body: bytes) -> int | None:
    try:
        value = json.loads(body)
    except ValueError:
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
