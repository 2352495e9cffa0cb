"""The broker: its topics and connected clients, the metadata file, the queue-scan loop and the disk-sync
ticker (nsqd/nsqd.go)."""
from __future__ import annotations

import fcntl
import itertools
import json
import logging
import os
import random
import threading
import time
from typing import TYPE_CHECKING

from .diskqueue import DiskQueue
from .lookup import LookupLoop
from .message import MIN_VALID_MSG_LENGTH
from .options import Options
from .tls import server_context
from .topic import Topic
from .wire import is_valid_name

if TYPE_CHECKING:
    from .client_v2 import ClientV2

log = logging.getLogger("nsqd")

VERSION = "1.3.0"  # the nsqd release whose behaviour this broker implements
METADATA_FILE = "nsqd.dat"


class DataPathLocked(Exception):
    pass


class NSQD:
    def __init__(self, options: Options):
        self.options = options
        self.tls_context = server_context(options)  # raises TLSConfigError, before the data path is locked
        self.data_path = options.data_path or os.getcwd()
        self._data_path_lock = _lock_directory(self.data_path)
        self.start_time = time.time()
        self.topics: dict[str, Topic] = {}
        self.clients: dict[int, ClientV2] = {}
        self._client_ids = itertools.count(1)
        self._lock = threading.Lock()
        self._metadata_lock = threading.Lock()
        self._loading = False
        self._exit = threading.Event()
        self.health_error: str | None = None
        self._threads = [threading.Thread(target=self._queue_scan_loop, name="queue-scan", daemon=True),
                         threading.Thread(target=self._disk_sync_loop, name="disk-sync", daemon=True)]
        self.tcp_port = 0
        self.http_port = 0
        self.lookup = LookupLoop(self, VERSION)

    def start(self) -> None:
        options = self.options
        # nsqd.New: a broadcast port of 0 is the listener's (R-02, GET /config/broadcast_tcp_port)
        options.broadcast_tcp_port = options.broadcast_tcp_port or self.tcp_port
        options.broadcast_http_port = options.broadcast_http_port or self.http_port
        self.load_metadata()
        self.persist_metadata()  # the file exists from the start (P-RST-07)
        for thread in self._threads:
            thread.start()
        self.lookup.start()  # after loading: it connects first, then sends what loading queued

    def stop(self) -> None:
        """After the listeners and client connections are closed: persist, then let every topic and
        channel write what it holds to disk (D-70, D-71)."""
        self.persist_metadata()
        log.info("NSQ: closing topics")
        with self._lock:
            topics = list(self.topics.values())
        for topic in topics:
            topic.close()
        self._exit.set()
        self.lookup.stop()
        for thread in self._threads:
            thread.join()
        os.close(self._data_path_lock)
        log.info("NSQ: bye")

    # -- health (H-03) ----------------------------------------------------------------------------------

    @property
    def health(self) -> str:
        return "OK" if self.health_error is None else f"NOK - {self.health_error}"

    def set_health(self, error: Exception | None) -> None:
        """A failed disk-queue write makes /ping answer 500 until a later write succeeds."""
        self.health_error = None if error is None else str(error)

    # -- topics -----------------------------------------------------------------------------------------

    def new_backend(self, name: str) -> DiskQueue:
        options = self.options
        return DiskQueue(name, self.data_path, options.max_bytes_per_file, MIN_VALID_MSG_LENGTH,
                         options.max_msg_size + MIN_VALID_MSG_LENGTH, options.sync_every)

    def get_topic(self, name: str) -> Topic:
        with self._lock:
            topic = self.topics.get(name)
            if topic is not None:
                return topic
            topic = self.topics[name] = Topic(self, name)
        log.info("TOPIC(%s): created", name)
        self.lookup.notify(topic)  # R-03, also while loading
        if not self._loading:
            for channel_name in self.lookup.channels_to_precreate(name):
                topic.get_channel(channel_name)
            topic.start()
            if not topic.ephemeral:
                self.persist_metadata()  # D-71
        return topic

    def existing_topic(self, name: str) -> Topic | None:
        with self._lock:
            return self.topics.get(name)

    def delete_topic(self, name: str) -> bool:
        with self._lock:
            topic = self.topics.get(name)
        if topic is None:
            return False
        topic.delete()
        with self._lock:
            if self.topics.get(name) is topic:
                del self.topics[name]
        if not topic.ephemeral:
            self.persist_metadata()
        return True

    def topic_emptied(self, topic: Topic) -> None:
        """D-52: an ephemeral topic goes with its last channel."""
        threading.Thread(target=self.delete_topic, args=(topic.name,), daemon=True).start()

    def sorted_topics(self) -> list[Topic]:
        with self._lock:
            return sorted(self.topics.values(), key=lambda t: t.name)

    # -- metadata: nsqd.dat (D-65, D-71, P-RST-05, P-RST-06, P-RST-07)
    # --------------------------------------------------

    def load_metadata(self) -> None:
        path = os.path.join(self.data_path, METADATA_FILE)
        try:
            with open(path, "rb") as file:
                metadata = json.loads(file.read())
        except FileNotFoundError:
            return  # a fresh start
        except ValueError as error:
            raise MetadataError(f"failed to parse metadata in {path} - {error}") from None  # P-RST-17: no start
        self._loading = True
        try:
            for entry in metadata.get("topics") or []:
                name = entry.get("name", "")
                if not is_valid_name(name.encode()):
                    log.warning("skipping creation of invalid topic %s", name)
                    continue
                topic = self.get_topic(name)
                if entry.get("paused"):
                    topic.set_paused(True)
                for channel_entry in entry.get("channels") or []:
                    channel_name = channel_entry.get("name", "")
                    if not is_valid_name(channel_name.encode()):
                        log.warning("skipping creation of invalid channel %s", channel_name)
                        continue
                    channel = topic.get_channel(channel_name)
                    if channel_entry.get("paused"):
                        channel.set_paused(True)
                topic.start()
        finally:
            self._loading = False

    def persist_metadata(self) -> None:
        """Compact JSON in Go's field order; ephemeral topics and channels are left out (D-54, P-RST-07)."""
        if self._loading:
            return  # written once loading is complete
        with self._metadata_lock:
            topics = []
            for topic in self.sorted_topics():
                if topic.ephemeral:
                    continue
                with topic.lock:
                    channels = [{"name": c.name, "paused": c.paused} for c in topic.channels.values()
                                if not c.ephemeral]
                topics.append({"name": topic.name, "paused": topic.paused, "channels": channels or None})
            data = json.dumps({"topics": topics or None, "version": VERSION}, separators=(",", ":"))
            path = os.path.join(self.data_path, METADATA_FILE)
            log.info("NSQ: persisting topic/channel metadata to %s", path)
            temporary = f"{path}.{random.getrandbits(63)}.tmp"
            try:
                with open(temporary, "w") as file:
                    file.write(data)
                    file.flush()
                    os.fsync(file.fileno())
                os.replace(temporary, path)
            except OSError as error:
                log.error("failed to persist metadata - %s", error)

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

    # -- timers ---------------------------------------------------------------------------------------

    def _queue_scan_loop(self) -> None:
        """Every --queue-scan-interval, time out due in-flight messages and release due deferred ones.

        nsqd samples 20 random channels of a list refreshed every 5 s, so its timeouts can fire late on a
        new channel (D-14); this loop visits every channel on every tick, which is inside nsqd's window."""
        interval = self.options.queue_scan_interval / 1e9
        while not self._exit.wait(interval):
            now = time.monotonic_ns()
            for channel in self._channels():
                channel.process_queues(now)

    def _disk_sync_loop(self) -> None:
        """go-diskqueue's sync ticker: every --sync-timeout, each disk queue used since its last sync syncs
        (P-RST-15)."""
        while not self._exit.wait(self.options.sync_timeout / 1e9):
            for queue in [t.backend for t in self.sorted_topics()] + [c.backend for c in self._channels()]:
                if queue is not None:
                    queue.sync_if_active()

    def _channels(self) -> list:
        channels = []
        for topic in self.sorted_topics():
            with topic.lock:
                channels.extend(topic.channels.values())
        return channels


class MetadataError(Exception):
    pass


def _lock_directory(path: str) -> int:
    """nsqd's dirlock: one broker per data path."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as error:
        raise DataPathLocked(f"failed to lock data-path: {error}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        os.close(fd)
        raise DataPathLocked(f"failed to lock data-path: {error}") from None
    return fd
