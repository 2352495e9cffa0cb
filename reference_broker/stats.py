"""What `GET /stats` reports, as JSON-ready dicts in nsqd's key order, and its text rendering (nsqd/stats.go,
the stats half of nsqd/http.go, ClientV2Stats in nsqd/client_v2.go).

Dicts keep nsqd's field order; keys nsqd tags `omitempty` are left out when empty. A missing list is None
(Go's nil slice, JSON `null`): the JSON and text forms tell an empty list and a missing one apart.
"""
from __future__ import annotations

import datetime
import gc
import platform
import time

from .client_v2 import ClientV2
from .nsqd import VERSION

# Clients print nsqd's version line; the "go" prefix keeps its shape (`built w/go…`) for tools that parse it.
VERSION_LINE = f"nsqd v{VERSION} (built w/go-compatible-python{platform.python_version()})"
_NO_LATENCY = {"count": 0, "percentiles": None}  # H-STATS-07: no --e2e-processing-latency-percentile support


def gather(nsqd, topic_filter: str, channel_filter: str, include_clients: bool) -> tuple[list | None, list | None]:
    """(topics, producers) as nsqd's GetStats builds them."""
    if topic_filter:
        topic = nsqd.existing_topic(topic_filter)
        if topic is None:
            return None, None  # H-STATS-04: nsqd returns before it even lists producers
        topics = [topic]
    else:
        topics = nsqd.sorted_topics()  # H-STATS-06
    topic_stats = []
    for topic in topics:
        with topic.lock:
            if channel_filter:
                channel = topic.channels.get(channel_filter)
                if channel is None:
                    continue  # H-STATS-05: a topic without the channel is left out
                channels = [channel]
            else:
                channels = sorted(topic.channels.values(), key=lambda c: c.name)  # H-STATS-06
        topic_stats.append(_topic_stats(topic, [_channel_stats(c, topic_filter, include_clients) for c in channels]))
    if not include_clients:
        return topic_stats, None  # H-STATS-03
    # H-STATS-10: producers are the TCP connections that have published; HTTP publishers never show.
    producers = [client_stats(c, topic_filter) for c in nsqd.connected_clients() if c.pub_counts]
    return topic_stats, producers or None


def _topic_stats(topic, channels: list[dict]) -> dict:
    return {  # H-STATS-07
        "topic_name": topic.name,
        "channels": channels,
        "depth": topic.depth,
        "backend_depth": topic.backend_depth,
        "message_count": topic.message_count,
        "message_bytes": topic.message_bytes,
        "paused": topic.paused,
        "e2e_processing_latency": _NO_LATENCY,
    }


def _channel_stats(channel, topic_filter: str, include_clients: bool) -> dict:
    with channel.lock:
        clients = list(channel.clients.values())
        stats = {  # H-STATS-08
            "channel_name": channel.name,
            "depth": channel.depth,
            "backend_depth": channel.backend_depth,
            "in_flight_count": len(channel.in_flight),
            "deferred_count": len(channel.deferred),
            "message_count": channel.message_count,
        }
        if channel.global_msg_count:  # omitted while 0, as nsqd master does
            stats["global_msg_count"] = channel.global_msg_count
    stats.update({
        "requeue_count": channel.requeue_count,
        "timeout_count": channel.timeout_count,
        "client_count": len(clients),
        "clients": [client_stats(c, topic_filter) for c in clients] if include_clients else None,
        "paused": channel.paused,
        "e2e_processing_latency": _NO_LATENCY,
    })
    return stats


def client_stats(client: ClientV2, topic_filter: str) -> dict:
    """H-STATS-09 in ClientV2Stats order."""
    stats = {
        "client_id": client.client_id_label,
        "hostname": client.hostname,
        "version": "V2",
        "remote_address": client.remote_address,
        "state": client.state,  # ST-01
        "ready_count": client.ready_count,
        "in_flight_count": client.in_flight_count,
        "message_count": client.message_count,
        "finish_count": client.finish_count,
        "requeue_count": client.requeue_count,
        "connect_ts": client.connect_ts,
        "sample_rate": client.sample_rate,
        "deflate": client.deflate,
        "snappy": client.snappy,
        "user_agent": client.user_agent,
    }
    if client.has_authorizations:  # omitempty, as these three are in nsqd
        stats["authed"] = True
    if client.auth_state and client.auth_state.identity:
        stats["auth_identity"] = client.auth_state.identity
    if client.auth_state and client.auth_state.identity_url:
        stats["auth_identity_url"] = client.auth_state.identity_url
    stats["topology_zone"] = client.topology_zone
    stats["topology_region"] = client.topology_region
    # H-STATS-10: nsqd's loop stops after the first matching topic, so there is at most one entry.
    for topic, count in list(client.pub_counts.items()):
        if not topic_filter or topic == topic_filter:
            stats["pub_counts"] = [{"topic": topic, "count": count}]
            break
    tls = client.tls  # T-04
    stats.update(tls.stats() if tls is not None else {
        "tls": False, "tls_cipher_suite": "", "tls_version": "", "tls_negotiated_protocol": "",
        "tls_negotiated_protocol_is_mutual": False})
    return stats


def memory_stats() -> dict:
    """nsqd's memStats keys. CPython has no Go heap: what it cannot measure is 0."""
    return {
        "heap_objects": len(gc.get_objects()),
        "heap_idle_bytes": 0,
        "heap_in_use_bytes": 0,
        "heap_released_bytes": 0,
        "gc_pause_usec_100": 0,
        "gc_pause_usec_99": 0,
        "gc_pause_usec_95": 0,
        "next_gc_bytes": 0,
        "gc_total_runs": sum(generation["collections"] for generation in gc.get_stats()),
    }


# -- text format (H-STATS-01) ------------------------------------------------------------------------------

def render_text(topics: list | None, producers: list | None, memory: dict | None, start_time: float,
                health: str) -> str:
    now = time.time()
    lines = [VERSION_LINE,
             f"start_time {_rfc3339(start_time)}",
             f"uptime {go_duration(int((now - start_time) * 1e9))}",
             "",
             f"Health: {health}"]
    if memory is not None:
        lines += ["", "Memory:"] + [f"   {name:<25}\t{value}" for name, value in memory.items()]
    if not topics:
        lines += ["", "Topics: None"]
    else:
        lines += ["", "Topics:"]
        for index, topic in enumerate(topics):
            if index:
                lines.append("")  # nsqd: a blank line between topics, none after "Topics:"
            prefix = "*P " if topic["paused"] else "   "
            lines.append(f"{prefix}[{topic['topic_name']:<15}] depth: {topic['depth']:<5} "
                         f"be-depth: {topic['backend_depth']:<5} msgs: {topic['message_count']:<8} e2e%: ")
            for channel in topic["channels"]:
                prefix = "   *P " if channel["paused"] else "      "
                lines.append(f"{prefix}[{channel['channel_name']:<25}] depth: {channel['depth']:<5} "
                             f"be-depth: {channel['backend_depth']:<5} inflt: {channel['in_flight_count']:<4} "
                             f"def: {channel['deferred_count']:<4} re-q: {channel['requeue_count']:<5} "
                             f"timeout: {channel['timeout_count']:<5} msgs: {channel['message_count']:<8} e2e%: ")
                lines += [f"        {_client_line(client, now)}" for client in channel["clients"] or ()]
    if not producers:
        lines += ["", "Producers: None"]
    else:
        lines += ["", "Producers:"] + [f"   {_client_line(client, now)}" for client in producers]
    return "\n".join(lines) + "\n"


def _client_line(stats: dict, now: float) -> str:
    port = stats["remote_address"].rpartition(":")[2]
    label = f"{stats['hostname']}:{port} {stats['user_agent']}"
    connected = go_duration(int(now - stats["connect_ts"]) * 1_000_000_000)  # truncated to whole seconds
    if "pub_counts" in stats:
        total = sum(entry["count"] for entry in stats["pub_counts"])
        topics = ",".join(f"{entry['topic']}={entry['count']}" for entry in stats["pub_counts"])
        return f"[V2 {label:<21}] msgs: {total:<8} topics: {topics} connected: {connected}"
    return (f"[V2 {label:<21}] state: {stats['state']} inflt: {stats['in_flight_count']:<4} "
            f"rdy: {stats['ready_count']:<4} fin: {stats['finish_count']:<8} re-q: {stats['requeue_count']:<8} "
            f"msgs: {stats['message_count']:<8} connected: {connected}")


def _rfc3339(timestamp: float) -> str:
    """Go's time.RFC3339 in local time: `Z` for UTC, else a numeric offset."""
    text = datetime.datetime.fromtimestamp(int(timestamp)).astimezone().isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def go_duration(ns: int) -> str:
    """Go's time.Duration.String(): `0s`, `1.5ms`, `2m3.25s`, `1h0m0s`."""
    if ns == 0:
        return "0s"
    sign, ns = ("-", -ns) if ns < 0 else ("", ns)
    if ns < 1_000:
        return f"{sign}{ns}ns"
    if ns < 1_000_000:
        return f"{sign}{_fraction(ns, 3)}µs"
    if ns < 1_000_000_000:
        return f"{sign}{_fraction(ns, 6)}ms"
    seconds, rest = divmod(ns, 1_000_000_000)
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    text = _fraction(seconds * 1_000_000_000 + rest, 9) + "s"
    if hours:
        return f"{sign}{hours}h{minutes}m{text}"
    if minutes:
        return f"{sign}{minutes}m{text}"
    return sign + text


def _fraction(value: int, digits: int) -> str:
    whole, fraction = divmod(value, 10 ** digits)
    fraction_text = f"{fraction:0{digits}d}".rstrip("0")
    return f"{whole}.{fraction_text}" if fraction_text else str(whole)
