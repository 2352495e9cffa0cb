"""The broker: its topics, its connected clients, and the queue-scan loop (nsqd/nsqd.go)."""
from __future__ import annotations

import itertools
import threading
import time
from typing import TYPE_CHECKING

from .options import Options
from .topic import Topic

if TYPE_CHECKING:
    from .client_v2 import ClientV2

VERSION = "1.3.0"  # the nsqd release whose behaviour this broker implements


class NSQD:
    def __init__(self, options: Options):
        self.options = options
        self.start_time = time.time()
        self.topics: dict[str, Topic] = {}
        self.clients: dict[int, ClientV2] = {}
        self._client_ids = itertools.count(1)
        self._lock = threading.Lock()
        self._exit = threading.Event()
        self._scan_thread = threading.Thread(target=self._queue_scan_loop, name="queue-scan", daemon=True)
        self.tcp_port = 0
        self.http_port = 0

    def start(self) -> None:
        self._scan_thread.start()

    def stop(self) -> None:
        self._exit.set()
        with self._lock:
            topics = list(self.topics.values())
            self.topics.clear()
        for topic in topics:
            topic.close()

    # -- topics -----------------------------------------------------------------------------------------

    def get_topic(self, name: str) -> Topic:
        with self._lock:
            topic = self.topics.get(name)
            if topic is None:
                topic = self.topics[name] = Topic(name, self.options, self._topic_emptied)
            return topic

    def existing_topic(self, name: str) -> Topic | None:
        with self._lock:
            return self.topics.get(name)

    def delete_topic(self, name: str) -> bool:
        with self._lock:
            topic = self.topics.pop(name, None)
        if topic is None:
            return False
        topic.close()
        return True

    def _topic_emptied(self, topic: Topic) -> None:
        with self._lock:
            if self.topics.get(topic.name) is topic:
                del self.topics[topic.name]
        topic.close()

    def sorted_topics(self) -> list[Topic]:
        with self._lock:
            return sorted(self.topics.values(), key=lambda t: t.name)

    # -- clients ----------------------------------------------------------------------------------------

    def add_client(self, client: ClientV2) -> None:
        with self._lock:
            self.clients[client.id] = client

    def remove_client(self, client: ClientV2) -> None:
        with self._lock:
            self.clients.pop(client.id, None)

    def next_client_id(self) -> int:
        return next(self._client_ids)

    def connected_clients(self) -> list[ClientV2]:
        with self._lock:
            return list(self.clients.values())

    # -- the queue-scan loop (D-14) -------------------------------------------------------------------

    def _queue_scan_loop(self) -> None:
        """Every --queue-scan-interval, time out due in-flight messages and release due deferred ones.

        nsqd samples 20 random channels of a list refreshed every 5 s, so its timeouts can fire late on a
        new channel (D-14); this loop visits every channel on every tick, which is inside nsqd's window."""
        interval = self.options.queue_scan_interval / 1e9
        while not self._exit.wait(interval):
            now = time.monotonic_ns()
            for topic in self.sorted_topics():
                with topic.lock:
                    channels = list(topic.channels.values())
                for channel in channels:
                    channel.process_queues(now)
