"""FIN/REQ pairing: which FIN or REQ settled each delivery on its connection, and the TOUCHes in between, from one
connection's events, window after window (P-FIN-04: a client settles only what it was sent). The lifecycle across
connections (derive/lifecycle.py) starts from the rows this makes: the ``delivered`` table."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_analysis.decode.events import EVENT_SCHEMA, kind_mask
from spark_analysis.decode.kinds import Direction, Kind, Status

DELIVERY_FIELDS = ["topic", "channel", "msg_id", "conn_id", "ts_ns", "attempts", "msg_ts_ns", "body_len", "body_hash"]
DELIVERED_SCHEMA = pa.schema(
    [
        *(EVENT_SCHEMA.field(name) for name in DELIVERY_FIELDS),
        ("settlement", pa.string()),  # FIN | REQ: what settled it on its connection; null: nothing did
        ("settled_ts_ns", pa.int64()),
        ("touches", pa.int64()),
    ]
)
_CARRIED_SCHEMA = pa.schema([*(EVENT_SCHEMA.field(name) for name in DELIVERY_FIELDS),
                             ("touches", pa.int64()), ("last_ts_ns", pa.int64())])


def codes(column) -> np.ndarray:
    """Equal values, equal integers (null: -1): keys compared in numpy."""
    return pc.fill_null(pc.dictionary_encode(column).combine_chunks().indices, -1).to_numpy()


class Settlements:
    """Each delivery as its connection saw it, one released window of its events after another: the first FIN or
    REQ that succeeded for its ID after it and before the ID's next delivery (a client settles only what it was
    sent: P-FIN-04), and the TOUCHes in between. A delivery nothing settled yet is carried to the next window,
    until it is settled, delivered again, the connection ends, or twice its msg_timeout has passed since its
    delivery or last TOUCH (nsqd fails a FIN after the timeout). The lifecycle across connections (derive/lifecycle.py)
    starts from these rows."""

    def __init__(self, msg_timeout_ns: int):
        self.patience_ns = 2 * msg_timeout_ns
        self.carried = _CARRIED_SCHEMA.empty_table()

    def settle(self, events: pa.Table, last: bool) -> pa.Table:
        acts = pc.and_kleene(kind_mask(events, Kind.COMMAND, "FIN", "REQ", "TOUCH"),
                             pc.equal(events["status"], Status.OK))
        columns = [*DELIVERY_FIELDS, "name", "direction"]
        window = events.select(columns).filter(pc.or_kleene(kind_mask(events, Kind.FRAME, "message"), acts))
        carried = self.carried
        if not window.num_rows and not carried.num_rows:
            return DELIVERED_SCHEMA.empty_table()
        window = window.append_column("touches", pa.nulls(window.num_rows, pa.int64()))
        window = window.append_column("last_ts_ns", window["ts_ns"])
        carried = carried.append_column("name", pa.repeat(pa.scalar("message"), carried.num_rows))
        carried = carried.append_column("direction", pa.repeat(pa.scalar(Direction.SERVER, pa.string()),
                                                               carried.num_rows))
        rows = pa.concat_tables([carried.select(window.column_names).cast(window.schema), window])
        count = rows.num_rows
        # By ID, then in time order (events.Rows.time_order: at the same instant a client's row first).
        ids = codes(rows["msg_id"])
        from_server = pc.not_equal(rows["direction"], Direction.CLIENT).to_numpy(zero_copy_only=False)
        order = np.lexsort((np.arange(count), from_server, rows["ts_ns"].to_numpy(), ids))
        names = rows["name"].to_numpy(zero_copy_only=False)[order]
        ids, ts = ids[order], rows["ts_ns"].to_numpy()[order]
        is_delivery = names == "message"
        # every row's latest delivery of the same ID before it (-1: none)
        latest = np.maximum.accumulate(np.where(is_delivery, np.arange(count), -1))
        latest = np.where((latest >= 0) & (ids[np.maximum(latest, 0)] == ids), latest, -1)
        settles = np.flatnonzero(((names == "FIN") | (names == "REQ")) & (latest >= 0))
        settled, first = np.unique(latest[settles], return_index=True)
        settlement = np.full(count, None, object)
        settled_ts = np.zeros(count, np.int64)
        settlement[settled], settled_ts[settled] = names[settles[first]], ts[settles[first]]
        touched = np.flatnonzero((names == "TOUCH") & (latest >= 0))
        touches = np.bincount(latest[touched], minlength=count)
        touches += pc.fill_null(rows["touches"], 0).to_numpy()[order]
        last_ts = rows["last_ts_ns"].to_numpy()[order]
        np.maximum.at(last_ts, latest[touched], ts[touched])
        deliveries = np.flatnonzero(is_delivery)
        superseded = np.concatenate((ids[deliveries][1:] == ids[deliveries][:-1], [False]))
        open_ = settlement[deliveries] == None  # noqa: E711 (an object array)
        if not last:
            now = pc.max(events["ts_ns"]).as_py() or 0
            waiting = open_ & ~superseded & (last_ts[deliveries] + self.patience_ns >= now)
            kept = deliveries[waiting]
            self.carried = rows.take(order[kept]).select(DELIVERY_FIELDS).append_column(
                "touches", pa.array(touches[kept], pa.int64())).append_column(
                "last_ts_ns", pa.array(last_ts[kept], pa.int64())).cast(_CARRIED_SCHEMA)
            deliveries = deliveries[~waiting]
        kept = settlement[deliveries]
        facts = {
            "settlement": pa.array(kept, pa.string()),
            "settled_ts_ns": pa.array(settled_ts[deliveries], mask=kept == None),  # noqa: E711 (an object array)
            "touches": touches[deliveries],
        }
        table = rows.take(order[deliveries]).select(DELIVERY_FIELDS)
        return pa.table({**{name: table[name] for name in DELIVERY_FIELDS}, **facts}).cast(DELIVERED_SCHEMA)
