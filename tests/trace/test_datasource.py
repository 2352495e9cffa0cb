"""The nsqpcap data source, tested the way Spark tests its own Python data sources."""

from __future__ import annotations

import pytest
from pyspark.errors import AnalysisException
from pyspark.testing import assertDataFrameEqual
from trace_helpers import PCAPS


def load(spark, paths, **options):
    reader = spark.read.format("nsqpcap")
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load(paths)


def test_one_partition_per_file_and_byte_ranges_for_large_files(spark):
    files = [str(PCAPS / "compressed.pcap"), str(PCAPS / "transcripts.pcap")]
    assert load(spark, files).rdd.getNumPartitions() == 2
    # compressed.pcap is 204,366 bytes: 4 ranges of 64 KiB; transcripts.pcap 1,937,784 bytes: 30
    assert load(spark, files, splitBytes=65536).rdd.getNumPartitions() == 4 + 30


def test_byte_range_splits_read_exactly_the_same_rows(spark):
    path = str(PCAPS / "transcripts.pcap")
    whole = load(spark, path)
    assertDataFrameEqual(load(spark, path, splitBytes=100_000), whole)
    assert whole.count() == 8155 and whole.where("error IS NOT NULL").count() == 0


def test_directory_and_glob_paths(spark):
    by_glob = load(spark, str(PCAPS / "co*.pcap"))
    assertDataFrameEqual(by_glob, load(spark, str(PCAPS / "compressed.pcap")))
    assert load(spark, str(PCAPS)).select("file").distinct().count() == len(list(PCAPS.glob("*.pcap")))


def test_truncated_file_is_a_counted_error_row(spark, tmp_path):
    path = tmp_path / "cut.pcap"
    path.write_bytes((PCAPS / "compressed.pcap").read_bytes()[:100_000])
    errors = load(spark, str(path)).where("error IS NOT NULL").select("error").collect()
    assert [row.error for row in errors] == ["pcap_truncated_record"]


@pytest.mark.parametrize(
    "options,message",
    [({}, "no such capture file"), ({"splitBytes": "lots"}, "splitBytes must be an integer")],
)
def test_bad_options_fail_with_a_clear_message(spark, tmp_path, options, message):
    path = str(tmp_path / "missing.pcap") if not options else str(PCAPS / "compressed.pcap")
    with pytest.raises(AnalysisException, match=message):
        load(spark, path, **options).count()


def test_payload_references_point_at_the_same_bytes(spark):
    from spark_analysis.read.pcapfile import read_payloads

    path = str(PCAPS / "compressed.pcap")
    copied = load(spark, path).orderBy("offset").collect()
    referenced = load(spark, path, payload="reference").orderBy("offset").collect()
    assert all(row.payload is None for row in referenced)
    assert read_payloads(
        [r.file for r in referenced],
        [r.payload_offset for r in referenced],
        [r.payload_length for r in referenced],
    ) == [bytes(r.payload) for r in copied]
    assert sum(len(r.payload) for r in copied) > 100_000
