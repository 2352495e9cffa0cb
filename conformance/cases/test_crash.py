"""Crashes and what the disk keeps (D-70, D-71, D-72, D-73, D-74, D-75, D-76, P-RST-07, P-RST-08, P-RST-09, P-RST-10,
P-RST-11, P-RST-12, P-RST-13, P-RST-14, P-RST-15 in conformance/spec/persistence.toml): SIGKILL, the sync policy
(--sync-every, --sync-timeout), rolled disk queue files and the files a target leaves in its --data-path. Each case
runs on a broker the suite may kill (conformance/crash.py); without what a case needs it is UNSUPPORTED."""

import json
import time

import pytest

from conformance import crash
from conformance.client import HarnessError, Unsupported
from nsq_protocol import wire

requirement = pytest.mark.requirement
RECORD_HEADER = 4 + 8 + 2 + 16  # go-diskqueue's size, then nsqd's timestamp, attempts and ID before the body


def create(nsq, topic: str, *channels: str) -> None:
    for path in [f"/topic/create?topic={topic}"] + [f"/channel/create?topic={topic}&channel={c}" for c in channels]:
        nsq.verify.equal(f"POST {path}", 200, nsq.http.post(path).status)


def publish(nsq, topic: str, channel: str, bodies: list[bytes]) -> None:
    """Publish so that the channel receives the messages in publish order, which fixes the ones that go past its
    memory queue to disk: nsqd's topic pump takes from its memory and disk queues at random, so the messages go in
    parts that each fit the topic's (empty) memory queue, in MPUBs of at most --max-body-size, each part once the
    channel has the one before (without a memory queue, one part: the topic's disk queue alone keeps the order).
    Parts in quick succession: a case about --sync-every needs its writes within --sync-timeout."""
    conn, part_size = nsq.connect(), nsq.limits["mem_queue_size"] or len(bodies)
    batch = max(1, min(2000, nsq.limits["max_body_size"] // (4 + max(map(len, bodies))) - 1))

    def channel_depth() -> int | None:
        return (nsq.http.channel_stats(topic, channel) or {}).get("depth")

    depth = channel_depth() or 0
    for part_start in range(0, len(bodies), part_size):
        part = bodies[part_start:part_start + part_size]
        for start in range(0, len(part), batch):
            conn.command("MPUB", topic, body=wire.mpub_body(part[start:start + batch]))
            conn.expect_response(b"OK")
        depth += len(part)
        nsq.until(lambda count=depth: channel_depth() == count, 5.0, f"channel {channel} has {depth} messages")


def overflowed(nsq, topic: str, channel: str, count: int, why: str) -> None:
    """Wait until `count` messages of the channel are on disk (D-70) and the topic has handed everything on."""
    nsq.until(lambda: (nsq.http.channel_stats(topic, channel) or {}).get("backend_depth") == count
              and (nsq.http.stats(topic) or {}).get("depth") == 0, 10.0, why)
    nsq.verify.equal("the channel's backend_depth before the crash (D-70)", count,
                     (nsq.http.channel_stats(topic, channel) or {}).get("backend_depth"))


def drain(nsq, topic: str, channel: str, count: int) -> list[bytes]:
    """Every message the channel has after the restart, by a consumer that FINs them as they come, as many at a
    time as --max-rdy-count allows."""
    conn, ready = nsq.connect(), max(1, min(count, nsq.limits["max_rdy_count"]))
    conn.subscribe(topic, channel, ready=ready)
    delivered = []
    while len(delivered) < count:
        for message in conn.expect_messages(min(ready, count - len(delivered)), timeout=5):
            conn.command("FIN", message.id_text)
            delivered.append(message.body)
    conn.expect_silence(0.3, "no message more than the channel had")
    return delivered


def bodies(first: int, count: int, size: int = 1) -> list[bytes]:
    return [f"{number:0{size}d}".encode() for number in range(first, first + count)]


@requirement("NSQ-DISK-001")
def test_topics_and_channels_outlive_a_sigkill(crashable):
    """Created over HTTP (one paused), then SIGKILL: both come back, the pause too (D-71, P-RST-10; rec-0276)."""
    nsq = crashable
    crash.require(nsq, "kill")
    topic = nsq.topic()
    create(nsq, topic, "paused")
    nsq.verify.equal("POST /channel/pause", 200, nsq.http.post(f"/channel/pause?topic={topic}&channel=paused").status)
    create(nsq, topic, "open")  # the last change: its creation alone must reach the metadata
    nsq.wait(1.0, "nsqd writes its metadata after a change, not with the reply (P-RST-08)")
    nsq.kill()
    channels = {name: (nsq.http.channel_stats(topic, name) or {}).get("paused") for name in ("open", "paused")}
    nsq.verify.equal("channels after the SIGKILL, with their pause state (D-71)", {"open": False, "paused": True},
                     channels)


@requirement("NSQ-DISK-002")
def test_what_reached_the_disk_outlives_a_sigkill(crashable):
    """--mem-queue-size + 3 messages, a wait past --sync-timeout, SIGKILL: the 3 that went to disk are delivered
    once each after the restart (P-RST-15; rec-0282)."""
    nsq = crashable
    crash.require(nsq, "kill")
    memory, topic = nsq.limits["mem_queue_size"], nsq.topic()
    create(nsq, topic, "c")
    published = bodies(0, memory + 3, 5)
    publish(nsq, topic, "c", published)
    overflowed(nsq, topic, "c", 3, "the last 3 went to disk")
    nsq.wait(nsq.limits["sync_timeout_ms"] / 1000 + 0.5, "past --sync-timeout: the disk queue synced (P-RST-15)")
    nsq.kill()
    delivered = drain(nsq, topic, "c", 3)
    nsq.verify.equal("after the SIGKILL: the messages that were on disk, each once (P-RST-15)",
                     published[-3:], sorted(delivered))


@requirement("NSQ-DISK-003")
def test_sync_every_writes_reach_the_metadata(crashable):
    """--sync-every messages past the memory queue, SIGKILL at once (before --sync-timeout): the sync after that
    many writes made them all survive (go-diskqueue's syncEvery)."""
    nsq = crashable
    crash.require(nsq, "kill")
    memory, every, topic = nsq.limits["mem_queue_size"], nsq.limits["sync_every"], nsq.topic()
    create(nsq, topic, "c")
    published = bodies(0, memory + every, 5)
    publish(nsq, topic, "c", published)
    overflowed(nsq, topic, "c", every, f"--sync-every ({every}) messages went to disk")
    nsq.kill()
    channel = nsq.http.channel_stats(topic, "c") or {}
    nsq.verify.equal("backend_depth after the SIGKILL: every message of the synced writes", every,
                     channel.get("backend_depth"))
    nsq.verify.equal("those messages, each once", published[-every:], sorted(drain(nsq, topic, "c", every)))


@requirement("NSQ-DISK-004")
def test_disk_queue_files_roll_and_are_read_across_a_restart(crashable):
    """Records go to the next numbered file when one more would take the file past --max-bytes-per-file: two per
    file here, and a record larger than the limit alone in the file it starts (D-76); after a SIGTERM restart
    every message is delivered once, from memory and the files (P-RST-14), and a file read to its end goes."""
    nsq = crashable
    crash.require(nsq, "restart", "data_path")
    size, memory = nsq.limits["max_bytes_per_file"], nsq.limits["mem_queue_size"]
    if size > 4096:
        pytest.skip(f"profile {nsq.profile.name}: --max-bytes-per-file {size} makes files roll only after "
                    "thousands of messages (a profile with a small one, e.g. nsqd-durability, shows it)")
    topic = nsq.topic()
    create(nsq, topic, "c")
    body_size = size // 2 - RECORD_HEADER  # two records fill a file to the limit at most, a third would pass it
    small = [body.rjust(body_size, b"x") for body in bodies(0, memory + 4, 3)]
    big = b"big".ljust(size, b"y")  # a record past the limit alone: it still goes into the file it starts
    published = [*small[:memory], big, *small[memory:]]
    publish(nsq, topic, "c", published)
    overflowed(nsq, topic, "c", 5, "5 went to disk")
    files = sorted(path.name for path in nsq.target.data_path.glob(f"{topic}:c.diskqueue.[0-9]*.dat"))
    nsq.verify.equal("the channel's disk queue files: the big record alone, then two records each (D-76)",
                     [f"{topic}:c.diskqueue.{number:06d}.dat" for number in range(3)], files)
    nsq.restart()
    nsq.verify.equal("depth after the restart: every message (P-RST-14)", len(published),
                     (nsq.http.channel_stats(topic, "c") or {}).get("depth"))
    nsq.verify.equal("every message once after the restart", sorted(published),
                     sorted(drain(nsq, topic, "c", len(published))))
    first = nsq.target.data_path / f"{topic}:c.diskqueue.000000.dat"
    nsq.until(lambda: not first.exists(), 2.0, "a file read to its end goes")
    nsq.verify.equal("file 000000 once read (removed, or renamed *.bad: D-76)", False, first.exists())


@requirement("NSQ-DISK-005")
def test_the_data_path_after_a_clean_shutdown(crashable):
    """One topic, one channel, one message nobody read, SIGTERM: nsqd.dat names them, the channel's queue holds
    the message in file 000000, the metadata files say where (P-RST-07, P-RST-09)."""
    nsq = crashable
    crash.require(nsq, "restart", "data_path")
    if nsq.limits["mem_queue_size"] == 0:
        pytest.skip(f"profile {nsq.profile.name}: P-RST-09's layout is a broker's with a memory queue; without one "
                    "the topic's own queue has files too")
    topic, body = nsq.topic(), b"kept on disk"
    create(nsq, topic, "c")
    nsq.connect().publish(topic, body)
    nsq.until(lambda: (nsq.http.channel_stats(topic, "c") or {}).get("depth") == 1, 2.0, "the message is queued")
    nsq.restart()
    data = nsq.target.data_path
    files = sorted(path.name for path in data.glob(f"{topic}*"))
    nsq.verify.equal("the topic's files after the restart (P-RST-09)",
                     [f"{topic}.diskqueue.meta.dat", f"{topic}:c.diskqueue.000000.dat",
                      f"{topic}:c.diskqueue.meta.dat"],
                     files)
    record = RECORD_HEADER + len(body)
    nsq.verify.soft_equal("the channel's disk queue metadata: depth, read file and position, write file and position",
                          f"1\n0,0\n0,{record}\n", _read(data / f"{topic}:c.diskqueue.meta.dat"))
    nsq.verify.soft_equal("the topic's disk queue metadata: empty", "0\n0,0\n0,0\n",
                          _read(data / f"{topic}.diskqueue.meta.dat"))
    stored = (data / f"{topic}:c.diskqueue.000000.dat").read_bytes() if files else b""
    nsq.verify.equal("the record: its size, then the message with the body last (D-76)",
                     (record - 4, body), (int.from_bytes(stored[:4], "big"), stored[RECORD_HEADER:]))
    metadata = json.loads(_read(data / "nsqd.dat") or "{}")
    mine = [entry for entry in metadata.get("topics") or [] if entry.get("name") == topic]
    nsq.verify.equal("nsqd.dat's entry of the topic (P-RST-07)",
                     [{"name": topic, "paused": False, "channels": [{"name": "c", "paused": False}]}], mine)
    nsq.verify.equal("the message after the restart", [body], drain(nsq, topic, "c", 1))


@requirement("NSQ-DISK-006")
def test_a_sigkill_before_the_sync_leaves_a_working_queue(crashable):
    """A message past the memory queue, synced, one more, SIGKILL at once (the queue's metadata lags its file):
    after the restart, new messages to the same channel, past its memory queue too, are taken and delivered once
    each (go-diskqueue writes on in a new file when the metadata lags the file: P-RST-15)."""
    nsq = crashable
    crash.require(nsq, "kill")
    memory, topic = nsq.limits["mem_queue_size"], nsq.topic()
    create(nsq, topic, "c")
    publish(nsq, topic, "c", bodies(0, memory + 1, 6))
    overflowed(nsq, topic, "c", 1, "one went to disk")
    nsq.wait(nsq.limits["sync_timeout_ms"] / 1000 + 0.5, "past --sync-timeout: that one is synced")
    publish(nsq, topic, "c", [b"unsynced"])
    overflowed(nsq, topic, "c", 2, "one more went to disk")
    nsq.kill()  # the queue's metadata now says less than its file holds
    past_memory = memory + 3 if memory <= 100 else 3  # a large memory queue: the disk queue is not reached again
    fresh = [b"new-" + body for body in bodies(0, past_memory, 6)]
    publish(nsq, topic, "c", fresh)
    # What survived the SIGKILL may come too, in any order, some of it twice (a queue whose read position was not
    # synced reads again what it had handed on): read until every new one came.
    conn, most = nsq.connect(), len(fresh) + 2 * (memory + 2)
    conn.subscribe(topic, "c", ready=min(most, nsq.limits["max_rdy_count"]))
    delivered = []
    while not set(fresh) <= set(delivered) and len(delivered) < most:
        message = conn.expect_message(timeout=3)
        conn.command("FIN", message.id_text)
        delivered.append(message.body)
    nsq.verify.equal("the new messages after the SIGKILL, each once", fresh,
                     sorted(body for body in delivered if body.startswith(b"new-")))


@requirement("NSQ-DISK-007")
def test_messages_from_disk_keep_to_rdy(crashable):
    """A topic without a channel keeps what passes its memory queue on disk, a DPUB too, which loses its deferral
    there (P-RST-12, D-70, D-32); the first SUB with RDY 1 then gets them all, one at a time, each once, whether
    the topic's or the channel's queue held them."""
    nsq = crashable
    memory, topic = nsq.limits["mem_queue_size"], nsq.topic()
    if memory > 1000:
        pytest.skip(f"profile {nsq.profile.name}: --mem-queue-size {memory} would take a case of thousands of "
                    "one-at-a-time deliveries (a profile with a small one, e.g. nsqd-durability, shows it)")
    published, conn = bodies(0, memory + 6, 4), nsq.connect()
    for body in published:
        conn.publish(topic, body)
    conn.command("DPUB", topic, 3000, body=b"deferred")
    conn.expect_response(b"OK")
    published.append(b"deferred")
    nsq.until(lambda: (nsq.http.stats(topic) or {}).get("backend_depth") == 7, 5.0, "7 went to the topic's disk")
    nsq.verify.equal("the topic's (depth, backend_depth, message_count) without a channel (D-70, D-53)",
                     (len(published), 7, len(published)),
                     tuple((nsq.http.stats(topic) or {}).get(key) for key in ("depth", "backend_depth",
                                                                             "message_count")))
    conn = nsq.connect()
    conn.subscribe(topic, "c", ready=1)
    subscribed, delivered, deferred_after = time.monotonic(), [], None
    for _ in published:
        message = conn.expect_message(timeout=5)
        if message.body == b"deferred":
            deferred_after = nsq.elapsed_since(subscribed)
        conn.expect_silence(0.1, "RDY 1: nothing more before the FIN")
        delivered.append(message.body)
        conn.command("FIN", message.id_text)
    conn.expect_silence(0.3, "no message more than were published")
    nsq.verify.equal("every message once, from memory and disk", sorted(published), sorted(delivered))
    nsq.verify.soft_equal("the DPUB 3000 that went to disk comes without its deferral (D-32): < 2.5 s after the "
                          "SUB", True, deferred_after is not None and deferred_after < 2.5)


def _read(path) -> str:
    return path.read_text() if path.is_file() else ""


@requirement("NSQ-DISK-008")
def test_reads_from_disk_are_synced_too(crashable):
    """Messages on disk, synced; then --sync-every of them read from disk, and SIGKILL at once: the reads were
    synced with them (go-diskqueue counts reads and writes alike), so none is delivered again after the restart."""
    nsq = crashable
    crash.require(nsq, "kill")
    memory, every, topic = nsq.limits["mem_queue_size"], nsq.limits["sync_every"], nsq.topic()
    if memory + every > 1000:
        pytest.skip(f"profile {nsq.profile.name}: --mem-queue-size {memory} and --sync-every {every} would take a "
                    "case of thousands of deliveries (a profile with small ones, e.g. nsqd-durability, shows it)")
    create(nsq, topic, "c")
    publish(nsq, topic, "c", bodies(0, memory + every, 5))
    overflowed(nsq, topic, "c", every, f"--sync-every ({every}) messages went to disk")
    nsq.wait(nsq.limits["sync_timeout_ms"] / 1000 + 0.5, "past --sync-timeout: the writes are synced")
    conn = nsq.connect()
    conn.subscribe(topic, "c", ready=memory + every)
    conn.expect_messages(memory + every, timeout=5)
    nsq.until(lambda: (nsq.http.channel_stats(topic, "c") or {}).get("backend_depth") == 0, 2.0,
              "every message was read from disk")
    nsq.kill()
    again = drain(nsq, topic, "c", 0)
    nsq.verify.equal("messages delivered again after the SIGKILL (the in-flight ones are lost: P-RST-11)", [], again)


@requirement("NSQ-DISK-009")
def test_a_corrupt_disk_queue_file_is_set_aside(crashable):
    """The size of the first record of a channel's second queue file overwritten with -1 before it is read: the
    file is renamed *.bad, its records are lost, and every other message is delivered once (go-diskqueue's
    handleReadError; D-76)."""
    nsq = crashable
    crash.require(nsq, "data_path")
    size, memory = nsq.limits["max_bytes_per_file"], nsq.limits["mem_queue_size"]
    if size > 4096 or memory > 1000:
        pytest.skip(f"profile {nsq.profile.name}: --max-bytes-per-file {size} and --mem-queue-size {memory} make "
                    "a second queue file take thousands of messages (nsqd-durability shows it)")
    topic = nsq.topic()
    create(nsq, topic, "c")
    published = [body.rjust(size // 2 - RECORD_HEADER, b"x") for body in bodies(0, memory + 6, 3)]
    publish(nsq, topic, "c", published)
    overflowed(nsq, topic, "c", 6, "6 went to disk, two per file")
    second = nsq.target.data_path / f"{topic}:c.diskqueue.000001.dat"
    with second.open("r+b") as file:  # the reader is still in file 000000
        file.write(b"\xff\xff\xff\xff")
    lost = published[memory + 2:memory + 4]  # the records of file 000001
    readable = [body for body in published if body not in lost]
    delivered = drain(nsq, topic, "c", len(readable))
    nsq.verify.equal("every message outside the corrupt file, once", sorted(readable), sorted(delivered))
    nsq.verify.equal("the corrupt file set aside as *.bad (D-76)", (False, True),
                     (second.exists(), second.with_name(second.name + ".bad").exists()))


@requirement("NSQ-DISK-010")
def test_without_a_memory_queue(crashable):
    """--mem-queue-size=0: queued messages are all on disk (backend_depth = depth); a ready consumer, also on an
    ephemeral channel, is handed each message at once; an ephemeral channel whose consumer is not ready drops
    every message (D-74; rec-0283, rec-0284)."""
    nsq = crashable
    if nsq.limits["mem_queue_size"] != 0:
        pytest.skip(f"profile {nsq.profile.name}: --mem-queue-size {nsq.limits['mem_queue_size']}, not 0 "
                    "(nsqd-memory-0 shows it)")
    topic = nsq.topic()
    create(nsq, topic, "c")
    ready, idle = nsq.connect(), nsq.connect()
    ready.subscribe(topic, "e#ephemeral", ready=5)
    idle.subscribe(topic, "idle#ephemeral", ready=0)
    for body in (b"d1", b"d2", b"d3"):  # one at a time: without a memory queue an ephemeral channel hands a message
        publish(nsq, topic, "c", [body])  # only to a consumer waiting at that moment; a burst loses some (D-74)
    nsq.verify.equal("the ready consumer of an ephemeral channel gets each message at once (D-74)",
                     [b"d1", b"d2", b"d3"], sorted(message.body for message in ready.expect_messages(3)))
    nsq.until(lambda: (nsq.http.channel_stats(topic, "c") or {}).get("depth") == 3, 2.0, "c has all three")
    stats = {name: nsq.http.channel_stats(topic, name) or {} for name in ("c", "idle#ephemeral")}
    nsq.verify.equal("(depth, backend_depth) of c, and (message_count, depth) of the ephemeral channel nobody is "
                     "ready on (D-74)", ((3, 3), (3, 0)),
                     ((stats["c"].get("depth"), stats["c"].get("backend_depth")),
                      (stats["idle#ephemeral"].get("message_count"), stats["idle#ephemeral"].get("depth"))))
    idle.command("RDY", 5)
    idle.expect_silence(0.5, "the ephemeral channel dropped what came while nobody was ready (D-74)")


@requirement("NSQ-DISK-011")
def test_a_record_that_would_pass_the_file_limit_starts_the_next_file(crashable):
    """Records of 40 % of --max-bytes-per-file each: two fit a file, the third would take it past the limit, so it
    starts the next file; five on disk leave files of two, two and one records, none over the limit (D-76:
    go-diskqueue rolls before a write, not after; rec-0286, rec-0287)."""
    nsq = crashable
    crash.require(nsq, "data_path")
    size, memory = nsq.limits["max_bytes_per_file"], nsq.limits["mem_queue_size"]
    if size > 4096 or memory > 1000:
        raise Unsupported(f"profile {nsq.profile.name}: --max-bytes-per-file {size} and --mem-queue-size {memory} "
                          "put files of thousands of messages on disk (nsqd-durability shows it)")
    topic, record = nsq.topic(), size * 2 // 5
    create(nsq, topic, "c")
    publish(nsq, topic, "c", [body.rjust(record - RECORD_HEADER, b"r") for body in bodies(0, memory + 5, 3)])
    overflowed(nsq, topic, "c", 5, "5 went to disk")
    files = sorted(nsq.target.data_path.glob(f"{topic}:c.diskqueue.[0-9]*.dat"))
    nsq.verify.equal("the sizes of the channel's disk queue files (D-76)", [2 * record, 2 * record, record],
                     [path.stat().st_size for path in files])


@requirement("NSQ-DISK-012")
def test_a_torn_last_record_is_never_delivered(crashable):
    """Three messages on disk and synced, then the start of a fourth record appended to their file (its size, the
    message header, 5 of its 20 body bytes), as a crash in the middle of a write leaves it, and SIGKILL: after the
    restart the three are delivered once each, the torn one never, and the file is renamed *.bad once read
    (go-diskqueue's readOne and handleReadError; D-76, P-RST-15)."""
    nsq = crashable
    crash.require(nsq, "kill", "data_path")
    memory = nsq.limits["mem_queue_size"]
    if memory > 1000:
        raise Unsupported(f"profile {nsq.profile.name}: --mem-queue-size {memory} puts messages on disk only after "
                          "thousands (nsqd-durability shows it)")
    topic, published = nsq.topic(), bodies(0, memory + 3, 4)
    create(nsq, topic, "c")
    publish(nsq, topic, "c", published)
    overflowed(nsq, topic, "c", 3, "3 went to disk")
    nsq.wait(nsq.limits["sync_timeout_ms"] / 1000 + 0.5, "past --sync-timeout: the three are synced")
    data = sorted(nsq.target.data_path.glob(f"{topic}:c.diskqueue.[0-9]*.dat"))[-1]
    # size 46 (26-byte message header + a 20-byte body), then 8 + 2 + 16 header bytes and 5 of the body
    with data.open("ab") as file:
        file.write((26 + 20).to_bytes(4, "big") + bytes(26) + b"torn-")
    nsq.kill()
    delivered = drain(nsq, topic, "c", 3)
    nsq.until(lambda: data.with_name(data.name + ".bad").exists(), 2.0, "the file read to its torn end is set aside")
    nsq.verify.equal("what comes after the SIGKILL (the memory queue's are lost: P-RST-11), and the torn file "
                     "renamed *.bad (D-76)", (sorted(published[memory:]), True),
                     (sorted(delivered), data.with_name(data.name + ".bad").exists()))


@requirement("NSQ-DISK-013")
def test_a_corrupt_metadata_file_stops_the_start(crashable):
    """nsqd.dat cut short while the broker runs, then SIGKILL: the broker does not start on it; with the file put
    back it starts with its topic and channel (P-RST-17). nsqd writes the file after each create, each write in a
    goroutine of its own, queued behind its nsqlookupd loop: one still queued at the cut would mend the file, so
    the cut waits until the file has stood still for a second."""
    nsq = crashable
    crash.require(nsq, "kill", "data_path")
    topic, metadata = nsq.topic(), nsq.target.data_path / "nsqd.dat"
    create(nsq, topic, "c")
    seen = {"text": "", "since": time.monotonic()}

    def written_and_still() -> bool:
        text = _read(metadata)
        if text != seen["text"]:
            seen.update(text=text, since=time.monotonic())
        return f'"{topic}"' in text and time.monotonic() - seen["since"] >= nsq.seconds(1.0)

    nsq.until(written_and_still, 5.0, "nsqd.dat names the topic (P-RST-08) and stays as it is for 1 s")
    kept = metadata.read_bytes()
    metadata.write_bytes(kept[:kept.index(topic.encode())])  # cut short, as a torn write leaves it
    try:
        nsq.kill()
        started = True
    except HarnessError:
        started = False
    metadata.write_bytes(kept)
    nsq.kill()  # SIGKILL of nothing, if it did not start, and a start on the mended file
    nsq.verify.equal("(the broker started on the corrupt nsqd.dat, the channel is back once the file is mended) "
                     "(P-RST-17)", (False, True), (started, nsq.http.channel_stats(topic, "c") is not None))
