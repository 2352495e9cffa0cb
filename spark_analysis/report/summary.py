"""``summary.json`` in the terms of the recorded truth files (their ``definitions`` field).

Every count here is derived from the capture alone. The truth's ``consumer_connections`` are the
recording scripts' names, which no capture holds; ``consumer_ports`` lists the client ports instead.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from spark_analysis.decode.kinds import Kind, Status
from spark_analysis.derive.lifecycle import LATENCY_COLUMNS, MESSAGE_KEY, Totals

PUBLISH_COMMANDS = ("PUB", "MPUB", "DPUB")
NS_PER_S = 1e9


MESSAGE_EVENT_TOTALS = ("messages_published", "deliveries", "fin", "req", "touch")


def message_events(totals: dict) -> int:
    """What the throughput figures count: publishes, deliveries and FIN/REQ/TOUCH (issue 12's "message events")."""
    return sum(totals[key] for key in MESSAGE_EVENT_TOTALS)


@dataclass
class Published:
    """A topic's publishing: messages accepted (OK received) per verb and in all, and the commands accepted."""

    PUB: int = 0
    MPUB: int = 0
    MPUB_commands: int = 0
    DPUB: int = 0
    total: int = 0
    publish_commands: int = 0


@dataclass
class ChannelCounts:
    """What a channel's consumers did and were sent, over all their connections."""

    deliveries: int = 0
    deliveries_by_attempts: dict[str, int] = field(default_factory=dict)  # "1", "2", ... in order
    unique_messages_delivered: int = 0
    unique_messages_finished: int = 0
    fin: int = 0
    req: int = 0
    req_delay0: int = 0  # D-20's immediate requeue
    req_delayed: int = 0
    touch: int = 0
    timeouts_redelivered: int = 0  # deliveries that timed out or were abandoned, then delivered again
    noack_deliberate: int = 0  # of those, the timeouts (D-11)
    abandoned_by_disconnect: int = 0  # and those whose connection went without CLS (D-15)
    e_fin_failed: int = 0
    e_fin_failed_deliberate_unknown_id: int = 0  # P-FIN-04: an ID the channel never delivered
    e_fin_failed_unexpected: int = 0
    tcp_connections: int = 0
    consumer_ports: list[int] = field(default_factory=list)
    heartbeats: int = 0
    nops: int = 0


@dataclass
class Topic:
    published: Published
    channels: dict[str, ChannelCounts]


@dataclass
class MessageTotals:
    """Over every topic and channel; ``message_events`` counts the first five."""

    messages_published: int
    deliveries: int
    fin: int
    req: int
    touch: int
    timeouts_redelivered: int
    e_fin_failed: int
    other_error_frames: int
    heartbeats_all_connections: int
    tcp_connections_nsqd_tcp_port: int


@dataclass
class ConnectionEntry:
    """One connection to nsqd's TCP port."""

    port: int  # the client's
    client: str
    server: str
    role: str  # consumer | producer | nsq-other
    topic: str | None
    channel: str | None
    codec: str
    heartbeats: int
    nops: int
    deliveries: int
    fin: int
    req: int
    touch: int
    fin_failed: int
    publish_commands: int
    messages_published: int
    cls: int
    t_connect: float  # seconds since the epoch, capture time
    t_close: float
    close: str  # kinds.Close
    gaps: int


@dataclass
class Latency:
    """Quantiles of a latency in milliseconds (None: no message had it)."""

    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    max: float | None = None


@dataclass
class Lookupd:
    """nsqlookupd's side: its V1 connections, their producers, their commands, each REGISTER and UNREGISTER with
    its answer (producer, action, topic, channel, status, count)."""

    connections: int
    producers: list[str]
    commands: dict[str, int]
    registrations: list[dict]


@dataclass
class Summary:
    """``summary.json``: what ``as_json`` gives, in the terms of the truth files."""

    totals: MessageTotals
    topics: dict[str, Topic]
    connections: list[ConnectionEntry]
    error_frames: dict[str, int]  # nsqd's error frames by code
    errors: dict[str, int]  # capture and decode errors by name
    violations: dict[str, dict[str, int]]  # the monitors': by catalogue item, then side (broker, client)
    not_judged: dict[str, dict[str, int]]  # the rules the traffic could not feed: by item, then why
    monitor_failures: list[str]  # monitors that raised on this traffic (a bug of theirs): their items not judged
    latency_ms: dict[str, Latency]  # publish_to_deliver, deliver_to_fin
    tls_connections: int
    lookupd: Lookupd
    other_connections: int

    def as_json(self) -> dict:
        return asdict(self)


def summarise(rows: Mapping[str, list[dict]], lifecycles: Totals, judged) -> Summary:
    """``rows``: the connections table and the other tallies (derive/tallies.py); ``lifecycles``: what the lifecycle
    tasks counted over every message; ``judged``: the monitors' counts (judge/job.py)."""
    conns = rows["connections"]
    nsq_conns = {c["conn_id"]: c for c in conns if c["to_nsqd_port"]}
    lookupd_conns = {c["conn_id"]: c for c in conns if c["is_lookupd"]}
    activity = rows["activity"]
    per_conn = defaultdict(Counter)
    for a in activity:
        per_conn[a["conn_id"]][(a["kind"], a["name"], a["status"], a["code"], a["req_delay0"])] += a["count"]

    channels: dict[tuple[str, str], ChannelCounts] = {}
    for conn in nsq_conns.values():
        if conn["channel"] is None:
            continue
        channel = channels.setdefault((conn["topic"], conn["channel"]), ChannelCounts())
        c = per_conn[conn["conn_id"]]
        channel.deliveries += _sum(c, Kind.FRAME, "message")
        channel.fin += _sum(c, Kind.COMMAND, "FIN", status=Status.OK)
        channel.req += _sum(c, Kind.COMMAND, "REQ", status=Status.OK)
        channel.req_delay0 += _sum(c, Kind.COMMAND, "REQ", status=Status.OK, req_delay0=True)
        channel.req_delayed += _sum(c, Kind.COMMAND, "REQ", status=Status.OK, req_delay0=False)
        channel.touch += _sum(c, Kind.COMMAND, "TOUCH", status=Status.OK)
        channel.e_fin_failed += _sum(c, Kind.FRAME, "error", code="E_FIN_FAILED")
        channel.tcp_connections += 1
        channel.consumer_ports.append(conn["client_port"])
        channel.heartbeats += _sum(c, Kind.FRAME, "heartbeat")
        channel.nops += _sum(c, Kind.COMMAND, "NOP")

    for (topic, name, attempts, outcome), count in lifecycles.deliveries.items():
        channel = channels.get((topic, name))
        if channel is None:
            continue
        by_attempts = channel.deliveries_by_attempts
        by_attempts[str(attempts)] = by_attempts.get(str(attempts), 0) + count
        if outcome in ("timeout", "abandoned"):
            channel.timeouts_redelivered += count
            if outcome == "timeout":
                channel.noack_deliberate += count
            else:
                channel.abandoned_by_disconnect += count
    for key, channel in channels.items():
        channel.unique_messages_delivered = lifecycles.delivered[key]
        channel.unique_messages_finished = lifecycles.finished[key]
    for row in rows["fin_failed"]:
        if (row["topic"], row["channel"]) in channels and tuple(row[name] for name in MESSAGE_KEY) not in \
                lifecycles.fin_failed_delivered:
            channels[(row["topic"], row["channel"])].e_fin_failed_deliberate_unknown_id += row["count"]
    for channel in channels.values():
        channel.e_fin_failed_unexpected = channel.e_fin_failed - channel.e_fin_failed_deliberate_unknown_id
        channel.deliveries_by_attempts = dict(sorted(channel.deliveries_by_attempts.items(),
                                                     key=lambda item: int(item[0])))
        channel.consumer_ports.sort()

    published = _published(activity, nsq_conns)
    topics = {
        topic: Topic(published.get(topic, Published()),
                     {ch: channels[(t, ch)] for t, ch in sorted(channels) if t == topic})
        for topic in sorted(set(published) | {t for t, _ in channels})
    }

    all_counts = Counter()
    for conn_id in nsq_conns:
        all_counts.update(per_conn[conn_id])
    error_frames = Counter()
    for (kind, name, _status, code, _), count in all_counts.items():
        if kind == Kind.FRAME and name == "error":
            error_frames[code] += count

    def total(counted: str) -> int:
        return sum(getattr(channel, counted) for channel in channels.values())

    totals = MessageTotals(
        messages_published=sum(topic.published.total for topic in topics.values()),
        deliveries=total("deliveries"),
        fin=total("fin"),
        req=total("req"),
        touch=total("touch"),
        timeouts_redelivered=total("timeouts_redelivered"),
        e_fin_failed=total("e_fin_failed"),
        other_error_frames=sum(n for code, n in error_frames.items() if code != "E_FIN_FAILED"),
        heartbeats_all_connections=_sum(all_counts, Kind.FRAME, "heartbeat"),
        tcp_connections_nsqd_tcp_port=len(nsq_conns),
    )
    return Summary(
        totals=totals,
        topics=topics,
        connections=[
            _connection_entry(conn, per_conn[conn["conn_id"]])
            for conn in sorted(nsq_conns.values(), key=lambda c: (c["first_ts_ns"], c["conn_id"]))
        ],
        error_frames=dict(sorted(error_frames.items())),
        errors=_named_counts(activity, Kind.ERROR),
        violations=_sorted(judged.violations),
        not_judged=_sorted(judged.not_judged),
        monitor_failures=sorted(judged.failures),
        latency_ms={
            name: Latency(*lifecycles.latency(column).quantiles([0.5, 0.9, 0.99, 1.0]))
            for name, column in zip(("publish_to_deliver", "deliver_to_fin"), LATENCY_COLUMNS, strict=True)
        },
        tls_connections=sum(conn["codec"] == "tls" for conn in nsq_conns.values()),
        lookupd=_lookupd(lookupd_conns, activity, rows["registrations"]),
        other_connections=len(conns) - len(nsq_conns) - len(lookupd_conns),
    )


def _lookupd(conns: dict, activity: list[dict], registrations) -> Lookupd:
    commands = Counter()
    for a in activity:
        if a["conn_id"] in conns and a["kind"] == Kind.COMMAND:
            commands[a["name"]] += a["count"]
    return Lookupd(
        connections=len(conns),
        producers=sorted({conn["producer"] for conn in conns.values() if conn["producer"]}),
        commands=dict(sorted(commands.items())),
        registrations=sorted(
            ({**row, "channel": row["channel"] or ""} for row in registrations),
            key=lambda row: (row["producer"] or "", row["topic"] or "", row["channel"], row["action"]),
        ),
    )


def _sum(counter: Counter, kind: Kind, name: str, status=None, code=None, req_delay0=None) -> int:
    return sum(
        count
        for (k, n, s, c, d), count in counter.items()
        if k == kind
        and n == name
        and (status is None or s == status)
        and (code is None or c == code)
        and (req_delay0 is None or d == req_delay0)
    )


def _published(activity: list[dict], nsq_conns: dict) -> dict[str, Published]:
    """Per topic, what its accepted commands published."""
    result: dict[str, Published] = {}
    for a in activity:
        # A publish that named no topic is refused by nsqd before anything else (P-PUB-02, P-MPUB-02, P-DPUB-02):
        # whatever a broken broker answered, no topic holds it.
        if a["status"] != Status.OK or a["conn_id"] not in nsq_conns or a["topic"] is None:
            continue
        if a["kind"] == Kind.PUBLISH:
            entry = result.setdefault(a["topic"], Published())
            setattr(entry, a["name"], getattr(entry, a["name"]) + a["count"])
            entry.total += a["count"]
            conn = nsq_conns[a["conn_id"]]
            conn["messages_published"] = conn.get("messages_published", 0) + a["count"]
        elif a["kind"] == Kind.COMMAND and a["name"] in PUBLISH_COMMANDS:
            entry = result.setdefault(a["topic"], Published())
            entry.publish_commands += a["count"]
            if a["name"] == "MPUB":
                entry.MPUB_commands += a["count"]
    return result


def _connection_entry(conn: dict, c: Counter) -> ConnectionEntry:
    return ConnectionEntry(
        port=conn["client_port"],
        client=conn["client"],
        server=conn["server"],
        role=conn["role"],
        topic=conn["topic"],
        channel=conn["channel"],
        codec=conn["codec"],
        heartbeats=_sum(c, Kind.FRAME, "heartbeat"),
        nops=_sum(c, Kind.COMMAND, "NOP"),
        deliveries=_sum(c, Kind.FRAME, "message"),
        fin=_sum(c, Kind.COMMAND, "FIN"),
        req=_sum(c, Kind.COMMAND, "REQ"),
        touch=_sum(c, Kind.COMMAND, "TOUCH"),
        fin_failed=_sum(c, Kind.FRAME, "error", code="E_FIN_FAILED"),
        publish_commands=sum(_sum(c, Kind.COMMAND, name) for name in PUBLISH_COMMANDS),
        messages_published=conn.get("messages_published", 0),
        cls=_sum(c, Kind.COMMAND, "CLS"),
        t_connect=conn["first_ts_ns"] / NS_PER_S,
        t_close=(conn["last_ts_ns"] or 0) / NS_PER_S,
        close=conn["close"],
        gaps=conn["gaps"],
    )


def _named_counts(activity: list[dict], kind: Kind) -> dict[str, int]:
    """Capture/decode errors by name."""
    counts = Counter()
    for a in activity:
        if a["kind"] == kind:
            counts[a["name"]] += a["count"]
    return dict(sorted(counts.items()))


def _sorted(counts: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    return {item: dict(sorted(counts[item].items())) for item in sorted(counts)}


def violations_line(summary: dict) -> str:
    """The monitors' findings in a few words: how many, by whom, which items."""
    by_side: dict[str, Counter] = {}
    for item, sides in summary["violations"].items():
        for side, count in sides.items():
            by_side.setdefault(side, Counter())[item] += count
    failed = f"; {len(summary['monitor_failures'])} monitor(s) failed" if summary["monitor_failures"] else ""
    if not by_side:
        return "no rule broken" + failed
    return "; ".join(f"{sum(items.values()):,} violations by the {side} ({', '.join(sorted(items))})"
                     for side, items in sorted(by_side.items())) + failed
