"""Running pynsq's clients on tornado's IOLoop for a bounded time."""
from __future__ import annotations

import tornado.ioloop


def run_until_stopped(readers: list, writers: list = (), seconds: float = 30) -> None:
    """Run the IOLoop until a handler stops it or `seconds` pass, then close every client."""
    loop = tornado.ioloop.IOLoop.current()
    timeout = loop.call_later(seconds, loop.stop)
    loop.start()
    loop.remove_timeout(timeout)
    for reader in readers:
        reader.close()
    for writer in writers:
        for conn in list(writer.conns.values()):
            conn.close()
