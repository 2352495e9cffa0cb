"""What the summary counts besides the lifecycles, tallied in the driver with pyarrow from the decoding tasks' small
tables: the connections table (one row per connection, from the connection rows of the lifecycles' exchange), and
the activity counts, the IDs E_FIN_FAILED named and the nsqlookupd registrations, each summed by its keys.

As Spark jobs they cost more in job latency than their few rows cost in work (about a second of every ``watch``
micro-batch). And sums add up: ``watch`` adds a micro-batch's final parts to the sums of the batches before, and its
open parts to a copy, instead of reading every part again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from spark_analysis.decode.events import CONNECTION_TYPE
from spark_analysis.decode.kinds import CLIENT_UNREADABLE, TLS_OPAQUE, Kind
from spark_analysis.derive import lifecycle
from spark_analysis.derive.connection_tables import ACTIVITY_KEYS, SCHEMAS
from spark_analysis.read.storage import LOCAL, Storage, join

COUNT = "count"


@dataclass(frozen=True)
class Tally:
    """Table ``table`` of the ``tables`` or the ``exchange`` directory, its rows counted by ``keys`` (its own
    ``count`` column summed, where it has one), after ``prepare``; without ``keys``, its rows kept as they are."""

    directory: str
    table: str
    keys: tuple[str, ...] | None
    prepare: Callable[[pa.Table], pa.Table] = lambda rows: rows

    def schema(self) -> pa.Schema:
        return SCHEMAS[self.table] if self.directory == "tables" else lifecycle.EXCHANGED_SCHEMAS[self.table]

    def counted(self, rows: pa.Table) -> pa.Table:
        if self.keys is None:
            return rows
        keys = list(self.keys)
        if COUNT in rows.column_names:
            summed = rows.group_by(keys, use_threads=False).aggregate([(COUNT, "sum")])
            return summed.rename_columns({f"{COUNT}_sum": COUNT})
        summed = rows.group_by(keys, use_threads=False).aggregate([([], "count_all")])
        return summed.rename_columns({"count_all": COUNT})


def _connection_columns(ended: pa.Table) -> pa.Table:
    """A connection's own event row as the connections table's columns, but for those that compare connections."""
    columns = {name: ended[name] for name in ("conn_id", "client", "server", "client_port", "server_port")}
    columns["first_ts_ns"] = ended["ts_ns"]
    columns["is_nsq"] = pc.equal(ended["name"], "nsq")
    columns["is_lookupd"] = pc.equal(ended["name"], "lookupd")
    facts = ended["connection"].combine_chunks() if ended.num_rows else pa.nulls(0, CONNECTION_TYPE)
    for field in CONNECTION_TYPE:
        columns[field.name] = pc.struct_field(facts, field.name)
    return pa.table(columns)


SUMMARY_TALLIES = {
    "connections": Tally("exchange", "connections", None, _connection_columns),
    "activity": Tally("tables", "activity", tuple(ACTIVITY_KEYS)),
    # P-FIN-04: an E_FIN_FAILED for an ID the channel never delivered answers a made-up ID.
    "fin_failed": Tally("exchange", "fin_failed", tuple(lifecycle.MESSAGE_KEY)),
    "registrations": Tally("tables", "registrations", ("producer", "action", "topic", "channel", "status")),
}


def undecoded(rows: pa.Table) -> set[str]:
    """The connections of ``rows`` (events, or their activity counts) with an error row other than TLS's start and
    the client's own unreadable bytes (which the monitors see, and after which nsqd reads nothing)."""
    errors = pc.and_(pc.equal(rows["kind"], Kind.ERROR),
                     pc.invert(pc.is_in(rows["name"], pa.array([TLS_OPAQUE, *CLIENT_UNREADABLE]))))
    return set(rows.filter(errors)["conn_id"].to_pylist())


class Tallies:
    """The ``kinds`` of tally, each over the same parts."""

    def __init__(self, kinds: Mapping[str, Tally], tables: Mapping[str, pa.Table] | None = None):
        self.kinds = dict(kinds)
        self.tables = dict(tables) if tables is not None else {
            name: kind.counted(kind.prepare(kind.schema().empty_table())) for name, kind in self.kinds.items()}

    def read(self, directories: Mapping[str, str], storage: Storage = LOCAL,
             chosen: Callable[[str], bool] = lambda file_name: True) -> Tallies:
        """The tallies of the parts whose file names ``chosen`` picks; ``directories``: where ``tables`` and
        ``exchange`` are."""
        tables = {}
        for name, kind in self.kinds.items():
            files = [url for url in storage.files(join(directories[kind.directory], kind.table), ".parquet")
                     if chosen(url.rsplit("/", 1)[-1])]
            tables[name] = kind.counted(kind.prepare(lifecycle.read_parts(files, kind.schema(), storage)))
        return Tallies(self.kinds, tables)

    def plus(self, name: str, directories: Mapping[str, str], storage: Storage = LOCAL,
             chosen: Callable[[str], bool] = lambda file_name: True) -> Tallies:
        """These tallies with kind ``name`` of the parts ``chosen`` picks added (parts written since they were read)."""
        kind = self.kinds[name]
        added = Tallies({name: kind}).read(directories, storage, chosen).tables[name]
        return Tallies(self.kinds, {**self.tables, name: kind.counted(pa.concat_tables([self.tables[name], added]))})

    def __add__(self, other: Tallies) -> Tallies:
        return Tallies(self.kinds, {name: kind.counted(pa.concat_tables([self.tables[name], other.tables[name]]))
                                    for name, kind in self.kinds.items()})

    def connections(self) -> pa.Table:
        """The connections table: one row per TCP connection with its role, subscription and how it ended."""
        rows = self.tables["connections"]
        # A server port counts as nsqd's TCP port when any connection to it spoke NSQ (the magic, C-01).
        servers = rows.group_by("server", use_threads=False).aggregate([("is_nsq", "max")])
        to_nsqd_port = pc.take(servers["is_nsq_max"], pc.index_in(rows["server"],
                                                                         value_set=servers["server"].combine_chunks()))

        def where(condition) -> pa.Array:
            return pc.fill_null(condition, False).combine_chunks()

        role = pc.case_when(
            pa.StructArray.from_arrays(
                [where(pc.is_valid(rows["channel"])), where(pc.greater(rows["publish_commands"], 0)),
                 where(rows["is_nsq"]), where(rows["is_lookupd"])],
                ["consumer", "producer", "nsq-other", "lookupd-peer"]),
            "consumer", "producer", "nsq-other", "lookupd-peer", "not-nsq")
        rows = rows.append_column("to_nsqd_port", to_nsqd_port).append_column("role", role)
        return rows.sort_by([("first_ts_ns", "ascending"), ("conn_id", "ascending")])

    def connection_ends(self) -> pa.Table:
        """How each connection ended (the lifecycles' ``ends``)."""
        return lifecycle.connection_ends_of(self.tables["connections"])

    def undecoded(self) -> set[str]:
        """The connections with bytes the decoder could not read (or the capture lost), but for what TLS encrypts."""
        activity = self.tables["activity"]
        return undecoded(activity)

    def fin_failed_ids(self) -> pa.Table:
        """The IDs E_FIN_FAILED named."""
        return self.tables["fin_failed"].select(lifecycle.MESSAGE_KEY)
