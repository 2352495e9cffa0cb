"""Captures and outputs on object storage: a real S3-compatible server (moto's, its own process on loopback), ranged
reads of byte ranges, every table, summary.json and report.html written there, counts exact."""

from __future__ import annotations

import json
import struct

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from object_store import moto_server
from pcap_variants import records, write_pcap
from pyarrow import fs
from trace_helpers import PCAPS, load_truth, truth_mismatches

from spark_analysis.analysis import run_analysis
from spark_analysis.derive.connection_tables import SCHEMAS
from spark_analysis.derive.lifecycle import LIFECYCLE_SCHEMAS
from spark_analysis.read.pcapfile import RESYNC_CHAIN, pcap_resync, read_range, split_file
from spark_analysis.read.storage import Storage, StorageError, endpoint_options


@pytest.fixture(scope="module")
def store():
    with moto_server() as server:
        yield server


def record_starts(path) -> list[int]:
    """Every record's offset, by the plain walk from the file's header."""
    data = path.read_bytes()
    starts, offset = [], 24
    while offset + 16 <= len(data):
        starts.append(offset)
        offset += 16 + struct.unpack_from("<I", data, offset + 8)[0]
    return starts


@pytest.mark.parametrize("name", ["compressed", "cluster", "transcripts", "workload-small"])
def test_resync_finds_the_record_boundary_after_every_split(name):
    path = PCAPS / f"{name}.pcap"
    starts, size = record_starts(path), path.stat().st_size
    with fs.LocalFileSystem().open_input_file(str(path)) as remote:
        head = remote.read_at(40, 0)
        for start in range(4096, size, 4093 if size < 2_000_000 else 65_521):
            expected = next((offset for offset in starts if offset >= start), size)
            assert pcap_resync(remote, start, size, head) == expected, start


def rows(url: str, split: int, storage: Storage) -> list[tuple]:
    return [row for byte_range in split_file(url, split, storage)
            for batch in read_range(byte_range, True, storage)
            for row in zip(*(batch.column(c).to_pylist() for c in ("offset", "seq", "payload", "error")), strict=True)]


@pytest.mark.parametrize("split", [4096, 50_000, 1 << 20])
def test_byte_ranges_on_object_storage_read_what_a_local_walk_reads(store, split):
    store.upload(PCAPS / "compressed.pcap", "s3://captures/ranges/compressed.pcap")
    local = rows(str(PCAPS / "compressed.pcap"), 0, Storage())
    assert len(local) == 739
    assert rows("s3://captures/ranges/compressed.pcap", split, store.storage) == local


def test_a_wrong_resync_is_a_named_error_not_a_silent_loss(store, tmp_path):
    frames = records(PCAPS / "compressed.pcap")
    # a frame padded with RESYNC_CHAIN zero-length record headers with the capture's own time: a range starting just
    # before them takes them for records
    seconds = frames[0][0] // 10**9
    fake = struct.pack("<IIII", seconds, 0, 0, 0) * RESYNC_CHAIN
    ts, frame = frames[10]
    frames[10] = (ts, frame + fake)
    path = tmp_path / "decoy.pcap"
    write_pcap(path, frames)
    decoy_at = path.read_bytes().index(fake)
    store.upload(path, "s3://captures/decoy/decoy.pcap")
    storage = store.storage
    url = "s3://captures/decoy/decoy.pcap"
    with storage.open_input(url) as remote:
        assert pcap_resync(remote, decoy_at - 3, storage.size(url), remote.read_at(40, 0)) == decoy_at
    from spark_analysis.read.pcapfile import ByteRange

    before = pa.Table.from_batches(list(read_range(ByteRange(url, 0, decoy_at - 3), True, storage)))
    errors = before.filter(pa.compute.is_valid(before["error"]))
    assert errors["error"].to_pylist() == ["split_resync_mismatch"]


def test_analysis_from_and_to_object_storage_is_exact_and_writes_everything_there(spark, analyse, store):
    store.upload(PCAPS / "workload-small.pcap", "s3://captures/minutes/workload-small.pcap")
    store.upload(PCAPS / "cluster.pcap", "s3://captures/other/cluster.pcap")
    storage = store.storage
    summary = run_analysis(spark, ["s3://captures/minutes/work*.pcap"], "s3://analysis/run1", split_bytes=1 << 20,
                           report=True, storage=storage)
    assert truth_mismatches(summary, load_truth("workload-small")) == []
    assert summary["input"]["bytes"] == (PCAPS / "workload-small.pcap").stat().st_size
    written = store.listing("s3://analysis/run1")
    assert "analysis/run1/summary.json" in written and "analysis/run1/report.html" in written
    assert not [path for path in written if "/exchange/" in path]
    assert json.loads(storage.read_text("s3://analysis/run1/summary.json"))["totals"] == summary["totals"]
    assert storage.read_text("s3://analysis/run1/report.html").count('<img src="data:image/png;base64,') == 7
    local = analyse("workload-small", [PCAPS / "workload-small.pcap"])["out_dir"]
    filesystem, base = storage.locate("s3://analysis/run1/tables")
    for name in [*SCHEMAS, *LIFECYCLE_SCHEMAS, "connections"]:
        remote_rows = ds.dataset(f"{base}/{name}", filesystem=filesystem, format="parquet").count_rows()
        assert remote_rows == pq.ParquetDataset(f"{local}/tables/{name}").read().num_rows, name


def test_endpoint_and_options_from_the_environment_and_the_command_line():
    assert endpoint_options({"AWS_ENDPOINT_URL": "http://127.0.0.1:9000"}) == {
        "endpoint_override": "127.0.0.1:9000", "scheme": "http"}
    assert endpoint_options({"AWS_ENDPOINT_URL": "http://a:1", "AWS_ENDPOINT_URL_S3": "https://b:2"}) == {
        "endpoint_override": "b:2", "scheme": "https"}
    storage = Storage.from_environment(["region=eu-west-1", "scheme=http"], {"AWS_ENDPOINT_URL": "https://s3.x"})
    assert storage.options == {"endpoint_override": "s3.x", "scheme": "http", "region": "eu-west-1"}
    with pytest.raises(StorageError, match="'region' is not key=value"):
        Storage.from_environment(["region"], {})
    with pytest.raises(StorageError, match="s3://bucket/x"):
        Storage({"no_such_option": "1"}).locate("s3://bucket/x")


def test_file_urls_are_local_files():
    local = str(PCAPS / "compressed.pcap")
    assert Storage().expand([f"file://{PCAPS}/compr*.pcap", f"file://{local}"]) == [local, local]
    assert rows(f"file://{local}", 50_000, Storage()) == rows(local, 0, Storage())
