"""The ``nsqparquet`` PySpark data source: a table's Parquet files read by Python tasks through ``read/storage.py``.

The analysis's tables on object storage: the JVM would need Hadoop's S3A (or GCS) connector on every executor to
read them, the Python workers read them with the pyarrow they already have. One partition per file, its row
groups as Arrow batches. Options: ``path`` (the table's directory), ``storage`` (``Storage.options`` as JSON).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema

from spark_analysis.read.storage import LOCAL, Storage, is_local, join, local_path


@dataclass
class ParquetPart(InputPartition):
    url: str


class NsqParquetDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "nsqparquet"

    def schema(self):
        raise ValueError("nsqparquet: give the table's schema (spark.read.schema(...))")

    def reader(self, schema) -> DataSourceReader:
        return NsqParquetReader(self.options)


class NsqParquetReader(DataSourceReader):
    def __init__(self, options):
        self.directory = options["path"]
        self.storage = Storage(json.loads(options.get("storage", "{}")))

    def partitions(self) -> list[ParquetPart]:
        return [ParquetPart(url) for url in self.storage.files(self.directory, ".parquet")] or [ParquetPart("")]

    def read(self, partition: ParquetPart):
        import pyarrow.parquet as pq

        if not partition.url:
            return  # a table no task wrote to: Spark needs one partition to read as empty
        with self.storage.open_input(partition.url) as source:
            yield from pq.ParquetFile(source).iter_batches()


def read_table(spark: SparkSession, url: str, schema: pa.Schema, storage: Storage = LOCAL) -> DataFrame:
    """The table in directory ``url`` as a DataFrame: read by the JVM where it is local, by ``nsqparquet`` elsewhere.
    The known schema spares Spark a job that would read the Parquet footers to infer it."""
    reader = spark.read.schema(from_arrow_schema(schema))
    if is_local(url):
        return reader.parquet(local_path(url))
    spark.dataSource.register(NsqParquetDataSource)  # any session will do: this one may not know the source yet
    return reader.format("nsqparquet").option("storage", json.dumps(storage.options)).load(url)


class WrittenTables(Mapping):
    """The tables of ``schemas`` in ``tables_dir``, each a DataFrame once asked for: making one lists its files (~40 ms
    of the driver's, more as a watch's parts pile up), and the summary and report ask for a few of them."""

    def __init__(self, spark: SparkSession, tables_dir: str, schemas: Mapping[str, pa.Schema],
                 storage: Storage = LOCAL):
        self.spark, self.tables_dir, self.schemas, self.storage = spark, tables_dir, schemas, storage
        self._read: dict[str, DataFrame] = {}

    def __getitem__(self, name: str) -> DataFrame:
        if name not in self._read:
            schema = self.schemas[name]  # KeyError: not one of them
            self._read[name] = read_table(self.spark, join(self.tables_dir, name), schema, self.storage)
        return self._read[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.schemas)

    def __len__(self) -> int:
        return len(self.schemas)
