"""The nsqd HTTP API (nsqd/http.go). Being written: only the server shell exists yet."""
from __future__ import annotations

import http.server
import socket
import threading


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):
        pass

    def do_GET(self):
        body = b"OK"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class HTTPServer:
    def __init__(self, nsqd, listener: socket.socket):
        self.nsqd = nsqd
        self.listener = listener
        self._server = http.server.ThreadingHTTPServer(listener.getsockname()[:2], _Handler,
                                                       bind_and_activate=False)
        self._server.socket.close()
        self._server.socket = listener
        self._server.daemon_threads = True
        self._server.nsqd = nsqd
        self._thread = threading.Thread(target=self._server.serve_forever, name="http", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
