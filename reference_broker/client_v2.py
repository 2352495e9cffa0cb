"""Per-connection state: IDENTIFY settings, RDY and in-flight counts, the output buffer, compression, and what
nsqd's per-connection messagePump sends on its own: heartbeats and timed flushes (nsqd/client_v2.go, and the
write half of nsqd/protocol_v2.go).

One thread per connection, its reader (protocol_v2's I/O loop). The timed half of every connection's messagePump
runs on one shared thread, the OutputLoop: heartbeats (C-28), flush ticks (D-41), write deadlines (C-31), and
bytes a socket refused, written once it is writable. A pump thread per connection doubled the threads, and
thousands of them contending for the GIL made connecting and disconnecting crowds take seconds
(benchmarks/broker_connections.py).

Writes never wait while anything is locked. Message frames wait in `_pending` until a flush (D-40); any other
frame goes out behind them, so frames keep their order (C-13, C-33). Bytes go to the socket with one
non-blocking write(2) under the connection's own `_output_lock`; what the kernel does not take stays in
`_unsent` until the socket is writable again. The only thread that ever waits for a peer is that peer's own
reader, sending a response, as nsqd's I/O loop waits in Send. While bytes are unsent the connection takes no
messages (ready_room is 0), as a messagePump blocked in a write takes none: they go to other consumers.
"""
from __future__ import annotations

import heapq
import itertools
import logging
import math
import os
import select
import socket
import threading
import time
import weakref
from collections.abc import Callable

from . import wire
from .compression import DeflateReader, DeflateWriter, SnappyReader, SnappyWriter
from .connection_reader import NO_DEADLINE_POLL, ConnectionClosed, ConnectionReader
from .tls import TLSStream

log = logging.getLogger("nsqd")

STATE_INIT = 0
STATE_SUBSCRIBED = 3  # ST-01: 1 and 2 are defined by nsqd but never used
STATE_CLOSING = 4

DEFAULT_OUTPUT_BUFFER_SIZE = 16 * 1024
WRITE_TIMEOUT = "i/o timeout"  # what Go's net package calls a passed deadline


class ClientV2:
    def __init__(self, nsqd, sock: socket.socket, client_id: int, output_loop: OutputLoop):
        options = nsqd.options
        self.nsqd = nsqd
        self.id = client_id
        self.sock = sock
        self._fd = sock.fileno()
        # write(2) must never wait: the socket object's timeout is the reader's (C-29), so writes bypass it.
        os.set_blocking(self._fd, False)
        self.reader = ConnectionReader(sock)
        self.remote_ip, remote_port = sock.getpeername()[:2]
        self.remote_address = f"{self.remote_ip}:{remote_port}"
        self.connect_ts = int(time.time())
        self.state = STATE_INIT
        self.channel = None
        # ID-01: until IDENTIFY, client_id and hostname are the remote IP.
        self.client_id_label = self.hostname = self.remote_ip
        self.user_agent = ""
        self.topology_region = self.topology_zone = ""
        self.heartbeat_interval = options.default_heartbeat_interval
        self.msg_timeout = options.msg_timeout
        self.output_buffer_size = DEFAULT_OUTPUT_BUFFER_SIZE
        self.output_buffer_timeout = options.output_buffer_timeout
        self.sample_rate = 0
        self.deflate = self.snappy = False
        self.tls: TLSStream | None = None  # set once the TLS handshake is done (T-01)
        self.identified = False
        # What the message pump took from the first IDENTIFY (ID-40).
        self.pump_heartbeat_interval = self.heartbeat_interval
        self.pump_flush_interval = self.output_buffer_timeout
        self.pump_sample_rate = 0
        self.pump_msg_timeout = self.msg_timeout
        # Counters; RDY and in-flight change under the channel's lock.
        self.ready_count = 0
        self.in_flight_count = 0
        self.message_count = 0
        self.finish_count = 0
        self.requeue_count = 0
        self.pub_counts: dict[str, int] = {}
        self.auth_state = None  # the auth server's answer (P-AUTH-08), re-asked once expired
        self.auth_secret = ""
        # The output path, all under _output_lock.
        self._output_lock = threading.Lock()
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        # What bytes go through on their way out, in order: snappy or deflate, then TLS (T-02, T-03).
        self._output_layers: list[Callable[[bytes], bytes]] = []
        self._output_paused = False  # during the TLS handshake, as nsqd's UpgradeTLS holds the write lock
        self._unsent = bytearray()
        self._backlogged = False  # bytes wait for the socket; set and cleared with the OutputLoop's watch
        self._backlog_episode = 0
        self._write_deadline: float | None = None
        # Set once a write failed or timed out, and at the end: like the error a bufio.Writer keeps, nothing is
        # written after it, and it ends the I/O loop at its next response.
        self._output_error: str | None = None
        # The pump's tickers: a restart (the first IDENTIFY, the end) makes older timers stale.
        self._output_loop = output_loop
        self._ticker_generation = 0
        self._ticker_origin = 0.0
        self._flush_ticks_taken = 0  # the flush ticker's ticks are numbered from its origin
        self._flush_tick_scheduled: int | None = None

    @property
    def has_authorizations(self) -> bool:
        return bool(self.auth_state and self.auth_state.authorizations)

    def __str__(self) -> str:
        return self.remote_address  # nsqd's clientV2.String(): how its log lines name a client

    # -- flow control (D-01, D-02, D-03, D-04, D-05)
    # ----------------------------------------------------------------------

    def ready_room(self) -> int:
        """RDY minus in flight; none while bytes wait for the socket or after the output failed: nsqd's
        messagePump takes no message while blocked in a write, nor after it exited."""
        if self.state != STATE_SUBSCRIBED or self._backlogged or self._output_error is not None:
            return 0
        return self.ready_count - self.in_flight_count

    def buffer_messages(self, messages) -> bool:
        """Called by the channel, under its lock, for messages now in flight to this client. True when the
        buffer must go out now: the client is no longer ready, the buffer is full (D-40), or a flush tick is
        already waiting (D-41)."""
        frames = [wire.message_frame(m.timestamp, m.attempts, m.id, m.body) for m in messages]
        self.in_flight_count += len(messages)
        self.message_count += len(messages)
        with self._output_lock:
            if self._output_error is not None:
                return False  # the pump has exited: they stay in flight until they time out
            was_empty = not self._pending
            self._pending += frames
            self._pending_bytes += sum(map(len, frames))
            if self._pending_bytes >= self.output_buffer_size or self.in_flight_count >= self.ready_count:
                return True
            return was_empty and self._flush_tick_waiting()

    # -- writing ----------------------------------------------------------------------------------------

    def send_frame(self, frame_type: int, data: bytes) -> None:
        """A non-message frame from the I/O loop, behind everything buffered (C-33). Like nsqd's Send it returns
        once the kernel has taken it all, so a peer that does not read its responses is not read either; the
        wait ends at the write deadline (C-31)."""
        if not self._write(wire.frame(frame_type, data)):
            self._wait_until_written()

    def request_flush(self) -> None:
        """Flush now, from any thread: what the socket does not take at once waits for the OutputLoop."""
        try:
            self._write(b"")
        except ConnectionClosed:
            pass  # the I/O loop ends the connection

    def _write(self, tail: bytes) -> bool:
        """Buffered messages, then `tail`, to the socket without waiting. True when nothing is left unsent."""
        with self._output_lock:
            if self._output_error is not None:
                raise ConnectionClosed(self._output_error)
            if self._output_paused:
                if tail:
                    self._pending.append(tail)
                return True
            data = b"".join(self._pending) + tail if self._pending else tail
            self._pending, self._pending_bytes = [], 0
            if data:
                for layer in self._output_layers:
                    data = layer(data)
                self._unsent += data
            became_ready = self._write_unsent()
            written = not self._unsent
            failed = self._output_error
        if became_ready:
            self._room_freed()
        if failed is not None:
            raise ConnectionClosed(failed)
        return written

    def _write_unsent(self) -> bool:
        """Under the output lock: hand the kernel what it takes now, and start or end a backlog (C-31). True
        when a backlog ended, so the connection takes messages again."""
        while self._unsent:
            try:
                written = os.write(self._fd, self._unsent)
            except BlockingIOError:
                break
            except OSError as error:
                self._fail(f"write failed - {error}")
                return False
            del self._unsent[:written]
        if self._unsent and not self._backlogged:
            self._backlogged = True
            self._backlog_episode += 1
            self._output_loop.watch(self._fd, self)
            interval = self.heartbeat_interval  # C-31: a write may take one heartbeat interval; C-32: 0 is none
            self._write_deadline = time.monotonic() + interval / 1e9 if interval > 0 else None
            if self._write_deadline is not None:
                self._output_loop.call_at(self._write_deadline, self._write_deadline_passed, self._backlog_episode)
            return False
        if not self._unsent and self._backlogged:
            self._end_backlog()
            return True
        return False

    def _end_backlog(self) -> None:
        self._backlogged = False
        self._write_deadline = None
        self._output_loop.unwatch(self._fd)

    def _fail(self, error: str) -> None:
        """Under the output lock: nothing more is written, and the pump's tickers stop (it exits in nsqd)."""
        if self._output_error is None:
            self._output_error = error
        self._pending, self._pending_bytes, self._unsent = [], 0, bytearray()
        if self._backlogged:
            self._end_backlog()
        self._ticker_generation += 1

    def _room_freed(self) -> None:
        channel = self.channel
        if channel is not None:
            channel.client_ready_changed()

    def socket_writable(self) -> None:
        """From the OutputLoop: the socket takes bytes again."""
        with self._output_lock:
            became_ready = self._output_error is None and self._write_unsent()
        if became_ready:
            self._room_freed()

    def _write_deadline_passed(self, episode: int) -> None:
        with self._output_lock:
            if episode != self._backlog_episode or not self._backlogged:
                return
            self._fail(WRITE_TIMEOUT)
        log.error("PROTOCOL(V2): [%s] messagePump error - write: %s", self, WRITE_TIMEOUT)

    def _wait_until_written(self) -> None:
        """The reader's wait for its backlog, as nsqd's I/O loop waits inside Send: until the socket took
        everything, the write failed, or the write deadline passed."""
        poller = select.poll()
        poller.register(self._fd, select.POLLOUT)
        while True:
            with self._output_lock:
                if self._output_error is None and self._backlogged and self._write_deadline is not None \
                        and time.monotonic() >= self._write_deadline:
                    self._fail(WRITE_TIMEOUT)
                if self._output_error is not None:
                    raise ConnectionClosed(self._output_error)
                if not self._backlogged:
                    return
                wait = NO_DEADLINE_POLL if self._write_deadline is None else self._write_deadline - time.monotonic()
            poller.poll(max(wait, 0) * 1000)
            self.socket_writable()

    # -- the pump's tickers (C-28, C-30, D-41) ----------------------------------------------------------

    def _restart_tickers(self) -> None:
        """Under the output lock: both tickers start now (C-30), from what the pump holds (ID-40)."""
        self._ticker_generation += 1
        self._ticker_origin = time.monotonic()
        self._flush_ticks_taken = 0
        self._flush_tick_scheduled = None
        interval = self.pump_heartbeat_interval / 1e9
        if interval > 0:
            self._output_loop.call_at(self._ticker_origin + interval, self._heartbeat_tick, self._ticker_generation,
                                      1)

    def _heartbeat_tick(self, generation: int, tick: int) -> None:
        """C-28: a heartbeat on every tick of a fixed ticker, busy or not. Like Go's Ticker, a late one skips the
        ticks it missed."""
        with self._output_lock:
            if generation != self._ticker_generation:
                return
            interval = self.pump_heartbeat_interval / 1e9
            tick = max(tick, math.floor((time.monotonic() - self._ticker_origin) / interval))
            self._output_loop.call_at(self._ticker_origin + (tick + 1) * interval, self._heartbeat_tick, generation,
                                      tick + 1)
        try:
            self._write(wire.frame(wire.FRAME_TYPE_RESPONSE, wire.HEARTBEAT))
        except ConnectionClosed:
            pass  # the I/O loop ends the connection and logs why (the write error is kept in _output_error)

    def _flush_tick_waiting(self) -> bool:
        """Under the output lock, when messages start waiting in the buffer. Go's Ticker keeps one tick that
        nobody took, and the pump only takes ticks while it holds buffered messages: if a tick came since the
        last one taken, it is taken now (True: flush). Otherwise the next tick is scheduled (D-41); none when
        the timeout is 0 (D-42)."""
        interval = self.pump_flush_interval / 1e9
        if interval <= 0:
            return False
        elapsed = math.floor((time.monotonic() - self._ticker_origin) / interval)
        if elapsed > self._flush_ticks_taken:
            self._flush_ticks_taken = elapsed
            return True
        tick = self._flush_ticks_taken + 1
        if self._flush_tick_scheduled != tick:
            self._flush_tick_scheduled = tick
            self._output_loop.call_at(self._ticker_origin + tick * interval, self._flush_tick, self._ticker_generation,
                                      tick)
        return False

    def _flush_tick(self, generation: int, tick: int) -> None:
        with self._output_lock:
            if generation != self._ticker_generation:
                return
            self._flush_ticks_taken = max(self._flush_ticks_taken, tick)
            self._flush_tick_scheduled = None
        self.request_flush()

    # -- IDENTIFY (ID-02, ID-03, ID-04, ID-05, ID-06, ID-07, ID-40)
    # ---------------------------------------------------------------

    def identify(self, settings: dict) -> None:
        """Apply validated settings; the first IDENTIFY also restarts the pump's tickers (C-30)."""
        for name, value in settings.items():
            setattr(self, name, value)
        if not self.identified:
            self.identified = True
            self.pump_heartbeat_interval = self.heartbeat_interval
            self.pump_flush_interval = self.output_buffer_timeout
            self.pump_sample_rate = self.sample_rate
            self.pump_msg_timeout = self.msg_timeout
            with self._output_lock:
                if self._output_error is None:
                    self._restart_tickers()

    def upgrade_tls(self, context) -> None:
        """T-01: the handshake on the raw socket; meanwhile the pump's output waits (nsqd holds the write lock),
        then goes out inside TLS. Raises OSError or ssl.SSLError when the handshake fails."""
        stream = TLSStream(context)
        with self._output_lock:
            self._output_paused = True
        try:
            stream.handshake(self.sock)
        finally:
            with self._output_lock:
                self._output_paused = False
        with self._output_lock:
            self._output_layers.append(stream.encrypt)
        self.reader.upgrade(stream)
        self.tls = stream

    def upgrade_deflate(self, level: int) -> None:
        with self._output_lock:
            self._output_layers.insert(0, DeflateWriter(level))
        self.reader.upgrade(DeflateReader())
        self.deflate = True

    def upgrade_snappy(self) -> None:
        with self._output_lock:
            self._output_layers.insert(0, SnappyWriter())
        self.reader.upgrade(SnappyReader())
        self.snappy = True

    # -- lifecycle --------------------------------------------------------------------------------------

    def start_pump(self) -> None:
        with self._output_lock:
            self._restart_tickers()

    def close_connection(self) -> None:
        """Shut the socket so the reader thread ends and cleans up (D-62: no error frame)."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # the peer or the reader closed it already: shut either way

    def stop(self) -> None:
        """After the I/O loop, before the socket closes: from now on nothing touches its descriptor. The
        compressor (a deflate window) goes at once, not when the connection's objects are collected."""
        with self._output_lock:
            self._fail("closed")
            self._output_layers = []


class OutputLoop:
    """The timed half of every connection's messagePump, on one thread: timers (heartbeats, flush ticks, write
    deadlines) and sockets that refused bytes, written again once epoll says they are writable. Every action is
    a client's method that writes without waiting, so no peer can hold this thread up."""

    def __init__(self):
        self._epoll = select.epoll()
        self._wakeup = os.eventfd(0, os.EFD_NONBLOCK)  # an earlier timer than the one slept for
        self._epoll.register(self._wakeup, select.EPOLLIN)
        self._lock = threading.Lock()
        self._timers: list[tuple[float, int, weakref.ref, Callable, tuple]] = []
        self._order = itertools.count()  # ties keep the order they were scheduled in
        self._sleeping_until = math.inf
        self._backlogged: dict[int, ClientV2] = {}  # descriptor -> client, while it has unsent bytes
        self._thread = threading.Thread(target=self._run, name="output-loop", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def call_at(self, when: float, action: Callable, *args) -> None:
        """`action(*args)` on the loop's thread at time.monotonic() `when`. `action` is a client's method; the
        client is held weakly, so a pending heartbeat keeps no closed connection's buffers alive."""
        entry = (when, next(self._order), weakref.ref(action.__self__), action.__func__, args)
        with self._lock:
            heapq.heappush(self._timers, entry)
            wake = when < self._sleeping_until
            if wake:
                self._sleeping_until = when
        if wake:
            os.eventfd_write(self._wakeup, 1)

    def watch(self, fd: int, client: ClientV2) -> None:
        """Call `client.socket_writable()` whenever `fd` is writable, until unwatch."""
        with self._lock:
            self._backlogged[fd] = client
            self._epoll.register(fd, select.EPOLLOUT)

    def unwatch(self, fd: int) -> None:
        with self._lock:
            del self._backlogged[fd]
            self._epoll.unregister(fd)

    def _run(self) -> None:
        while True:
            with self._lock:
                self._sleeping_until = self._timers[0][0] if self._timers else math.inf
                timeout = min(max(self._sleeping_until - time.monotonic(), 0), NO_DEADLINE_POLL)
            for fd, _ in self._epoll.poll(timeout):
                if fd == self._wakeup:
                    os.eventfd_read(self._wakeup)
                    continue
                with self._lock:
                    client = self._backlogged.get(fd)
                if client is not None:
                    self._guarded(client.socket_writable)
            now = time.monotonic()
            while True:
                with self._lock:
                    if not self._timers or self._timers[0][0] > now:
                        break
                    _, _, client_ref, function, args = heapq.heappop(self._timers)
                if (client := client_ref()) is not None:
                    self._guarded(function, client, *args)

    @staticmethod
    def _guarded(action: Callable, *args) -> None:
        """A bug in one connection's action must not end every connection's heartbeats."""
        try:
            action(*args)
        except Exception:
            log.exception("output loop: %s failed", getattr(action, "__qualname__", action))
