"""The exact truth a correct analyzer must report, counted by the simulations as they write the capture, with
the definitions of the recorded truth files (``DEFINITIONS``)."""

from __future__ import annotations

from spark_analysis.generate.capture import Consumer

DEFINITIONS = {
    "note": "counts over what the capture holds: frames in dropped segments do not exist for the analyzer",
    "published.PUB/MPUB/DPUB": "messages accepted (OK received) per command type; MPUB_commands counts commands",
    "deliveries": "message frames captured on connections subscribed to the channel",
    "unique_messages_delivered / unique_messages_finished": "distinct IDs delivered / with a captured "
    "delivery "
    "directly followed by a successful FIN",
    "fin, req, touch": "successful FIN / REQ / TOUCH commands (made-up-ID FINs fail and are excluded)",
    "timeouts_redelivered": "captured deliveries directly followed by another captured delivery of the same "
    "message on the channel (no FIN/REQ between); noack_deliberate = the same here",
    "abandoned_by_disconnect": "always 0: every consumer ends with CLS",
    "e_fin_failed": "E_FIN_FAILED frames; all answer made-up IDs",
}


class ChannelTruth:
    def __init__(self):
        self.counts = {
            "deliveries": 0,
            "fin": 0,
            "req": 0,
            "req_delay0": 0,
            "req_delayed": 0,
            "touch": 0,
            "timeouts_redelivered": 0,
            "e_fin_failed": 0,
            "heartbeats": 0,
            "nops": 0,
        }
        self.by_attempts: dict[int, int] = {}
        self.delivered: set[bytes] = set()
        self.finished: set[bytes] = set()
        self.last_event: dict[bytes, str] = {}  # captured lifecycle position per message
        self.consumers: list[Consumer] = []
        self.next_consumer = 0

    def as_truth(self, unique_delivered: int, unique_finished: int) -> dict:
        counts = self.counts
        return {
            "deliveries": counts["deliveries"],
            "deliveries_by_attempts": {str(k): v for k, v in sorted(self.by_attempts.items())},
            "unique_messages_delivered": unique_delivered,
            "unique_messages_finished": unique_finished,
            "fin": counts["fin"],
            "req": counts["req"],
            "req_delay0": counts["req_delay0"],
            "req_delayed": counts["req_delayed"],
            "touch": counts["touch"],
            "timeouts_redelivered": counts["timeouts_redelivered"],
            "noack_deliberate": counts["timeouts_redelivered"],
            "abandoned_by_disconnect": 0,
            "e_fin_failed": counts["e_fin_failed"],
            "e_fin_failed_deliberate_unknown_id": counts["e_fin_failed"],
            "e_fin_failed_unexpected": 0,
            "tcp_connections": len(self.consumers),
            "consumer_connections": [c.conn.name for c in self.consumers],
            "heartbeats": counts["heartbeats"],
            "nops": counts["nops"],
        }


def truth_document(
    definitions: dict, messages_published: int, topics: dict, connections: list, other_error_frames: int
) -> dict:
    """The truth file of either workload: ``topics`` {topic: {"published": ..., "channels": {name: truth}}},
    ``connections`` [(connection, role, topic, channel)]."""
    channels = [c for t in topics.values() for c in t["channels"].values()]
    totals = {
        "messages_published": messages_published,
        "deliveries": sum(c["deliveries"] for c in channels),
        "fin": sum(c["fin"] for c in channels),
        "req": sum(c["req"] for c in channels),
        "touch": sum(c["touch"] for c in channels),
        "timeouts_redelivered": sum(c["timeouts_redelivered"] for c in channels),
        "e_fin_failed": sum(c["e_fin_failed"] for c in channels),
        "other_error_frames": other_error_frames,
        "heartbeats_all_connections": sum(conn.counts["heartbeats"] for conn, *_ in connections),
        "tcp_connections_nsqd_tcp_port": len(connections),
    }
    documented = [
        dict(conn.counts, name=conn.name, port=conn.port, role=role, topic=topic, channel=channel)
        for conn, role, topic, channel in connections
    ]
    return {"definitions": definitions, "totals": totals, "topics": topics, "connections": documented}
