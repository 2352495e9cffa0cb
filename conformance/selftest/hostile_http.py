"""The hostile fake nsqd's HTTP API (hostile_broker.py): nsqd 1.3.0's answers, roughly, from the in-memory broker,
and the lies a request draws instead of them or around them."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

from conformance.selftest.hostile_plan import HostilePlan, Liar

if TYPE_CHECKING:
    from conformance.selftest.hostile_broker import HostileBroker


class HttpSession:
    def __init__(self, broker: HostileBroker, liar: Liar):
        self.broker, self.liar = broker, liar

    def honest(self, method: str, path: str, query: dict, body: bytes) -> tuple[int, object]:
        """(status, body: bytes or a JSON value) as nsqd 1.3.0 would roughly answer."""
        state = self.broker.state
        topic_name = query.get("topic", [""])[0]
        channel_name = query.get("channel", [""])[0]
        if path == "/ping":
            return 200, b"OK"
        if path == "/info":
            return 200, {"version": "1.3.0", "broadcast_address": "127.0.0.1", "hostname": "hostile",
                         "http_port": self.broker.http_address[1], "tcp_port": self.broker.tcp_address[1],
                         "start_time": int(self.broker.started)}
        if path == "/stats":
            if query.get("format", ["text"])[0] != "json":
                return 200, b"nsqd v1.3.0 (built w/hostile)\nstart_time 2026-01-01T00:00:00Z\nuptime 1s\n\nHealth: OK\n"
            topics = [{"topic_name": topic.name, "depth": len(topic.backlog), "message_count": topic.message_count,
                       "paused": topic.paused, "backend_depth": 0, "message_bytes": 0, "e2e_processing_latency": {},
                       "channels": [{"channel_name": channel.name, "depth": len(channel.queue), "paused":
                                     channel.paused, "client_count": len(channel.subscribers), "clients": [],
                                     "in_flight_count": sum(len(s.in_flight) for s in channel.subscribers),
                                     "deferred_count": 0, "message_count": 0, "requeue_count": 0,
                                     "timeout_count": 0, "backend_depth": 0, "e2e_processing_latency": {}}
                                    for channel in topic.channels.values()]}
                      for topic in state.topics.values() if not topic_name or topic.name == topic_name]
            return 200, {"version": "1.3.0", "health": "OK", "start_time": int(self.broker.started),
                         "topics": topics, "memory": {}, "producers": []}
        if path in ("/pub", "/mpub"):
            if not topic_name:
                return 400, {"message": "MISSING_ARG_TOPIC"}
            bodies = body.split(b"\n") if path == "/mpub" else [body]
            for message in bodies:
                state.publish(topic_name, message)
            return 200, b"OK"
        if path.startswith("/topic/") or path.startswith("/channel/"):
            if not topic_name:
                return 400, {"message": "MISSING_ARG_TOPIC"}
            topic = state.topic(topic_name)
            if path.startswith("/channel/"):
                if not channel_name:
                    return 400, {"message": "MISSING_ARG_CHANNEL"}
                channel = state.channel(topic, channel_name)
                if path.endswith("/delete"):
                    topic.channels.pop(channel_name, None)
                elif path.endswith("pause"):
                    channel.paused = path.endswith("/pause")
                elif path.endswith("/empty"):
                    channel.queue.clear()
            elif path.endswith("/delete"):
                state.topics.pop(topic_name, None)
            elif path.endswith("pause"):
                topic.paused = path.endswith("/pause")
            return 200, b""
        if path.startswith("/config/"):
            if method == "PUT":
                try:
                    value = json.loads(body)
                except ValueError:
                    return 400, {"message": "INVALID_VALUE"}
                if path == "/config/nsqlookupd_tcp_addresses" and isinstance(value, list):
                    self.broker.register_with([address for address in value if isinstance(address, str)])
                return 200, value
            return 200, {"/config/nsqlookupd_tcp_addresses": [], "/config/log_level": "info"}.get(path, 0)
        return 404, {"message": "NOT_FOUND"}

    def answer(self, method: str, target: str, body: bytes, probe: bool) -> bytes:
        parts = urlsplit(target)
        status, payload = self.honest(method, parts.path, parse_qs(parts.query), body)
        liar = self.liar
        if probe:
            liar = Liar(HostilePlan(frozenset(), 0), liar.rng)  # the liveness probe gets the truth
        if not isinstance(payload, bytes):
            if liar.lies("http-types"):
                payload = self.wrong_types(payload)
            payload = json.dumps(payload).encode()
        if liar.lies("http-garbage-body"):
            payload = liar.pick([os.urandom(40), b"{", b"<html>nope</html>", b"\xff\xfe", b"[1, 2", b"null",
                                 b"[" + b"0," * 500_000 + b"0]", payload + b" " * 1_000_000 + b"}"])
        if liar.lies("http-status"):
            status = liar.pick([0, 199, 204, 301, 404, 500, 503, 999])
        status_line = f"HTTP/1.1 {status} Whatever"
        if liar.lies("http-status"):
            status_line = liar.pick(["HTTP/1.1 abc Bad", "HTTP/9.9 200 OK", "garbage", "HTTP/1.1"])
        length = str(len(payload))
        truncated = False
        if liar.lies("http-truncated"):
            length, truncated = str(len(payload) + liar.pick([1, 100, 10 ** 6])), True
        elif liar.lies("http-lying-length"):
            length = liar.pick([str(max(0, len(payload) - 3)), "-1", "abc", "1e3", "99999999999999999999"])
        head = f"{status_line}\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n" \
               f"Connection: close\r\n\r\n"
        if truncated and liar.rng.random() < 0.5:
            payload = payload[:len(payload) // 2]
        return head.encode("latin-1") + payload

    def wrong_types(self, value):
        liar = self.liar
        if isinstance(value, dict) and value:
            damaged = {key: self.wrong_types(item) if liar.rng.random() < 0.5 else item for key, item in value.items()}
            key = liar.pick(sorted(damaged))
            damaged[key] = liar.pick([None, "x", -5, [], {}, "1", 1e300, True])
            if liar.rng.random() < 0.3:
                damaged.pop(liar.pick(sorted(damaged)))
            return liar.pick([damaged, damaged, damaged, [damaged], "x"])
        if isinstance(value, list):
            return liar.pick([[self.wrong_types(item) for item in value], {}, None, [None, 1, "x"]])
        return liar.pick([value, None, "x", -1, [], {}])
