"""A tiny TCP proxy in front of a broker that breaks exactly one behaviour, to prove the suite notices.

Faults:
- ``attempts-stuck``: every message frame reports attempts = 1, so redeliveries look like first
  deliveries (breaks C-12, requirement NSQ-FRAME-004).
- ``no-close-after-fatal``: when the broker closes a connection, the proxy keeps the client side
  open (breaks C-23, requirement NSQ-ERR-001).
- ``stats-without-client-count``: in front of the HTTP port, every channel in ``/stats`` JSON loses its
  ``client_count`` (an older nsqd's shape; requirement NSQ-HTTP-008): the case must FAIL naming the field,
  not end in a Python error.
- ``tls-not-offered``: the IDENTIFY response says ``"tls_v1":false`` where the broker said true, though the
  broker still upgrades (a broker that mis-reports its negotiation; breaks T-01, requirement NSQ-TLS-002).
- ``lookupd-config-ignored``: in front of the HTTP port, ``PUT /config/nsqlookupd_tcp_addresses`` is answered
  200 with the addresses echoed and never reaches the broker (a setting accepted without effect; breaks R-11,
  the registration cases).
- ``error-reworded``: error frames keep their code but not nsqd's wording (``E_INVALID reworded: ...``): NON-STRICT,
  and FAIL under ``--strict`` (a verdict without an exception, which the report must still explain).
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

FAULTS = ("none", "attempts-stuck", "no-close-after-fatal", "stats-without-client-count", "tls-not-offered",
          "lookupd-config-ignored", "error-reworded")
_FRAME_REWRITES = ("attempts-stuck", "tls-not-offered", "error-reworded")
_CONFIG_PUT = b"PUT /config/nsqlookupd_tcp_addresses "


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
            if self.fault == "lookupd-config-ignored" and self._answered_config_put(client):
                continue
            server = socket.create_connection(self.upstream)
            for source, target, rewrite in ((client, server, False), (server, client, True)):
                threading.Thread(target=self._pump, args=(source, target, rewrite), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket, server_side: bool) -> None:
        if server_side and self.fault == "stats-without-client-count":
            self._pump_rewritten_http(source, target)
            return
        decoder, held, rewriting = wire.FrameDecoder(), b"", server_side and self.fault in _FRAME_REWRITES
        try:
            while data := source.recv(65536):
                if rewriting:
                    start, held = decoder.offset, held + data
                    try:
                        data = b"".join(self._rewrite(frame) for frame in decoder.feed(data))
                        held = held[decoder.offset - start:]
                    except wire.ProtocolViolation as exc:
                        # A compressed stream after IDENTIFY (ID-30): forward the rest untouched.
                        data = b"".join(self._rewrite(frame) for frame in exc.frames) + held[exc.offset - start:]
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

    def _rewrite(self, frame: wire.Frame) -> bytes:
        if self.fault == "attempts-stuck" and frame.frame_type == wire.FRAME_MESSAGE:
            data = frame.data[:8] + struct.pack(">H", 1) + frame.data[10:]  # C-09: attempts at bytes 8..9
            return wire.encode_frame(wire.FRAME_MESSAGE, data)
        if self.fault == "tls-not-offered" and frame.frame_type == wire.FRAME_RESPONSE:
            return wire.encode_frame(wire.FRAME_RESPONSE, frame.data.replace(b'"tls_v1":true', b'"tls_v1":false'))
        if self.fault == "error-reworded" and frame.frame_type == wire.FRAME_ERROR:
            code, _, text = frame.data.partition(b" ")
            return wire.encode_frame(wire.FRAME_ERROR, code + b" reworded: " + text)
        return frame.encode()

    @staticmethod
    def _answered_config_put(client: socket.socket) -> bool:
        """Peek at an HTTP request: the lookupd-address PUT is answered here (the body echoed, as nsqd does);
        anything else goes on to the broker untouched."""
        with contextlib.suppress(OSError):
            client.settimeout(5)
            start = client.recv(len(_CONFIG_PUT), socket.MSG_PEEK | socket.MSG_WAITALL)
            client.settimeout(None)
            if start != _CONFIG_PUT:
                return False
            request = b""
            while b"\r\n\r\n" not in request and (data := client.recv(65536)):
                request += data
            head, _, body = request.partition(b"\r\n\r\n")
            length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
            while len(body) < length and (data := client.recv(65536)):
                body += data
            client.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\n"
                           b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
        client.close()
        return True
