"""A FIFO of byte strings kept in numbered segment files under --data-path (nsqio/go-diskqueue v1.1.0).

`<name>.diskqueue.000000.dat`, `…000001.dat`, … hold records `[4-byte BE size][data]`; a file rolls to the
next number when the record being written would take it past --max-bytes-per-file (D-76).
`<name>.diskqueue.meta.dat` holds `depth\\nreadFileNum,readPos\\nwriteFileNum,writePos\\n`, written
atomically (temp file, fsync, rename) on every sync: after --sync-every reads and writes, when a file is
finished or rolled, and on nsqd's --sync-timeout ticker when anything happened since (`sync_if_active`).

go-diskqueue owns its files from one goroutine; here one lock does and the calling thread does the I/O.
Every `put_many` hands its records to the kernel before it returns, so a SIGKILL after a publisher's OK
loses what nsqd loses: records past the last synced metadata, which a restart salvages only partly
(P-RST-15). A record that cannot be read (torn, or a size outside [min, max]: --max-msg-size is checked
on read) makes the whole file unreadable: it is renamed `*.bad`, logged, and reading goes on with the next
file, as go-diskqueue does.
"""
from __future__ import annotations

import bisect
import itertools
import logging
import operator
import os
import random
import struct
import threading

log = logging.getLogger("nsqd")

_SIZE = struct.Struct(">i")
_READ_CHUNK = 64 * 1024  # the read file is read a chunk at a time; runs of records are taken from the chunk
_METADATA = "{depth}\n{read_file},{read_pos}\n{write_file},{write_pos}\n"


class DiskQueueError(Exception):
    """A write the queue refused or the disk failed; nsqd reports it as unhealthy (H-03)."""


class DiskQueue:
    def __init__(self, name: str, data_path: str, max_bytes_per_file: int, min_msg_size: int,
                 max_msg_size: int, sync_every: int):
        self.name = name
        self._data_path = data_path
        self._max_bytes_per_file = max_bytes_per_file
        self._min_msg_size = min_msg_size
        self._max_msg_size = max_msg_size
        self._sync_every = sync_every
        self._lock = threading.Lock()
        self._depth = 0
        self._read_file_num = self._read_pos = 0
        self._write_file_num = self._write_pos = 0
        self._next_read_file_num = self._next_read_pos = 0  # past the record read ahead
        self._ahead: bytes | None = None
        self._read_file = None
        self._read_buffer = b""  # what has been read of the read file, from `_read_buffer_pos` on not yet used
        self._read_buffer_pos = 0
        self._write_file = None
        self._max_bytes_per_file_read = 0
        self._ops_since_sync = 0
        self._needs_sync = False
        self._exiting = False
        self._retrieve_metadata()
        self._read_ahead()

    @property
    def depth(self) -> int:
        return self._depth

    # -- writing -----------------------------------------------------------------------------------------

    def put(self, data: bytes) -> None:
        self.put_many([data])

    def put_many(self, records: list[bytes]) -> None:
        """Append records in order; all of them reach the kernel before this returns. A record of a refused
        size fails the call after the ones before it are written, as go-diskqueue's put of each would."""
        sizes = list(map(len, records))
        accepted = len(records)
        if records and not (self._min_msg_size <= min(sizes) and max(sizes) <= self._max_msg_size):
            accepted = next(index for index, size in enumerate(sizes)
                            if not self._min_msg_size <= size <= self._max_msg_size)
        with self._lock:
            if self._exiting:
                raise DiskQueueError("exiting")
            try:
                start = 0
                while start < accepted:
                    start = self._write_run(records, sizes, start, accepted)
            except OSError as error:
                self._close_write_file()
                raise DiskQueueError(str(error)) from None
            self._ops_since_sync += accepted
            if self._ops_since_sync >= self._sync_every:
                self._sync_logged()
        if accepted < len(records):
            raise DiskQueueError(f"invalid message write size ({sizes[accepted]}) minMsgSize={self._min_msg_size} "
                                 f"maxMsgSize={self._max_msg_size}")

    def _write_run(self, records: list[bytes], sizes: list[int], start: int, stop: int) -> int:
        """Write records[start:stop] in one write, up to the first that needs something else first; returns
        where it stopped. The first always goes: in the next file if it would take this one past
        --max-bytes-per-file (D-76), and alone if the reader is waiting for it, which takes it at once."""
        if self._write_pos > 0 and self._write_pos + 4 + sizes[start] > self._max_bytes_per_file:
            self._roll()
        reader_waiting = self._ahead is None
        if reader_waiting:
            stop = start + 1
        else:
            ends = list(itertools.accumulate(map(operator.add, sizes[start:stop], itertools.repeat(4))))
            stop = start + max(bisect.bisect_right(ends, self._max_bytes_per_file - self._write_pos), 1)
        self._write(b"".join(itertools.chain.from_iterable(
            zip(map(_SIZE.pack, sizes[start:stop]), records[start:stop], strict=True))))
        self._depth += stop - start
        if reader_waiting:
            self._read_ahead()
        return stop

    def _roll(self) -> None:
        if self._read_file_num == self._write_file_num:
            self._max_bytes_per_file_read = self._write_pos
        self._write_file_num += 1
        self._write_pos = 0
        self._sync_logged()  # go-diskqueue syncs whenever it starts a new file
        self._close_write_file()

    def _write(self, data: bytes) -> None:
        """At the write position, which moves past it once the kernel has it all."""
        if self._write_file is None:
            path = self._file_name(self._write_file_num)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            self._write_file = os.fdopen(fd, "r+b", buffering=0)
            log.info("DISKQUEUE(%s): writeOne() opened %s", self.name, path)
        self._write_file.seek(self._write_pos)
        view = memoryview(data)
        while view:
            view = view[self._write_file.write(view):]
        self._write_pos += len(data)

    # -- reading -----------------------------------------------------------------------------------------

    def get(self) -> bytes | None:
        """The oldest record, consumed; None when the queue is empty."""
        records = self.get_many(1)
        return records[0] if records else None

    def get_many(self, limit: int) -> list[bytes]:
        """Up to `limit` of the oldest records, consumed, each exactly as `get` would take it."""
        records: list[bytes] = []
        with self._lock:
            self._read_ahead()
            while self._ahead is not None and len(records) < limit:
                records += self._take_run(limit - len(records) - 1)
                records.append(self._take_held())
        return records

    def _take_held(self) -> bytes:
        data, self._ahead = self._ahead, None
        self._move_forward()
        self._ops_since_sync += 1
        if self._ops_since_sync >= self._sync_every or self._needs_sync:
            self._sync_logged()
        self._read_ahead()
        return data

    def _take_run(self, limit: int) -> list[bytes]:
        """Up to `limit` records taken as `_take_held` takes them, in one pass over the read buffer, while
        taking one moves nothing but positions and counts: it is not the last of its file, no sync falls due,
        and the next record is in the buffer, whole and of a valid size, to be held in its place. Whatever
        else (a new file, a sync, a bad or torn record, the end of the buffer) is left to `_take_held`."""
        taken: list[bytes] = []
        if self._read_file is None or self._needs_sync:  # no file: the held record was the last of its own
            return taken
        limit = min(limit, self._sync_every - self._ops_since_sync - 1)
        finished = self._read_file_num < self._write_file_num
        # Where the next record to hold must start: before the end of a finished file, before the write
        # position in the file being written.
        readable_end = self._max_bytes_per_file_read if finished else self._write_pos
        data, position, unpack = self._read_buffer, self._read_buffer_pos, _SIZE.unpack_from
        minimum, maximum = self._min_msg_size, self._max_msg_size
        held, read_pos, next_read_pos = self._ahead, self._read_pos, self._next_read_pos
        for _ in range(limit):
            if next_read_pos >= readable_end or position + 4 > len(data):
                break
            (size,) = unpack(data, position)
            record_end = position + 4 + size
            if not minimum <= size <= maximum or record_end > len(data):
                break
            taken.append(held)
            held = data[position + 4:record_end]
            position = record_end
            read_pos, next_read_pos = next_read_pos, next_read_pos + 4 + size
        if not taken:
            return taken
        self._ahead, self._read_pos, self._next_read_pos = held, read_pos, next_read_pos
        self._read_buffer_pos = position
        self._depth -= len(taken)
        self._ops_since_sync += len(taken)
        if finished and next_read_pos >= readable_end:  # the held record ends its file, as _read_one handles it
            self._close_read_file()
            self._next_read_file_num += 1
            self._next_read_pos = 0
        return taken

    def _read_ahead(self) -> None:
        """go-diskqueue's ioLoop holds the next record as soon as one exists. When that record was the last
        of the file being written, the file is not left at its end even if the writer rolls on later: the
        next read meets EOF and the file is renamed `*.bad` (D-76: what nsqd's data path shows)."""
        while self._ahead is None and (self._read_file_num < self._write_file_num
                                       or self._read_pos < self._write_pos):
            try:
                self._ahead = self._read_one()
            except (OSError, _CorruptRecord) as error:
                log.error("DISKQUEUE(%s) reading at %d of %s - %s", self.name, self._read_pos,
                          self._file_name(self._read_file_num), error)
                self._handle_read_error()

    def _read_one(self) -> bytes:
        if self._read_file is None:
            path = self._file_name(self._read_file_num)
            self._read_file = open(path, "rb", buffering=0)  # noqa: SIM115 - kept open across calls, closed on roll
            log.info("DISKQUEUE(%s): readOne() opened %s", self.name, path)
            self._read_file.seek(self._read_pos)
            # A finished file's own size says where it ends; the file being written has no end yet.
            self._max_bytes_per_file_read = self._max_bytes_per_file
            if self._read_file_num < self._write_file_num:
                self._max_bytes_per_file_read = os.fstat(self._read_file.fileno()).st_size
        header = self._read_bytes(4)
        if len(header) < 4:
            self._close_read_file()
            raise _CorruptRecord("EOF" if not header else "unexpected EOF")
        (size,) = _SIZE.unpack(header)
        if not self._min_msg_size <= size <= self._max_msg_size:
            self._close_read_file()
            # No way to know where the next record starts: the rest of the file is lost.
            raise _CorruptRecord(f"invalid message read size ({size})")
        data = self._read_bytes(size)
        if len(data) < size:
            self._close_read_file()
            raise _CorruptRecord("unexpected EOF")
        self._next_read_file_num = self._read_file_num
        self._next_read_pos = self._read_pos + 4 + size
        if self._read_file_num < self._write_file_num and self._next_read_pos >= self._max_bytes_per_file_read:
            self._close_read_file()
            self._next_read_file_num += 1
            self._next_read_pos = 0
        return data

    def _read_bytes(self, size: int) -> bytes:
        """The read file's next `size` bytes, fewer at its end, through the read buffer."""
        end = self._read_buffer_pos + size
        if end > len(self._read_buffer):
            self._read_buffer = self._read_buffer[self._read_buffer_pos:] + self._read_file.read(max(size, _READ_CHUNK))
            self._read_buffer_pos, end = 0, size
        data = self._read_buffer[self._read_buffer_pos:end]
        self._read_buffer_pos += len(data)
        return data

    def _move_forward(self) -> None:
        finished = self._read_file_num
        self._read_file_num, self._read_pos = self._next_read_file_num, self._next_read_pos
        self._depth -= 1
        if finished != self._read_file_num:
            self._needs_sync = True
            path = self._file_name(finished)
            try:
                os.remove(path)
            except OSError as error:
                log.error("DISKQUEUE(%s) failed to Remove(%s) - %s", self.name, path, error)
        self._check_tail_corruption()

    def _handle_read_error(self) -> None:
        """Skip the unreadable file (and, when it is the one being written, start a new one)."""
        self._close_read_file()
        if self._read_file_num == self._write_file_num:
            self._close_write_file()
            self._write_file_num += 1
            self._write_pos = 0
        bad = self._file_name(self._read_file_num)
        log.warning("DISKQUEUE(%s) jump to next file and saving bad file as %s.bad", self.name, bad)
        try:
            os.rename(bad, bad + ".bad")
        except OSError:
            log.error("DISKQUEUE(%s) failed to rename bad diskqueue file %s to %s.bad", self.name, bad, bad)
        self._read_file_num += 1
        self._read_pos = 0
        self._next_read_file_num, self._next_read_pos = self._read_file_num, 0
        self._needs_sync = True
        self._check_tail_corruption()

    def _check_tail_corruption(self) -> None:
        """At the end of the data the depth must be 0 and the positions equal; if not, trust the positions."""
        if self._read_file_num < self._write_file_num or self._read_pos < self._write_pos:
            return
        if self._depth != 0:
            kind = "negative depth at tail (%d), metadata corruption" if self._depth < 0 else \
                "positive depth at tail (%d), data loss"
            log.error("DISKQUEUE(%s) " + kind + ", resetting 0...", self.name, self._depth)
            self._depth = 0
            self._needs_sync = True
        if self._read_file_num != self._write_file_num or self._read_pos != self._write_pos:
            log.error("DISKQUEUE(%s) read position past write position, corruption, skipping to next "
                      "writeFileNum and resetting 0...", self.name)
            self._skip_to_next_file()
            self._needs_sync = True

    # -- whole-queue operations ----------------------------------------------------------------------

    def empty(self) -> None:
        """Drop everything: every data file and the metadata file (D-63, D-64)."""
        with self._lock:
            if self._exiting:
                raise DiskQueueError("exiting")
            log.info("DISKQUEUE(%s): emptying", self.name)
            self._skip_to_next_file()
            _remove_if_present(self._metadata_file_name())
            self._ops_since_sync = 0

    def close(self, last_records: list[bytes] = ()) -> None:
        """Shutdown: `last_records` (what its owner held in memory) written, then positions synced, so a restart
        resumes where this left off. A failed write loses those records with a log line, as nsqd's flush does."""
        if last_records:
            try:
                self.put_many(last_records)
            except DiskQueueError as error:
                log.error("failed to write message to backend - %s", error)
        with self._lock:
            if self._exiting:
                return
            self._exiting = True
            log.info("DISKQUEUE(%s): closing", self.name)
            self._sync_logged()
            self._close_read_file()
            self._close_write_file()

    def delete(self) -> None:
        """Topic or channel deletion: drop the files, then stop."""
        self.empty()
        with self._lock:
            self._exiting = True
            log.info("DISKQUEUE(%s): deleting", self.name)

    def sync_if_active(self) -> None:
        """Called every --sync-timeout: positions reach the metadata file within one tick of any activity."""
        with self._lock:
            if self._exiting or not (self._ops_since_sync or self._needs_sync):
                return
            self._sync_logged()

    # -- files -------------------------------------------------------------------------------------------

    def _skip_to_next_file(self) -> None:
        self._close_read_file()
        self._close_write_file()
        for number in range(self._read_file_num, self._write_file_num + 1):
            _remove_if_present(self._file_name(number))
        self._write_file_num += 1
        self._write_pos = 0
        self._read_file_num = self._write_file_num
        self._read_pos = 0
        self._next_read_file_num, self._next_read_pos = self._read_file_num, 0
        self._ahead = None
        self._depth = 0

    def _sync_logged(self) -> None:
        """A failed sync is logged and retried at the next one, as go-diskqueue's ioLoop does."""
        try:
            self._sync()
        except OSError as error:
            log.error("DISKQUEUE(%s) failed to sync - %s", self.name, error)

    def _sync(self) -> None:
        if self._write_file is not None:
            os.fsync(self._write_file.fileno())
        self._persist_metadata()
        self._ops_since_sync = 0
        self._needs_sync = False

    def _persist_metadata(self) -> None:
        path = self._metadata_file_name()
        temporary = f"{path}.{random.getrandbits(63)}.tmp"
        text = _METADATA.format(depth=self._depth, read_file=self._read_file_num, read_pos=self._read_pos,
                                write_file=self._write_file_num, write_pos=self._write_pos)
        with open(temporary, "w") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)

    def _retrieve_metadata(self) -> None:
        try:
            with open(self._metadata_file_name()) as file:
                text = file.read()
        except FileNotFoundError:
            return  # a new queue: go-diskqueue starts from zero when there is no metadata file
        except OSError as error:
            log.error("DISKQUEUE(%s) failed to retrieveMetaData - %s", self.name, error)
            return
        try:
            depth_line, read_line, write_line = text.split("\n")[:3]
            depth = int(depth_line)
            read_file, read_pos = (int(part) for part in read_line.split(","))
            write_file, write_pos = (int(part) for part in write_line.split(","))
        except ValueError:
            log.error("DISKQUEUE(%s) failed to retrieveMetaData - unexpected content %r", self.name, text[:64])
            return
        self._depth = depth
        self._read_file_num, self._read_pos = read_file, read_pos
        self._write_file_num, self._write_pos = write_file, write_pos
        self._next_read_file_num, self._next_read_pos = read_file, read_pos
        # Metadata not synced at the last stop (SIGKILL): the write file holds more than it says. Write on
        # in a new file and let the reader salvage what it can from this one.
        path = self._file_name(self._write_file_num)
        try:
            size = os.stat(path).st_size
        except FileNotFoundError:
            return  # nothing was written to the write file yet: nothing to salvage
        if self._write_pos < size:
            log.warning("DISKQUEUE(%s) %s metadata writePos %d < file size of %d, skipping to new file",
                        self.name, path, self._write_pos, size)
            self._write_file_num += 1
            self._write_pos = 0

    def _close_read_file(self) -> None:
        if self._read_file is not None:
            self._read_file.close()
            self._read_file = None
            self._read_buffer, self._read_buffer_pos = b"", 0

    def _close_write_file(self) -> None:
        if self._write_file is not None:
            self._write_file.close()
            self._write_file = None

    def _metadata_file_name(self) -> str:
        return os.path.join(self._data_path, f"{self.name}.diskqueue.meta.dat")

    def _file_name(self, number: int) -> str:
        return os.path.join(self._data_path, f"{self.name}.diskqueue.{number:06d}.dat")


class _CorruptRecord(Exception):
    pass


def _remove_if_present(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
    except OSError as error:
        log.error("DISKQUEUE failed to remove %s - %s", path, error)
