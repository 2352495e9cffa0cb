"""The disk queue on real files: go-diskqueue's file names, rotation, positions, and recovery from what a
crash or a bad disk leaves behind (D-76; nsqio/go-diskqueue diskqueue_test.go covers the same ground)."""
from __future__ import annotations

import logging
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_broker.diskqueue import DiskQueue, DiskQueueError

MIN, MAX = 4, 1000


def _queue(path, max_bytes_per_file=1 << 20, sync_every=2500, name="t") -> DiskQueue:
    return DiskQueue(name, str(path), max_bytes_per_file, MIN, MAX, sync_every)


def _drain(queue: DiskQueue) -> list[bytes]:
    items = []
    while (item := queue.get()) is not None:
        items.append(item)
    return items


def test_records_come_back_in_order_and_files_are_named_as_nsqd_names_them(tmp_path):
    queue = _queue(tmp_path)
    queue.put_many([b"one1", b"two22", b"three333"])
    assert queue.depth == 3
    assert sorted(os.listdir(tmp_path)) == ["t.diskqueue.000000.dat"]
    assert _drain(queue) == [b"one1", b"two22", b"three333"] and queue.depth == 0
    queue.close()
    assert sorted(os.listdir(tmp_path)) == ["t.diskqueue.000000.dat", "t.diskqueue.meta.dat"]
    assert (tmp_path / "t.diskqueue.meta.dat").read_text() == "0\n0,29\n0,29\n"  # 3 records: 8 + 9 + 12


def test_a_file_rolls_when_the_next_record_would_pass_the_limit(tmp_path):
    # D-76: records of 4 + 100 bytes with a limit of 256: two per file, the third starts file 000001.
    queue = _queue(tmp_path, max_bytes_per_file=256)
    queue.put_many([bytes([i]) * 100 for i in range(5)])
    assert sorted(n for n in os.listdir(tmp_path) if n.endswith(".dat") and "meta" not in n) == [
        "t.diskqueue.000000.dat", "t.diskqueue.000001.dat", "t.diskqueue.000002.dat"]
    assert [r[0] for r in _drain(queue)] == [0, 1, 2, 3, 4]


def test_a_finished_file_is_removed_once_read(tmp_path):
    queue = _queue(tmp_path, max_bytes_per_file=256)
    queue.put_many([bytes([i]) * 100 for i in range(6)])
    _drain(queue)
    assert "t.diskqueue.000000.dat" not in os.listdir(tmp_path)


def test_positions_survive_close_and_reopen(tmp_path):
    queue = _queue(tmp_path, max_bytes_per_file=256)
    queue.put_many([b"%04d" % i for i in range(100)])
    assert [queue.get() for _ in range(40)] == [b"%04d" % i for i in range(40)]
    queue.close()
    reopened = _queue(tmp_path, max_bytes_per_file=256)
    assert reopened.depth == 60
    assert _drain(reopened) == [b"%04d" % i for i in range(40, 100)]


def test_writes_after_a_close_are_refused(tmp_path):
    queue = _queue(tmp_path)
    queue.close()
    with pytest.raises(DiskQueueError, match="exiting"):
        queue.put(b"late")


def test_sizes_outside_the_limits_are_refused_on_write(tmp_path):
    queue = _queue(tmp_path)
    with pytest.raises(DiskQueueError, match="invalid message write size"):
        queue.put(b"x" * (MAX + 1))
    with pytest.raises(DiskQueueError, match="invalid message write size"):
        queue.put(b"xy")


def test_a_size_over_the_maximum_on_read_makes_the_file_bad_and_reading_goes_on(tmp_path, caplog):
    # --max-msg-size is checked on read: a file written under a larger limit (or corrupted) is renamed.
    queue = _queue(tmp_path, max_bytes_per_file=64)
    queue.put_many([b"a" * 40, b"b" * 40, b"c" * 40])  # one record per file
    queue.close()
    path = tmp_path / "t.diskqueue.000001.dat"
    path.write_bytes(b"\x7f\xff\xff\xff" + path.read_bytes()[4:])
    reopened = _queue(tmp_path, max_bytes_per_file=64)
    with caplog.at_level(logging.WARNING, logger="nsqd"):
        assert _drain(reopened) == [b"a" * 40, b"c" * 40]
    assert "t.diskqueue.000001.dat.bad" in os.listdir(tmp_path)
    assert "invalid message read size" in caplog.text and "saving bad file" in caplog.text
    assert reopened.depth == 0


def test_a_torn_last_record_is_skipped_with_its_file(tmp_path, caplog):
    # A crash in the middle of a write leaves a short record at the end of the file being written.
    queue = _queue(tmp_path)
    queue.put_many([b"whole-1", b"whole-2", b"torn-record"])
    queue.close()
    path = tmp_path / "t.diskqueue.000000.dat"
    path.write_bytes(path.read_bytes()[:-3])
    (tmp_path / "t.diskqueue.meta.dat").write_text("3\n0,0\n0,%d\n" % path.stat().st_size)
    reopened = _queue(tmp_path)
    with caplog.at_level(logging.ERROR, logger="nsqd"):
        assert _drain(reopened) == [b"whole-1", b"whole-2"]
    assert "t.diskqueue.000000.dat.bad" in os.listdir(tmp_path)
    reopened.put(b"after")  # the queue writes on in a new file
    assert _drain(reopened) == [b"after"]


def test_stale_metadata_after_a_kill_salvages_the_unsynced_records(tmp_path, caplog):
    # go-diskqueue: metadata writePos < file size -> write on in a new file, read what the old one holds.
    queue = _queue(tmp_path)
    queue.put_many([b"synced-1", b"synced-2"])
    queue.close()  # metadata: depth 2, write position after two records
    with open(tmp_path / "t.diskqueue.000000.dat", "ab") as file:
        file.write(b"\x00\x00\x00\x0aunsynced-3")  # written by a broker that was killed before its sync
    with caplog.at_level(logging.WARNING, logger="nsqd"):
        reopened = _queue(tmp_path)
    assert "skipping to new file" in caplog.text
    reopened.put(b"new-4")
    assert _drain(reopened) == [b"synced-1", b"synced-2", b"unsynced-3", b"new-4"]


def test_unreadable_metadata_is_logged_and_the_queue_starts_empty(tmp_path, caplog):
    (tmp_path / "t.diskqueue.meta.dat").write_text("garbage")
    with caplog.at_level(logging.ERROR, logger="nsqd"):
        queue = _queue(tmp_path)
    assert "failed to retrieveMetaData" in caplog.text and queue.depth == 0
    queue.put(b"works")
    assert _drain(queue) == [b"works"]


def test_sync_every_writes_the_metadata(tmp_path):
    queue = _queue(tmp_path, sync_every=10)
    queue.put_many([b"%04d" % i for i in range(9)])
    assert not (tmp_path / "t.diskqueue.meta.dat").exists()
    queue.put(b"tenth")
    assert (tmp_path / "t.diskqueue.meta.dat").read_text().startswith("10\n")


def test_sync_if_active_writes_positions_only_after_activity(tmp_path):
    queue = _queue(tmp_path)
    queue.sync_if_active()
    assert not (tmp_path / "t.diskqueue.meta.dat").exists()
    queue.put(b"once")
    queue.sync_if_active()
    assert (tmp_path / "t.diskqueue.meta.dat").read_text() == "1\n0,0\n0,8\n"


def test_empty_drops_every_file_and_the_metadata(tmp_path):
    queue = _queue(tmp_path, max_bytes_per_file=64)
    queue.put_many([b"x" * 40] * 4)
    queue.close()
    reopened = _queue(tmp_path, max_bytes_per_file=64)
    reopened.empty()
    assert reopened.depth == 0 and not [n for n in os.listdir(tmp_path) if n.startswith("t.")]
    reopened.put(b"again")
    assert _drain(reopened) == [b"again"]


@settings(max_examples=40, deadline=None)
@given(operations=st.lists(st.one_of(
    st.lists(st.binary(min_size=MIN, max_size=120), min_size=1, max_size=8).map(lambda r: ("put", r)),
    st.integers(1, 10).map(lambda n: ("get", n)),
    st.just(("reopen", 0))), max_size=30), max_bytes_per_file=st.sampled_from([64, 300, 1 << 20]))
def test_the_queue_is_a_fifo_across_rolls_and_reopens(tmp_path_factory, operations, max_bytes_per_file):
    path = tmp_path_factory.mktemp("dq")
    queue, model = _queue(path, max_bytes_per_file=max_bytes_per_file), []
    for kind, argument in operations:
        if kind == "put":
            queue.put_many(argument)
            model.extend(argument)
        elif kind == "get":
            for _ in range(argument):
                expected = model.pop(0) if model else None
                assert queue.get() == expected
        else:
            queue.close()
            queue = _queue(path, max_bytes_per_file=max_bytes_per_file)
        assert queue.depth == len(model)
    assert _drain(queue) == model


def _files(path) -> dict[str, bytes]:
    return {name: (path / name).read_bytes() for name in sorted(os.listdir(path))}


@settings(max_examples=60, deadline=None)
@given(operations=st.lists(st.one_of(
    st.lists(st.binary(min_size=MIN, max_size=120), min_size=1, max_size=12).map(lambda r: ("put", r)),
    st.integers(1, 15).map(lambda n: ("get", n)),
    st.just(("reopen", 0))), max_size=30), max_bytes_per_file=st.sampled_from([64, 300, 1 << 20]),
    sync_every=st.sampled_from([1, 4, 2500]))
def test_get_many_leaves_what_one_get_at_a_time_leaves(tmp_path_factory, operations, max_bytes_per_file, sync_every):
    # get_many takes runs of records from the read buffer: same records, files, positions and syncs as get.
    one_path, many_path = tmp_path_factory.mktemp("one"), tmp_path_factory.mktemp("many")
    one = _queue(one_path, max_bytes_per_file=max_bytes_per_file, sync_every=sync_every)
    many = _queue(many_path, max_bytes_per_file=max_bytes_per_file, sync_every=sync_every)
    for kind, argument in operations:
        if kind == "put":
            one.put_many(argument)
            many.put_many(argument)
        elif kind == "get":
            singly = [record for record in (one.get() for _ in range(argument)) if record is not None]
            assert many.get_many(argument) == singly
        else:
            one.close()
            many.close()
            one = _queue(one_path, max_bytes_per_file=max_bytes_per_file, sync_every=sync_every)
            many = _queue(many_path, max_bytes_per_file=max_bytes_per_file, sync_every=sync_every)
        assert many.depth == one.depth
        assert _files(many_path) == _files(one_path)
