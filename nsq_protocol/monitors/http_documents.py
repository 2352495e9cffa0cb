"""The JSON documents nsqd's HTTP API answers, shaped as nsqd v1.3.0 shapes them (nsqd/http.go doStats and doInfo,
nsqd/stats.go): their keys, what the request's parameters leave in or out, the order of topics and channels. Each
answer is judged on its own, against its own request."""

from __future__ import annotations

import json

from nsq_protocol.http import HttpExchange
from nsq_protocol.monitors.events import BROKER
from nsq_protocol.monitors.monitor import Monitor

HTTP = "HTTP"
_BOOL = {"true": True, "1": True, "false": False, "0": False}  # nsqd/http.go: boolParams; anything else is true
TOP_KEYS = frozenset({"version", "health", "start_time", "topics", "producers"})  # and memory (H-STATS-17)
TOPIC_KEYS = frozenset({"topic_name", "channels", "depth", "backend_depth", "message_count", "message_bytes", "paused",
                        "e2e_processing_latency"})
CHANNEL_KEYS = frozenset({"channel_name", "depth", "backend_depth", "in_flight_count", "deferred_count",
                          "message_count", "requeue_count", "timeout_count", "client_count", "clients", "paused",
                          "e2e_processing_latency"})
INFO_KEYS = frozenset({"version", "broadcast_address", "hostname", "http_port", "tcp_port", "start_time"})
INFO_LIMITS = frozenset({"max_heartbeat_interval", "max_output_buffer_size", "max_output_buffer_timeout",
                         "max_deflate_level"})  # H-INFO-02, since 1.3.0
# what master adds after v1.3.0 (PR #1301's topology experiment): the channel's counts by locality (H-STATS-12, each
# left out while zero) and /info's zone and region
CHANNEL_LATER = frozenset({"global_msg_count", "zone_local_msg_count", "region_local_msg_count"})
INFO_LATER = frozenset({"topology_zone", "topology_region"})
# H-INFO-02: the durations in nanoseconds; their defaults (--max-heartbeat-interval 60s, --max-output-buffer-timeout
# 30s) in other units would be these
_DURATIONS = {"max_heartbeat_interval": (60_000_000_000, (60_000, 60)),
              "max_output_buffer_timeout": (30_000_000_000, (30_000, 30))}


class DocumentsAsNsqd(Monitor):
    """Each /stats answer's document (the H-STATS items of ``ITEMS``) against its request's format, include_clients,
    include_mem, topic and channel; H-INFO-01, H-INFO-02: /info's keys and its durations in nanoseconds (judged
    where they are the flags' defaults: another unit of them is no flag's)."""

    ITEMS = ("H-INFO-01", "H-INFO-02", "H-STATS-02", "H-STATS-03", "H-STATS-04", "H-STATS-05", "H-STATS-06",
             "H-STATS-07", "H-STATS-08", "H-STATS-14", "H-STATS-15", "H-STATS-17")
    KINDS = frozenset()  # no V2 event: only the HTTP exchanges

    def http_exchange(self, judge, exchange: HttpExchange):
        request, response = exchange.request, exchange.response
        if request.method != "GET" or response.status != 200 or not response.whole:
            return
        path = request.target.split("?", 1)[0]
        if path not in ("/stats", "/info"):
            return
        params = request.params()
        if params is None:
            return
        if path == "/stats" and params.get("format") != "json":
            self._text(exchange, params)
            return
        try:
            document = json.loads(response.body)
        except ValueError:
            return  # not JSON: HttpAnswersAsNsqd's (H-02, H-STATS-01)
        if not isinstance(document, dict):
            return
        faults = _info(document) if path == "/info" else _stats(document, params)
        for item, expected, observed in faults[:1]:  # the first fault: the rest often follow from it
            self.report(item, BROKER, exchange.ts, HTTP, expected, observed, exchange)

    def _text(self, exchange: HttpExchange, params: dict):
        """H-STATS-17: the text report's Memory section as include_mem asks."""
        wanted, body = _BOOL.get(params.get("include_mem", ""), True), exchange.response.body
        if body.startswith(b"nsqd v") and (b"\nMemory:\n" in body) != wanted:  # else not the report (H-STATS-01)
            self.report("H-STATS-17", BROKER, exchange.ts, HTTP, f"a Memory: section {'' if wanted else 'not '}"
                        "in the text report", "the opposite", exchange)


def _info(document: dict) -> list[tuple[str, str, str]]:
    keys = set(document)
    if not INFO_KEYS <= keys <= INFO_KEYS | INFO_LIMITS | INFO_LATER:
        return [("H-INFO-01", f"the keys {sorted(INFO_KEYS)} and the limits", f"{sorted(keys)}")]
    if not INFO_LIMITS <= keys:
        return [("H-INFO-02", f"the limits {sorted(INFO_LIMITS)}", f"{sorted(keys)}")]
    faults = []
    for key, (default, other_units) in _DURATIONS.items():
        if document[key] in other_units:  # H-INFO-02: the default in ms or s, not ns
            faults.append(("H-INFO-02", f"{key} in nanoseconds ({default} by default)", f"{document[key]}"))
    return faults


def _stats(document: dict, params: dict) -> list[tuple[str, str, str]]:
    faults = []
    with_memory = _BOOL.get(params.get("include_mem", ""), True)
    with_clients = _BOOL.get(params.get("include_clients", ""), True)
    keys = set(document)
    if ("memory" in keys) != with_memory:
        faults.append(("H-STATS-17" if with_memory else "H-STATS-03",
                       f"memory {'present' if with_memory else 'left out'} (include_mem "
                       f"{params.get('include_mem')!r})", f"keys {sorted(keys)}"))
    if keys - {"memory"} != TOP_KEYS:
        faults.append(("H-STATS-02", f"the keys {sorted(TOP_KEYS)} and memory", f"{sorted(keys)}"))
        return faults
    topic, channel = params.get("topic", ""), params.get("channel", "")
    topics = document["topics"]
    if topics is None:
        if not topic:  # H-STATS-04: no topic filter gives a list, [] when there are none
            faults.append(("H-STATS-04", "topics a list (no topic filter)", "null"))
        return faults
    if not isinstance(topics, list) or not all(isinstance(entry, dict) for entry in topics):
        return [*faults, ("H-STATS-02", "topics a list of objects", f"{str(topics)[:80]}")]
    names = [entry.get("topic_name") for entry in topics]
    if topic and (len(topics) > 1 or any(name != topic for name in names)):
        faults.append(("H-STATS-15", f"at most topic {topic} (the filter)", f"{names[:5]}"))
    if names != sorted(names, key=str):
        faults.append(("H-STATS-06", "topics sorted by name", f"{names[:5]}"))
    if not with_clients and document["producers"] is not None:
        faults.append(("H-STATS-03", "producers null (include_clients=false)", "a list"))
    for entry in topics:
        faults += _topic(entry, channel, with_clients)
    return faults


def _topic(entry: dict, channel: str, with_clients: bool) -> list[tuple[str, str, str]]:
    name = entry.get("topic_name")
    if set(entry) != TOPIC_KEYS:
        return [("H-STATS-07", f"topic {name}'s keys {sorted(TOPIC_KEYS)}", f"{sorted(entry)}")]
    channels = entry["channels"]
    if not isinstance(channels, list) or not all(isinstance(one, dict) for one in channels):
        return [("H-STATS-07", f"topic {name}'s channels a list of objects", f"{str(channels)[:80]}")]
    faults = []
    names = [one.get("channel_name") for one in channels]
    if channel and names != [channel]:  # H-STATS-05: a topic without the channel is left out
        faults.append(("H-STATS-05", f"topic {name} with channel {channel} alone (the filter)", f"{names[:5]}"))
    if names != sorted(names, key=str):
        faults.append(("H-STATS-06", f"topic {name}'s channels sorted by name", f"{names[:5]}"))
    for one in channels:
        label = f"channel {name}/{one.get('channel_name')}"
        if not CHANNEL_KEYS <= set(one) <= CHANNEL_KEYS | CHANNEL_LATER:
            faults.append(("H-STATS-08", f"{label}'s keys {sorted(CHANNEL_KEYS)}", f"{sorted(one)}"))
            continue
        clients = one["clients"]
        if with_clients != isinstance(clients, list) or (not with_clients and clients is not None):
            faults.append(("H-STATS-03", f"{label}'s clients {'a list' if with_clients else 'null'} "
                           f"(include_clients={with_clients})", f"{str(clients)[:60]}"))
        elif with_clients and one["client_count"] != len(clients):
            faults.append(("H-STATS-14", f"{label}'s client_count {len(clients)}, its clients listed",
                           f"{one['client_count']}"))
    return faults
