"""A tiny TCP proxy in front of a broker that breaks exactly one behaviour, to prove the suite notices.

Faults:
- ``attempts-stuck``: every message frame reports attempts = 1, so redeliveries look like first
  deliveries (breaks C-12, requirement NSQ-FRAME-004).
- ``no-close-after-fatal``: when the broker closes a connection, the proxy keeps the client side
  open (breaks C-23, requirement NSQ-ERR-001).
- ``stats-without-client-count``: in front of the HTTP port, every channel in ``/stats`` JSON loses its
  ``client_count`` (an older nsqd's shape; requirement NSQ-HTTP-008): the case must FAIL naming the field,
  not end in a Python error.
- ``none``: a faithful proxy (the control).

Uncompressed sessions only: the proxy decodes server frames with ``conformance.wire``.
"""

from __future__ import annotations

import contextlib
import re
import socket
import struct
import threading

from conformance import wire

FAULTS = ("none", "attempts-stuck", "no-close-after-fatal", "stats-without-client-count")


class FaultyProxy:
    def __init__(self, upstream: tuple[str, int], fault: str):
        if fault not in FAULTS:
            raise ValueError(f"fault must be one of {FAULTS}")
        self.upstream, self.fault = upstream, fault
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = self.listener.getsockname()[:2]
        self._threads: list[threading.Thread] = []
        self._closing = threading.Event()

    def start(self) -> FaultyProxy:
        threading.Thread(target=self._accept, daemon=True, name="proxy-accept").start()
        return self

    def stop(self) -> None:
        self._closing.set()
        self.listener.close()

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            for source, target, rewrite in ((client, server, False), (server, client, True)):
                threading.Thread(target=self._pump, args=(source, target, rewrite), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket, server_side: bool) -> None:
        if server_side and self.fault == "stats-without-client-count":
            self._pump_rewritten_http(source, target)
            return
        decoder, held, rewriting = wire.FrameDecoder(), b"", server_side and self.fault == "attempts-stuck"
        try:
            while data := source.recv(65536):
                if rewriting:
                    start, held = decoder.offset, held + data
                    try:
                        data = b"".join(self._stuck(frame) for frame in decoder.feed(data))
                        held = held[decoder.offset - start:]
                    except wire.ProtocolViolation as exc:
                        # A compressed stream after IDENTIFY (ID-30): forward the rest untouched.
                        data = b"".join(self._stuck(frame) for frame in exc.frames) + held[exc.offset - start:]
                        rewriting = False
                target.sendall(data)
        except OSError:
            pass
        if server_side and self.fault == "no-close-after-fatal":
            return  # the broker hung up; the client is left waiting on an open socket
        for sock in (source, target):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    @staticmethod
    def _pump_rewritten_http(source: socket.socket, target: socket.socket) -> None:
        """The suite asks with `Connection: close`: the whole response, then the edited one."""
        response = b""
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                response += data
        head, _, body = response.partition(b"\r\n\r\n")
        body = re.sub(rb'"client_count":\d+,?', b"", body)
        head = re.sub(rb"(?i)content-length: *\d+", b"Content-Length: %d" % len(body), head)
        with contextlib.suppress(OSError):
            target.sendall(head + b"\r\n\r\n" + body)
        for sock in (source, target):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    @staticmethod
    def _stuck(frame: wire.Frame) -> bytes:
        if frame.frame_type != wire.FRAME_MESSAGE:
            return frame.encode()
        data = frame.data[:8] + struct.pack(">H", 1) + frame.data[10:]  # C-09: attempts at bytes 8..9
        return wire.encode_frame(wire.FRAME_MESSAGE, data)
