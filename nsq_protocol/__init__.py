"""The project's reading of NSQ, sans-IO: the foundation the active suite (``conformance/``), the trace analysis
(``spark_analysis/``) and the tests stand on, so that a frame, a negotiated value and a rule mean the same thing
live and in a capture.

- ``wire``: nsqd's TCP protocol V2, commands and frames, and the compression layers negotiated on it;
- ``wire_v1``: nsqlookupd's TCP protocol V1;
- ``monitors``: the behaviour catalogue's rules as small state machines over one connection's events, or over one
  nsqd's connections together, each keyed by its item ID (``conformance/spec/*.toml``).

Nothing here opens a socket, starts a thread, or imports pytest or Spark. The reference broker does not import it:
it is the other, independent reading of the protocol that this one is checked against.
"""
