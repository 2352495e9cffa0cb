"""Hostile sessions against a running broker: a seeded, grammar-aware generator of TCP and HTTP sessions
(``session.py``: the broker's limits and a session's steps; ``grammar.py``: the generator), a runner that plays
them against one broker (``play.py``: one session and its checks; ``health.py``: many at once, and the broker
afterwards), and what nsqd keeps true whatever a peer sends.

Shared by tests/broker/test_fuzz.py (10,000 sessions in CI, plus a hypothesis test that shrinks) and
benchmarks/broker_fuzz.py (`tox -e fuzz`, 100,000 sessions). Session `i` of seed `s` is drawn from its own
`random.Random(f"{s}:{i}")`, so any one session is generated again alone, whatever ran beside it.

A TCP session is the magic (sometimes wrong or short), then commands drawn for the state the generator
expects the connection to be in (INIT, identified, upgraded to snappy or deflate, subscribed, closing), some
of them mutated (truncated, lying sizes, flipped bytes, overlong lines, garbage, bad names, huge numbers, odd
JSON), written pipelined or split at odd boundaries, through the negotiated compression once the broker says
it upgraded; it ends with a half-close, a close, or a reset (SO_LINGER 0). An HTTP session is one to three
requests, well-formed or not, against the nsqd HTTP API.

Per session, what nsqd always does (IDs are the behaviour catalogue's):
  - every frame is [size][type][data] with type 0, 1 or 2 and a sane size (C-06, C-07); a message frame has
    a 26-byte header and a 16-hex ID (C-09, C-10); the compressed stream decodes (ID-33, ID-34);
  - a response is OK, CLOSE_WAIT, _heartbeat_ or IDENTIFY's JSON document (ID-20);
  - every error frame is one of Appendix A's strings;
  - a fatal error frame is the last response or error frame, and the broker closes the connection (C-23);
  - a wrong magic gets exactly E_BAD_PROTOCOL and a close (C-02);
  - a half-closed connection is closed by the broker (EOF ends nsqd's I/O loop);
  - a session that gave nsqd none of its reasons to close silently (C-25) is not closed before it ends;
  - an HTTP response is well-formed, and an error carries one of Appendix B's messages.
And of the broker after all sessions (`check_health`): no traceback in its stderr, /ping answers within 1 s, a
fresh client can PUB, SUB, RDY, receive and FIN, the peak RSS is bounded, and its threads are back to the
baseline (no connection thread left, no pump of a deleted topic).
"""
