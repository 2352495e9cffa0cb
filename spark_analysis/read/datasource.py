"""The ``nsqpcap`` PySpark data source: ``spark.read.format("nsqpcap").load(paths)``.

Rows follow ``pcapfile.PACKET_SCHEMA``: one per TCP segment, or a named error row for input that
cannot be walked. One partition per file, or per byte range of ``splitBytes`` for large files.

Options:
    splitBytes   byte-range size for large files (default 64 MiB; 0 = one partition per file)
    payload      "bytes" (default): the ``payload`` column holds the segment's bytes;
                 "reference": ``payload`` is null and consumers read ``payload_length`` bytes at
                 ``payload_offset`` of ``file`` themselves (``pcapfile.read_payloads``), so that
                 payloads never cross a shuffle; needs the files on every executor's file system
    storage      ``Storage.options`` as JSON: the options of the files' filesystem (``read/storage.py``) when they
                 are URLs (``s3://bucket/captures/*.pcap``): every task opens them itself, by ranged reads
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from spark_analysis.read.pcapfile import PACKET_DDL
from spark_analysis.read.storage import Storage

DEFAULT_SPLIT_BYTES = 64 << 20  # walking the records of 100 MB of small packets takes seconds: cores share a file


@dataclass
class PcapRange(InputPartition):
    path: str
    start: int
    end: int


class NsqPcapDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "nsqpcap"

    def schema(self) -> str:
        return PACKET_DDL

    def reader(self, schema) -> DataSourceReader:
        return NsqPcapReader(self.options)


class NsqPcapReader(DataSourceReader):
    def __init__(self, options):
        if "paths" in options:
            paths = json.loads(options["paths"])
        elif "path" in options:
            paths = [options["path"]]
        else:
            raise ValueError("nsqpcap: give one or more capture files to load()")
        self.storage = Storage(json.loads(options.get("storage", "{}")))
        self.paths = self.storage.expand(paths)
        missing = [p for p in self.paths if not self.storage.is_file(p)]
        if missing:
            raise FileNotFoundError(f"nsqpcap: no such capture file: {', '.join(missing)}")
        try:
            self.split_bytes = int(options.get("splitBytes", DEFAULT_SPLIT_BYTES))
        except ValueError:
            raise ValueError(f"nsqpcap: splitBytes must be an integer, got {options['splitBytes']!r}") from None
        if self.split_bytes < 0:
            raise ValueError("nsqpcap: splitBytes must be >= 0")
        self.payload = options.get("payload", "bytes")
        if self.payload not in ("bytes", "reference"):
            raise ValueError(f"nsqpcap: payload must be 'bytes' or 'reference', got {self.payload!r}")

    def partitions(self) -> list[PcapRange]:
        from spark_analysis.read.pcapfile import split_file

        return [PcapRange(r.path, r.start, r.end) for path in self.paths
                for r in split_file(path, self.split_bytes, self.storage)]

    def read(self, partition: PcapRange):
        from spark_analysis.read.pcapfile import ByteRange, read_range

        yield from read_range(
            ByteRange(partition.path, partition.start, partition.end), self.payload == "bytes", self.storage
        )
