"""Per-connection state: IDENTIFY settings, RDY and in-flight counts, the output buffer, compression, and
the message pump thread that sends heartbeats and time-based flushes (nsqd/client_v2.go + messagePump).

Two threads per connection: the reader (protocol_v2's I/O loop) and the pump. Message frames wait in
`_pending` until a flush; any other frame flushes them first, so frames keep their order (C-13, C-33).
"""
from __future__ import annotations

import socket
import threading
import time

from . import wire
from .compression import DeflateReader, DeflateWriter, SnappyReader, SnappyWriter
from .connection_reader import NO_DEADLINE_POLL, ConnectionClosed, ConnectionReader

STATE_INIT = 0
STATE_SUBSCRIBED = 3  # ST-01: 1 and 2 are defined by nsqd but never used
STATE_CLOSING = 4

DEFAULT_OUTPUT_BUFFER_SIZE = 16 * 1024


class ClientV2:
    def __init__(self, nsqd, sock: socket.socket, client_id: int):
        options = nsqd.options
        self.nsqd = nsqd
        self.id = client_id
        self.sock = sock
        self._wsock = sock.dup()  # its own timeout: the write deadline (C-31)
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
        # The output path.
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._pending_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._compress = None
        self._wake = threading.Condition()
        self._flush_requested = False
        self._pump_restart = False
        self._closed = False
        self.reader_ident = threading.get_ident()
        self._pump = threading.Thread(target=self._pump_loop, name=f"pump-{client_id}", daemon=True)

    @property
    def has_authorizations(self) -> bool:
        return bool(self.auth_state and self.auth_state.authorizations)

    def __repr__(self) -> str:
        return f"<client {self.id} {self.remote_address}>"

    # -- flow control (D-01..D-05) ----------------------------------------------------------------------

    def ready_room(self) -> int:
        if self.state != STATE_SUBSCRIBED:
            return 0
        return self.ready_count - self.in_flight_count

    def buffer_messages(self, messages) -> bool:
        """Called by the channel, under its lock, for messages now in flight to this client. True when
        the buffer must go out now: the client is no longer ready, or the buffer is full (D-40)."""
        frames = [wire.message_frame(m.timestamp, m.attempts, m.id, m.body) for m in messages]
        size = sum(len(f) for f in frames)
        with self._pending_lock:
            was_empty = not self._pending
            self._pending.extend(frames)
            self._pending_bytes += size
            full = self._pending_bytes >= self.output_buffer_size
        self.in_flight_count += len(messages)
        self.message_count += len(messages)
        flush_now = full or self.in_flight_count >= self.ready_count
        if was_empty and not flush_now:
            with self._wake:
                self._wake.notify()  # the pump now has a buffer to flush on its next tick (D-41)
        return flush_now

    # -- writing ----------------------------------------------------------------------------------------

    def send_frame(self, frame_type: int, data: bytes) -> None:
        """A non-message frame: written with everything buffered before it, at once (C-33)."""
        self._write(wire.frame(frame_type, data))

    def flush(self) -> None:
        self._write(b"")

    def _write(self, tail: bytes) -> None:
        with self._write_lock:
            with self._pending_lock:
                pending, self._pending, self._pending_bytes = self._pending, [], 0
            if not pending and not tail:
                return
            data = b"".join(pending) + tail if pending else tail
            if self._compress is not None:
                data = self._compress(data)
            write_deadline = self.heartbeat_interval / 1e9 if self.heartbeat_interval > 0 else None
            self._wsock.settimeout(write_deadline or NO_DEADLINE_POLL)
            try:
                self._wsock.sendall(data)
            except OSError:
                self.close_connection()
                raise ConnectionClosed("write failed") from None

    def request_flush(self) -> None:
        """Flush now: inline on this client's own reader thread, else by waking its pump thread."""
        if threading.get_ident() == self.reader_ident:
            try:
                self.flush()
            except ConnectionClosed:
                pass
            return
        with self._wake:
            self._flush_requested = True
            self._wake.notify()

    # -- IDENTIFY (ID-02..ID-07, ID-40) ---------------------------------------------------------------

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
            with self._wake:
                self._pump_restart = True
                self._wake.notify()

    def upgrade_deflate(self, level: int) -> None:
        with self._write_lock:
            self._compress = DeflateWriter(level)
        self.reader.upgrade(DeflateReader())
        self.deflate = True

    def upgrade_snappy(self) -> None:
        with self._write_lock:
            self._compress = SnappyWriter()
        self.reader.upgrade(SnappyReader())
        self.snappy = True

    # -- lifecycle --------------------------------------------------------------------------------------

    def start_pump(self) -> None:
        self._pump.start()

    def close_connection(self) -> None:
        """Shut the socket so the reader thread ends and cleans up (D-62: no error frame)."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def stop(self) -> None:
        """After the I/O loop: unblock a pump stuck writing to a peer that stopped reading, then join it."""
        self.close_connection()
        with self._wake:
            self._closed = True
            self._wake.notify()
        self._pump.join()
        self._wsock.close()

    def _pump_loop(self) -> None:
        """Heartbeats on a fixed ticker (C-28) and buffered messages flushed on the flush ticker (D-41)."""
        start = time.monotonic()
        heartbeat, flush_every = self.pump_heartbeat_interval / 1e9, self.pump_flush_interval / 1e9
        next_heartbeat, next_flush = start + heartbeat, start + flush_every
        while True:
            with self._wake:
                now = time.monotonic()
                wake_at = next_heartbeat if heartbeat > 0 else now + NO_DEADLINE_POLL
                if flush_every > 0 and self._pending:
                    wake_at = min(wake_at, next_flush)
                if not (self._flush_requested or self._pump_restart or self._closed) and wake_at > now:
                    self._wake.wait(wake_at - now)
                if self._closed:
                    return
                flush_requested, self._flush_requested = self._flush_requested, False
                if self._pump_restart:
                    self._pump_restart = False
                    start = time.monotonic()
                    heartbeat = self.pump_heartbeat_interval / 1e9
                    flush_every = self.pump_flush_interval / 1e9
                    next_heartbeat, next_flush = start + heartbeat, start + flush_every
            now = time.monotonic()
            try:
                if flush_every > 0 and now >= next_flush:
                    next_flush += flush_every * (1 + (now - next_flush) // flush_every)
                    flush_requested = True
                if flush_requested:
                    self.flush()
                if heartbeat > 0 and now >= next_heartbeat:
                    next_heartbeat += heartbeat * (1 + (now - next_heartbeat) // heartbeat)
                    self.send_frame(wire.FRAME_TYPE_RESPONSE, wire.HEARTBEAT)
            except ConnectionClosed:
                return
