"""``summary.json`` in the terms of the recorded truth files (their ``definitions`` field).

Every count here is derived from the capture alone. The truth's ``consumer_connections`` are the
recording scripts' names, which no capture holds; ``consumer_ports`` lists the client ports instead.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Mapping

from pyspark.sql import DataFrame, Row

from spark_analysis.lifecycle import LATENCY_COLUMNS, MESSAGE_KEY, Totals

PUBLISH_COMMANDS = ("PUB", "MPUB", "DPUB")
NS_PER_S = 1e9


MESSAGE_EVENT_TOTALS = ("messages_published", "deliveries", "fin", "req", "touch")
# Spark jobs in flight at once for independent queries; enough to hide per-job latency on a few cores.
CONCURRENT_JOBS = 4


def message_events(totals: dict) -> int:
    """What the throughput figures count: publishes, deliveries and FIN/REQ/TOUCH (issue 12's "message events")."""
    return sum(totals[key] for key in MESSAGE_EVENT_TOTALS)


# Every count but the lifecycles' comes from the connections table and these few small aggregates of the decoding
# tasks' tables. They are independent, of each other and of the lifecycles, and each costs mostly Spark's fixed
# per-job latency: they run side by side.
AGGREGATES: dict[str, Callable[[Mapping[str, DataFrame]], DataFrame]] = {
    "activity": lambda tables: tables["activity"],
    # P-FIN-04: an E_FIN_FAILED for an ID the channel never delivered answers a made-up ID.
    # the IDs E_FIN_FAILED frames named, as the decoding tasks gave them to the lifecycles' exchange
    "fin_failed": lambda tables: tables["fin_failed"].groupBy(*MESSAGE_KEY).count(),
    "registrations": lambda tables: tables["registrations"]
    .groupBy("producer", "action", "topic", "channel", "status").count(),
}


def summarise(rows: Mapping[str, list[Row]], lifecycles: Totals) -> dict:
    """``rows``: the connections table and each of ``AGGREGATES``, collected; ``lifecycles``: what the lifecycle
    tasks counted over every message."""
    conns = [row.asDict() for row in rows["connections"]]
    nsq_conns = {c["conn_id"]: c for c in conns if c["to_nsqd_port"]}
    lookupd_conns = {c["conn_id"]: c for c in conns if c["is_lookupd"]}
    activity = [row.asDict() for row in rows["activity"]]
    per_conn = defaultdict(Counter)
    for a in activity:
        per_conn[a["conn_id"]][(a["kind"], a["name"], a["status"], a["code"], a["req_delay0"])] += a["count"]

    channels: dict[tuple[str, str], dict] = {}
    for conn in nsq_conns.values():
        if conn["channel"] is None:
            continue
        channel = channels.setdefault((conn["topic"], conn["channel"]), _empty_channel())
        c = per_conn[conn["conn_id"]]
        channel["deliveries"] += _sum(c, "frame", "message")
        channel["fin"] += _sum(c, "command", "FIN", status="ok")
        channel["req"] += _sum(c, "command", "REQ", status="ok")
        channel["req_delay0"] += _sum(c, "command", "REQ", status="ok", req_delay0=True)
        channel["req_delayed"] += _sum(c, "command", "REQ", status="ok", req_delay0=False)
        channel["touch"] += _sum(c, "command", "TOUCH", status="ok")
        channel["e_fin_failed"] += _sum(c, "frame", "error", code="E_FIN_FAILED")
        channel["tcp_connections"] += 1
        channel["consumer_ports"].append(conn["client_port"])
        channel["heartbeats"] += _sum(c, "frame", "heartbeat")
        channel["nops"] += _sum(c, "command", "NOP")

    for (topic, name, attempts, outcome), count in lifecycles.deliveries.items():
        channel = channels.get((topic, name))
        if channel is None:
            continue
        by_attempts = channel["deliveries_by_attempts"]
        by_attempts[str(attempts)] = by_attempts.get(str(attempts), 0) + count
        if outcome in ("timeout", "abandoned"):
            channel["timeouts_redelivered"] += count
            channel["noack_deliberate" if outcome == "timeout" else "abandoned_by_disconnect"] += count
    for key, channel in channels.items():
        channel["unique_messages_delivered"] = lifecycles.delivered[key]
        channel["unique_messages_finished"] = lifecycles.finished[key]
    for row in rows["fin_failed"]:
        if (row.topic, row.channel) in channels and tuple(row[name] for name in MESSAGE_KEY) not in \
                lifecycles.fin_failed_delivered:
            channels[(row.topic, row.channel)]["e_fin_failed_deliberate_unknown_id"] += row["count"]
    for channel in channels.values():
        channel["e_fin_failed_unexpected"] = channel["e_fin_failed"] - channel["e_fin_failed_deliberate_unknown_id"]
        channel["deliveries_by_attempts"] = dict(
            sorted(channel["deliveries_by_attempts"].items(), key=lambda item: int(item[0]))
        )
        channel["consumer_ports"].sort()

    published = _published(activity, nsq_conns)
    topics: dict[str, dict] = {}
    for topic in sorted(set(published) | {t for t, _ in channels}):
        topics[topic] = {
            "published": published.get(topic, _empty_published()),
            "channels": {ch: channels[(t, ch)] for t, ch in sorted(channels) if t == topic},
        }

    all_counts = Counter()
    for conn_id in nsq_conns:
        all_counts.update(per_conn[conn_id])
    error_frames = Counter()
    for (kind, name, _status, code, _), count in all_counts.items():
        if kind == "frame" and name == "error":
            error_frames[code] += count
    totals = {
        "messages_published": sum(t["published"]["total"] for t in topics.values()),
        "deliveries": sum(c["deliveries"] for c in channels.values()),
        "fin": sum(c["fin"] for c in channels.values()),
        "req": sum(c["req"] for c in channels.values()),
        "touch": sum(c["touch"] for c in channels.values()),
        "timeouts_redelivered": sum(c["timeouts_redelivered"] for c in channels.values()),
        "e_fin_failed": sum(c["e_fin_failed"] for c in channels.values()),
        "other_error_frames": sum(n for code, n in error_frames.items() if code != "E_FIN_FAILED"),
        "heartbeats_all_connections": _sum(all_counts, "frame", "heartbeat"),
        "tcp_connections_nsqd_tcp_port": len(nsq_conns),
    }
    return {
        "totals": totals,
        "topics": topics,
        "connections": [
            _connection_entry(conn, per_conn[conn["conn_id"]])
            for conn in sorted(nsq_conns.values(), key=lambda c: (c["first_ts_ns"], c["conn_id"]))
        ],
        "error_frames": dict(sorted(error_frames.items())),
        "errors": _named_counts(activity, "error"),
        "violations": _named_counts(activity, "violation"),
        "latency_ms": {
            name: dict(zip(("p50", "p90", "p99", "max"), lifecycles.latency(column).quantiles([0.5, 0.9, 0.99, 1.0]),
                           strict=False))
            for name, column in zip(("publish_to_deliver", "deliver_to_fin"), LATENCY_COLUMNS, strict=True)
        },
        "tls_connections": sum(conn["codec"] == "tls" for conn in nsq_conns.values()),
        "lookupd": _lookupd(lookupd_conns, activity, rows["registrations"]),
        "other_connections": len(conns) - len(nsq_conns) - len(lookupd_conns),
    }


def _lookupd(conns: dict, activity: list[dict], registrations) -> dict:
    """nsqlookupd's side of the capture: its V1 connections, their producers, their commands, each REGISTER and
    UNREGISTER with its answer."""
    commands = Counter()
    for a in activity:
        if a["conn_id"] in conns and a["kind"] == "command":
            commands[a["name"]] += a["count"]
    return {
        "connections": len(conns),
        "producers": sorted({conn["producer"] for conn in conns.values() if conn["producer"]}),
        "commands": dict(sorted(commands.items())),
        "registrations": sorted(
            ({**row.asDict(), "channel": row["channel"] or ""} for row in registrations),
            key=lambda row: (row["producer"] or "", row["topic"] or "", row["channel"], row["action"]),
        ),
    }


def _sum(counter: Counter, kind: str, name: str, status=None, code=None, req_delay0=None) -> int:
    return sum(
        count
        for (k, n, s, c, d), count in counter.items()
        if k == kind
        and n == name
        and (status is None or s == status)
        and (code is None or c == code)
        and (req_delay0 is None or d == req_delay0)
    )


def _published(activity: list[dict], nsq_conns: dict) -> dict[str, dict]:
    """published.PUB/MPUB/DPUB: messages accepted (OK received); *_commands: accepted commands."""
    result: dict[str, dict] = {}
    for a in activity:
        if a["status"] != "ok" or a["conn_id"] not in nsq_conns:
            continue
        if a["kind"] == "publish":
            entry = result.setdefault(a["topic"], _empty_published())
            entry[a["name"]] += a["count"]
            entry["total"] += a["count"]
            conn = nsq_conns[a["conn_id"]]
            conn["messages_published"] = conn.get("messages_published", 0) + a["count"]
        elif a["kind"] == "command" and a["name"] in PUBLISH_COMMANDS:
            entry = result.setdefault(a["topic"], _empty_published())
            entry["publish_commands"] += a["count"]
            if a["name"] == "MPUB":
                entry["MPUB_commands"] += a["count"]
    return result


def _empty_published() -> dict:
    return {"PUB": 0, "MPUB": 0, "MPUB_commands": 0, "DPUB": 0, "total": 0, "publish_commands": 0}


def _empty_channel() -> dict:
    return {
        "deliveries": 0,
        "deliveries_by_attempts": {},
        "unique_messages_delivered": 0,
        "unique_messages_finished": 0,
        "fin": 0,
        "req": 0,
        "req_delay0": 0,
        "req_delayed": 0,
        "touch": 0,
        "timeouts_redelivered": 0,
        "noack_deliberate": 0,
        "abandoned_by_disconnect": 0,
        "e_fin_failed": 0,
        "e_fin_failed_deliberate_unknown_id": 0,
        "e_fin_failed_unexpected": 0,
        "tcp_connections": 0,
        "consumer_ports": [],
        "heartbeats": 0,
        "nops": 0,
    }


def _connection_entry(conn: dict, c: Counter) -> dict:
    return {
        "port": conn["client_port"],
        "client": conn["client"],
        "server": conn["server"],
        "role": conn["role"],
        "topic": conn["topic"],
        "channel": conn["channel"],
        "codec": conn["codec"],
        "heartbeats": _sum(c, "frame", "heartbeat"),
        "nops": _sum(c, "command", "NOP"),
        "deliveries": _sum(c, "frame", "message"),
        "fin": _sum(c, "command", "FIN"),
        "req": _sum(c, "command", "REQ"),
        "touch": _sum(c, "command", "TOUCH"),
        "fin_failed": _sum(c, "frame", "error", code="E_FIN_FAILED"),
        "publish_commands": sum(_sum(c, "command", name) for name in PUBLISH_COMMANDS),
        "messages_published": conn.get("messages_published", 0),
        "cls": _sum(c, "command", "CLS"),
        "t_connect": conn["first_ts_ns"] / NS_PER_S,
        "t_close": (conn["last_ts_ns"] or 0) / NS_PER_S,
        "close": conn["close"],
        "gaps": conn["gaps"],
    }


def _named_counts(activity: list[dict], kind: str) -> dict[str, int]:
    """Capture/decode errors or violations by name."""
    counts = Counter()
    for a in activity:
        if a["kind"] == kind:
            counts[a["name"]] += a["count"]
    return dict(sorted(counts.items()))
