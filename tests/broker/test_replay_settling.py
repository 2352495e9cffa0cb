"""The transcripts' replay asks a GET again, within a bound, where its answer shows state the broker updates
asynchronously (a RDY sent after the SUB whose OK was awaited shows in /stats a moment later); it never asks a
POST again, and a GET that never matches still fails."""

from __future__ import annotations

import http.server
import json
import threading
from contextlib import contextmanager

from .recorded import replay


@contextmanager
def answering(documents: list[dict]):
    """An HTTP server whose n-th request gets ``documents[n]`` (the last one from then on); yields it, with
    ``asked`` counting the requests."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self):
            body = json.dumps(documents[min(server.asked, len(documents) - 1)]).encode()
            server.asked += 1
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.asked = 0
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _replayed(server, method: str) -> str | None:
    transcript = {"id": "t", "steps": [{"http": {"method": method, "path": "/stats?format=json"}},
                                       {"expect_http": {"status": 200, "json": {"ready_count": 1}}}]}
    port = server.server_address[1]
    return replay.replay_one(transcript, "127.0.0.1", port, "127.0.0.1", port)


def test_a_get_is_asked_again_until_the_broker_shows_the_update():
    with answering([{"ready_count": 0}, {"ready_count": 0}, {"ready_count": 1}]) as server:
        assert _replayed(server, "GET") is None
        assert server.asked == 3


def test_a_get_that_never_matches_fails_within_the_bound():
    with answering([{"ready_count": 0}]) as server:
        error = _replayed(server, "GET")
    assert error is not None and "ready_count" in error and "expected 1, got 0" in error
    assert 2 <= server.asked <= replay.SETTLED_WITHIN_S / 0.02 + 2  # asked again, not without end


def test_a_post_is_never_asked_again():
    with answering([{"ready_count": 0}, {"ready_count": 1}]) as server:
        error = _replayed(server, "POST")
        assert error is not None and server.asked == 1
